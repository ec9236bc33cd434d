import Testing
import Wire
@testable import Signaling

func feedAll(_ text: String, splitEvery step: Int, head: Bool = false, limits: HTTPLimits = HTTPLimits()) throws(HTTPError) -> HTTPResponse? {
    var p = HTTPResponseParser(limits: limits, headRequest: head)
    let bytes = Array(text.utf8)
    var i = 0
    while i < bytes.count {
        let chunk = Array(bytes[i..<min(bytes.count, i + step)])
        if let r = try p.feed(chunk) { return r }
        i += step
    }
    return try p.finish()
}

@Suite struct HTTPResponseTests {
    /// The same response split at every granularity parses identically.
    @Test(arguments: [1, 2, 7, 1000])
    func contentLength(step: Int) throws {
        let text = "HTTP/1.1 201 Created\r\nContent-Type: application/sdp\r\nLocation: /whip/abc\r\nETag: \"x1\"\r\nContent-Length: 5\r\n\r\nv=0\r\n"
        let r = try #require(try feedAll(text, splitEvery: step))
        #expect(r.status == 201 && r.reason == "Created")
        #expect(r.headers["location"] == "/whip/abc" && r.headers["ETAG"] == "\"x1\"")
        #expect(r.bodyText == "v=0\r\n")
    }

    /// RFC 9112 §7.1: chunk sizes in hex, extensions ignored, trailers skipped.
    @Test(arguments: [1, 3, 1000])
    func chunked(step: Int) throws {
        let text = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: y\r\n\r\n"
        let r = try #require(try feedAll(text, splitEvery: step))
        #expect(r.bodyText == "Wikipedia in\r\n\r\nchunks.")
    }

    @Test func closeDelimitedAndNoBodyStatuses() throws {
        let r = try #require(try feedAll("HTTP/1.0 200 OK\r\nServer: x\r\n\r\nall of it", splitEvery: 4))
        #expect(r.bodyText == "all of it")
        // 204 and HEAD have no body whatever the headers say.
        let n = try #require(try feedAll("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n", splitEvery: 100))
        #expect(n.status == 204 && n.body.isEmpty)
        let h = try #require(try feedAll("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", splitEvery: 100, head: true))
        #expect(h.body.isEmpty)
    }

    @Test func repeatedHeaders() throws {
        let text = "HTTP/1.1 201 Created\r\nLink: <stun:stun.example.net>; rel=\"ice-server\"\r\nlink: <turn:t.example.net?transport=udp>; rel=\"ice-server\"; username=\"u\"; credential=\"p\"\r\nContent-Length: 0\r\n\r\n"
        let r = try #require(try feedAll(text, splitEvery: 9))
        #expect(r.headers.values("Link").count == 2)
    }

