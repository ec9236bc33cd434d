import Testing
import Wire
import JSON
@testable import Signaling

/// What a provider's refusal means: OpenAI's error bodies and retry headers,
/// classified as its own SDKs do (openai-node `shouldRetry`/`retryRequest`).
@Suite struct ErrorClassTests {
    static let now: Int64 = 1_796_000_000

    static func json(_ status: Int, code: String, type: String = "invalid_request_error", message: String,
                     headers: [(String, String)] = []) -> HTTPResponse {
        let body: JSONValue = ["error": ["message": .string(message), "type": .string(type), "param": .null, "code": .string(code)]]
        return HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "application/json")] + headers), body: body.serialized())
    }

    func classify(_ r: HTTPResponse) -> RouteFailure {
        RouteClient.classify(r, "OpenAI", now: Self.now, redact: { $0 })
    }

    @Test func quotaIsNotARateLimit() {
        let r = Self.json(429, code: "insufficient_quota", type: "insufficient_quota",
                          message: "You exceeded your current quota, please check your plan and billing details.")
        guard case .quota(let m) = classify(r) else { Issue.record("\(classify(r))"); return }
        #expect(m.contains("You exceeded your current quota") && m.contains("not a rate limit"))
    }

    @Test func rateLimitHonoursTheServersWait() {
        let limited = { (h: [(String, String)]) in Self.json(429, code: "rate_limit_exceeded", type: "requests", message: "Rate limit reached", headers: h) }
        #expect(classify(limited([("retry-after-ms", "1500")])) == .retryAfter(.milliseconds(1500), "OpenAI answered 429 : Rate limit reached [rate_limit_exceeded]"))
        // retry-after-ms wins over Retry-After; fractional milliseconds and seconds.
        #expect(limited([("retry-after-ms", "250.5"), ("Retry-After", "9")]).retryAfter(now: Self.now) == .microseconds(250_500))
        #expect(limited([("Retry-After", "1.5")]).retryAfter(now: Self.now) == .milliseconds(1500))
        #expect(limited([("Retry-After", "0.25")]).retryAfter(now: Self.now) == .milliseconds(250))
        #expect(limited([("Retry-After", "2")]).retryAfter(now: Self.now) == .seconds(2))
        #expect(limited([("Retry-After", "1.")]).retryAfter(now: Self.now) == nil)
        #expect(limited([("Retry-After", "1.2.3")]).retryAfter(now: Self.now) == nil)
        // A rate limit with no wait: an ordinary retry.
        guard case .unavailable = classify(limited([])) else { Issue.record("plain 429"); return }
    }

    @Test func shouldRetryIsTheServersWord() {
        let r = { (v: String) in HTTPResponse(status: 409, headers: HTTPHeaders([("x-should-retry", v)]), body: Array("conflict".utf8)) }
        #expect(r("true").shouldRetry == true && r("false").shouldRetry == false && r("maybe").shouldRetry == nil)
        guard case .rejected = classify(r("false")) else { Issue.record("false"); return }
        guard case .unavailable = classify(r("true")) else { Issue.record("true"); return }
        // true wins over a JSON error body that would otherwise be a data error.
        guard case .unavailable = classify(Self.json(400, code: "x", message: "m", headers: [("x-should-retry", "true")])) else {
            Issue.record("should-retry true on 400"); return
        }
    }

    @Test func invalidOfferIsADataErrorWithOpenAIsMessage() {
        let r = Self.json(400, code: "invalid_offer", message: "The offer SDP is invalid: missing a=fingerprint")
        guard case .rejected(let m) = classify(r) else { Issue.record("\(classify(r))"); return }
        #expect(m == "OpenAI answered 400 : The offer SDP is invalid: missing a=fingerprint [invalid_offer]")
        // A 4xx without a JSON error body stays an ordinary refusal.
        guard case .unavailable = classify(HTTPResponse(status: 404, body: Array("not found".utf8))) else { Issue.record("404"); return }
    }

    @Test func regionIsItsOwnConfigurationError() {
        let r = Self.json(403, code: "unsupported_country_region_territory", type: "request_forbidden",
                          message: "Country, region, or territory not supported")
        guard case .region(let m) = classify(r) else { Issue.record("\(classify(r))"); return }
        #expect(m.contains("Country, region, or territory not supported") && m.contains("the token is not the problem"))
        guard case .unauthorized = classify(HTTPResponse(status: 403, body: Array("forbidden".utf8))) else { Issue.record("403"); return }
    }

    @Test func everyRouteRequestSaysWhoItIs() throws {
        let calls = try HTTPURL("https://api.openai.com/v1/realtime/calls")
        let token = try HTTPURL("https://backend.example/token")
        let route = Route.openai(calls: calls, tokenURL: token)
        #expect(RouteClient.userAgent == "linnet/" + LinnetVersion.string)
        #expect(RouteClient.ephemeralKeyRequest(token, credential: nil).headers["User-Agent"] == "linnet/" + LinnetVersion.string)
        #expect(RouteClient.offerRequest(route, offer: "v=0", bearer: nil).headers["User-Agent"] == RouteClient.userAgent)
        #expect(RouteClient.offerRequest(.backend(base: token, chat: "c"), offer: "v=0", bearer: nil).headers["User-Agent"] == RouteClient.userAgent)
        // Pins: the token URL's host, never OpenAI's.
        #expect(RouteClient.pinsApply(to: token, route: route))
        #expect(!RouteClient.pinsApply(to: calls, route: route))
        #expect(!RouteClient.pinsApply(to: try HTTPURL("https://api.openai.com/v1/realtime/calls/rtc_1/hangup"), route: route))
        #expect(RouteClient.pinsApply(to: try HTTPURL("https://backend.example/voice/c"), route: .backend(base: token, chat: "c")))
    }
}

