import Testing
import JSON
@testable import Signaling

/// Both sides of the routes are one set of builders and parsers: what the client sends,
/// the server reads as meant, and what the server answers, the client reads back.
@Suite struct RouteTests {
    let base = try! HTTPURL("https://backend.example/api")
    let whip = try! HTTPURL("https://whip.example/whip/endpoint")
    func noRedact(_ s: String) -> String { s }

    func server(_ r: HTTPRequest) -> RouteServer.Parsed {
        RouteServer.parse(method: r.method, target: r.url.target, headers: r.headers, body: r.body)
    }

    @Test func backendRoundTrip() throws {
        let token = BearerCredential(token: "device-token-1234", for: base)
        let route = Route.backend(base: base, chat: "chat/7 x")
        let offer = RouteClient.offerRequest(route, offer: "v=0\r\n", bearer: token)
        #expect(offer.url.target == "/api/voice/chat%2F7%20x")
        #expect(offer.headers["Authorization"] == "Bearer device-token-1234")
        #expect(server(offer) == .request(.backendOffer(chat: "chat%2F7%20x", sdp: "v=0\r\n")))
        let response = RouteServer.backendAnswered(id: "v-42", answer: "v=0\r\nanswer")
        guard case .answer(let a) = RouteClient.offerOutcome(route, response, url: offer.url, now: 0, redact: noRedact) else {
            Issue.record("not an answer"); return
        }
        #expect(a.sdp == "v=0\r\nanswer" && a.voiceID == "v-42" && a.warnings.isEmpty)
        let close = try #require(RouteClient.closeRequest(route, answer: a, bearer: token))
        #expect(close.method == "POST" && close.url.target == "/api/voice/chat%2F7%20x/v-42/close")
        #expect(server(close) == .request(.backendClose(chat: "chat%2F7%20x", id: "v-42")))
    }

