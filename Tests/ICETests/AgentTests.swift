import Testing
@testable import ICE
import Wire

@Suite struct AgentConnectivity {
    @Test func twoAgentsConnectAndAgreeOnThePair() throws {
        var w = TwoAgents(seed: 1)
        w.connectSignaling()
        #expect(w.a.state == .checking && w.b.state == .checking)
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        let pa = try #require(w.a.selectedPair), pb = try #require(w.b.selectedPair)
        #expect(pa.local == TwoAgents.addressA && pa.remote == TwoAgents.addressB)
        #expect(pb.local == TwoAgents.addressB && pb.remote == TwoAgents.addressA)
        // Roles stay as configured; no conflicts, nothing dropped.
        #expect(w.a.role == .controlling && w.b.role == .controlled)
        #expect(w.a.stats.unauthenticated == 0 && w.b.stats.malformed == 0)
        // Every datagram on the wire is STUN by RFC 7983's first-byte rule, and every
        // request A sent carries what RFC 8445 §7.2.2 asks for.
        for (_, d) in w.wire {
            #expect(isSTUN(firstByte: d.bytes[0]))
            let m = try STUNMessage.parse(d.bytes)
            #expect(m.fingerprint != nil)
            if d.from == TwoAgents.addressA && m.type == .bindingRequest {
                #expect(m.username == "bUf/:aUfr")
                #expect(m.iceControlling == w.a.tieBreaker)
                #expect(m.priority == Candidate.priority(type: .peerReflexive, localPreference: 65535))
                try m.verifyIntegrity(of: d.bytes, key: Array(TwoAgents.credentialsB.password.utf8))
            }
            if d.from == TwoAgents.addressB && m.type == .bindingSuccess {
                #expect(m.mappedAddress == TwoAgents.addressA)
                try m.verifyIntegrity(of: d.bytes, key: Array(TwoAgents.credentialsB.password.utf8))
            }
        }
        // The controlling agent nominated with USE-CANDIDATE.
        #expect(w.wire.contains { d in
            d.1.from == TwoAgents.addressA && ((try? STUNMessage.parse(d.1.bytes))?.useCandidate ?? false)
        })
    }

    @Test func connectsWithTwentyPercentLoss() throws {
        var dropped = 0, retransmitted = 0
        for seed in UInt64(100)..<UInt64(140) {
            var w = TwoAgents(seed: seed)
            w.net.loss = 0.2
            w.net.minDelay = .milliseconds(5)
            w.net.maxDelay = .milliseconds(80)  // reorders freely
            w.net.duplicate = 0.05
            w.connectSignaling()
            w.run(until: Instant.zero + .seconds(30)) { $0.bothConnected }
            #expect(w.bothConnected, "seed \(seed)")
            #expect(w.a.selectedPair?.remote == TwoAgents.addressB, "seed \(seed)")
            #expect(w.b.selectedPair?.remote == TwoAgents.addressA, "seed \(seed)")
            dropped += w.net.dropped
            retransmitted += w.a.stats.retransmissions + w.b.stats.retransmissions
        }
        // The loss did bite: datagrams were lost and recovered by retransmission.
        #expect(dropped >= 20)
        #expect(retransmitted >= 10)
    }

    @Test func roleConflictBothControllingResolves() throws {
        // B has the larger tie-breaker, so it stays controlling and A gives way (§7.3.1.1).
        var w = TwoAgents(roleA: .controlling, roleB: .controlling, tieBreakerA: 100, tieBreakerB: 200)
        w.connectSignaling()
        w.run(until: Instant.zero + .seconds(10)) { $0.bothConnected }
        #expect(w.bothConnected)
        #expect(w.a.role == .controlled && w.b.role == .controlling)
        #expect(w.eventsA.contains { $0.1 == .roleChanged(.controlled) })
        #expect(!w.eventsB.contains { if case .roleChanged = $0.1 { true } else { false } })
        #expect(w.a.stats.roleConflicts + w.b.stats.roleConflicts > 0)
        // The conflict went over the wire as a 487 from B or a switch on A's receipt.
        #expect(w.a.selectedPair?.remote == TwoAgents.addressB && w.b.selectedPair?.remote == TwoAgents.addressA)
    }

    @Test func roleConflictBothControlledResolves() throws {
        var w = TwoAgents(roleA: .controlled, roleB: .controlled, tieBreakerA: 9, tieBreakerB: 3)
        w.connectSignaling()
        w.run(until: Instant.zero + .seconds(10)) { $0.bothConnected }
        #expect(w.bothConnected)
        #expect(w.a.role == .controlling && w.b.role == .controlled)
    }

    @Test func peerReflexiveRemoteFromAnIncomingCheck() throws {
        // B never learns A's candidate through signaling: it learns it from A's check.
        var w = TwoAgents(seed: 3)
        w.a.start(now: w.now)
        w.b.start(now: w.now)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        w.run(until: Instant.zero + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        let remote = try #require(w.b.remoteCandidates.first)
        #expect(remote.type == .peerReflexive)
        #expect(remote.socketAddress == TwoAgents.addressA)
        // Its priority is the PRIORITY attribute A sent (RFC 8445 §7.3.1.3).
        #expect(remote.priority == Candidate.priority(type: .peerReflexive, localPreference: 65535))
    }

    /// `answer --advertise`: B behind a one-to-one NAT whose inside
    /// address A cannot reach. B offers, beside its private host candidate, a
    /// server-reflexive one at the public address and its host port, based on its host
    /// candidate; the call connects through the NAT, with checks sent from the base.
    @Test func advertisedAddressReachesAHostBehindANAT() throws {
        let outside = SocketAddress("203.0.113.20:6000")!
        var config = ICEConfig()
        config.advertised = [IPAddress("203.0.113.20")!, IPAddress("2001:db8::20")!]
        var w = TwoAgents(configB: config)
        w.natB = (inside: TwoAgents.addressB, outside: outside)
        // One per UDP host candidate of the same family: none for the IPv6 address.
        let offered = w.b.localCandidates
        #expect(offered.count == 2)
        let srflx = try #require(offered.first { $0.type == .serverReflexive })
        #expect(srflx.socketAddress == outside)
        #expect(srflx.relatedAddress == .ip(TwoAgents.addressB.ip) && srflx.relatedPort == TwoAgents.addressB.port)
        #expect(srflx.priority == Candidate.priority(type: .serverReflexive, localPreference: 65535))
        w.connectSignaling()
        w.run(until: Instant.zero + .seconds(10)) { $0.bothConnected }
        #expect(w.bothConnected)
        let pa = try #require(w.a.selectedPair), pb = try #require(w.b.selectedPair)
        #expect(pa.remote == outside && pb.local == TwoAgents.addressB && pb.remote == TwoAgents.addressA)
        // A checked the public address, and nothing left B but through the NAT.
        #expect(w.wire.contains { $0.1.to == outside })
        #expect(w.wire.allSatisfy { $0.1.from != TwoAgents.addressB })
    }

    @Test func serverReflexiveGathering() throws {
        var config = ICEConfig(stunServer: TwoAgents.stunServer)
        config.software = "linnet-test"
        var w = TwoAgents(configA: config)
        w.a.start(now: w.now)
        w.run(until: Instant.zero + .seconds(2))
        let gathered = w.eventsA.compactMap { e -> Candidate? in
            if case .localCandidate(let c) = e.1 { return c } else { return nil }
        }
        #expect(gathered.count == 2)
        let srflx = try #require(gathered.first { $0.type == .serverReflexive })
        #expect(srflx.socketAddress == TwoAgents.natA)
        #expect(srflx.relatedAddress == .ip(TwoAgents.addressA.ip) && srflx.relatedPort == TwoAgents.addressA.port)
        #expect(srflx.priority == Candidate.priority(type: .serverReflexive, localPreference: 65535))
        #expect(w.eventsA.contains { $0.1 == .gatheringComplete })
        // Gathering completes after the candidate, and the request went from A's socket.
        let completeAt = try #require(TwoAgents.firstTime(w.eventsA, .gatheringComplete))
        #expect(completeAt > .zero)
        #expect(w.wire.contains { $0.1.from == TwoAgents.addressA && $0.1.to == TwoAgents.stunServer })
    }

    @Test func gatheringTimesOutWhenTheServerIsSilent() throws {
        var config = ICEConfig(stunServer: SocketAddress("198.51.100.99:3478")!)
        config.maxTransmissions = 3
        var w = TwoAgents(configA: config)
        w.a.start(now: w.now)
        w.run(until: Instant.zero + .seconds(20))
        // 500 ms, then 1000 ms, then 2000 ms after the third send: 3.5 s.
        #expect(TwoAgents.firstTime(w.eventsA, .gatheringComplete) == Instant.zero + .milliseconds(3500))
        #expect(w.wire.filter { $0.1.to == config.stunServer }.count == 3)
    }
}

