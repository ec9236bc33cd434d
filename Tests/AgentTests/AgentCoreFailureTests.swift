import Testing
import Wire
import JSON
import Signaling
@testable import Agent

/// HTTP status → failure class → exit status (README "exit statuses"), giving up after
/// `max-attempts`, `Retry-After`, and "disconnected only after connected": decided by the
/// core, checked here on the simulated clock instead of by spawning the binary.
@Suite struct AgentCoreFailureTests {
    /// A world whose provider answers every offer with `reply`, run until the core exits.
    func ending(_ reply: WorldProvider.Reply, route: RouteKind = .whip, maxAttempts: Int,
                within limit: Duration = .seconds(600)) throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = route
        o.maxAttempts = maxAttempts
        let w = try ProviderWorld(o)
        w.provider.reply = { $0.kind == .offer ? reply : .normal }
        w.startCore()
        try #require(w.run(within: limit) { w.exited != nil } != nil, "no exit: \(w.states)")
        return w
    }

    static func status(_ code: Int, _ headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: code, reason: code == 401 ? "Unauthorized" : "", headers: HTTPHeaders(headers + [("Content-Type", "text/plain")]),
                     body: Array("refused\n".utf8))
    }

    /// The rule, one row per class: 401/403 → 78 (the token), 5xx and refusals → 69,
    /// garbage or an unusable answer → 65, a certificate that does not verify → 78.
    @Test func statusToFailureClassToExitStatus() throws {
        let cases: [(String, WorldProvider.Reply, RouteKind, Agent.ExitStatus, String)] = [
            ("401", .respond(Self.status(401)), .whip, .config, "check the token"),
            ("403", .respond(Self.status(403)), .backend, .config, "check the token"),
            ("500", .respond(Self.status(500)), .whip, .unavailable, "WHIP endpoint answered 500"),
            ("503", .respond(Self.status(503)), .backend, .unavailable, "backend answered 503"),
            ("refused", .fail(HTTPTransportFailure(.noAnswer, "connection refused")), .whip, .unavailable, "connection refused"),
            ("timeout", .timeout, .whip, .unavailable, "timed out"),
            ("garbage bytes", .fail(HTTPTransportFailure(.badData, "not HTTP: garbage")), .whip, .dataError, "not HTTP"),
            ("not SDP", .respond(HTTPResponse(status: 201, headers: HTTPHeaders([("Content-Type", "application/sdp"), ("Location", "/whip/x")]),
                                              body: Array("not an SDP answer".utf8))), .whip, .dataError, "answer is unusable"),
            ("not JSON", .respond(HTTPResponse(status: 200, body: Array("<html>".utf8))), .backend, .dataError, "not JSON"),
            ("certificate", .fail(HTTPTransportFailure(.configuration, "not issued by a trusted CA")), .whip, .config, "trusted CA"),
        ]
        for (name, reply, route, status, words) in cases {
            let w = try ending(reply, route: route, maxAttempts: 1)
            #expect(w.exited?.status == status, "\(name): exit \(String(describing: w.exited?.status))")
            #expect(w.logged(words), "\(name): \(w.logs.map(\.text).suffix(4))")
            #expect(w.logged("giving up after 1 failed attempt (max-attempts 1)"), "\(name)")
            // One attempt, then the end: nothing was connected, so never `disconnected`.
            #expect(w.sessionsStarted.count == 1 && w.states == ["connecting", "failed", "closed"], "\(name): \(w.states)")
            #expect(!w.logs.contains { $0.text.contains("device-token") }, "\(name): the token never appears in the log")
            #expect(w.problems.isEmpty, "\(name): \(w.problems)")
        }
    }

    /// A 401 backs off long (30 s doubling, half of it jittered) and with max-attempts
    /// 2 the second 401 ends the run with 78 — after the one wait, not at once.
    @Test func unauthorizedBacksOffLongThenGivesUp() throws {
        let w = try ending(.respond(Self.status(401)), maxAttempts: 2)
        #expect(w.exited?.status == .config)
        let retry = try #require(w.retries.first)
        #expect(retry.delay >= .seconds(15) && retry.delay <= .seconds(30), "\(retry.delay)")
        #expect(w.sessionsStarted.count == 2)
        #expect(startsAt(w.sessionsStarted[1].at, retry))
        #expect(w.logged("giving up after 2 failed attempts (max-attempts 2)"))
        #expect(w.exited!.at - w.sessionsStarted[1].at < .milliseconds(100))
    }

    /// max-attempts 3 with a provider that always answers 503: exactly three sessions,
    /// each after its backoff, then 69; nothing is started after the give-up.
    @Test func givesUpAfterMaxAttempts() throws {
        let w = try ending(.respond(Self.status(503)), maxAttempts: 3)
        #expect(w.exited?.status == .unavailable)
        #expect(w.sessionsStarted.count == 3)
        #expect(w.retries.map(\.attempt) == [1, 2, 3])
        for (i, r) in w.retries.prefix(2).enumerated() {
            #expect(r.delay <= backoffCeiling(r.attempt))
            #expect(startsAt(w.sessionsStarted[i + 1].at, r))
        }
        #expect(w.logged("giving up after 3 failed attempts (max-attempts 3)"))
        let end = try #require(w.exited?.at)
        w.run(for: .seconds(120))
        #expect(w.sessionsStarted.count == 3 && w.requestsSent.count == 3, "nothing after the end")
        #expect(w.exited?.at == end)
        // Without max-attempts the same provider is retried forever, the ceiling
        // reaching 30 s.
        let forever = try ProviderWorld()
        forever.provider.reply = { $0.kind == .offer ? .respond(Self.status(503)) : .normal }
        forever.startCore()
        forever.run(for: .seconds(600))
        #expect(forever.exited == nil && forever.retries.count >= 20)
        #expect(forever.retries.allSatisfy { $0.delay <= backoffCeiling($0.attempt) })
        #expect(forever.retries.last.map { backoffCeiling($0.attempt) } == .seconds(30))
    }

    /// `Retry-After` is a floor on the backoff (RFC 9110 §10.2.3): 7 s means the next
    /// attempt 7 s later, exactly (the jitter's ceiling, 0.5 s, is below it). One of an
    /// hour is capped at 600 s, said so, and waited; with max-attempts the run does not
    /// sit through it (waits past 30 s per allowed retry end it at once, 69).
    @Test func retryAfterIsHonouredAndCapped() throws {
        let seven = try ProviderWorld()
        seven.provider.reply = { r in r.kind == .offer && r.count == 1 ? .respond(Self.status(503, [("Retry-After", "7")])) : .normal }
        seven.startCore()
        try #require(seven.run(within: .seconds(60)) { seven.core.state == .connected } != nil)
        let r7 = try #require(seven.retries.first)
        #expect(r7.delay == .seconds(7))
        #expect(startsAt(seven.sessionsStarted[1].at, r7))

        let hour = try ProviderWorld()
        hour.provider.reply = { r in r.kind == .offer && r.count == 1 ? .respond(Self.status(503, [("Retry-After", "3600")])) : .normal }
        hour.startCore()
        try #require(hour.run(within: .seconds(700)) { hour.core.state == .connected } != nil)
        let capped = try #require(hour.records("retry").first)
        #expect(capped["delay_ms"]?.int64 == 600_000)
        #expect(capped["error"]?.string?.contains("retry after 600 s, the cap; the server asked for 3600 s") == true, "\(capped.fields)")
        #expect(startsAt(hour.sessionsStarted[1].at, try #require(hour.retries.first)))

        // An HTTP date works as well as seconds (judged against the world's wall clock).
        let dated = try ProviderWorld()
        let date = imfFixdate(dated.wallClock + 20)
        dated.provider.reply = { r in r.kind == .offer && r.count == 1 ? .respond(Self.status(503, [("Retry-After", date)])) : .normal }
        dated.startCore()
        try #require(dated.run(within: .seconds(60)) { dated.core.state == .connected } != nil)
        let rd = try #require(dated.retries.first)
        #expect(rd.delay >= .seconds(19) && rd.delay <= .seconds(20), "\(rd.delay)")

        let script = try ending(.respond(Self.status(503, [("Retry-After", "3600")])), maxAttempts: 2, within: .seconds(5))
        #expect(script.exited?.status == .unavailable)
        #expect(script.sessionsStarted.count == 1)
        #expect(script.logged("the next would wait 600 s, and a max-attempts 2 run waits at most 30 s in all"), "\(script.logs.map(\.text).suffix(3))")
    }

    /// "Disconnected" only after a session was connected. An answered offer whose media
    /// never reaches the device fails when ICE gives up (checks unanswered), as
    /// `failed`. One whose ICE connects but whose DTLS never completes, and whose path
    /// then goes away for 4 s and comes back (ICE disconnected and connected again),
    /// fails at the connect timeout, exactly 20 s after it started, still never
    /// `disconnected`. A call that was connected and loses its path is `disconnected`.
    @Test func disconnectedOnlyIfItWasConnected() throws {
        var o = ProviderWorld.Options()
        o.maxAttempts = 1
        let never = try ProviderWorld(o)
        never.net.down.loss = 1
        never.startCore()
        try #require(never.run(within: .seconds(60)) { never.exited != nil } != nil)
        #expect(never.states == ["connecting", "failed", "closed"], "\(never.states)")
        #expect(never.logged("ICE failed"), "\(never.logs.map(\.text).suffix(4))")
        #expect(never.exited?.status == .unavailable)

        let noDTLS = try ProviderWorld(o)
        // RFC 7983: 20–63 is DTLS.
        noDTLS.dropToDevice = { bytes in bytes.first.map { (20...63).contains($0) } ?? false }
        noDTLS.schedule(after: .seconds(5)) { $0.net.blackhole(for: .seconds(4)) }
        noDTLS.startCore()
        try #require(noDTLS.run(within: .seconds(60)) { noDTLS.exited != nil } != nil)
        let ice = noDTLS.logs.filter { $0.text.hasPrefix("session 1: ICE ") }.map(\.text)
        #expect(ice.contains("session 1: ICE disconnected") && ice.last == "session 1: ICE connected", "\(ice)")
        #expect(noDTLS.states == ["connecting", "failed", "closed"], "\(noDTLS.states)")
        let failedAt = try #require(noDTLS.stateTimes("failed").first)
        #expect(failedAt == noDTLS.start + .seconds(20))
        #expect(noDTLS.logged("no media connection within 20.000s"), "\(noDTLS.logs.map(\.text).suffix(4))")
        #expect(noDTLS.exited?.status == .unavailable)

        let dropped = try ProviderWorld()
        dropped.startCore()
        try #require(dropped.run(within: .seconds(5)) { dropped.core.state == .connected } != nil)
        dropped.net.down.loss = 1
        dropped.net.up.loss = 1
        try #require(dropped.run(within: .seconds(10)) { dropped.core.state == .disconnected } != nil)
        #expect(dropped.states == ["connecting", "connected", "disconnected"])
    }

    /// No sockets (the network is down) is a transient failure like a refused offer:
    /// retried, and 69 when max-attempts ends it.
    @Test func noSocketsIsUnavailable() throws {
        var o = ProviderWorld.Options()
        o.maxAttempts = 2
        let w = try ProviderWorld(o)
        w.bindFails = true
        w.startCore()
        try #require(w.run(within: .seconds(10)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .unavailable)
        #expect(w.retries.count == 2 && w.requestsSent.isEmpty)
    }
}

