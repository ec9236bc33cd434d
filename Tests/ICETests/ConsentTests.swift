import Testing
@testable import ICE
import Wire

func connectedWorld(seed: UInt64 = 7) -> TwoAgents {
    var w = TwoAgents(seed: seed)
    w.connectSignaling()
    w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
    return w
}

@Suite struct ConsentFreshness {
    @Test func consentChecksEveryFiveSecondsWithJitter() throws {
        var w = connectedWorld()
        #expect(w.bothConnected)
        let connectedAt = w.now
        w.run(for: .seconds(60))
        #expect(w.bothConnected)
        // Consent requests: A's requests after connection, one fresh transaction each.
        let times = w.requestsSent(from: TwoAgents.addressA).map(\.0).filter { $0 > connectedAt }
        #expect(times.count >= 10)
        let gaps = zip(times.dropFirst(), times).map { ($0 - $1) }
        for g in gaps {
            #expect(g >= .milliseconds(4000) && g <= .milliseconds(6000), "gap \(g)")
        }
        // Randomised, not a fixed period.
        #expect(Set(gaps).count > gaps.count / 2)
        #expect(w.eventsA.filter { $0.1 == .stateChanged(.disconnected) }.isEmpty)
    }

    @Test func lossGoesDisconnectedAtThreeSecondsAndFailedAtThirty() throws {
        var w = connectedWorld()
        #expect(w.bothConnected)
        w.run(for: .seconds(7))
        let blackholeAt = w.now
        w.net.blackhole = true
        w.run(for: .seconds(45))

        for (address, events) in [(TwoAgents.addressA, w.eventsA), (TwoAgents.addressB, w.eventsB)] {
            let lastResponse = try #require(w.lastSuccessDelivered(to: address))
            #expect(lastResponse <= blackholeAt + .milliseconds(30))
            // The first consent request after the last response is the one never answered.
            let unanswered = try #require(w.requestsSent(from: address).first { $0.0 >= lastResponse }?.0)
            let disconnectedAt = try #require(TwoAgents.firstTime(events, .stateChanged(.disconnected)))
            let failedAt = try #require(TwoAgents.firstTime(events, .stateChanged(.failed)))
            #expect(disconnectedAt == unanswered + .seconds(3))
            #expect(failedAt == lastResponse + .seconds(30))
            // After consent expired the agent stops sending checks on the pair.
            #expect(!w.requestsSent(from: address).contains { $0.0 > failedAt })
        }
        #expect(w.a.state == .failed && w.a.selectedPair == nil)
        // Consent checks kept going while disconnected (loss is detected by missing
        // responses, recovery needs requests), and were retransmitted.
        #expect(w.a.stats.retransmissions > 0)
    }

    @Test func silenceProbeNoticesAVanishedPeerWithinThreeSeconds() throws {
        // With only consent checks as traffic (no media in this harness) and the
        // consent timing every Linnet call uses (1 s of silence, then 2 s unanswered).
        var config = ICEConfig()
        config.useVoiceCallConsent()
        var w = TwoAgents(seed: 11, configA: config, configB: config)
        w.connectSignaling()
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        w.run(for: .seconds(7))
        #expect(w.bothConnected, "answered probes keep the agent connected")
        let blackholeAt = w.now
        w.net.blackhole = true
        w.run(for: .seconds(5))
        let lastArrival = try #require(w.delivered.last { $0.1.to == TwoAgents.addressA }?.0)
        #expect(lastArrival <= blackholeAt)
        let disconnectedAt = try #require(TwoAgents.firstTime(w.eventsA, .stateChanged(.disconnected)))
        // Independent bound: the last packet A received, plus 1 s of silence, plus 2 s
        // unanswered: within 3 s.
        #expect(disconnectedAt <= lastArrival + .seconds(3), "disconnected \(disconnectedAt - lastArrival) after the last packet")
        #expect(disconnectedAt > blackholeAt)
    }

