import Testing
import Wire
@testable import Agent

/// Drives a supervisor with a manual clock and records what it asks for.
final class SupervisorHarness {
    let supervisor: Supervisor
    var now = Instant.zero
    var actions: [SupervisorAction] = []

    init(_ configure: (inout SupervisorPolicy) -> Void = { _ in }, seed: UInt64 = 7) {
        var p = SupervisorPolicy()
        configure(&p)
        supervisor = Supervisor(policy: p, seed: seed)
    }

    @discardableResult
    func drain() -> [SupervisorAction] {
        var got: [SupervisorAction] = []
        while case .action(let a) = supervisor.pollOutput() { got.append(a) }
        actions += got
        return got
    }

    /// Advances the clock to `t`, firing every deadline on the way in order.
    func advance(to t: Instant) {
        while true {
            let d = supervisor.nextDeadline
            guard d <= t else { break }
            now = max(now, d)
            supervisor.handleTimeout(now: now)
            drain()
        }
        now = t
    }

    func advance(by d: Duration) { advance(to: now + d) }

    var started: [Int] {
        actions.compactMap { if case .startSession(let id, _) = $0 { return id } else { return nil } }
    }
    var closed: [Int] {
        actions.compactMap { if case .closeSession(let id) = $0 { return id } else { return nil } }
    }
    var states: [SessionState] {
        actions.compactMap { if case .stateChanged(let s, _) = $0 { return s } else { return nil } }
    }
    var delays: [Duration] {
        actions.compactMap { if case .retryScheduled(let d, _, _) = $0 { return d } else { return nil } }
    }
}

