import Testing
import Foundation
import Wire
import ICE
import DTLS
@testable import Peer

/// Datagrams from addresses ICE never validated: a stranger who learns
/// our port (it is in the SDP) sends a ClientHello, random DTLS-looking bytes or fake
/// SRTP. Before, `handleInput` fed any DTLS to mbedtls and took the DTLS path from it,
/// so one datagram 0–0.4 s after the answer failed the call.
@Suite struct StrangerTests {
    /// A ClientHello as a genuine mbedtls client sends it (to a server that will never
    /// accept its certificate): what a stranger would spray.
    static func strangersClientHello() throws -> [UInt8] {
        let random = try CryptoRandom()
        let c = try DTLSConnection(role: .client, identity: try Identity(random: random), random: random,
                                   remoteFingerprints: [CertificateFingerprint(algorithm: .sha256, bytes: [UInt8](repeating: 7, count: 32))])
        c.start(now: .zero)
        guard case .transmit(let hello) = c.pollOutput() else { throw DTLSError.notConnected }
        return hello
    }

    /// A spray from fresh ports during the first 400 ms after the answer, at both peers:
    /// every seed connects, nothing is ever sent to a stranger (no STUN answer, no DTLS
    /// alert), and each spray datagram that reached a peer's DTLS/SRTP demux is counted
    /// as dropped.
    @Test func aSprayOfStrangersCannotStopCallSetup() throws {
        let hello = try Self.strangersClientHello()
        var connected = 0
        for seed in UInt64(1)...20 {
            let net = try TwoPeers(seed: seed)
            var rng = SeededRandom(seed: seed &+ 1000)
            let start = net.now
            var sprayed = [0, 0]
            net.run(until: start + .seconds(2), each: { now in
                guard now < start + .milliseconds(400) else { return }
                for toOfferer in [true, false] {
                    let peer = toOfferer ? net.offerer : net.answerer
                    let local = toOfferer ? net.offererAddress : net.answererAddress
                    let stranger = SocketAddress(ip: IPAddress("203.0.113.66")!, port: UInt16(40_000 + rng.next() % 20_000))
                    let junk = (0..<60).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                    // A Binding request with made-up credentials (it fails integrity) and
                    // one without any: STUN from strangers.
                    let forged = STUNMessage(type: .bindingRequest, transactionID: TransactionID.random(using: &rng),
                                             attributes: [.username(Username("nobody:here")), .priority(Priority(1))])
                    let stun = [try! forged.serialized(integrityKey: Array("not-the-password".utf8), fingerprint: true),
                                try! STUNMessage(type: .bindingRequest, transactionID: TransactionID.random(using: &rng)).serialized(fingerprint: true)]
                    for d in stun { peer.handleInput(d, from: stranger, local: local, now: now) }
                    for d in [hello, [22] + junk, [23, 0xFE, 0xFD] + junk, [0x80, 111] + junk] {
                        peer.handleInput(d, from: stranger, local: local, now: now)
                        sprayed[toOfferer ? 0 : 1] += 1
                    }
                }
            }, every: .milliseconds(10))
            if net.offerer.connected && net.answerer.connected { connected += 1 }
            #expect(net.offerer.connected && net.answerer.connected, "seed \(seed)")
            #expect(net.destinations.allSatisfy { $0.1 == net.offererAddress || $0.1 == net.answererAddress }, "seed \(seed): sent to a stranger")
            #expect(net.offerer.stats.unvalidatedDropped == sprayed[0], "seed \(seed)")
            #expect(net.answerer.stats.unvalidatedDropped == sprayed[1], "seed \(seed)")
        }
        print("BENCH stranger_spray: \(connected)/20 calls connected under a spray of STUN, ClientHellos, DTLS and SRTP from other ports")
    }

    /// Strangers' packets do not count as the peer being alive: with the real peer gone
    /// and a spray going on, consent loss still shows within the silence probe plus the
    /// unanswered time (1.5 s + 1.5 s after the last genuine packet, as `linnet run` has it).
    @Test func aSprayDoesNotHideConsentLoss() throws {
        let net = try TwoPeers(seed: 9, configure: {
            $0.ice.silenceProbe = .milliseconds(1500)
            $0.ice.disconnectedTimeout = .milliseconds(1500)
        })
        net.run(until: net.now + .seconds(2))
        #expect(net.offerer.connected && net.answerer.connected)
        let hello = try Self.strangersClientHello()
        net.blackhole = true
        let gone = net.now
        var rng = SeededRandom(seed: 4)
        net.run(until: gone + .seconds(6), each: { now in
            let stranger = SocketAddress(ip: IPAddress("203.0.113.66")!, port: UInt16(40_000 + rng.next() % 20_000))
            for d in [hello, [0x80, 111] + [UInt8](repeating: 1, count: 40)] {
                net.offerer.handleInput(d, from: stranger, local: net.offererAddress, now: now)
            }
        }, every: .milliseconds(20))
        #expect(net.offerer.stats.unvalidatedDropped >= 500)
        // The last genuine datagram arrived at most one harness delay (5 ms) after `gone`.
        let detected = try #require(net.eventTimes.first { $0.offerer && $0.event == .iceStateChanged(.disconnected) }?.at)
        #expect(detected - gone <= .milliseconds(3_005), "consent loss noticed \(detected - gone) after the peer went")
    }
}

/// The negotiated direction is honoured both ways (RFC 3264 §6.1).
/// Before, an `a=inactive` answer still got 251 packets of microphone audio in 5 s.
@Suite struct DirectionTests {
    /// The answer, as the offerer sees it, says `dir` for the audio section.
    @Test(arguments: [("inactive", false, false), ("sendonly", false, true), ("recvonly", true, false), ("sendrecv", true, true)])
    func answerDirectionIsHonoured(dir: String, offererSends: Bool, offererReceives: Bool) throws {
        let net = try TwoPeers(seed: 21, tamperAnswer: { $0.replacingOccurrences(of: "a=sendrecv", with: "a=\(dir)") })
        net.run(until: net.now + .seconds(2))
        #expect(net.offerer.connected)
        var i = 0
        net.run(until: net.now + .seconds(1), each: { now in
            frame(i, tag: 0xA1).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            frame(i, tag: 0xB2).withUnsafeBytes { net.answerer.sendAudio($0, samples: 960, now: now) }
            i += 1
        })
        net.run(until: net.now + .milliseconds(100))
        #expect((net.offerer.stats.rtpSent > 0) == offererSends, "\(dir): sent \(net.offerer.stats.rtpSent)")
        #expect(net.received(false).isEmpty == !offererSends)
        // The answerer (which believes it said sendrecv) sends; the offerer plays it only if allowed.
        #expect(net.received(true).isEmpty == !offererReceives, "\(dir): received \(net.received(true).count)")
        #expect((net.offerer.stats.directionDropped > 0) == !offererReceives)
    }
}
