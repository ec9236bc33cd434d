import Testing
import Wire
import JSON
import Signaling
import ICE
@testable import Agent

/// The agent core's connection decisions, in ProviderWorld on a manual clock: what
/// CLITests/AgentTests.swift checked by spawning the binary and timing it with the wall
/// clock, now with the timing facts asserted on simulated time.
@Suite struct AgentCoreConnectionTests {
    /// Every route connects: the offer reaches the provider, its answerer peer connects,
    /// audio goes both ways (the echo comes back) and SIGTERM closes the provider's side
    /// first (DELETE, close route, hang-up), then exits 0.
    /// ICE servers in the WHIP answer's `Link` fields (for the next session: this offer
    /// was complete before the answer): a TURN server with its own credentials on the
    /// internet is used; by name, resolved first; one without credentials never gets
    /// the configured ones; one on this host or the LAN is refused (the provider is on
    /// the internet); a `stun:` one is not a relay. Each refusal is said once.
    @Test func answerICEServersAreJudgedByTheCore() throws {
        var o = ProviderWorld.Options()
        let configured = TURNServer(url: try ICEServerURL(parsing: "turn:turn.device.net"), username: "kiosk-17", credential: "s3cret")
        o.configure = { $0.configuredRelays = [configured] }
        let w = try ProviderWorld(o)
        w.startCore()
        w.provider.linkHeaders = [
            "<turn:198.51.100.7:3478?transport=tcp>; rel=\"ice-server\"; username=\"u\"; credential=\"p\"",
            "<turn:turn.example.net>; rel=\"ice-server\"; username=\"u2\"; credential=\"p2\"",
            "<turn:evil.example.net:3478>; rel=\"ice-server\"",
            "<turn:192.168.1.20:3478>; rel=\"ice-server\"; username=\"u\"; credential=\"p\"",
            "<stun:stun.example.net>; rel=\"ice-server\""]
        _ = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        #expect(w.learnedRelays.map { "\($0.server.url) \($0.server.username) \($0.address)" } == ["turn:198.51.100.7:3478?transport=tcp u 198.51.100.7:3478"])
        #expect(w.resolveRequests.map { "\($0.url) \($0.username)" } == ["turn:turn.example.net:3478 u2"])
        let warnings = w.logs.filter { $0.level == .warning }.map(\.text)
        #expect(warnings.contains { $0.contains("turn:evil.example.net:3478 came without a username and credential") }, "\(warnings)")
        #expect(warnings.contains { $0.contains("turn:192.168.1.20:3478 is on a private network") }, "\(warnings)")
        #expect(!w.logs.contains { $0.text.contains("kiosk-17") || $0.text.contains("s3cret") })
        // The name resolves: to a LAN address it is refused, to a public one used.
        let named = try #require(w.resolveRequests.first)
        w.core.relayResolved(named, addresses: [SocketAddress(ip: IPAddress("10.0.0.5")!, port: 3478)], now: w.now)
        w.drive()
        #expect(w.learnedRelays.count == 1)
        w.core.relayResolved(named, addresses: [SocketAddress(ip: IPAddress("10.0.0.5")!, port: 3478),
                                                SocketAddress(ip: IPAddress("203.0.113.9")!, port: 3478)], now: w.now)
        w.drive()
        #expect(w.learnedRelays.last.map { "\($0.address) \($0.server.username)" } == "203.0.113.9:3478 u2")
        // The same answer again (the next session's) adds nothing.
        w.core.newConversation(now: w.now)
        w.drive()
        _ = w.run(within: .seconds(5)) { w.core.sessionIDs.contains(2) && w.core.state == .connected }
        #expect(w.learnedRelays.count == 2 && w.resolveRequests.count == 1)
    }