@Suite struct SupervisorTests {
    @Test func firstSessionConnectsAndCarriesAudio() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        #expect(h.drain() == [.stateChanged(.connecting, reason: nil), .startSession(id: 1, reason: .initial)])
        h.advance(by: .milliseconds(300))
        h.supervisor.connected(1, now: h.now)
        #expect(h.drain() == [.switchAudio(to: 1), .stateChanged(.connected, reason: nil)])
        #expect(h.supervisor.activeSession == 1)
    }

    @Test func failedAttemptsBackOffWithFullJitterDoublingToThirtySeconds() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        var ceilings: [Duration] = []
        for attempt in 1...12 {
            let id = h.started.last!
            h.supervisor.failed(id, .transient("connection refused"), now: h.now)
            let got = h.drain()
            #expect(got.contains(.closeSession(id: id)))
            #expect(got.contains(.stateChanged(.failed, reason: "connection refused")))
            guard case .retryScheduled(let delay, let n, _)? = got.first(where: { if case .retryScheduled = $0 { true } else { false } }) else {
                Issue.record("no retry scheduled")
                return
            }
            #expect(n == attempt)
            // Independent reference: 0.5 s · 2^(n−1), capped at 30 s.
            let ceiling = min(Duration.seconds(30), Duration.milliseconds(500) * (Int64(1) << Int64(attempt - 1)))
            ceilings.append(ceiling)
            #expect(delay >= .zero && delay <= ceiling)
            // Nothing starts before the delay; the next attempt starts at it.
            let before = h.started.count
            h.advance(by: delay - .nanoseconds(1))
            #expect(h.started.count == before)
            h.advance(by: .nanoseconds(1))
            #expect(h.started.count == before + 1)
        }
        #expect(ceilings.suffix(6).allSatisfy { $0 == .seconds(30) })
        // Connecting resets the count: the next failure's ceiling is 0.5 s again.
        h.supervisor.connected(h.started.last!, now: h.now)
        h.drain()
        #expect(h.supervisor.attempts == 0)
    }

    @Test func jitterSpreadsAFleet() {
        // 200 devices failing at the same moment must not retry in step: their first
        // delays are spread over [0, 0.5 s] (full jitter), not bunched.
        var delays: [Int64] = []
        for seed in 0..<200 {
            let h = SupervisorHarness(seed: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15)
            h.supervisor.start(now: h.now)
            h.drain()
            h.supervisor.failed(1, .transient("503"), now: h.now)
            h.drain()
            delays.append(h.delays[0].milliseconds)
        }
        var buckets = [Int](repeating: 0, count: 5)
        for d in delays { buckets[Int(min(d, 499) / 100)] += 1 }
        #expect(buckets.allSatisfy { $0 >= 20 }, "delays per 100 ms bucket: \(buckets)")
    }

    @Test func unauthorizedBacksOffLongAndRetryAfterIsAFloor() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.failed(1, .unauthorized("401 Unauthorized"), now: h.now)
        let got = h.drain()
        #expect(got.contains(.stateChanged(.failed, reason: "401 Unauthorized (check the token)")))
        #expect(h.delays[0] >= .seconds(15) && h.delays[0] <= .seconds(30))
        h.advance(by: h.delays[0])
        h.supervisor.failed(2, .retryAfter(.seconds(120), "503"), now: h.now)
        h.drain()
        #expect(h.delays[1] == .seconds(120))
        h.advance(by: h.delays[1])
        h.supervisor.failed(3, .retryAfter(.seconds(86_400), "503"), now: h.now)
        h.drain()
        #expect(h.delays[2] == .seconds(600), "a day-long Retry-After is capped")
    }

    /// A Retry-After past the cap is shown as the wait that will really happen (not
    /// "retry after 999999999.000s" for a 10-minute wait), the asked one beside it.
    @Test func cappedRetryAfterShowsTheCappedWait() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.failed(1, .retryAfter(.seconds(999_999_999), "503 Service Unavailable"), now: h.now)
        let got = h.drain()
        let expected = "503 Service Unavailable (retry after 600 s, the cap; the server asked for 999999999 s)"
        #expect(got.contains(.stateChanged(.failed, reason: expected)), "\(got)")
        guard case .retryScheduled(let delay, _, let failure)? = got.first(where: { if case .retryScheduled = $0 { true } else { false } }) else {
            Issue.record("no retry scheduled")
            return
        }
        #expect(delay == .seconds(600))
        #expect(failure.description == expected)
        // Under the cap, as asked.
        h.advance(by: delay)
        h.supervisor.failed(2, .retryAfter(.seconds(7), "503"), now: h.now)
        #expect(h.drain().contains(.stateChanged(.failed, reason: "503 (retry after 7 s)")))
    }

    /// max-attempts: N failed attempts, or sooner when the waits would pass 30 s per
    /// allowed retry; the ordinary back-off never reaches that bound.
    @Test func attemptLimitBoundsAttemptsAndWaiting() {
        var none = AttemptLimit(maximumAttempts: 0)
        #expect(none.failed(attempt: 99, delay: .seconds(600)) == .retry)
        #expect(none.summary == nil)

        var three = AttemptLimit(maximumAttempts: 3)
        #expect(three.maximumTotalWait == .seconds(60))
        #expect(three.summary == "max-attempts 3: gives up after 3 failed attempts in a row, or sooner if the waits between them would pass 60 s in all")
        #expect(three.failed(attempt: 1, delay: .seconds(600))
                == .giveUp("giving up after 1 failed attempt: the next would wait 600 s, and a max-attempts 3 run waits at most 60 s in all"))

        var auth = AttemptLimit(maximumAttempts: 3)
        #expect(auth.failed(attempt: 1, delay: .milliseconds(29_500)) == .retry)
        #expect(auth.failed(attempt: 2, delay: .milliseconds(40_200))
                == .giveUp("giving up after 2 failed attempts: the next would wait 41 s, and a max-attempts 3 run waits at most 60 s in all"))

        // The ordinary back-off's worst case for ten attempts (0.5 s doubling to 30 s).
        var ten = AttemptLimit(maximumAttempts: 10)
        var ceiling = Duration.milliseconds(500)
        for attempt in 1...9 {
            #expect(ten.failed(attempt: attempt, delay: ceiling) == .retry, "attempt \(attempt)")
            ceiling = min(ceiling * 2, .seconds(30))
        }
        #expect(ten.failed(attempt: 10, delay: .seconds(1)) == .giveUp("giving up after 10 failed attempts (max-attempts 10)"))

        // A connected session starts the waiting again.
        var again = AttemptLimit(maximumAttempts: 3)
        #expect(again.failed(attempt: 1, delay: .seconds(50)) == .retry)
        again.connected()
        #expect(again.failed(attempt: 1, delay: .seconds(50)) == .retry)
    }

    @Test func aSessionThatNeverConnectsTimesOut() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.advance(by: .seconds(20))
        #expect(h.closed == [1])
        #expect(h.states.last == .failed)
        #expect(h.delays.count == 1)
    }

    @Test func rolloverStartsTheNextSessionBeforeTheLimitAndSwitchesWithoutAGap() {
        let h = SupervisorHarness { $0.maximumSessionAge = .seconds(3_600) }
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.advance(by: .seconds(55 * 60) - .milliseconds(1))
        #expect(h.started == [1])
        h.advance(by: .milliseconds(1))
        #expect(h.actions.last == .startSession(id: 2, reason: .rollover))
        // Audio stays on session 1 until 2 is connected; then 1 is closed, after the switch.
        h.advance(by: .seconds(1))
        h.supervisor.connected(2, now: h.now)
        let got = h.drain()
        #expect(got == [.switchAudio(to: 2), .closeSession(id: 1)])
        #expect(!h.states.dropFirst(2).contains(.disconnected), "no state change a listener would see")
        #expect(h.supervisor.activeSession == 2)
        // The next rollover is 55 minutes after session 2 connected.
        h.advance(by: .seconds(55 * 60))
        #expect(h.actions.last == .startSession(id: 3, reason: .rollover))
    }

    /// The switch waits for a quiet moment, at most until shortly before the
    /// old session's limit.
    @Test func rolloverSwitchesAtAQuietMoment() {
        let h = SupervisorHarness { $0.maximumSessionAge = .seconds(3_600) }
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.advance(by: .seconds(55 * 60))
        #expect(h.actions.last == .startSession(id: 2, reason: .rollover))
        h.supervisor.setBusy(true, now: h.now)  // the button is held
        h.advance(by: .seconds(1))
        h.supervisor.connected(2, now: h.now)
        let connected2 = h.now
        #expect(h.drain().isEmpty, "connected, but it waits")
        #expect(h.supervisor.activeSession == 1)
        h.advance(by: .seconds(30))
        #expect(h.supervisor.activeSession == 1)
        h.supervisor.setBusy(false, now: h.now)
        #expect(h.drain() == [.switchAudio(to: 2), .closeSession(id: 1)])

        // Busy to the end: switched 10 s before the limit regardless.
        h.advance(to: connected2 + .seconds(55 * 60))
        #expect(h.actions.last == .startSession(id: 3, reason: .rollover))
        let session2Limit = connected2 + .seconds(60 * 60)
        h.supervisor.setBusy(true, now: h.now)
        h.supervisor.connected(3, now: h.now)
        h.drain()
        h.advance(to: session2Limit - .seconds(10) - .milliseconds(1))
        #expect(h.supervisor.activeSession == 2)
        h.advance(by: .milliseconds(1))
        #expect(h.supervisor.activeSession == 3)
        #expect(h.actions.suffix(2) == [.switchAudio(to: 3), .closeSession(id: 2)])
    }

    /// The session's own `expires_at` plans the rollover (Azure's 30 minutes,
    /// or whatever the provider says), not the configured age.
    @Test func rolloverIsPlannedFromTheSessionsExpiry() {
        let h = SupervisorHarness { $0.maximumSessionAge = .seconds(3_600) }
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.supervisor.sessionExpires(1, at: h.now + .seconds(30 * 60), now: h.now)
        h.advance(by: .seconds(25 * 60) - .milliseconds(1))
        #expect(h.started == [1])
        h.advance(by: .milliseconds(1))
        #expect(h.actions.last == .startSession(id: 2, reason: .rollover))
    }

    @Test func aFailingRolloverRetriesWhileTheOldSessionCarriesOn() {
        let h = SupervisorHarness { $0.maximumSessionAge = .seconds(600) }
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.advance(by: .seconds(540))
        #expect(h.started == [1, 2])
        h.supervisor.failed(2, .transient("500"), now: h.now)
        h.drain()
        #expect(h.supervisor.activeSession == 1)
        #expect(h.supervisor.state == .connected)
        h.advance(by: h.delays[0])
        #expect(h.actions.last == .startSession(id: 3, reason: .rollover))
    }

    @Test func consentLossWithoutICERestartStartsAReplacementAndKeepsTheOldUntilItConnects() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.advance(by: .seconds(10))
        h.supervisor.disconnected(1, now: h.now)
        #expect(h.drain() == [.stateChanged(.disconnected, reason: "no answer to consent checks"),
                              .startSession(id: 2, reason: .reconnect)])
        h.supervisor.connected(2, now: h.now + .milliseconds(400))
        #expect(h.drain() == [.switchAudio(to: 2), .closeSession(id: 1), .stateChanged(.connected, reason: nil)])
    }

    @Test func consentComingBackCancelsTheReplacement() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.supervisor.disconnected(1, now: h.now + .seconds(5))
        h.drain()
        h.supervisor.connected(1, now: h.now + .seconds(6))
        #expect(h.drain() == [.closeSession(id: 2), .stateChanged(.connected, reason: nil)])
        #expect(h.supervisor.activeSession == 1 && h.supervisor.pendingSession == nil)
    }

    @Test func iceRestartIsTriedFirstWhereTheRouteSupportsIt() {
        let h = SupervisorHarness { $0.iceRestart = true }
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.supervisor.disconnected(1, now: h.now)
        #expect(h.drain() == [.stateChanged(.disconnected, reason: "no answer to consent checks"), .restartICE(id: 1)])
        // No answer within the restart timeout: a fresh session.
        h.advance(by: .seconds(4))
        #expect(h.actions.last == .startSession(id: 2, reason: .reconnect))
        // A route that refuses the restart: a fresh session at once.
        let r = SupervisorHarness { $0.iceRestart = true }
        r.supervisor.start(now: r.now)
        r.drain()
        r.supervisor.connected(1, now: r.now)
        r.supervisor.disconnected(1, now: r.now)
        r.drain()
        r.supervisor.restartFailed(1, now: r.now)
        #expect(r.drain() == [.startSession(id: 2, reason: .reconnect)])
        // A restart that works brings the same session back.
        let k = SupervisorHarness { $0.iceRestart = true }
        k.supervisor.start(now: k.now)
        k.drain()
        k.supervisor.connected(1, now: k.now)
        k.supervisor.disconnected(1, now: k.now)
        k.drain()
        k.supervisor.connected(1, now: k.now + .seconds(1))
        #expect(k.drain() == [.stateChanged(.connected, reason: nil)])
        k.advance(by: .seconds(10))
        #expect(k.started == [1])
    }

    @Test func theProviderEndingTheCallReconnectsAtOnce() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.drain()
        h.supervisor.ended(1, now: h.now)
        #expect(h.drain() == [.closeSession(id: 1), .stateChanged(.disconnected, reason: "the provider ended the session"),
                              .stateChanged(.connecting, reason: nil), .startSession(id: 2, reason: .reconnect)])
    }

    @Test func closeClosesEverySessionOnceAndThenIgnoresReports() {
        let h = SupervisorHarness()
        h.supervisor.start(now: h.now)
        h.drain()
        h.supervisor.connected(1, now: h.now)
        h.advance(by: .seconds(3_300))
        #expect(h.supervisor.pendingSession == 2)
        h.supervisor.close(now: h.now)
        #expect(h.drain() == [.closeSession(id: 2), .closeSession(id: 1), .stateChanged(.closed, reason: nil)])
        h.supervisor.failed(2, .transient("x"), now: h.now)
        h.supervisor.close(now: h.now)
        #expect(h.drain().isEmpty)
        #expect(h.supervisor.nextDeadline == .distantFuture)
    }

    @Test func aDaySimulatedStaysBoundedAndAlwaysRecovers() {
        // 24 hours with a provider that drops the call at random, refuses one attempt
        // in three and rolls over hourly: at most two sessions ever exist, every started
        // session is closed exactly once, and the agent ends connected.
        let h = SupervisorHarness { $0.maximumSessionAge = .seconds(3_600) }
        var rng = SeededRandom(seed: 42)
        h.supervisor.start(now: h.now)
        h.drain()
        var open: Set<Int> = [1]
        var closedOnce: [Int: Int] = [:]
        var maxOpen = 0
        let end = Instant.zero + .seconds(86_400)
        var connectedTime = Duration.zero
        while h.now < end {
            let step = Duration.milliseconds(Int64(rng.next() % 5_000) + 100)
            let wasConnected = h.supervisor.state == .connected
            h.advance(by: step)
            if wasConnected { connectedTime = connectedTime + step }
            if let p = h.supervisor.pendingSession {
                if rng.next() % 3 == 0 { h.supervisor.failed(p, .transient("refused"), now: h.now) } else { h.supervisor.connected(p, now: h.now) }
            } else if let a = h.supervisor.activeSession, rng.next() % 400 == 0 {
                h.supervisor.ended(a, now: h.now)
            }
            for a in h.drain() {
                if case .startSession(let id, _) = a { open.insert(id) }
                if case .closeSession(let id) = a { open.remove(id); closedOnce[id, default: 0] += 1 }
            }
            maxOpen = max(maxOpen, open.count)
        }
        #expect(maxOpen <= 2)
        #expect(closedOnce.values.allSatisfy { $0 == 1 })
        #expect(connectedTime > .seconds(86_400 * 9 / 10), "connected \(connectedTime) of 24 h")
        #expect(h.started.count > 24, "hourly rollovers happened: \(h.started.count) sessions")
    }
}

