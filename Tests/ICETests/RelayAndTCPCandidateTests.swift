import Testing
@testable import ICE
import Wire

/// Relayed candidates (RFC 8445 §5.1.1.2, the base is the relayed address) and ICE-TCP
/// active candidates (RFC 6544) in the agent, on the in-memory network. The TURN
/// wrapping itself is the runtime's (and coturn's, in CLITests/TURNCallTests): here the
/// relayed address simply routes to A, as a relay does.
@Suite struct RelayAndTCPCandidateTests {
    static let relayed = SocketAddress("192.0.2.50:50000")!
    static let mapped = SocketAddress("203.0.113.9:41000")!
    static let turnServer = IPAddress("192.0.2.1")!

    /// Relay-only A (no host candidates, one expected relay): gathering completes only
    /// when the relay comes; it is announced as `typ relay` with its mapped address as
    /// raddr, and the call selects it.
    @Test func gatheringWaitsForTheRelayAndTheRelayIsSelected() {
        var config = ICEConfig()
        config.expectedRelays = 1
        var w = TwoAgents(configA: config, hostsA: [])
        w.a.start(now: w.now)
        w.drain()
        #expect(!w.eventsA.contains { $0.1 == .gatheringComplete }, "gathering completed before the relay")
        w.run(for: .milliseconds(100))
        #expect(!w.eventsA.contains { $0.1 == .gatheringComplete })
        w.a.addRelayCandidate(relayed: Self.relayed, mapped: Self.mapped, server: Self.turnServer, now: w.now)
        w.hostsA.append(Self.relayed)
        w.drain()
        #expect(w.eventsA.contains { $0.1 == .gatheringComplete })
        let announced = w.eventsA.compactMap { if case .localCandidate(let c) = $0.1 { return c } else { return nil } }
        #expect(announced.count == 1)
        #expect(announced.first?.type == .relay && announced.first?.socketAddress == Self.relayed)
        #expect(announced.first?.description.contains("typ relay raddr 203.0.113.9 rport 41000") == true, "\(announced)")
        // RFC 8445 §5.1.2.1: type preference 0 for relayed candidates.
        #expect((announced.first?.priority ?? 1) >> 24 == 0)

        w.b.start(now: w.now)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        for c in announced { w.b.addRemoteCandidate(c, now: w.now) }
        w.run(until: w.now + .seconds(5)) { $0.bothConnected }
        #expect(w.bothConnected)
        #expect(w.a.selectedPair?.local == Self.relayed && w.a.selectedPair?.remote == TwoAgents.addressB)
        #expect(w.b.selectedPair?.remote == Self.relayed)
        // Nothing was sent from anywhere but the relayed address.
        #expect(w.wire.allSatisfy { $0.1.from != TwoAgents.addressA })
    }

