import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import ICE
import Wire

// The TURN client against an independent server: coturn's turnserver (Debian package
// `coturn`, in scripts/setup.sh) on loopback, long-term credentials, the sans-IO client
// driven with real sockets (CoturnSupport.swift). Every exchange is judged by coturn:
// what it relays reaches a real UDP socket, what the peer sends comes back through it.
//
// Figures (allocation time on loopback) are printed:
//   swift test --filter ICETests.CoturnInterop 2>&1 | grep coturn:

let coturnMissing = Coturn.path == nil

@Suite(.serialized, .disabled(if: coturnMissing, "turnserver (Debian package coturn) is not installed: scripts/setup.sh installs it"))
struct CoturnInterop {
    @Test func udp() throws { try relayScenario(.udp) }
    @Test func tcp() throws { try relayScenario(.tcp) }
    @Test func tls() throws { try relayScenario(.tls) }

    @Test(arguments: [TURNTransport.udp, .tcp])
    func wrongPasswordFailsOnce(_ transport: TURNTransport) throws {
        let server = try Coturn()
        defer { server.stop() }
        let link: TURNLink = transport == .udp ? try UDPLink(server: server.address) : try TCPLink(server: server.address)
        let s = TURNSession(link: link, password: "not-the-secret", transport: transport, port: server.port)
        defer { s.close() }
        _ = try s.allocate()
        // Let anything that would follow (a retry storm) happen: run until the client's
        // own timers are all done, which, for a final failure, is at once.
        try s.pump(seconds: 2) { s.client.deadline == .distantFuture }
        #expect(s.events.count == 1, "\(s.events)")
        guard case .failed(.unauthorized(let why)) = s.events.first else {
            Issue.record("expected .unauthorized, got \(s.events)\n\(server.log)")
            return
        }
        #expect(why.contains("linnet"))
        #expect(s.client.requestsSent <= 3, "requests: \(s.sentKinds)")
        #expect(s.client.deadline == .distantFuture)
        print("coturn: wrong password over \(transport): \(s.client.requestsSent) requests, \(s.receivedKinds) — \(why)")
    }

