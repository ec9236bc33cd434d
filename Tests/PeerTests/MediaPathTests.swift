import Testing
import Foundation
import Wire
import Media
@testable import Peer

/// The media path between two peers: Opus written straight into the RTP packet,
/// SRTP in place, datagrams borrowed on receive, the jitter buffer and decoder.
@Suite struct MediaOverPeerTests {
    /// frame-ms 10, 20 and 40 through PCM → Opus → RTP → SRTP → datagram → SRTP → RTP →
    /// jitter buffer → PCM: timestamps step by 48 × frame-ms, every frame arrives, and
    /// each playout is one frame of that length carrying the tone.
    @Test(arguments: [10, 20, 40])
    func frameLengthsRoundTrip(ms: Int) throws {
        let net = try TwoPeers(seed: 31)
        net.borrowInput = true
        net.run(until: net.now + .seconds(2))
        #expect(net.offerer.connected && net.answerer.connected)
        let sender = try MediaPath(MediaSettings(frameMilliseconds: ms, bitrate: 48_000))
        let receiver = try MediaPath(MediaSettings(frameMilliseconds: ms))
        let n = sender.clock.samples
        let pcm = (0..<(48_000 * 3)).map { Int16(8_000 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        var k = 0
        net.run(until: net.now + .seconds(2), each: { now in
            guard (k + 1) * n <= pcm.count else { return }
            pcm.withUnsafeBufferPointer { all in
                let frame = UnsafeBufferPointer(rebasing: all[(k * n)..<((k + 1) * n)])
                net.offerer.sendAudio(samples: sender.clock.rtpTicks, now: now) { sender.encode(frame, into: $0) }
            }
            k += 1
        }, every: sender.clock.duration)
        net.run(until: net.now + .milliseconds(100))
        let got = net.received(false)
        #expect(got.count == k && k >= 2_000 / ms - 2)
        for (a, b) in zip(got, got.dropFirst()) { #expect(b.timestamp &- a.timestamp == UInt32(48 * ms)) }
        var out = [Int16](repeating: 0, count: receiver.clock.maxPacketSamples)
        var decoded: [Int16] = []
        for (i, a) in got.enumerated() {
            receiver.received(a.sequence, a)
            let m = out.withUnsafeMutableBufferPointer { receiver.playout(now: a.arrival + .milliseconds(Int64(2 * ms)), into: $0) }
            if i > 3 { #expect(m == n) }
            decoded += out[0..<m]
        }
        let tail = decoded.suffix(24_000)
        let rms = (tail.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(tail.count)).squareRoot()
        #expect(abs(20 * log10(rms / (8_000 / 2.0.squareRoot()))) < 1.5, "rms \(rms) at \(ms) ms")
    }
}

extension MediaPath {
    func received(_ sequence: Int64, _ a: ReceivedAudio) {
        received(sequence: sequence, timestamp: a.timestamp, payload: a.payload, arrival: a.arrival)
    }
}