@Suite struct OpenAIHangupTests {
    @Test func hangupThroughTheBackendOrWhileTheKeyIsValid() throws {
        let calls = try HTTPURL("https://api.openai.com/v1/realtime/calls")
        let answer = RouteAnswer(sdp: "", resource: try HTTPURL("https://api.openai.com/v1/realtime/calls/rtc_abc"), etag: nil,
                                 iceServers: [], voiceID: nil, warnings: [])
        let key = BearerCredential(token: "ek_1", for: calls)
        let backend = try HTTPURL("https://backend.example/hangup")
        let device = BearerCredential(token: "device", for: backend)
        // The backend's route: the call id, the device's token, never the key.
        let viaBackend = try #require(RouteClient.openAIHangup(answer: answer, key: key, keyExpired: true, hangupURL: backend, device: device))
        #expect(viaBackend.method == "POST" && viaBackend.url == backend)
        #expect(try JSONValue.parse(viaBackend.body) == ["call_id": "rtc_abc"])
        #expect(viaBackend.headers["Authorization"] == "Bearer device")
        // The key's own hangup while it is valid; nothing once it has expired.
        let direct = try #require(RouteClient.openAIHangup(answer: answer, key: key, keyExpired: false, hangupURL: nil, device: device))
        #expect(direct.url.target == "/v1/realtime/calls/rtc_abc/hangup" && direct.headers["Authorization"] == "Bearer ek_1")
        #expect(RouteClient.openAIHangup(answer: answer, key: key, keyExpired: true, hangupURL: nil, device: device) == nil)
    }

    @Test func theKeysExpiryIsRead() throws {
        let token = try HTTPURL("https://backend.example/token")
        let ga = HTTPResponse(status: 200, body: Array(#"{"value":"ek_1","expires_at":1796000600,"session":{}}"#.utf8))
        let old = HTTPResponse(status: 200, body: Array(#"{"client_secret":{"value":"ek_2","expires_at":1796000601}}"#.utf8))
        let none = HTTPResponse(status: 200, body: Array(#"{"value":"ek_3"}"#.utf8))
        #expect(try RouteClient.ephemeralKeyDetails(ga, tokenURL: token, now: 0, redact: { $0 }).get() == ("ek_1", 1_796_000_600))
        #expect(try RouteClient.ephemeralKeyDetails(old, tokenURL: token, now: 0, redact: { $0 }).get() == ("ek_2", 1_796_000_601))
        #expect(try RouteClient.ephemeralKeyDetails(none, tokenURL: token, now: 0, redact: { $0 }).get() == ("ek_3", nil))
    }
}
