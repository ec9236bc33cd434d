import Testing
import CAllocCounter
import Wire
import SRTP
@testable import Peer

/// Packet copies on the media path. Send: Opus writes into the RTP packet in the peer's
/// scratch buffer, SRTP protects in place, one datagram array (1 copy; an encoder's
/// packet array, an RTP packet built from it and a datagram array would be 3).
/// Receive: decrypted and parsed in the receive buffer, one payload array that the
/// jitter buffer keeps (1; an array per step, a copy to decrypt and the jitter buffer's
/// own would be 5). The kernel's copies are the same either way (docs/ARCHITECTURE.md,
/// "Data path: one frame").
@Suite struct InPlaceMediaTests {
    /// The copy-free paths carry what the copying ones did. Sending: a payload written
    /// straight into the packet (where Opus writes it) goes out as the RTP packet of
    /// that payload, the same size as one copied in. Receiving: the datagram is decrypted
    /// in the caller's own buffer (afterwards it holds the plain RTP packet: nothing was
    /// copied out to decrypt it), and the event carries the payload that was sent.
    @Test func inPlacePathsCarryWhatTheCopyingOnesDid() throws {
        let net = try TwoPeers(seed: 32)
        net.run(until: net.now + .seconds(2))
        // Any bytes do: the peer neither reads nor checks the payload.
        let payload = frame(7, tag: 0xC3)
        let timestamp = net.offerer.sender.timestamp
        // The copy-free send: the closure writes the same payload where Opus would.
        guard var datagram = sendInPlace(net.offerer, payload, now: net.now) else { Issue.record("nothing sent"); return }
        #expect(datagram.count == 12 + payload.count + SRTPContext.rtpOverhead)
        let before = datagram
        datagram.withUnsafeMutableBytes {
            net.answerer.handleInput($0, from: net.offererAddress, local: net.answererAddress, now: net.now)
        }
        // Decrypted where it lay: the header is the sender's, the payload plain again.
        #expect(datagram != before)
        #expect(datagram[0] == 0x80 && Array(datagram[12..<(12 + payload.count)]) == payload)
        #expect(UInt32(datagram[4]) << 24 | UInt32(datagram[5]) << 16 | UInt32(datagram[6]) << 8 | UInt32(datagram[7]) == timestamp)
        var got: [ReceivedAudio] = []
        while case .event(let e) = net.answerer.pollOutput() { if case .audio(let a) = e { got.append(a) } }
        #expect(got.count == 1 && got.first?.payload == payload && got.first?.timestamp == timestamp)
        // The copying send of the same payload, for the next timestamp: the same shape.
        payload.withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: net.now) }
        guard case .transmit(let copied, _, _) = net.offerer.pollOutput() else { Issue.record("nothing sent"); return }
        #expect(copied.count == datagram.count)
        // Nothing encoded: nothing sent, and the frame's time still passes.
        let t = net.offerer.sender.timestamp
        net.offerer.sendAudio(samples: 960, now: net.now) { _ in nil }
        #expect(net.offerer.sender.timestamp == t &+ 960)
        if case .transmit = net.offerer.pollOutput() { Issue.record("sent a packet for a frame that was not encoded") }
    }

    /// The stats say what went: a datagram the driver could not send comes back out of
    /// `rtpSent` (and its bytes), counted as `sendFailed`; RTCP likewise out of
    /// `rtcpSent`; anything else (STUN, DTLS) only counts as a failure. A payload too
    /// large for the packet is refused and counted, never sent.
    @Test func whatCouldNotGoIsCountedNotSent() throws {
        let net = try TwoPeers(seed: 34)
        net.run(until: net.now + .seconds(2))
        _ = drainAudio(net.offerer)
        let sent = net.offerer.stats.rtpSent, bytes = net.offerer.stats.rtpBytesSent
        let datagram = try #require(sendInPlace(net.offerer, frame(5, tag: 0x11), now: net.now))
        #expect(net.offerer.stats.rtpSent == sent + 1 && net.offerer.stats.rtpBytesSent == bytes + datagram.count)
        net.offerer.transmitFailed(datagram)
        #expect(net.offerer.stats.rtpSent == sent && net.offerer.stats.rtpBytesSent == bytes)
        #expect(net.offerer.stats.sendFailed == 1)
        // RTCP (a receiver report's packet type, 201, in the second byte).
        let rtcp = net.offerer.stats.rtcpSent
        net.offerer.transmitFailed([0x81, 201, 0, 7] + [UInt8](repeating: 0, count: 28))
        #expect(net.offerer.stats.rtcpSent == max(0, rtcp - 1) && net.offerer.stats.rtpSent == sent)
        // A STUN binding request (first byte 0): neither.
        net.offerer.transmitFailed([0x00, 0x01, 0x00, 0x00] + [UInt8](repeating: 0, count: 16))
        #expect(net.offerer.stats.sendFailed == 3 && net.offerer.stats.rtpSent == sent)
        // A payload that leaves no room for SRTP's tag is refused: counted, not sent.
        let huge = [UInt8](repeating: 0x22, count: 4_000)
        huge.withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: net.now) }
        #expect(net.offerer.stats.rtpNotProtected == 1 && net.offerer.stats.rtpSent == sent)
        if case .transmit = net.offerer.pollOutput() { Issue.record("sent a packet that could not be made") }
    }

    /// Allocations per packet on the loop: a sent datagram handed back with
    /// `recycle` carries the next one in its own storage (one allocation fewer than a
    /// send without it, counted by CAllocCounter), and what it carries is the next
    /// packet, whole (the answerer decrypts it and gets the payload sent). A datagram the
    /// shell still holds when the next is built is never written over.
    @Test func recycledDatagramCarriesTheNextPacket() throws {
        let net = try TwoPeers(seed: 33)
        net.run(until: net.now + .seconds(2))
        _ = drainAudio(net.offerer)
        _ = drainAudio(net.answerer)
        func send(_ tag: UInt8) -> [UInt8]? { sendInPlace(net.offerer, frame(Int(tag), tag: tag), now: net.now) }
        func receive(_ datagram: [UInt8]) -> [UInt8]? {
            var d = datagram
            d.withUnsafeMutableBytes { net.answerer.handleInput($0, from: net.offererAddress, local: net.answererAddress, now: net.now) }
            return drainAudio(net.answerer).first?.payload
        }
        // Handed back and no longer held: the next packet is built in its storage.
        var first = send(1)
        try #require(first != nil)
        #expect(receive(first!) == frame(1, tag: 1))
        net.offerer.recycle(first!)
        first = nil
        alloc_counter_begin()
        let second = send(2)
        let recycledCalls = alloc_counter_end()
        #expect(receive(try #require(second)) == frame(2, tag: 2))
        // Not handed back: a send allocates its datagram.
        alloc_counter_begin()
        let third = send(3)
        let plainCalls = alloc_counter_end()
        #expect(receive(try #require(third)) == frame(3, tag: 3))
        // (A debug build allocates elsewhere in a send too: the difference is the datagram.)
        if alloc_counter_available() != 0 { #expect(plainCalls == recycledCalls + 1) }
        // Handed back but still held (a shell that queued it): the next packet gets
        // storage of its own and the held datagram keeps its bytes.
        let held = try #require(send(4))
        let snapshot = held.map { $0 }
        net.offerer.recycle(held)
        let fifth = try #require(send(5))
        #expect(held == snapshot)
        #expect(receive(fifth) == frame(5, tag: 5))
        #expect(receive(held) == frame(4, tag: 4))
    }

    /// The received side: a payload the consumer has let go is reused for the
    /// packet a pool's length later (no allocation for it, counted by CAllocCounter),
    /// while one it still holds keeps its bytes; every event carries the payload sent.
    @Test func receivedPayloadsReuseStorageTheConsumerLetGo() throws {
        let net = try TwoPeers(seed: 34)
        net.run(until: net.now + .seconds(2))
        _ = drainAudio(net.offerer)
        _ = drainAudio(net.answerer)
        let pool = net.answerer.payloadPool.count
        var datagrams: [[UInt8]] = []
        for i in 0..<(pool + 2) {
            guard let d = sendInPlace(net.offerer, frame(i, tag: UInt8(truncatingIfNeeded: i)), now: net.now) else {
                Issue.record("nothing sent"); return
            }
            datagrams.append(d)
        }
        // Delivers datagram `i` and returns its payload and the allocation calls made.
        func deliver(_ i: Int) -> ([UInt8]?, Int) {
            alloc_counter_begin()
            datagrams[i].withUnsafeMutableBytes { net.answerer.handleInput($0, from: net.offererAddress, local: net.answererAddress, now: net.now) }
            let calls = alloc_counter_end()
            let got = drainAudio(net.answerer)
            return (got.count == 1 ? got[0].payload : nil, calls)
        }
        // Packet 0 is let go at once, packet 1 held throughout, the rest kept until the end.
        var first = deliver(0).0
        #expect(first == frame(0, tag: 0))
        first = nil
        let held = try #require(deliver(1).0)
        var kept: [[UInt8]] = []
        var calls: [Int] = []
        for i in 2..<(pool + 2) {
            let (p, n) = deliver(i)
            #expect(p == frame(i, tag: UInt8(i)))
            if let p { kept.append(p) }
            calls.append(n)
        }
        // Packet `pool` went into packet 0's storage: one allocation fewer than packet
        // `pool + 1`, which could not take the held packet 1's, still intact.
        if alloc_counter_available() != 0 {
            #expect(calls[pool - 2] + 1 == calls[pool - 1])
        }
        #expect(held == frame(1, tag: 1))
    }
}

/// Sends `payload` as one frame the copy-free way (the closure writes it where Opus
/// would) and returns the datagram the peer queued for it, or nil.
func sendInPlace(_ peer: Peer, _ payload: [UInt8], now: Instant) -> [UInt8]? {
    peer.sendAudio(samples: 960, now: now) { room in
        payload.withUnsafeBytes { room.copyMemory(from: $0) }
        return payload.count
    }
    guard case .transmit(let d, _, _) = peer.pollOutput() else { return nil }
    return d
}

/// Every `.audio` event the peer has queued, the rest of its output drained.
func drainAudio(_ peer: Peer) -> [ReceivedAudio] {
    var got: [ReceivedAudio] = []
    while true {
        switch peer.pollOutput() {
        case .timeout: return got
        case .event(.audio(let a)): got.append(a)
        default: break
        }
    }
}