    /// The peer's check arrives before its answer (aiortc checks as soon as it has
    /// answered): its address is learnt as peer-reflexive on the host candidate it
    /// reached. When the answer then signals that address, it must pair with the
    /// relayed candidate too, or a call whose host paths are cut never connects.
    @Test func aCandidateLearntFromAnEarlyCheckPairsWithTheRelayOnceSignaled() {
        var w = TwoAgents()
        w.a.start(now: w.now)
        w.a.addRelayCandidate(relayed: Self.relayed, mapped: nil, server: Self.turnServer, now: w.now)
        w.hostsA.append(Self.relayed)
        w.b.start(now: w.now)
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        for c in w.a.localCandidates { w.b.addRemoteCandidate(c, now: w.now) }
        // B's checks reach A's host candidate before A knows anything of B.
        w.run(for: .milliseconds(60))
        #expect(w.a.checklist.map { "\($0.local)-\($0.remote)" } == ["10.0.0.1:5000-10.0.0.2:6000"], "\(w.a.checklist)")
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        for c in w.b.localCandidates { w.a.addRemoteCandidate(c, now: w.now) }
        #expect(Set(w.a.checklist.map { "\($0.local)-\($0.remote)" }) == ["10.0.0.1:5000-10.0.0.2:6000", "192.0.2.50:50000-10.0.0.2:6000"],
                "\(w.a.checklist)")
    }

    /// A relay given up still completes gathering (with what there is), once.
    @Test func aFailedRelayCompletesGathering() {
        var config = ICEConfig()
        config.expectedRelays = 2
        var w = TwoAgents(configA: config)
        w.a.start(now: w.now)
        w.drain()
        #expect(!w.eventsA.contains { $0.1 == .gatheringComplete })
        w.a.relayGatheringFailed(now: w.now)
        w.drain()
        #expect(!w.eventsA.contains { $0.1 == .gatheringComplete }, "one of two relays settled")
        w.a.addRelayCandidate(relayed: Self.relayed, mapped: nil, server: Self.turnServer, now: w.now)
        w.a.relayGatheringFailed(now: w.now)
        w.drain()
        #expect(w.eventsA.filter { $0.1 == .gatheringComplete }.count == 1)
    }

    /// The peer's TCP candidates are capped (`maximumTCPRemotes`, 8): each is a
    /// connection the device opens, and an answer is the provider's to write. UDP
    /// candidates are not counted against it.
    @Test func tcpRemotesAreCapped() throws {
        var config = ICEConfig()
        config.tcpActive = true
        var w = TwoAgents(configA: config)
        w.a.start(now: w.now)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        var took = 0
        for k in 0..<12 {
            let c = try Candidate(parsing: "candidate:\(k) 1 tcp 1518280447 10.0.0.2 \(7000 + k) typ host tcptype passive")
            if w.a.addRemoteCandidate(c, now: w.now) { took += 1 }
        }
        #expect(took == 8)
        let udp = try Candidate(parsing: "candidate:99 1 udp 2130706431 10.0.0.2 5000 typ host")
        let tookUDP = w.a.addRemoteCandidate(udp, now: w.now)
        #expect(tookUDP)
    }

    /// ICE-TCP: A offers one active TCP candidate (port 9, `tcptype active`); a peer's
    /// passive TCP candidate pairs with it and only with it, an active or an `so` one
    /// is not taken, and a check "from" the active base reaches the passive address
    /// and succeeds.
    @Test func activeTCPPairsOnlyWithPassive() {
        var config = ICEConfig()
        config.tcpActive = true
        let passiveB = SocketAddress("10.0.0.2:7000")!
        var w = TwoAgents(configA: config)
        w.a.start(now: w.now)
        w.drain()
        let announced = w.eventsA.compactMap { if case .localCandidate(let c) = $0.1 { return c } else { return nil } }
        let tcp = announced.filter { $0.transport == .tcp }
        #expect(tcp.count == 1)
        #expect(tcp.first?.port == 9 && tcp.first?.tcpType == "active", "\(announced)")
        // UDP host candidates keep the higher priority.
        #expect((tcp.first?.priority ?? .max) < (announced.first { $0.transport == .udp }?.priority ?? 0))

        w.b.start(now: w.now)
        // B's "passive TCP" address: the in-memory network routes it to B (the TCP
        // connection and RFC 4571 framing are the runtime's; libnice checks them).
        w.hostsB.append(passiveB)
        w.a.setRemoteCredentials(TwoAgents.credentialsB, now: w.now)
        w.b.setRemoteCredentials(TwoAgents.credentialsA, now: w.now)
        // B offers only TCP (as webrtcbin with ICE-TCP alone does).
        let passive = try! Candidate(parsing: "candidate:7 1 tcp 1518280447 10.0.0.2 7000 typ host tcptype passive")
        let active = try! Candidate(parsing: "candidate:8 1 tcp 1518280447 10.0.0.2 9 typ host tcptype active")
        let so = try! Candidate(parsing: "candidate:9 1 tcp 1518280447 10.0.0.2 7001 typ host tcptype so")
        let tookPassive = w.a.addRemoteCandidate(passive, now: w.now)
        let tookActive = w.a.addRemoteCandidate(active, now: w.now)
        let tookSO = w.a.addRemoteCandidate(so, now: w.now)
        #expect(tookPassive && !tookActive && !tookSO)
        let base = SocketAddress("10.0.0.1:9")!
        #expect(w.a.checklist.map { "\($0.local)-\($0.remote)" } == ["10.0.0.1:9-10.0.0.2:7000"], "\(w.a.checklist)")
        w.hostsA.append(base)
        w.run(until: w.now + .seconds(3)) { $0.a.state == .connected }
        #expect(w.a.state == .connected)
        #expect(w.a.selectedPair?.local == base && w.a.selectedPair?.remote == passiveB)
        #expect(!w.requestsSent(from: base).isEmpty)
        // A UDP candidate at the same address is another path, not a duplicate: it
        // pairs with the UDP host candidate, the TCP one stays.
        let udpTwin = try! Candidate(parsing: "candidate:10 1 udp 2130706431 10.0.0.2 7000 typ host")
        let tookTwin = w.a.addRemoteCandidate(udpTwin, now: w.now)
        #expect(tookTwin)
        #expect(Set(w.a.checklist.map { "\($0.local)-\($0.remote)" }) == ["10.0.0.1:9-10.0.0.2:7000", "10.0.0.1:5000-10.0.0.2:7000"])
        // Without ICE-TCP a passive TCP candidate is kept out.
        var plain = TwoAgents()
        plain.a.start(now: plain.now)
        let plainTook = plain.a.addRemoteCandidate(passive, now: plain.now)
        #expect(!plainTook)
    }
}