    /// A backend's `iceServers` in the browser's RTCIceServer shape: `urls` a string or a
    /// list, credentials per entry; entries of another shape and URLs with control
    /// characters are skipped, and at most 8 are taken.
    @Test func backendICEServers() throws {
        let route = Route.backend(base: base, chat: "c")
        let body = #"{"sdp":"v=0\r\nanswer","iceServers":[{"urls":"stun:stun.example.net"},"#
            + #"{"urls":["turn:t.example.net:3478?transport=tcp","turns:t.example.net"],"username":"u1","credential":"p1"},"#
            + #"{"urls":"turn:bad\r\nx"},7,{"username":"no-urls"}]}"#
        let r = HTTPResponse(status: 200, reason: "OK", headers: HTTPHeaders([("Content-Type", "application/json")]), body: Array(body.utf8))
        guard case .answer(let a) = RouteClient.offerOutcome(route, r, url: base, now: 0, redact: noRedact) else {
            Issue.record("not an answer"); return
        }
        #expect(a.iceServers == [ICEServerLink(url: "stun:stun.example.net"),
                                 ICEServerLink(url: "turn:t.example.net:3478?transport=tcp", username: "u1", credential: "p1"),
                                 ICEServerLink(url: "turns:t.example.net", username: "u1", credential: "p1")])
        let many = #"{"sdp":"v=0","iceServers":[{"urls":["#
            + (0..<20).map { "\"turn:h\($0).example\"" }.joined(separator: ",") + "]}]}"
        let r2 = HTTPResponse(status: 200, reason: "OK", headers: HTTPHeaders([("Content-Type", "application/json")]), body: Array(many.utf8))
        guard case .answer(let b) = RouteClient.offerOutcome(route, r2, url: base, now: 0, redact: noRedact) else {
            Issue.record("not an answer"); return
        }
        #expect(b.iceServers.count == 8)
    }

    @Test func whipRoundTrip() throws {
        let token = BearerCredential(token: "device-token-1234", for: whip)
        let offer = RouteClient.offerRequest(.whip(whip), offer: "v=0\r\n", bearer: token)
        #expect(offer.headers["Content-Type"] == RouteMediaType.sdp)
        #expect(server(offer) == .request(.whipOffer(sdp: "v=0\r\n")))
        var created = RouteServer.whipCreated(id: "s1", answer: "v=0\r\nA", etag: "\"s1-1\"")
        created.headers.add("Link", "<stun:stun.example.net>; rel=\"ice-server\"")
        created.headers.add("Link", "<turn:turn.example.net?transport=tcp>; rel=\"ice-server\"; username=\"u;1\"; credential=\"p,2\"")
        guard case .answer(let a) = RouteClient.offerOutcome(.whip(whip), created, url: whip, now: 0, redact: noRedact) else {
            Issue.record("not an answer"); return
        }
        #expect(a.resource?.description == "https://whip.example/whip/s1" && a.etag == "\"s1-1\"")
        #expect(a.iceServers == [ICEServerLink(url: "stun:stun.example.net"),
                                 ICEServerLink(url: "turn:turn.example.net?transport=tcp", username: "u;1", credential: "p,2")])
        let patch = RouteClient.restartRequest(resource: a.resource!, fragment: "a=ice-ufrag:x\r\n", bearer: token)
        #expect(patch.headers["If-Match"] == "\"*\"")
        #expect(server(patch) == .request(.whipRestart(id: "s1", fragment: "a=ice-ufrag:x\r\n")))
        let restarted = RouteServer.restarted(fragment: "a=ice-ufrag:y\r\n", etag: "\"s1-2\"")
        guard case .success(let r) = RouteClient.restartOutcome(restarted, redact: noRedact) else { Issue.record("refused"); return }
        #expect(r.fragment == "a=ice-ufrag:y\r\n" && r.etag == "\"s1-2\"")
        let delete = try #require(RouteClient.closeRequest(.whip(whip), answer: a, bearer: token))
        #expect(delete.method == "DELETE" && server(delete) == .request(.whipDelete(id: "s1")))
    }

    @Test func openAIKeyAndHangup() throws {
        let tokenURL = try HTTPURL("https://backend.example/realtime-key")
        let calls = try HTTPURL("https://api.openai.com/v1/realtime/calls")
        let device = BearerCredential(token: "device-token-1234", for: tokenURL)
        let keyRequest = RouteClient.ephemeralKeyRequest(tokenURL, credential: device)
        #expect(keyRequest.headers["Authorization"] == "Bearer device-token-1234")
        for body in ["{\"value\":\"ek_1\"}", "{\"client_secret\":{\"value\":\"ek_1\"}}"] {
            let r = HTTPResponse(status: 200, reason: "OK", headers: HTTPHeaders(), body: Array(body.utf8))
            #expect((try? RouteClient.ephemeralKey(r, tokenURL: tokenURL, now: 0, redact: noRedact).get()) == "ek_1")
        }
        let bad = HTTPResponse(status: 200, reason: "OK", headers: HTTPHeaders(), body: Array("{\"value\":\"a b\"}".utf8))
        guard case .failure(.badAnswer) = RouteClient.ephemeralKey(bad, tokenURL: tokenURL, now: 0, redact: noRedact) else {
            Issue.record("a key with a space was taken"); return
        }
        let key = BearerCredential(token: "ek_1-abcdefgh", for: calls)
        let offer = RouteClient.offerRequest(.openai(calls: calls, tokenURL: tokenURL), offer: "v=0\r\n", bearer: key)
        #expect(offer.url == calls && offer.headers["Authorization"] == "Bearer ek_1-abcdefgh")
        let created = HTTPResponse(status: 201, reason: "Created", headers: HTTPHeaders([("Location", "/v1/realtime/calls/rtc_1")]), body: Array("v=0\r\n".utf8))
        guard case .answer(let a) = RouteClient.offerOutcome(.openai(calls: calls, tokenURL: tokenURL), created, url: calls, now: 0, redact: noRedact) else {
            Issue.record("not an answer"); return
        }
        let hangup = try #require(RouteClient.closeRequest(.openai(calls: calls, tokenURL: tokenURL), answer: a, bearer: key))
        #expect(hangup.url.description == "https://api.openai.com/v1/realtime/calls/rtc_1/hangup")
    }

    /// HTTP status → failure class (the supervisor's backoff and the exit status follow).
    @Test func classification() throws {
        func outcome(_ status: Int, _ headers: [(String, String)] = [], body: String = "") -> OfferOutcome {
            RouteClient.offerOutcome(.whip(whip), HTTPResponse(status: status, reason: "R", headers: HTTPHeaders(headers), body: Array(body.utf8)),
                                     url: whip, now: 1_000_000, redact: noRedact)
        }
        guard case .failure(.unauthorized) = outcome(401) else { Issue.record("401"); return }
        guard case .failure(.unauthorized) = outcome(403) else { Issue.record("403"); return }
        guard case .failure(.retryAfter(let d, _)) = outcome(503, [("Retry-After", "7")]) else { Issue.record("503"); return }
        #expect(d == .seconds(7))
        guard case .failure(.unavailable) = outcome(500) else { Issue.record("500"); return }
        guard case .redirect(let next) = outcome(307, [("Location", "/other")]) else { Issue.record("307"); return }
        #expect(next.target == "/other")
        guard case .failure(.badAnswer) = outcome(307) else { Issue.record("307 without Location"); return }
        guard case .failure(.badAnswer) = outcome(308, [("Location", "http://whip.example/x")]) else { Issue.record("downgrade"); return }
        let backend = Route.backend(base: base, chat: "c")
        guard case .failure(.badAnswer) = RouteClient.offerOutcome(backend, HTTPResponse(status: 200, reason: "OK", headers: HTTPHeaders(), body: Array("<html>".utf8)),
                                                                   url: base, now: 0, redact: noRedact) else { Issue.record("html"); return }
    }

    @Test func voiceIDs() {
        #expect(RouteClient.voiceID(.string("v-1.a_b~c")) == .id("v-1.a_b~c"))
        #expect(RouteClient.voiceID(.number(JSONNumber(42))) == .id("42"))
        #expect(RouteClient.voiceID(nil) == .absent)
        for bad: JSONValue in [.string("a\r\nX: 1"), .string("../x"), .string(".."), .string(""), .string(String(repeating: "a", count: 129)),
                               .number(JSONNumber(-1)), .bool(true)] {
            guard case .refused = RouteClient.voiceID(bad) else { Issue.record("\(bad) taken"); continue }
        }
    }

    @Test func linkHeaders() {
        #expect(ICEServerLink.parse("<stun:a.example>; rel=ice-server, <https://x>; rel=\"preconnect\"") == [ICEServerLink(url: "stun:a.example")])
        #expect(ICEServerLink.parse("<turn:t,1.example>; rel=\"ice-server other\"") == [ICEServerLink(url: "turn:t,1.example")])
        #expect(ICEServerLink.parse("garbage, <>; rel=ice-server, <stun:b>") == [])
        #expect(ICEServerLink.parse("<stun:c>; rel=ice-server; username=\"a\\\"b\"") == [ICEServerLink(url: "stun:c", username: "a\"b")])
    }

    @Test func serverRefusals() {
        #expect(RouteServer.parse(method: "POST", target: "/whip", headers: HTTPHeaders([("Content-Type", "text/plain")]), body: [])
                == .refuse(RouteServer.text(415, "WHIP offers are application/sdp")))
        guard case .refuse(let r) = RouteServer.parse(method: "GET", target: "/x", headers: HTTPHeaders(), body: []) else { Issue.record("GET"); return }
        #expect(r.status == 405)
        guard case .refuse(let b) = RouteServer.parse(method: "POST", target: "/voice/7", headers: HTTPHeaders(), body: Array("{".utf8)) else {
            Issue.record("bad JSON"); return
        }
        #expect(b.status == 400)
    }
}