    @Test func respondingAgainRecoversToConnected() throws {
        var w = connectedWorld(seed: 8)
        w.run(for: .seconds(6))
        let pair = w.a.selectedPair
        w.net.blackhole = true
        w.run(for: .seconds(9))
        #expect(w.a.state == .disconnected && w.b.state == .disconnected)
        let healedAt = w.now
        w.net.blackhole = false
        w.run(for: .seconds(10))
        #expect(w.bothConnected)
        let reconnectedAt = try #require(TwoAgents.firstTime(w.eventsA, .stateChanged(.connected), after: healedAt))
        // Recovery comes from a consent response that arrived after the network healed.
        let response = try #require(w.lastSuccessDelivered(to: TwoAgents.addressA))
        #expect(reconnectedAt > healedAt && reconnectedAt <= response)
        #expect(w.a.selectedPair == pair)
        #expect(!w.eventsA.contains { $0.1 == .stateChanged(.failed) })
    }

    @Test func iceRestartRecoversAfterFailure() throws {
        var w = connectedWorld(seed: 9)
        let oldCheckFromB = try #require(w.wire.first {
            $0.1.from == TwoAgents.addressB && (try? STUNMessage.parse($0.1.bytes))?.type == .bindingRequest
        }?.1)
        w.net.blackhole = true
        w.run(for: .seconds(40))
        #expect(w.a.state == .failed && w.b.state == .failed)
        w.net.blackhole = false

        // New credentials on both sides; candidates signaled again (RFC 8445 §9).
        let newA = ICECredentials(ufrag: "aNew", password: "restartPasswordAgentA01")
        let newB = ICECredentials(ufrag: "bNew", password: "restartPasswordAgentB01")
        let restartAt = w.now
        w.a.restart(localCredentials: newA, now: w.now)
        w.b.restart(localCredentials: newB, now: w.now)
        w.a.setRemoteCredentials(newB, now: w.now)
        w.b.setRemoteCredentials(newA, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        for c in w.a.localCandidates { w.b.addRemoteCandidate(c, now: w.now) }
        w.drain()
        #expect(w.a.state == .checking && w.b.state == .checking)
        w.run(until: w.now + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        #expect(TwoAgents.firstTime(w.eventsA, .stateChanged(.connected), after: restartAt) != nil)
        // The new checks use the new ufrags.
        let lastRequest = try #require(w.requestsSent(from: TwoAgents.addressA).last?.1)
        #expect(lastRequest.username == "bNew:aNew")

        // A check from the old generation no longer authenticates.
        let before = w.a.stats.unauthenticated
        w.a.handleInput(oldCheckFromB.bytes, from: TwoAgents.addressB, local: TwoAgents.addressA, now: w.now)
        #expect(w.a.stats.unauthenticated == before + 1)
    }
}

