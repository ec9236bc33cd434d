import Testing
import Wire
import Signaling
@testable import Agent

/// Losing the path and getting it back: the WHIP ICE restart (RFC 9725 §4.3.2) and NAT
/// rebinding, on the core with the in-memory provider. Were CLITests/RelayTests.swift's
/// black-hole and rebinding runs through relay.py.
@Suite struct AgentCoreRestartTests {
    /// Frames the provider's session received after `t`.
    func framesAfter(_ s: WorldProvider.Session, _ t: Instant) -> Int { s.audio.filter { $0.at > t }.count }

    /// A 5 s black hole 2 s into the call (shorter than consent expiry): `disconnected`
    /// within 3 s of the hole, an ICE restart through WHIP (PATCH with the fragment,
    /// `If-Match`, the answerer gave an ETag) that goes through when the hole closes, and
    /// `connected` again on the same session; audio flows both ways again.
    @Test func shortBlackholeIsRiddenOutByAnICERestart() throws {
        let w = try ProviderWorld()
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        let holeAt = w.now
        w.net.blackhole(for: .seconds(5))
        let lost = try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected })
        #expect(lost - holeAt <= .seconds(3), "disconnected \(lost - holeAt) into the hole")
        let back = try #require(w.run(within: .seconds(20)) { w.core.state == .connected })
        #expect(back >= holeAt + .seconds(5))
        #expect(back - (holeAt + .seconds(5)) < .seconds(1), "connected \(back - (holeAt + .seconds(5))) after the hole closed")
        w.run(for: .seconds(3))
        #expect(w.states == ["connecting", "connected", "disconnected", "connected"], "\(w.states)")
        #expect(w.sessionsStarted.count == 1, "recovered on the same session")
        #expect(w.records("ice_restart").count == 1)
        let patch = try #require(w.requests("PATCH").first?.request)
        #expect(patch.url.target == "/whip/s1")
        #expect(patch.headers["If-Match"] == "\"*\"" && patch.headers["Content-Type"] == RouteMediaType.fragment)
        #expect(patch.headers["Authorization"] == "Bearer device-token")
        let s = try #require(w.provider.sessionOfCore[1])
        #expect(s.restarts == 1 && s.endedBy == nil)
        #expect(framesAfter(s, back) > 100)
        #expect(w.logged("ICE restart → https://provider.test/whip/s1"))
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// Without an ETag the endpoint takes no restarts: when the call is lost (here the
    /// provider's media for it is gone, its HTTP still up) there is no PATCH, a fresh
    /// session starts at that instant and connects, and the old one is closed.
    @Test func noETagMeansAFreshSession() throws {
        let w = try ProviderWorld()
        w.provider.etag = false
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        let first = try #require(w.provider.sessionOfCore[1])
        w.provider.end(first, by: "media crashed", goodbye: false)
        let lost = try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected })
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        #expect(w.requests("PATCH").isEmpty && w.records("ice_restart").isEmpty)
        let sessions = w.sessionsStarted
        #expect(sessions.map(\.reason) == ["initial", "reconnect"])
        #expect(sessions[1].at == lost, "the fresh session starts when the call is lost")
        w.run(for: .seconds(4))
        #expect(w.core.sessionIDs == [2])
        #expect(w.requests("DELETE").contains { $0.request.url.target == "/whip/s1" }, "the old one is closed, best effort (404)")
        let fresh = try #require(w.provider.sessionOfCore[2])
        #expect(framesAfter(fresh, w.now - .seconds(2)) > 50)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// A call that comes back by itself (consent answered again after a 5 s hole, no
    /// ETag so no restart) before the fresh session started for it has connected (its
    /// provider is slow to answer): the fresh session is no longer needed and is closed
    /// while still connecting; the state is `connected` on the first session.
    @Test func aCallThatComesBackMakesTheReconnectUnneeded() throws {
        let w = try ProviderWorld()
        w.provider.etag = false
        w.provider.reply = { $0.kind == .offer && $0.count == 2 ? .slow(.seconds(5)) : .normal }
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        w.net.blackhole(for: .seconds(5))
        try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected } != nil)
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        w.run(for: .seconds(3))
        #expect(w.sessionsStarted.map(\.reason) == ["initial", "reconnect"])
        #expect(w.records("audio").compactMap { $0["session"]?.int64 } == [1], "audio never left session 1")
        #expect(w.core.sessionIDs == [1] && w.core.activeID == 1)
        #expect(w.states == ["connecting", "connected", "disconnected", "connected"], "\(w.states)")
        #expect(framesAfter(try #require(w.provider.sessionOfCore[1]), w.now - .seconds(2)) > 50)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// An endpoint that gave an ETag but refuses the PATCH (405): the restart fails at
    /// the refusal, a fresh session starts at that instant, and the ETag is forgotten
    /// (the next loss goes straight to a fresh session, no second PATCH).
    @Test func refusedRestartMeansAFreshSession() throws {
        let w = try ProviderWorld()
        w.provider.acceptsRestarts = false
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        // Only the path is lost: HTTP still gets through (signaling on another route).
        w.net.up.loss = 1
        try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected } != nil)
        try #require(w.run(within: .seconds(2)) { w.sessionsStarted.count == 2 } != nil)
        let patch = try #require(w.requests("PATCH").first)
        #expect(w.sessionsStarted[1].reason == "reconnect")
        #expect(w.sessionsStarted[1].at == patch.at + .milliseconds(40), "at the refusal, one round trip after the PATCH")
        #expect(w.logged("ICE restart refused (405"), "\(w.logs.map(\.text).suffix(6))")
        w.net.up.loss = 0
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        // Session 1 is closed once 2 carries the audio; 2 has an ETag but its endpoint
        // still refuses: on the next loss its restart is tried and refused the same way.
        w.run(for: .seconds(2))
        #expect(w.core.sessionIDs == [2])
        #expect(w.requests("PATCH").count == 1)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// A restart whose answer is lost (the provider applied it, the response never
    /// came; the device cannot know the provider's new credentials): the supervisor's
    /// restart timeout (4 s) starts a fresh session, at exactly that time, rather than
    /// waiting for the HTTP deadline (5 s); the PATCH still pending is abandoned when the
    /// old session closes.
    @Test func lostRestartAnswerFallsBackToAFreshSession() throws {
        let w = try ProviderWorld()
        w.provider.reply = { $0.kind == .restart ? .lose : .normal }
        var cancelled: [RequestID] = []
        w.onOutput = { if case .cancelHTTP(let id) = $0 { cancelled.append(id) } }
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        w.net.up.loss = 1
        let lost = try #require(w.run(within: .seconds(10)) { w.core.state == .disconnected })
        w.net.up.loss = 0
        try #require(w.run(within: .seconds(10)) { w.sessionsStarted.count == 2 } != nil)
        #expect(w.sessionsStarted[1].at == lost + SupervisorPolicy().iceRestartTimeout)
        #expect(w.provider.sessionOfCore[1]?.restarts == 1, "the provider did apply it")
        try #require(w.run(within: .seconds(30)) { w.core.state == .connected } != nil)
        w.run(for: .seconds(1))
        #expect(w.core.sessionIDs == [2])
        #expect(cancelled.count == 1, "the unanswered PATCH is abandoned: \(cancelled)")
        #expect(w.exchanges.isEmpty)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// The board's router rebinds (new public port for the device's socket): the
    /// provider's peer sees the device's datagrams from the new source and its own to the
    /// old one vanish; the call moves to the new mapping on the same session and audio
    /// reaches the provider again.
    @Test func natRebindingOnTheDeviceSide() throws {
        let w = try ProviderWorld()
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        let host = try #require(w.deviceHosts[1])
        let before = try #require(w.net.mapped(host))
        w.rebindDevice()
        let rebindAt = w.now
        let after = try #require(w.net.mapped(host))
        #expect(after != before)
        w.run(for: .seconds(20))
        let s = try #require(w.provider.sessionOfCore[1])
        #expect(w.sessionsStarted.count == 1)
        #expect(s.peer?.selectedPair?.remote == after, "the provider's path moved to the new mapping")
        #expect(framesAfter(s, w.now - .seconds(5)) >= 240, "audio reaches the provider again")
        #expect((w.media[1]?.receivedCount ?? 0) > 0)
        #expect(w.core.state == .connected)
        print("BENCH core_nat_rebinding(device side): \(w.states), path at the provider \(String(describing: s.peer?.selectedPair)), frames in the last 5 s \(framesAfter(s, w.now - .seconds(5)))/250, first frame after the rebinding \(s.audio.first { $0.at > rebindAt + .milliseconds(100) }.map { "\($0.at - rebindAt)" } ?? "never")")
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    /// The provider's side rebinds (relay.py's `rebind`: the answerer's source port
    /// changes and datagrams to the old one vanish; as there, the device is not behind a
    /// NAT): the device's path moves to the new port on the same session and the echo
    /// comes back.
    @Test func natRebindingOnTheProviderSide() throws {
        var o = ProviderWorld.Options()
        o.deviceNAT = false
        let w = try ProviderWorld(o)
        w.startCore()
        let up = try #require(w.run(within: .seconds(5)) { w.core.state == .connected })
        w.run(until: up + .seconds(2))
        let s = try #require(w.provider.sessionOfCore[1])
        w.net.rebind(.provider)
        let moved = try #require(w.net.mapped(s.host))
        let echoed = w.media[1]?.receivedCount ?? 0
        w.run(for: .seconds(20))
        #expect(w.sessionsStarted.count == 1)
        #expect(w.core.activePeer?.selectedPair?.remote == moved, "the device's path moved to the new port")
        #expect((w.media[1]?.receivedCount ?? 0) > echoed + 200, "the echo comes back")
        #expect(w.core.state == .connected)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }
}