@Suite struct AgentChecklist {
    static let a1 = SocketAddress("10.0.0.1:5000")!, a2 = SocketAddress("10.0.0.3:5002")!
    static let b1 = SocketAddress("10.0.0.2:6000")!, b2 = SocketAddress("10.0.0.4:6002")!

    @Test func pairsSortedByPriorityAndPacedAtTa() throws {
        var w = TwoAgents(seed: 2, hostsA: [Self.a1, Self.a2], hostsB: [Self.b1, Self.b2])
        w.net.blackhole = true  // only A's own pacing, no triggered checks
        w.a.start(now: w.now)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        let remote = [Self.b1, Self.b2].enumerated().map { i, address in
            Candidate(foundation: "r\(i)", priority: Candidate.priority(type: .host, localPreference: UInt16(65535 - i)),
                      address: address, type: .host)
        }
        for c in remote { w.a.addRemoteCandidate(c, now: w.now) }
        // Unusable remote candidates are refused: TCP, mDNS, component 2.
        #expect(!w.a.addRemoteCandidate(try Candidate(parsing: "candidate:9 1 tcp 1 10.0.0.9 9 typ host tcptype active"), now: w.now))
        #expect(!w.a.addRemoteCandidate(try Candidate(parsing: "candidate:9 1 udp 1 x.local 9 typ host"), now: w.now))
        #expect(!w.a.addRemoteCandidate(try Candidate(parsing: "candidate:9 2 udp 1 10.0.0.9 9 typ host"), now: w.now))

        // Expected order from RFC 8445 §6.1.2.3 computed here (A controlling: G = A's).
        let pa = [Candidate.priority(type: .host, localPreference: 65535), Candidate.priority(type: .host, localPreference: 65534)]
        let pb = [Candidate.priority(type: .host, localPreference: 65535), Candidate.priority(type: .host, localPreference: 65534)]
        func prio(_ g: UInt32, _ d: UInt32) -> UInt64 {
            UInt64(min(g, d)) * 4_294_967_296 + 2 * UInt64(max(g, d)) + (g > d ? 1 : 0)
        }
        var expected: [(SocketAddress, SocketAddress, UInt64)] = []
        for (i, l) in [Self.a1, Self.a2].enumerated() {
            for (j, r) in [Self.b1, Self.b2].enumerated() { expected.append((l, r, prio(pa[i], pb[j]))) }
        }
        expected.sort { $0.2 > $1.2 }
        let list = w.a.checklist
        #expect(list.map(\.local) == expected.map(\.0))
        #expect(list.map(\.remote) == expected.map(\.1))

        w.run(for: .milliseconds(400))
        // One new check per Ta = 50 ms, best pair first (RFC 8445 §6.1.4.2).
        let checks = w.requestsSent(from: Self.a1).map { ($0.0, Self.a1) } + w.requestsSent(from: Self.a2).map { ($0.0, Self.a2) }
        let sent = w.wire.filter { ($0.1.from == Self.a1 || $0.1.from == Self.a2) }.map { ($0.0, $0.1.from, $0.1.to) }
        #expect(checks.count == 4)
        #expect(sent.map(\.0) == [0, 50, 100, 150].map { Instant.zero + .milliseconds($0) })
        #expect(sent.map(\.1) == expected.map(\.0))
        #expect(sent.map(\.2) == expected.map(\.1))
    }

