import Testing
import Foundation
import Wire
import SimulatedNetwork
import ICE
import DTLS
import SCTP
@testable import Peer

/// Hostile input at the peer connection: nothing unauthenticated is accepted, every
/// refusal is counted, memory stays bounded. (Unit-level checks live with the modules:
/// SRTPTests tamper/replay, ICETests ConsentTests forged checks, SCTPTests FloodTests,
/// SignalingTests oversized headers, JSONTests depth limits.)
@Suite struct PeerSecurityTests {
    func rtpDelivered(_ net: ImpairedNetwork, toOfferer: Bool) -> [[UInt8]] {
        net.deliveredLog.filter { $0.offerer == toOfferer && (128...191).contains($0.bytes[0]) && !(192...223).contains($0.bytes[1]) }.map { $0.bytes }
    }

    /// The offer's fingerprint is not the offerer's certificate: the answerer (DTLS
    /// client) refuses the handshake; neither side connects or delivers audio.
    @Test func answererRefusesAWrongFingerprint() throws {
        let net = try ImpairedNetwork(seed: 301, offerTamper: { offer in
            var lines = offer.components(separatedBy: "\r\n")
            for i in lines.indices where lines[i].hasPrefix("a=fingerprint:sha-256 ") {
                lines[i] = "a=fingerprint:sha-256 " + (0..<32).map { _ in "5A" }.joined(separator: ":")
            }
            return lines.joined(separator: "\r\n")
        })
        net.run(until: net.now + .seconds(10), each: { now in
            frame(0, tag: 9).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            frame(0, tag: 9).withUnsafeBytes { net.answerer.sendAudio($0, samples: 960, now: now) }
        })
        #expect(net.has(false, .failed(.dtls(.fingerprintMismatch))))
        #expect(!net.answerer.connected && !net.offerer.connected)
        #expect(net.audio(true).isEmpty && net.audio(false).isEmpty)
        #expect(net.answerer.inbound == nil && net.offerer.inbound == nil)
    }

    /// SRTP: a replayed packet, a forged tag, a changed payload, a changed sequence
    /// number and a forged SRTCP packet are all dropped and counted one by one; none
    /// produces audio or RTCP statistics.
    @Test func forgedAndReplayedSRTPIsDroppedAndCounted() throws {
        let net = try ImpairedNetwork(seed: 302)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        net.logDelivered = true
        var n = 0
        net.run(until: net.now + .seconds(2), each: { now in
            frame(n, tag: 0x77).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            n += 1
        })
        let genuine = try #require(rtpDelivered(net, toOfferer: false).last)
        let rtcp = try #require(net.deliveredLog.last { !$0.offerer && (192...223).contains($0.bytes[1]) }?.bytes)
        let audioBefore = net.audio(false).count
        let before = net.answerer.stats
        var forgeries: [[UInt8]] = [genuine]                 // a replay
        var tag = genuine; tag[tag.count - 1] ^= 0x01; forgeries.append(tag)
        var body = genuine; body[14] ^= 0x80; forgeries.append(body)
        var seq = genuine; seq[3] &+= 7; forgeries.append(seq)   // "new" sequence, old tag
        var rtcpForged = rtcp; rtcpForged[rtcpForged.count - 1] ^= 0x01; forgeries.append(rtcpForged)
        forgeries.append(rtcp)                                // an SRTCP replay
        for f in forgeries {
            net.answerer.handleInput(f, from: net.offererMapped, local: net.answererHost, now: net.now)
        }
        net.drain()
        #expect(net.answerer.stats.srtpDropped == before.srtpDropped + forgeries.count)
        #expect(net.audio(false).count == audioBefore)
        #expect(net.answerer.stats.rtcpReceived == before.rtcpReceived)
        #expect(net.answerer.stats.rtpReceived == before.rtpReceived)
        // Genuine traffic still flows afterwards.
        net.run(until: net.now + .seconds(1), each: { now in
            frame(n, tag: 0x77).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            n += 1
        })
        #expect(net.audio(false).count >= audioBefore + 45)
    }