@Suite struct WatchdogHealthTests {
    @Test func pingsOnlyWhileEveryThreadInUseMoves() {
        var w = WatchdogHealth()
        let t = Instant.zero
        #expect(w.check(PipelineProgress(captureFrames: 0, playbackFrames: 0), now: t) == .ping)
        #expect(w.check(PipelineProgress(captureFrames: 50, playbackFrames: 50), now: t + .seconds(1)) == .ping)
        if case .withhold(let why) = w.check(PipelineProgress(captureFrames: 50, playbackFrames: 100), now: t + .seconds(2)) {
            #expect(why.contains("capture"))
        } else {
            Issue.record("a frozen capture thread must stop the pings")
        }
        if case .withhold(let why) = w.check(PipelineProgress(captureFrames: 150, playbackFrames: 100), now: t + .seconds(3)) {
            #expect(why.contains("playback"))
        } else {
            Issue.record("a frozen playback thread must stop the pings")
        }
        #expect(w.check(PipelineProgress(captureFrames: 250, playbackFrames: 200), now: t + .seconds(4)) == .ping)
        // Deliberately idle (no device in use): nothing to wait for.
        #expect(w.check(PipelineProgress(captureFrames: nil, playbackFrames: nil), now: t + .seconds(5)) == .ping)
        #expect(w.check(PipelineProgress(captureFrames: nil, playbackFrames: nil), now: t + .seconds(6)) == .ping)
    }

    @Test func intervalIsHalfTheWatchdogTimeout() {
        #expect(WatchdogHealth.interval(watchdogMicroseconds: 30_000_000) == .seconds(15))
        #expect(WatchdogHealth.interval(watchdogMicroseconds: 10_000) == .milliseconds(100))
    }
}
