import Testing
import Foundation
import Wire
import SimulatedNetwork
import ICE
import DTLS
@testable import Peer

/// Two peers joined by an in-memory network on a manual clock, with seeded loss and
/// delay (delay differences reorder datagrams): the shared network
/// (Tests/SimulatedNetwork) with no NAT and a uniform delay in [0, `maxDelay`).
final class TwoPeers {
    typealias InFlight = DatagramNetwork.InFlight

    let offerer: Peer
    let answerer: Peer
    let offererAddress = SocketAddress("192.0.2.1:5000")!
    let answererAddress = SocketAddress("198.51.100.2:6000")!
    let network: DatagramNetwork
    var now: Instant {
        get { network.now }
        set { network.now = newValue }
    }
    var loss = 0.0 { didSet { impair() } }
    var maxDelay: Duration = .milliseconds(5) { didSet { impair() } }
    var blackhole: Bool {
        get { network.blackholeUntil == .distantFuture }
        set { network.blackholeUntil = newValue ? .distantFuture : nil }
    }
    var inFlight: [InFlight] { network.inFlight }
    var events: [(Bool, PeerEvent)] = []
    var deadlines: [Instant] = [.distantFuture, .distantFuture]
    /// Every datagram either peer sent: (sender is the offerer, to).
    var destinations: [(Bool, SocketAddress)] = []
    /// Every event with the simulated time it came out.
    var eventTimes: [(offerer: Bool, event: PeerEvent, at: Instant)] = []
    /// Hand datagrams over in a receive buffer the peer borrows (Call's way) rather than
    /// as arrays.
    var borrowInput = false

    init(seed: UInt64, tamperAnswer: ((String) -> String)? = nil, configure: ((inout PeerConfiguration) -> Void)? = nil) throws {
        network = DatagramNetwork(seed: seed)
        network.attach(offererAddress, side: .device)
        network.attach(answererAddress, side: .provider)
        let crypto = try CryptoRandom()
        var oc = PeerConfiguration(hostAddresses: [offererAddress]), ac = PeerConfiguration(hostAddresses: [answererAddress])
        configure?(&oc)
        configure?(&ac)
        offerer = try Peer(role: .offerer, configuration: oc, identity: try Identity(random: crypto), crypto: crypto, seed: network.rng.next())
        answerer = try Peer(role: .answerer, configuration: ac, identity: try Identity(random: crypto), crypto: crypto, seed: network.rng.next())
        impair()
        offerer.start(now: now)
        answerer.start(now: now)
        drain()
        let offer = try offerer.createOffer()
        let answer = try answerer.acceptOffer(offer, now: now)
        try offerer.setRemoteAnswer(tamperAnswer?(answer) ?? answer, now: now)
        drain()
    }

    func impair() {
        let path = Impairment(loss: loss, delay: .zero, jitter: maxDelay)
        network.up = path
        network.down = path
    }

    func peer(_ first: Bool) -> Peer { first ? offerer : answerer }

    func drain() {
        for first in [true, false] {
            let p = peer(first)
            loop: while true {
                switch p.pollOutput() {
                case .transmit(let bytes, let from, let to):
                    destinations.append((first, to))
                    network.send(bytes, from: from, to: to, fromDevice: first)
                case .event(let e):
                    events.append((first, e))
                    eventTimes.append((first, e, now))
                case .timeout(let t):
                    deadlines[first ? 0 : 1] = t
                    break loop
                }
            }
        }
    }

    /// Runs until `until`: delivers datagrams and fires timeouts in time order.
    func run(until end: Instant, each: ((Instant) -> Void)? = nil, every: Duration = .milliseconds(20)) {
        var nextTick = now
        while now < end {
            var next = min(network.nextDue, deadlines[0], deadlines[1], end)
            if each != nil { next = min(next, nextTick) }
            now = max(now, next)
            if each != nil && now >= nextTick {
                each?(now)
                nextTick = nextTick + every
            }
            for d in network.takeDue() {
                guard let (local, side) = network.route(d) else { continue }
                let target = peer(side == .device)
                if borrowInput {
                    var buffer = d.bytes
                    buffer.withUnsafeMutableBytes { target.handleInput($0, from: d.from, local: local, now: now) }
                } else {
                    target.handleInput(d.bytes, from: d.from, local: local, now: now)
                }
            }
            for first in [true, false] where deadlines[first ? 0 : 1] <= now {
                peer(first).handleTimeout(now: now)
            }
            drain()
        }
    }

