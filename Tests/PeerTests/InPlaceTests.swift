import Testing
import Wire
import SRTP
@testable import Peer

/// Packet copies on the media path (issue 14). Send, before: the encoder's packet
/// array, the RTP packet built from it, the datagram array (3). Now: Opus writes into
/// the RTP packet in the peer's scratch buffer, SRTP protects in place, one datagram
/// array (1). Receive, before: the datagram array, its copy-on-write copy to decrypt,
/// the plaintext array to parse, the payload array, the jitter buffer's copy (5). Now:
/// decrypted and parsed in the receive buffer, one payload array that the jitter
/// buffer keeps (1). The kernel's copies are the same either way.
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
        net.offerer.sendAudio(samples: 960, now: net.now) { room in
            payload.withUnsafeBytes { room.copyMemory(from: $0) }
            return payload.count
        }
        guard case .transmit(var datagram, _, _) = net.offerer.pollOutput() else { Issue.record("nothing sent"); return }
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
}