    @Test func remoteCandidatesTrickledLate() throws {
        var w = TwoAgents(seed: 6)
        w.a.start(now: w.now)
        w.b.start(now: w.now)
        w.run(for: .seconds(1))
        #expect(w.a.state == .checking)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        w.run(for: .seconds(1))
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        w.run(until: w.now + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
    }

    @Test func allPairsFailingWithEndOfCandidatesFails() throws {
        var config = ICEConfig()
        config.maxTransmissions = 2
        var w = TwoAgents(configA: config)
        w.net.blackhole = true
        w.connectSignaling()
        w.a.setRemoteEndOfCandidates(now: w.now)
        w.run(for: .seconds(10))
        #expect(w.a.state == .failed)
        // First send at 0, retransmission at 0.5 s, failure one doubled RTO later.
        #expect(TwoAgents.firstTime(w.eventsA, .stateChanged(.failed)) == Instant.zero + .milliseconds(1500))
    }

    @Test func closeStopsEverything() throws {
        var w = connectedWorld(seed: 12)
        w.a.close()
        w.drain()
        let sentBefore = w.requestsSent(from: TwoAgents.addressA).count
        w.run(for: .seconds(20))
        #expect(w.a.state == .closed)
        #expect(w.requestsSent(from: TwoAgents.addressA).count == sentBefore)
        #expect(w.deadlineA == .distantFuture)
    }
}