    /// STUN checks from an attacker: a wrong password, a wrong ufrag, no integrity. None
    /// is answered, none adds a candidate or moves the path, even while the real
    /// path is disconnected (when a genuine new pair would be switched to).
    @Test func forgedSTUNIsIgnoredEvenWhileDisconnected() throws {
        let net = try ImpairedNetwork(seed: 303)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let attacker = SocketAddress("203.0.113.66:4444")!
        let offererCreds = net.offerer.ice.localCredentials, answererCreds = net.answerer.ice.localCredentials
        var rng = SeededRandom(seed: 9)
        func check(username: String, key: [UInt8]?) throws -> [UInt8] {
            let m = STUNMessage(type: .bindingRequest, transactionID: TransactionID.random(using: &rng), attributes: [
                .username(Username(username)), .priority(Priority(0x7E00_00FF)),
                .iceControlling(ICEControlling(tieBreaker: rng.next())), .useCandidate,
            ])
            if let key { return try m.serialized(integrityKey: key, fingerprint: true) }
            return try m.serialized(fingerprint: true)
        }
        let forged = [
            try check(username: answererCreds.ufrag + ":" + offererCreds.ufrag, key: STUNMessage.shortTermKey(password: "wrong-password-0123456789")),
            try check(username: "nope:" + offererCreds.ufrag, key: STUNMessage.shortTermKey(password: answererCreds.password)),
            try check(username: answererCreds.ufrag + ":" + offererCreds.ufrag, key: nil),
        ]
        // Make the real path stale first: drop everything, both ways, for 8 s.
        net.blackhole(for: .seconds(8))
        #expect(net.run(within: .seconds(10)) { net.answerer.iceState == .disconnected } != nil)
        let pathBefore = net.answerer.selectedPair
        let unauthenticated = net.answerer.iceStats.unauthenticated
        for f in forged {
            net.answerer.handleInput(f, from: attacker, local: net.answererHost, now: net.now)
        }
        // Nothing to the attacker, ever.
        var toAttacker = 0
        loop: while true {
            switch net.answerer.pollOutput() {
            case .transmit(_, _, let to): if to == attacker { toAttacker += 1 }
            case .event(let e): net.events.append((false, e, net.now))
            case .timeout(let t): net.deadlines[1] = t; break loop
            }
        }
        #expect(toAttacker == 0)
        #expect(net.answerer.iceStats.unauthenticated == unauthenticated + forged.count)
        #expect(!net.answerer.ice.remoteCandidates.contains { $0.socketAddress == attacker })
        #expect(net.answerer.selectedPair == pathBefore)
        // The real path comes back on its own (consent responses resume).
        net.run(until: net.now + .seconds(12))
        #expect(net.answerer.iceState == .connected && net.answerer.selectedPair?.remote == net.offererMapped)
    }

    /// A peer sending data-channel messages as fast as it can: its own send buffer
    /// refuses past `sendBufferLimit` (no unbounded queue), the receiver's reassembly
    /// memory stays under its limit, every accepted message arrives, and a message over
    /// the negotiated maximum is refused at once.
    @Test func dataChannelFloodStaysBounded() throws {
        let net = try ImpairedNetwork(seed: 304)
        let channel = try net.connectWithChannel()
        net.toAnswerer = Impairment(loss: 0.05, delay: .milliseconds(20), jitter: .milliseconds(10))
        let sendLimit = try #require(net.offerer.channels?.association.config.sendBufferLimit)
        let receiveLimit = try #require(net.answerer.channels?.association.config.receiveBufferSize)
        var accepted = 0, refused = 0, maxBuffered = 0, maxReceive = 0
        let message = [UInt8](repeating: 0x42, count: 16_000)
        net.run(until: net.now + .seconds(20), every: .milliseconds(10), each: { now in
            for _ in 0..<50 {
                do {
                    try net.offerer.send(channel: channel, binary: message, now: now)
                    accepted += 1
                } catch PeerError.dataChannel(.sendBufferFull) {
                    refused += 1
                    break
                } catch {
                    Issue.record("unexpected \(error)")
                    break
                }
            }
            maxBuffered = max(maxBuffered, net.offerer.channels?.association.bufferedAmount ?? 0)
            maxReceive = max(maxReceive, net.answerer.channels?.association.receiveBuffered ?? 0)
        })
        #expect(refused > 0)
        #expect(maxBuffered <= sendLimit)
        #expect(maxReceive <= 2 * receiveLimit)
        #expect(throws: PeerError.self) {
            try net.offerer.send(channel: channel, binary: [UInt8](repeating: 1, count: Int(net.offerer.configuration.maxMessageSize) + 1), now: net.now)
        }
        net.run(until: net.now + .seconds(30))
        let received = net.messages(false)
        print("BENCH datachannel_flood: \(accepted) × 16 KB accepted, \(refused) refusals, max send buffer \(maxBuffered) B (limit \(sendLimit)), max receive buffer \(maxReceive) B (limit \(receiveLimit)), delivered \(received.count)")
        #expect(received.count == accepted)
        #expect(received.allSatisfy { $0.data == message })
    }
}