@Suite struct AgentHostileInput {
    @Test func garbageAndForgeriesAreDroppedAndCounted() throws {
        var w = connectedWorld(seed: 10)
        #expect(w.bothConnected)
        w.drain()
        let pair = w.a.selectedPair
        let A = TwoAgents.addressA, B = TwoAgents.addressB
        func outputsAfter(_ w: inout TwoAgents) -> Int {
            var n = 0
            while true {
                if case .timeout = w.a.pollOutput() { return n }
                n += 1
            }
        }

        // 1. Garbage that is not STUN, and truncated STUN.
        var rng = SeededRandom(seed: 99)
        for _ in 0..<200 {
            let bytes = (0..<Int(rng.next() % 64)).map { _ in UInt8(truncatingIfNeeded: rng.next()) & 0x03 }
            w.a.handleInput(bytes, from: B, local: A, now: w.now)
        }
        #expect(w.a.stats.malformed == 200)
        #expect(outputsAfter(&w) == 0)

        // 2. A well-formed check keyed with the wrong password.
        let id = TransactionID(1, 2, 3)
        let check = STUNMessage(type: .bindingRequest, transactionID: id, attributes: [
            .username(Username("aUfr:bUf/")), .priority(Priority(1)), .iceControlled(ICEControlled(tieBreaker: 1)),
        ])
        let forged = try check.serialized(integrityKey: Array("not-the-password-of-a!!".utf8), fingerprint: true)
        w.a.handleInput(forged, from: B, local: A, now: w.now)
        #expect(w.a.stats.unauthenticated == 1)
        // 3. The right password but someone else's ufrag in USERNAME.
        var wrongUser = check
        wrongUser.attributes[0] = .username(Username("zzzz:bUf/"))
        w.a.handleInput(try wrongUser.serialized(integrityKey: Array(TwoAgents.credentialsA.password.utf8), fingerprint: true),
                        from: B, local: A, now: w.now)
        #expect(w.a.stats.unauthenticated == 2)
        // 4. No MESSAGE-INTEGRITY at all.
        w.a.handleInput(try check.serialized(fingerprint: true), from: B, local: A, now: w.now)
        #expect(w.a.stats.unauthenticated == 3)
        #expect(outputsAfter(&w) == 0)

        // 5. A response to nothing we sent.
        let stray = STUNMessage(type: .bindingSuccess, transactionID: TransactionID(7, 7, 7),
                                attributes: [.xorMappedAddress(XORMappedAddress(A))])
        w.a.handleInput(try stray.serialized(integrityKey: Array(TwoAgents.credentialsB.password.utf8), fingerprint: true),
                        from: B, local: A, now: w.now)
        #expect(w.a.stats.unmatchedResponses == 1)

        // 6. The genuine check still gets its answer, with XOR-MAPPED-ADDRESS = source.
        let good = try check.serialized(integrityKey: Array(TwoAgents.credentialsA.password.utf8), fingerprint: true)
        w.a.handleInput(good, from: B, local: A, now: w.now)
        guard case .transmit(let reply, let from, let to) = w.a.pollOutput() else {
            Issue.record("no answer to an authentic check")
            return
        }
        #expect(from == A && to == B)
        let m = try STUNMessage.parse(reply)
        #expect(m.type == .bindingSuccess && m.transactionID == id && m.mappedAddress == B)
        try m.verifyIntegrity(of: reply, key: Array(TwoAgents.credentialsA.password.utf8))

        #expect(w.a.state == .connected && w.a.selectedPair == pair)
    }

    @Test func forgedResponseToAnOutstandingCheckIsNotTrusted() throws {
        var w = TwoAgents(seed: 4)
        w.net.blackhole = true
        w.connectSignaling()
        w.run(for: .milliseconds(1))
        // A's first check is in flight (and lost); forge B's answer with a wrong key.
        let (_, request) = try #require(w.requestsSent(from: TwoAgents.addressA).first)
        let forged = STUNMessage(type: .bindingSuccess, transactionID: request.transactionID,
                                 attributes: [.xorMappedAddress(XORMappedAddress(TwoAgents.addressA))])
        w.a.handleInput(try forged.serialized(integrityKey: Array("guess".utf8), fingerprint: true),
                        from: TwoAgents.addressB, local: TwoAgents.addressA, now: w.now)
        #expect(w.a.stats.unauthenticated == 1)
        #expect(w.a.checklist.allSatisfy { $0.state != "succeeded" })
        #expect(w.a.state == .checking)
    }

    @Test func unknownRequiredAttributeGets420() throws {
        var w = connectedWorld(seed: 5)
        w.drain()
        var bytes = try STUNMessage(type: .bindingRequest, transactionID: TransactionID(4, 5, 6)).serialized()
        bytes += [0x00, 0x77, 0x00, 0x00]
        bytes[3] = 4
        w.a.handleInput(bytes, from: TwoAgents.addressB, local: TwoAgents.addressA, now: w.now)
        guard case .transmit(let reply, _, _) = w.a.pollOutput() else {
            Issue.record("no 420")
            return
        }
        let m = try STUNMessage.parse(reply)
        #expect(m.errorCode?.code == 420)
        #expect(m.attributes.contains(.unknownAttributes(UnknownAttributes([0x0077]))))
    }
}