    func received(_ first: Bool) -> [ReceivedAudio] {
        events.compactMap { e in
            guard e.0 == first, case .audio(let a) = e.1 else { return nil }
            return a
        }
    }

    func has(_ first: Bool, _ event: PeerEvent) -> Bool { events.contains { $0.0 == first && $0.1 == event } }
}

/// A fake encoded frame that names its index, so arrival can be checked exactly.
func frame(_ index: Int, tag: UInt8) -> [UInt8] { [tag, UInt8(index >> 8), UInt8(index & 0xFF)] + [UInt8](repeating: tag, count: 40) }

@Suite struct PeerTests {
    @Test func connectsAndCarriesAudioBothWays() throws {
        let net = try TwoPeers(seed: 1)
        net.run(until: net.now + .seconds(2))
        #expect(net.offerer.connected && net.answerer.connected)
        #expect(net.has(true, .connected) && net.has(false, .connected))
        var sent = 0
        net.run(until: net.now + .seconds(2), each: { now in
            frame(sent, tag: 0xA1).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            frame(sent, tag: 0xB2).withUnsafeBytes { net.answerer.sendAudio($0, samples: 960, now: now) }
            sent += 1
        })
        net.run(until: net.now + .milliseconds(100))
        let atAnswerer = net.received(false), atOfferer = net.received(true)
        #expect(atAnswerer.count == sent && atOfferer.count == sent)
        #expect(atAnswerer.map { $0.payload } == (0..<sent).map { frame($0, tag: 0xA1) }, "payloads differ")
        #expect(atOfferer.map { $0.payload } == (0..<sent).map { frame($0, tag: 0xB2) }, "payloads differ")
        // Timestamps advance by 960 per frame (RFC 7587: 48 kHz clock).
        for (a, b) in zip(atAnswerer, atAnswerer.dropFirst()) { #expect(b.timestamp &- a.timestamp == 960) }
        // RTCP flowed and gave a round-trip time.
        #expect(net.offerer.stats.rtcpReceived > 0 && net.answerer.stats.rtcpReceived > 0)
        #expect(net.offerer.stats.roundTripTime != nil)
    }

    /// 10 % loss with reordering: the call still connects, and what arrives is intact,
    /// each frame at most once, with the loss visible in RTCP.
    @Test(arguments: [7, 8, 9] as [UInt64])
    func lossAndReordering(seed: UInt64) throws {
        let net = try TwoPeers(seed: seed)
        net.loss = 0.10
        net.maxDelay = .milliseconds(40)
        net.run(until: net.now + .seconds(10))
        #expect(net.offerer.connected && net.answerer.connected)
        var sent = 0
        net.run(until: net.now + .seconds(5), each: { now in
            frame(sent, tag: 0xA1).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            sent += 1
        })
        net.run(until: net.now + .milliseconds(200))
        let got = net.received(false)
        let indices = got.map { Int($0.payload[1]) << 8 | Int($0.payload[2]) }
        #expect(Set(indices).count == indices.count)
        for (g, i) in zip(got, indices) { #expect(g.payload == frame(i, tag: 0xA1)) }
        #expect(got.count > sent * 8 / 10 && got.count < sent)
        // Extended sequence numbers map one-to-one onto frame indices.
        for (g, i) in zip(got, indices) { #expect(g.sequence - got[0].sequence == Int64(i - indices[0])) }
    }

    /// An answer whose fingerprint is not the answerer's certificate: DTLS refuses and no
    /// audio is ever delivered.
    @Test func fingerprintMismatchFailsTheCall() throws {
        let net = try TwoPeers(seed: 3) { answer in
            var lines = answer.components(separatedBy: "\r\n")
            for i in lines.indices where lines[i].hasPrefix("a=fingerprint:sha-256 ") {
                lines[i] = "a=fingerprint:sha-256 " + (0..<32).map { _ in "AB" }.joined(separator: ":")
            }
            return lines.joined(separator: "\r\n")
        }
        net.run(until: net.now + .seconds(5))
        #expect(net.has(true, PeerEvent.failed(PeerError.dtls(DTLSError.fingerprintMismatch))))
        #expect(!net.offerer.connected)
        net.run(until: net.now + .seconds(1), each: { now in
            frame(0, tag: 1).withUnsafeBytes { net.answerer.sendAudio($0, samples: 960, now: now) }
        })
        #expect(net.received(true).isEmpty)
    }

    /// Consent loss (RFC 7675): a black hole moves ICE to disconnected after 3 s and to
    /// failed after 30 s without responses.
    @Test func consentLoss() throws {
        let net = try TwoPeers(seed: 5)
        net.run(until: net.now + .seconds(2))
        #expect(net.offerer.connected)
        net.blackhole = true
        let start = net.now
        net.run(until: start + .seconds(10))
        #expect(net.offerer.iceState == .disconnected)
        net.run(until: start + .seconds(40))
        #expect(net.has(true, .iceStateChanged(.failed)))
        #expect(net.has(true, .failed(.iceFailed)))
    }

    @Test func garbageIsDroppedAndCounted() throws {
        let net = try TwoPeers(seed: 11)
        net.run(until: net.now + .seconds(2))
        let before = net.answerer.stats
        for junk: [UInt8] in [[0x80, 111, 0, 1], [0x90] + [UInt8](repeating: 0, count: 60), [200], [70, 1, 2], [0x16, 0xFE]] {
            net.answerer.handleInput(junk, from: net.offererAddress, local: net.answererAddress, now: net.now)
        }
        #expect(net.answerer.stats.srtpDropped + net.answerer.stats.malformed > before.srtpDropped + before.malformed)
        #expect(net.answerer.connected)
    }
}

@Suite struct PeerDataChannelTests {
    func messages(_ net: TwoPeers, _ first: Bool) -> [(UInt16, [UInt8], Bool)] {
        net.events.compactMap { e in
            guard e.0 == first, case .dataChannel(.message(let ch, let data, let text)) = e.1 else { return nil }
            return (ch, data, text)
        }
    }

    /// The offerer opens `oai-events` once the association is up; messages of every size
    /// (one byte to larger than one packet, empty) go both ways through 10 % loss and
    /// arrive once, in order, intact; closing works from the answerer's side.
    @Test func channelsThroughLoss() throws {
        let net = try TwoPeers(seed: 21)
        net.loss = 0.10
        net.maxDelay = .milliseconds(30)
        net.run(until: net.now + .seconds(10))
        #expect(net.has(true, .dataChannel(.connected)) && net.has(false, .dataChannel(.connected)))
        let channel = try net.offerer.openChannel(label: "oai-events", now: net.now)
        net.run(until: net.now + .seconds(3))
        let opened = net.events.contains { e in
            if e.0 == false, case .dataChannel(.opened(let ch, let label, _)) = e.1 { return ch == channel && label == "oai-events" }
            return false
        }
        #expect(opened)
        let sizes = [1, 100, 1199, 1200, 5000, 70_000, 0]
        for (i, size) in sizes.enumerated() {
            let text = String(repeating: Character(UnicodeScalar(UInt8(97 + i))), count: size)
            try net.offerer.send(channel: channel, text: text, now: net.now)
            try net.answerer.send(channel: channel, binary: Array(text.utf8), now: net.now)
        }
        net.run(until: net.now + .seconds(60))
        let atAnswerer = messages(net, false), atOfferer = messages(net, true)
        #expect(atAnswerer.map { $0.1.count } == sizes)
        #expect(atOfferer.map { $0.1.count } == sizes)
        #expect(atAnswerer.allSatisfy { $0.2 } && atOfferer.allSatisfy { !$0.2 })
        for (i, m) in atAnswerer.enumerated() { #expect(m.1.allSatisfy { $0 == UInt8(97 + i) }) }
        try net.answerer.closeChannel(channel, now: net.now)
        net.run(until: net.now + .seconds(10))
        #expect(net.has(true, .dataChannel(.closed(channel: channel))) && net.has(false, .dataChannel(.closed(channel: channel))))
    }

    @Test func channelCallsBeforeConnectionAreErrors() throws {
        let net = try TwoPeers(seed: 22)
        #expect(throws: PeerError.self) { _ = try net.offerer.openChannel(label: "x", now: net.now) }
        #expect(throws: PeerError.self) { try net.offerer.send(channel: 0, text: "x", now: net.now) }
    }
}
