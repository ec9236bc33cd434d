import Testing
@testable import ICE
import Wire

/// Connect time is decided by the checks' schedule, which the manual clock shows
/// exactly: no check may wait for a timer that nothing needs (RFC 8445 §7.2.5.3.4,
/// §7.3.1.4, §8.1.1).
@Suite struct ConnectTimeTests {
    /// With one pair (one interface each, as on a board with one link), the controlling
    /// agent nominates as soon as its check succeeds: nothing better can still succeed.
    /// It used to wait out `nominationDelay` (500 ms), the whole of `linnet demo`'s
    /// 510 ms connect time.
    @Test func aSinglePairIsNominatedAtOnce() throws {
        var w = TwoAgents(seed: 3)
        w.connectSignaling()
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        let firstSuccess = try #require(w.delivered.first {
            $0.1.to == TwoAgents.addressA && (try? STUNMessage.parse($0.1.bytes))?.type == .bindingSuccess
        }?.0)
        let nomination = try #require(w.requestsSent(from: TwoAgents.addressA).first { $0.1.useCandidate }?.0)
        // Paced like any check (Ta), but not held back for a better pair that cannot exist.
        #expect(nomination - firstSuccess <= w.a.config.ta)
        #expect(w.a.stats.retransmissions == 0 && w.b.stats.retransmissions == 0)
        let connected = try #require(TwoAgents.firstTime(w.eventsA, .stateChanged(.connected)))
        #expect(connected < Instant.zero + w.a.config.nominationDelay)
    }

    /// The answerer's checks reach the offerer before the answer does (the offerer has no
    /// remote credentials yet): they are answered, and the offerer's own check goes out
    /// the moment the answer arrives, as a triggered check (RFC 8445 §7.3.1.4).
    @Test func checksBeforeTheAnswerCostNothing() throws {
        var w = TwoAgents(seed: 4)
        w.a.start(now: w.now)
        w.b.start(now: w.now)
        // B has the offer: A's credentials and candidates.
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        for c in w.a.localCandidates { w.b.addRemoteCandidate(c, now: w.now) }
        w.run(until: Instant.zero + .milliseconds(100))
        #expect(w.a.stats.requestsAnswered >= 1)  // answered without B's credentials
        // The answer reaches A.
        let answerAt = w.now
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        let firstCheck = try #require(w.requestsSent(from: TwoAgents.addressA).first?.0)
        #expect(firstCheck == answerAt)
        #expect(w.a.stats.retransmissions == 0 && w.b.stats.retransmissions == 0)
        let connected = try #require(TwoAgents.firstTime(w.eventsB, .stateChanged(.connected)))
        #expect(connected - answerAt < .milliseconds(200))
    }

    /// The controlled agent's first check is lost (it reached the offerer before the
    /// offerer's socket or credentials were there). When the offerer's check arrives on
    /// that in-progress pair, the check is cancelled and repeated at once (RFC 8445
    /// §7.3.1.4) instead of waiting 500 ms for its retransmission; the cancelled check's
    /// silence later does not fail the pair.
    @Test func aLostFirstCheckIsReplacedByATriggeredOne() throws {
        var w = TwoAgents(seed: 5)
        w.a.start(now: w.now)
        w.b.start(now: w.now)
        w.net.blackhole = true
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        for c in w.a.localCandidates { w.b.addRemoteCandidate(c, now: w.now) }
        w.run(until: Instant.zero + .milliseconds(1))
        w.net.blackhole = false
        #expect(w.requestsSent(from: TwoAgents.addressB).count == 1)
        w.run(until: Instant.zero + .milliseconds(100))
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        let connected = try #require(TwoAgents.firstTime(w.eventsB, .stateChanged(.connected)))
        #expect(connected < Instant.zero + w.b.config.initialRTO)
        #expect(w.b.stats.retransmissions == 0)
        // Long after the cancelled transaction has timed out, the pair still holds.
        w.run(for: .seconds(45))
        #expect(w.bothConnected)
        #expect(w.b.checklist.allSatisfy { $0.state == "succeeded" })
    }
}