    @Test func malformedResponsesAreErrors() {
        let cases: [(String, HTTPError)] = [
            ("<html>hello</html>\r\n\r\n", .malformed("bad status line '<html>hello</html>'")),
            ("HTTP/1.1 2000 OK\r\n\r\n", .malformed("bad status line 'HTTP/1.1 2000 OK'")),
            ("HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", .malformed("header line without a colon")),
            ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", .malformed("bad Content-Length '-1'")),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", .unsupportedTransferEncoding("gzip")),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .malformed("bad chunk size 'zz'")),
            ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", .truncated),
            ("HTTP/1.1 200 OK\r\nContent-Le", .truncated),
        ]
        for (text, expected) in cases {
            #expect(throws: expected, "\(text)") { _ = try feedAll(text, splitEvery: 5) }
        }
    }

    @Test func limitsBoundMemory() {
        var limits = HTTPLimits()
        limits.maxHeaderBytes = 1024
        limits.maxBodyBytes = 100
        let huge = "HTTP/1.1 200 OK\r\n" + String(repeating: "X-Pad: " + String(repeating: "a", count: 100) + "\r\n", count: 20) + "\r\n"
        #expect(throws: HTTPError.headersTooLarge(limit: 1024)) { _ = try feedAll(huge, splitEvery: 64, limits: limits) }
        let endless = "HTTP/1.1 200 OK\r\n" + String(repeating: "a", count: 5000)
        #expect(throws: HTTPError.headersTooLarge(limit: 1024)) { _ = try feedAll(endless, splitEvery: 64, limits: limits) }
        #expect(throws: HTTPError.bodyTooLarge(limit: 100)) {
            _ = try feedAll("HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n", splitEvery: 64, limits: limits)
        }
        #expect(throws: HTTPError.bodyTooLarge(limit: 100)) {
            _ = try feedAll("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n", splitEvery: 64, limits: limits)
        }
        #expect(throws: HTTPError.bodyTooLarge(limit: 100)) {
            _ = try feedAll("HTTP/1.1 200 OK\r\n\r\n" + String(repeating: "b", count: 200), splitEvery: 64, limits: limits)
        }
    }

    /// Random garbage and every truncation of a valid response: errors or nil, never a trap.
    @Test func garbageNeverTraps() {
        var rng = SeededRandom(seed: 9112)
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0...300, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var p = HTTPResponseParser()
            _ = try? p.feed(bytes)
            _ = try? p.finish()
        }
        let valid = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".utf8)
        for cut in 0..<valid.count {
            var p = HTTPResponseParser()
            let partial = try? p.feed(Array(valid[0..<cut]))
            #expect(partial == nil)
            #expect(throws: HTTPError.self) { _ = try p.finish() }
        }
    }
}

@Suite struct HTTPRequestTests {
    @Test func serialize() throws {
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/sdp")
        headers.add("Authorization", "Bearer t")
        let request = HTTPRequest(method: "POST", url: try HTTPURL("http://127.0.0.1:8080/whip?x=1"), headers: headers, body: Array("v=0\r\n".utf8))
        #expect(String(decoding: request.serialize(), as: UTF8.self) ==
                "POST /whip?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/sdp\r\nAuthorization: Bearer t\r\nContent-Length: 5\r\n\r\nv=0\r\n")
        let delete = HTTPRequest(method: "DELETE", url: try HTTPURL("https://example.com/r/1"))
        #expect(String(decoding: delete.serialize(), as: UTF8.self) == "DELETE /r/1 HTTP/1.1\r\nHost: example.com\r\n\r\n")
    }

    @Test func serverSideParse() throws {
        var p = HTTPRequestParser()
        let r = try #require(try p.feed(Array("POST /voice/chat1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}".utf8)))
        #expect(r.method == "POST" && r.target == "/voice/chat1" && r.body == Array("{}".utf8))
        var q = HTTPRequestParser()
        #expect(throws: HTTPError.self) { _ = try q.feed(Array("GARBAGE\r\n\r\n".utf8)) }
    }

    @Test func urls() throws {
        let u = try HTTPURL("https://api.example.com/v1/realtime/calls")
        #expect(u.secure && u.host == "api.example.com" && u.port == 443 && u.target == "/v1/realtime/calls")
        let v = try HTTPURL("http://[::1]:8080")
        #expect(v.host == "::1" && v.port == 8080 && v.target == "/" && v.hostHeader == "[::1]:8080")
        #expect(try HTTPURL("HTTP://h/p#frag").target == "/p")
        #expect(try u.resolving("/whip/resource/1").description == "https://api.example.com/whip/resource/1")
        #expect(try u.resolving("calls/2").description == "https://api.example.com/v1/realtime/calls/2")
        #expect(try u.resolving("http://other:81/x").description == "http://other:81/x")
        for bad in ["ftp://x/", "http://", "http://user@host/", "http://h:0/", "http://h:99999/", "http://[::1/", "://x", "http://a b/"] {
            #expect(throws: HTTPError.self, "\(bad)") { _ = try HTTPURL(bad) }
        }
    }
}