    /// Allocate; relay both ways by Send/Data indications and by ChannelData; refresh;
    /// release, and check the relay is gone.
    func relayScenario(_ transport: TURNTransport) throws {
        let server = try Coturn(tls: transport == .tls)
        defer { server.stop() }
        let link: TURNLink
        var port = server.port
        switch transport {
        case .udp: link = try UDPLink(server: server.address)
        case .tcp: link = try TCPLink(server: server.address)
        case .tls:
            port = server.tlsPort!
            let ca = try [UInt8](Data(contentsOf: server.dir.appendingPathComponent("ca.pem")))
            let tlsLink = try TLSLink(server: SocketAddress(ip: server.address.ip, port: port), hostname: "turn.linnet.test", caPEM: ca)
            let took = try tlsLink.handshake()
            print("coturn: TLS handshake with turnserver on loopback took \(took) (\(tlsLink.tls.cipherSuite ?? "?"))")
            link = tlsLink
        }
        let s = TURNSession(link: link, transport: transport, port: port)
        defer { s.close() }

        let took = try s.allocate()
        guard case .allocated(let relayed, let mapped) = s.events.first else {
            Issue.record("allocation failed: \(s.events)\n\(server.log)")
            return
        }
        print("coturn: allocation over \(transport) on loopback took \(took) (401 challenge + authenticated Allocate; \(server.command))")
        #expect(relayed.ip == IPAddress("127.0.0.1"))
        #expect(relayed.port != 0 && relayed.port != server.port)
        #expect(mapped == link.localAddress, "XOR-MAPPED-ADDRESS is our socket as coturn saw it")
        // 401, then the authenticated Allocate; coturn now and then answers that with
        // 438 Stale Nonce first (seen over UDP), which the client follows once more.
        #expect(s.sentKinds.allSatisfy { $0 == "allocate" } && (2...4).contains(s.sentKinds.count), "\(s.sentKinds)")
        #expect(s.receivedKinds.first == "allocate-error-401" && s.receivedKinds.last == "allocate-success", "\(s.receivedKinds)")
        #expect(s.receivedKinds.dropFirst().dropLast().allSatisfy { $0 == "allocate-error-438" }, "\(s.receivedKinds)")
        if s.receivedKinds.count > 2 { print("coturn: allocation over \(transport) went \(s.receivedKinds)") }
        s.events.removeAll()

        let (peer, peerAddress) = try s.addPeer()
        // 1. Client → peer before any permission: CreatePermission, then a Send indication.
        let first: [UInt8] = Array("hello through coturn over \(transport)".utf8)
        s.client.send(first, to: peerAddress, now: monotonicNow())
        try #require(try s.pump { s.peerReceived[peer]?.count == 1 }, "the first packet never reached the peer\n\(server.log)")
        #expect(s.peerReceived[peer]?[0].0 == first)
        #expect(s.peerReceived[peer]?[0].1 == relayed, "it comes from the relayed address")
        #expect(s.sentKinds.contains("create-permission") && s.sentKinds.contains("send-indication"))
        #expect(s.sentKinds.firstIndex(of: "create-permission")! < s.sentKinds.firstIndex(of: "send-indication")!)

        // 2. The ChannelBind that went out with it succeeds; then ChannelData both ways.
        try #require(try s.pump { s.receivedKinds.contains("channel-bind-success") }, "no ChannelBind success: \(s.receivedKinds)")
        let second = (0..<203).map { UInt8(truncatingIfNeeded: $0 &* 7) }  // not a multiple of 4: padding over TCP
        let sentBefore = s.sentKinds.count
        s.client.send(second, to: peerAddress, now: monotonicNow())
        try #require(try s.pump { s.peerReceived[peer]?.count == 2 })
        #expect(s.peerReceived[peer]?[1].0 == second)
        #expect(Array(s.sentKinds[sentBefore...]) == ["channel-data"])

        let back = Array("and back on the channel".utf8)
        try Sock.sendTo(peer, back, relayed)
        try #require(try s.pump { s.events.contains(.data(from: peerAddress, bytes: back)) }, "\(s.events)")
        #expect(s.receivedKinds.last == "channel-data")

        // 3. A second peer on the same IP (the permission covers it) that has no channel:
        //    coturn uses a Data indication.
        let (_, other) = try s.addPeer()
        let otherBytes = Array("from a peer without a channel".utf8)
        try Sock.sendTo(s.peers[1], otherBytes, relayed)
        try #require(try s.pump { s.events.contains(.data(from: other, bytes: otherBytes)) }, "\(s.events)")
        #expect(s.receivedKinds.last == "data-indication")

        // 4. Refresh.
        s.events.removeAll()
        s.client.refresh(now: monotonicNow())
        try #require(try s.pump { !s.events.isEmpty })
        #expect(s.events == [.refreshed])

        // 5. Release: Refresh with LIFETIME 0, which coturn accepts. Then the relay port
        //    closes (coturn deletes the allocation on its next timer tick, within a
        //    second): a packet from the peer draws an ICMP port unreachable
        //    (ECONNREFUSED on a connected socket) and reaches the client no more.
        let received = s.events.count
        s.client.release(now: monotonicNow())
        try s.drainClient()
        #expect(s.sentKinds.last == "refresh")
        try s.pump(seconds: 5) { s.receivedKinds.filter { $0 == "refresh-success" }.count == 2 }
        #expect(s.receivedKinds.last == "refresh-success", "coturn's answer to the release: \(s.receivedKinds)")
        let probe = try Sock.udp()
        defer { Glibc.close(probe) }
        try Sock.udpConnect(probe, relayed)
        s.peers.append(probe)
        var lastProbe = Instant.zero
        let refused = try s.pump(seconds: 5, tick: .milliseconds(20)) {
            if s.peerErrors[probe]?.contains(ECONNREFUSED) == true { return true }
            // Until the server has dropped the allocation, a probe every 20 ms or so.
            let now = monotonicNow()
            if now - lastProbe >= .milliseconds(20) {
                lastProbe = now
                _ = Array("probe".utf8).withUnsafeBytes { send(probe, $0.baseAddress, $0.count, 0) }
            }
            return false
        }
        #expect(refused, "the relayed port still answers after release\n\(server.log)")
        #expect(s.events.count == received, "nothing relayed after release: \(s.events)")
        if transport == .udp {
            // And the server has forgotten the 5-tuple: a new Allocate on it succeeds
            // (with the old allocation alive it would be 437 Allocation Mismatch, RFC 8656 §7.2).
            let again = TURNSession(link: s.link, transport: transport, port: port)
            _ = try again.allocate()
            guard case .allocated = again.events.first else {
                Issue.record("a new allocation after release failed: \(again.events)\n\(server.log)")
                return
            }
            again.client.release(now: monotonicNow())
            try again.drainClient()
        }
        #expect(s.client.state == .released)
    }
}