    /// While a session lives, how to close it with the device's own credentials is
    /// kept (for the next start, should this process die); it is forgotten once the
    /// session is closed. OpenAI only with a hangup-url: an ephemeral key is not kept.
    @Test(arguments: [RouteKind.whip, .backend, .openai])
    func theCloseIsKeptWhileTheSessionLives(_ route: RouteKind) throws {
        for hangup in route == .openai ? [false, true] : [false] {
            var o = ProviderWorld.Options()
            o.route = route
            if hangup { o.configure = { $0.hangupURL = try? HTTPURL("https://backend.test/hangup") } }
            let w = try ProviderWorld(o)
            w.startCore()
            _ = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
            let kept = w.pendingCloses[1]
            switch route {
            case .whip: #expect(kept?.method == "DELETE" && kept?.url.target.hasSuffix("/s1") == true, "\(String(describing: kept))")
            case .backend: #expect(kept?.method == "POST" && kept?.url.target.hasSuffix("/close") == true, "\(String(describing: kept))")
            case .openai:
                if hangup { #expect(kept?.url.target == "/hangup" && String(decoding: kept?.body ?? [], as: UTF8.self).contains("call_id")) }
                else { #expect(kept == nil, "no ephemeral key on disk") }
            }
            w.stop()
            _ = try #require(w.run(within: .seconds(5)) { w.exited != nil })
            #expect(w.pendingCloses.isEmpty, "forgotten once closed: \(w.pendingCloses)")
        }
    }

    @Test(arguments: [RouteKind.whip, .backend, .openai])
    func connectsCarriesAudioAndClosesOnEveryRoute(_ route: RouteKind) throws {
        var o = ProviderWorld.Options()
        o.route = route
        let w = try ProviderWorld(o)
        w.startCore()
        let connected = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        // Setup on the simulated clock: HTTP round trips of 40 ms, 10 ms each way.
        #expect(connected - w.start < .seconds(1), "connected after \(connected - w.start)")
        w.run(for: .seconds(3))
        let p = try #require(w.provider.sessionOfCore[1])
        #expect(p.audioCount > 100, "frames at the provider: \(p.audioCount)")
        #expect((w.media[1]?.receivedCount ?? 0) > 100, "echoed frames back: \(w.media[1]?.receivedCount ?? 0)")
        #expect(w.states == ["connecting", "connected"])
        w.stop()
        let ended = try #require(w.run(within: .seconds(5)) { w.exited != nil })
        #expect(w.exited?.status == .ok)
        // The provider's close round trip (40 ms), then the peer's own close.
        #expect(ended - connected < .seconds(5))
        #expect(p.endedBy == "close", "the provider heard of the end by its route: \(p.endedBy ?? "nothing")")
        #expect(w.states.last == "closed")
        #expect(w.core.sessionIDs.isEmpty)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }
}

/// The backoff ceiling of failed attempt `n` (counted since the last connection): 0.5 s
/// doubling to 30 s (SupervisorPolicy's defaults, restated here as the reference).
func backoffCeiling(_ attempt: Int) -> Duration {
    min(.seconds(30), .milliseconds(500) * (Int64(1) << Int64(min(attempt - 1, 20))))
}

/// Whether an attempt started at `t` is the one `retry` scheduled: its delay ran out
/// then (the record's `delay_ms` is the delay truncated to whole milliseconds).
func startsAt(_ t: Instant, _ retry: (attempt: Int, delay: Duration, at: Instant)) -> Bool {
    t >= retry.at + retry.delay && t < retry.at + retry.delay + .milliseconds(1)
}

extension AgentCoreConnectionTests {
    /// The answerer dies mid-call (no goodbye, every connection refused) and comes back:
    /// the core is `disconnected` within 3 s of the last packet that reached it (consent,
    /// RFC 7675, with the runtime's 1.5 s + 1.5 s), tries an ICE restart (refused: the
    /// provider is gone), then fresh sessions with backoff; once the provider is back the
    /// next attempt is the one the backoff scheduled, within its ceiling, and it connects
    /// within a second. Was CLITests' `answererKilledAndRestartedReconnects` (`detected <
    /// 4.0`, `reconnect < 2.5` on the wall clock).
    @Test func answererKilledAndRestartedReconnects() throws {
        let w = try ProviderWorld()
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.core.state == .connected } != nil)
        w.run(for: .seconds(2))
        let first = try #require(w.provider.sessionOfCore[1])
        #expect(first.audioCount > 50 && (w.media[1]?.receivedCount ?? 0) > 50)
        w.provider.kill()
        let killedAt = w.now
        let lost = try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected })
        let lastPacket = try #require(w.lastToDevice)
        // What was in flight when it died still landed; nothing after.
        #expect(lastPacket <= killedAt + .milliseconds(10))
        #expect(lost - lastPacket <= .seconds(3), "disconnected \(lost - lastPacket) after the last packet")
        #expect(w.records("ice_restart").count == 1, "an ICE restart is tried first (WHIP with an ETag)")
        w.run(for: .seconds(5))
        #expect(w.retries.count >= 2, "backing off while the provider is down: \(w.retries.map(\.delay))")
        for r in w.retries { #expect(r.delay <= backoffCeiling(r.attempt), "attempt \(r.attempt) waited \(r.delay)") }
        w.provider.revive()
        let backAt = w.now
        let up = try #require(w.run(within: .seconds(60)) { w.core.state == .connected })
        let winner = try #require(w.sessionsStarted.last)
        #expect(winner.reason == "reconnect")
        let retry = try #require(w.retries.last { $0.at <= winner.at })
        // The attempt that connected is the one the backoff scheduled, at its time (the
        // record's delay is in whole milliseconds)…
        #expect(startsAt(winner.at, retry))
        // … scheduled before the provider was back or by the refusal of an attempt then
        // in flight (one HTTP round trip), and it waited at most its ceiling.
        #expect(retry.at <= backAt + .milliseconds(40))
        #expect(winner.at - backAt <= backoffCeiling(retry.attempt) + .milliseconds(40))
        #expect(up - winner.at <= .seconds(1), "connected \(up - winner.at) after the attempt started")
        // Audio on the new session; the dead one is closed.
        w.run(for: .seconds(2))
        let second = try #require(w.provider.sessionOfCore[winner.id])
        #expect(second.audioCount > 50 && (w.media[winner.id]?.receivedCount ?? 0) > 50)
        #expect(w.core.sessionIDs == [winner.id])
        #expect(w.states.first == "connecting" && w.states.contains("disconnected") && w.states.last == "connected", "\(w.states)")
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .ok && w.states.last == "closed")
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// The backend is down when the agent starts: failed attempts, each retry waiting a
    /// jittered delay under the 0.5 s, 1 s, 2 s ceilings and the next attempt starting
    /// exactly then; `failed` is the state (never `disconnected`: nothing was
    /// connected); once the backend is up the agent connects, and SIGTERM calls the
    /// close route. Was CLITests' `backendDownAtStartThenUp`.
    @Test func backendDownAtStartThenUp() throws {
        var o = ProviderWorld.Options()
        o.route = .backend
        let w = try ProviderWorld(o)
        w.provider.kill()
        w.startCore()
        try #require(w.run(within: .seconds(30)) { w.retries.count >= 3 } != nil)
        let retries = w.retries
        for (i, r) in retries.prefix(3).enumerated() {
            #expect(r.attempt == i + 1)
            #expect(r.delay >= .zero && r.delay <= .milliseconds(500 << Int64(i)), "retry \(i + 1) waited \(r.delay)")
        }
        // Each next attempt starts when its delay runs out, not before, not after.
        let starts = w.sessionsStarted
        for (i, r) in retries.prefix(2).enumerated() { #expect(startsAt(starts[i + 1].at, r), "attempt \(i + 2)") }
        #expect(w.states.contains("failed") && !w.states.contains("disconnected"), "\(w.states)")
        w.provider.revive()
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        let voice = try #require(w.provider.sessionOfCore[w.core.activeID ?? -1])
        w.stop()
        try #require(w.run(within: .seconds(5)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .ok)
        // The backend's close route was called on the way out.
        #expect(voice.endedBy == "close")
        #expect(w.requests("POST").contains { $0.request.url.target.hasSuffix("/voice/c1/\(voice.id)/close") })
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// Rollover: with a 10 s session limit the next session starts at 9 s after the
    /// connection (a tenth before the limit), audio switches to it once it is connected
    /// and only then is the old one closed: every uplink frame reaches the provider, on
    /// one session or the other, none twice, and the public state never leaves
    /// `connected`. `--seconds 12` ends it. Was CLITests'
    /// `rolloverSwitchesSessionsWithoutAGap` (`abs(… - 9) < 0.5` on the wall clock).
    @Test func rolloverSwitchesSessionsWithoutAGap() throws {
        var o = ProviderWorld.Options()
        o.maximumSessionAge = .seconds(10)
        o.runFor = .seconds(12)
        let w = try ProviderWorld(o)
        var switchedBeforeClose = false
        w.onOutput = { out in
            // The old session's DELETE comes after the switch of audio to the new one.
            if case .http(_, let r, _) = out, r.method == "DELETE", r.url.target.hasSuffix("/s1") {
                switchedBeforeClose = w.audioSession == 2
            }
        }
        w.startCore()
        try #require(w.run(within: .seconds(60)) { w.exited != nil } != nil)
        #expect(w.exited?.status == .ok)
        #expect(w.states == ["connecting", "connected", "closed"], "no state change a listener would see: \(w.states)")
        let sessions = w.sessionsStarted
        #expect(sessions.map(\.reason) == ["initial", "rollover"])
        let connectedAt = try #require(w.stateTimes("connected").first)
        #expect(sessions.last?.at == connectedAt + .seconds(9), "rollover \((sessions.last?.at ?? connectedAt) - connectedAt) after connecting")
        #expect(w.records("audio").compactMap { $0["session"]?.int64 } == [1, 2])
        #expect(switchedBeforeClose)
        // Every frame the core sent from the first connection to the end reached the
        // provider exactly once (no loss on this path): no gap at the switch.
        let s1 = try #require(w.provider.sessionOfCore[1]), s2 = try #require(w.provider.sessionOfCore[2])
        let indices = (s1.audio + s2.audio).map(\.index).sorted()
        #expect(Set(indices).count == indices.count, "no frame twice")
        let gaps = zip(indices, indices.dropFirst()).filter { $1 != $0 + 1 }
        #expect(gaps.isEmpty, "gaps in the uplink at the provider: \(gaps.prefix(5))")
        #expect(!s1.audio.isEmpty && !s2.audio.isEmpty)
        #expect(indices.count == w.framesOffered, "\(indices.count) frames arrived of \(w.framesOffered) sent")
        // The switch came while session 1 still carried audio: its last frame is the one
        // before session 2's first.
        #expect((s1.audio.map(\.index).max() ?? 0) + 1 == s2.audio.map(\.index).min())
        // `--seconds 12` counted from the first connection.
        let ending = try #require(w.logs.first { $0.text.contains("ending after 12 s") })
        #expect(ending.at == connectedAt + .seconds(12))
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// SIGTERM in the states that are not `connected`: while waiting out a backoff, and
    /// with the offer unanswered by a server that accepted it and says nothing. Each
    /// ends at once (the same instant), closed, exit 0. Connected, with a provider that
    /// does not answer the DELETE: the exit comes when the close timeout (3 s) runs out.
    /// Was CLITests' `sigtermWhileBackingOffOrConnecting` (`< 2` s on the wall clock).
    @Test func sigtermWhileBackingOffOrConnecting() throws {
        let backingOff = try ProviderWorld()
        backingOff.provider.kill()
        backingOff.startCore()
        try #require(backingOff.run(within: .seconds(10)) { !backingOff.retries.isEmpty } != nil)
        let t1 = backingOff.now
        backingOff.stop()
        #expect(backingOff.exited?.at == t1 && backingOff.exited?.status == .ok)
        #expect(backingOff.states.last == "closed")

        let unanswered = try ProviderWorld()
        unanswered.provider.reply = { $0.kind == .offer ? .never : .normal }
        unanswered.startCore()
        try #require(unanswered.run(within: .seconds(10)) { !unanswered.provider.handled.isEmpty } != nil)
        unanswered.run(for: .seconds(5))
        #expect(unanswered.core.state == .connecting)
        let t2 = unanswered.now
        unanswered.stop()
        #expect(unanswered.exited?.at == t2 && unanswered.exited?.status == .ok)
        #expect(unanswered.states.last == "closed")
        // The abandoned offer's answer must not be delivered.
        #expect(unanswered.exchanges.isEmpty)

        let deaf = try ProviderWorld()
        deaf.provider.reply = { $0.kind == .close ? .timeout : .normal }
        deaf.startCore()
        try #require(deaf.run(within: .seconds(5)) { deaf.core.state == .connected } != nil)
        let t3 = deaf.now
        deaf.stop()
        try #require(deaf.run(within: .seconds(10)) { deaf.exited != nil } != nil)
        #expect(deaf.exited?.at == t3 + deaf.core.settings.closeTimeout && deaf.exited?.status == .ok)
        #expect(deaf.logged("provider close failed"))
        for w in [backingOff, unanswered, deaf] { #expect(w.problems.isEmpty, "\(w.problems)") }
    }

    /// `--seconds` counts from the first connection, not from the start: two refused
    /// attempts first, then the run lasts its 5 s of connection and exits 0.
    @Test func secondsCountFromTheFirstConnection() throws {
        var o = ProviderWorld.Options()
        o.runFor = .seconds(5)
        let w = try ProviderWorld(o)
        w.provider.reply = { r in r.kind == .offer && r.count <= 2 ? .respond(RouteServer.text(503, "busy")) : .normal }
        w.startCore()
        try #require(w.run(within: .seconds(60)) { w.exited != nil } != nil)
        let connectedAt = try #require(w.stateTimes("connected").first)
        #expect(connectedAt > w.start + .milliseconds(40), "the first connection came after the refusals")
        let ending = try #require(w.logs.first { $0.text.contains("ending after 5 s (--seconds)") })
        #expect(ending.at == connectedAt + .seconds(5))
        #expect(w.exited?.status == .ok)
        // The provider's close round trip, then the exit.
        #expect(w.exited!.at - ending.at <= .milliseconds(100))
        #expect(w.problems.isEmpty, "\(w.problems)")
    }
}
