import Testing
import Wire
@testable import Signaling

/// Inputs found by the fuzz targets in Fuzz/ (scripts/fuzz.sh), byte for byte, with the
/// behaviour the fix gives. Each was a trap or a broken invariant before.
@Suite struct FuzzRegressionTests {
    /// fuzz_http_request: an empty chunk-size line (here the CRLF after "0\r" once the
    /// 8-byte chunk has eaten "abad\r\n0\r") split into no fields and indexed [0]: a trap
    /// that any client of `linnet answer`, or any server, could trigger.
    @Test func emptyChunkSizeLineIsRefused() {
        let request = Array("POST /sesrion HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nabad\r\n0\r\n\r\n".utf8)
        var parser = HTTPRequestParser()
        #expect(throws: HTTPError.malformed("bad chunk size ''")) { try parser.feed(request) }

        var responses = HTTPResponseParser()
        let response = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n".utf8)
        #expect(throws: HTTPError.malformed("bad chunk size ''")) { try responses.feed(response) }
        var semicolon = HTTPResponseParser()
        let onlyExtension = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;x=1\r\n".utf8)
        #expect(throws: HTTPError.malformed("bad chunk size ''")) { try semicolon.feed(onlyExtension) }
    }

    /// fuzz_http_response: a `Location` with spaces (here a status line pasted into it)
    /// resolved to a target with spaces, which the next request writes verbatim into its
    /// request line. URLs with spaces or control bytes are refused now.
    @Test func locationWithSpacesOrControlBytesIsRefused() throws {
        let base = try HTTPURL("https://api.example.com/v1/realtime?model=x")
        let location = "https://other.example.com:8443/x/2.0 500 Internal Server Error"
        #expect(throws: HTTPError.badURL(location)) { try base.resolving(location) }
        #expect(throws: HTTPError.badURL("/calls/1\rX-Injected: 1")) { try base.resolving("/calls/1\rX-Injected: 1") }
        #expect(throws: HTTPError.badURL("calls\t1")) { try base.resolving("calls\t1") }
        #expect(throws: HTTPError.badURL("http://a b/")) { try HTTPURL("http://a b/") }
        #expect(throws: HTTPError.badURL("http://h/\u{7F}")) { try HTTPURL("http://h/\u{7F}") }
        // Percent-encoded, it is an ordinary URL.
        #expect(try base.resolving("/x/2.0%20500").target == "/x/2.0%20500")
        #expect(try base.resolving("calls/1").target == "/v1/calls/1")

        // The whole response as the fuzzer gave it: still parsed, Location as sent.
        var parser = HTTPResponseParser()
        let bytes = Array(("HTTP/1.1 307 Temporary Redirect\r\nLocation: " + location
                           + "\r\nServer: x\r\n\r\n<htm?y=1\r\nContent-Length: 0\r\n\r\n").utf8)
        #expect(try parser.feed(bytes) == nil)
        let response = try parser.finish()
        #expect(response.status == 307)
        #expect(response.headers["Location"] == location)
    }
}