/// RFC 9110 §5.6.7 IMF-fixdate for Unix seconds ("Sun, 06 Nov 1994 08:49:37 GMT"), from
/// the civil calendar (days-from-civil inverted), without Foundation's clock types.
func imfFixdate(_ unix: Int64) -> String {
    let days = unix >= 0 ? unix / 86_400 : (unix - 86_399) / 86_400
    let secs = unix - days * 86_400
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let day = doy - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][Int(((days % 7) + 7) % 7)]
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
    return "\(weekday), \(two(day)) \(months[Int(month - 1)]) \(year) \(two(secs / 3_600)):\(two(secs / 60 % 60)):\(two(secs % 60)) GMT"
}

/// Errors that need different answers, on the core with the simulated clock.
@Suite struct AgentCoreErrorClassTests {
    static func openAIError(_ status: Int, code: String, type: String = "invalid_request_error", message: String,
                            headers: [(String, String)] = []) -> HTTPResponse {
        let body: JSONValue = ["error": ["message": .string(message), "type": .string(type), "param": .null, "code": .string(code)]]
        return HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "application/json")] + headers), body: body.serialized())
    }

    func world(maxAttempts: Int = 0, _ reply: @escaping (WorldProvider.Request) -> WorldProvider.Reply) throws -> ProviderWorld {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.maxAttempts = maxAttempts
        let w = try ProviderWorld(o)
        w.provider.reply = reply
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        return w
    }

    @Test func insufficientQuotaBacksOffLongAndSaysSo() throws {
        let w = try world { $0.kind == .offer ? .respond(Self.openAIError(429, code: "insufficient_quota", type: "insufficient_quota",
                                                                          message: "You exceeded your current quota.")) : .normal }
        try #require(w.run(within: .seconds(10)) { w.retries.count >= 1 } != nil)
        // 30 s doubling, half of it jittered: at least 15 s, never the 0.5 s of a blip.
        #expect(w.retries[0].delay >= .seconds(15), "\(w.retries)")
        #expect(w.logs.contains { $0.level == .error && $0.text.contains("out of quota") })
        #expect(w.statuses.last?.status.problem == "insufficient_quota")
        let json = try JSONValue.parse(try #require(w.statuses.last?.status.json))
        #expect(json["problem"] == "insufficient_quota")
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    @Test func invalidOfferGivesUpWithMaxAttemptsShowingOpenAIsMessage() throws {
        let w = try world(maxAttempts: 2) { $0.kind == .offer ? .respond(Self.openAIError(400, code: "invalid_offer",
                                                                                         message: "Invalid SDP offer: no audio section")) : .normal }
        try #require(w.run(within: .seconds(600)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .dataError)
        #expect(w.logged("Invalid SDP offer: no audio section [invalid_offer]"))
        // Not the 0.5–30 s of a transient failure: the one wait was long.
        #expect(w.retries.first.map { $0.delay >= .seconds(15) } == true, "\(w.retries)")
    }

    @Test func regionUnsupportedIsAConfigurationMessage() throws {
        let w = try world(maxAttempts: 1) { $0.kind == .offer ? .respond(Self.openAIError(403, code: "unsupported_country_region_territory",
                                                                                         type: "request_forbidden", message: "Country, region, or territory not supported")) : .normal }
        try #require(w.run(within: .seconds(60)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .config)
        #expect(w.logged("does not serve this country or region"))
        #expect(!w.logged("check the token"))
    }

    @Test func aRefusedEphemeralKeyIsFetchedAgainSoon() throws {
        // The first call is refused with 401 although the key was just fetched.
        let w = try world { r in r.kind == .offer && r.count == 1 ? .respond(HTTPResponse(status: 401, reason: "Unauthorized", body: Array("bad key".utf8))) : .normal }
        try #require(w.run(within: .seconds(10)) { w.core.state == .connected } != nil)
        #expect(w.retries.count == 1 && w.retries[0].delay <= .milliseconds(500), "\(w.retries)")
        #expect(w.provider.counts[.token] == 2, "a new key for the second attempt")
        #expect(w.logged("the ephemeral key was refused"))
        #expect(!w.logged("check the token"))
    }

    @Test func aRateLimitWaitsWhatTheServerAsked() throws {
        let w = try world { r in r.kind == .offer && r.count == 1
            ? .respond(Self.openAIError(429, code: "rate_limit_exceeded", type: "requests", message: "Rate limit reached", headers: [("retry-after-ms", "2500")]))
            : .normal }
        try #require(w.run(within: .seconds(10)) { w.core.state == .connected } != nil)
        #expect(w.retries.count == 1 && w.retries[0].delay >= .milliseconds(2500), "\(w.retries)")
    }
}

@Suite struct AgentCoreHangupTests {
    /// The token URL says the key expires 60 s after it was made: a call ended after
    /// that sends no hangup with it (it would be refused), and says why.
    /// The key's expiry is judged by the token server's clock (its `Date`), not the
    /// device's: with the device clock an hour fast, a key valid for ten minutes still
    /// hangs up the call it made.
    @Test func aFastDeviceClockStillHangsUp() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.deviceClockOffset = 3_600
        let w = try ProviderWorld(o)
        w.provider.reply = { r in
            guard r.kind == .token else { return .normal }
            let body: JSONValue = ["value": .string(w.provider.ephemeralKey), "expires_at": JSONValue(Int(w.wallClock + 600))]
            return .respond(HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", "application/json")]), body: body.serialized()))
        }
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.run(for: .seconds(30))
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(w.requestsSent.contains { $0.request.url.target.hasSuffix("/hangup") })
    }

    @Test func noHangupWithAnExpiredKey() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        let w = try ProviderWorld(o)
        w.provider.reply = { r in
            guard r.kind == .token else { return .normal }
            let body: JSONValue = ["value": .string(w.provider.ephemeralKey), "expires_at": JSONValue(Int(w.wallClock + 60))]
            return .respond(HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", "application/json")]), body: body.serialized()))
        }
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.run(for: .seconds(61))
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(!w.requestsSent.contains { $0.request.url.target.hasSuffix("/hangup") })
        #expect(w.logged("the ephemeral key has expired, so no hangup request"))
        w.run(for: .milliseconds(100))
        #expect(w.provider.sessionOfCore[1]?.endedBy == "goodbye", "the peer's close ended it")
    }

    @Test func hangupThroughTheBackendsRoute() throws {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.configure = { $0.hangupURL = try! HTTPURL("https://backend.test/hangup") }
        let w = try ProviderWorld(o)
        w.provider.reply = { r in r.url.target == "/hangup" ? .respond(HTTPResponse(status: 200)) : .normal }
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        let hangup = try #require(w.requestsSent.first { $0.request.url.target == "/hangup" }?.request)
        #expect(hangup.headers["Authorization"] == "Bearer device-token")
        #expect(try JSONValue.parse(hangup.body) == ["call_id": "rtc_1"])
    }
}
