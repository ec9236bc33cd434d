import Testing
import Foundation
import Wire
import SimulatedNetwork
import ICE
import DTLS
import RTP
import Codec
@testable import Peer

/// The impairment model against its own definition (so the figures below mean what
/// they say).
@Suite struct ImpairmentModelTests {
    func sendMany(_ net: ImpairedNetwork, _ n: Int) {
        for i in 0..<n {
            net.send([0x80, UInt8(i & 0xFF)], from: net.offererHost, to: net.answererMapped, fromOfferer: true)
        }
    }

    @Test func bernoulliLossRate() throws {
        let net = try ImpairedNetwork(seed: 1)
        net.inFlight.removeAll()
        net.countersToAnswerer = PathCounters()
        net.toAnswerer.loss = 0.2
        sendMany(net, 20_000)
        let rate = Double(net.countersToAnswerer.lost) / 20_000
        // Binomial(20000, 0.2): σ ≈ 0.0028; 4σ.
        #expect(abs(rate - 0.2) < 0.012, "loss \(rate)")
    }

    /// Gilbert–Elliott: long-run loss p/(p+r) (lossInBad 1, lossInGood 0) and mean burst
    /// length 1/r, counted from the loss pattern.
    @Test func gilbertElliottBursts() throws {
        let net = try ImpairedNetwork(seed: 2)
        net.inFlight.removeAll()
        net.countersToAnswerer = PathCounters()
        let ge = GilbertElliott(p: 0.02, r: 0.25)
        net.toAnswerer.burst = ge
        var pattern: [Bool] = []
        for _ in 0..<50_000 {
            let before = net.countersToAnswerer.lost
            net.send([0x80], from: net.offererHost, to: net.answererMapped, fromOfferer: true)
            pattern.append(net.countersToAnswerer.lost > before)
        }
        let rate = Double(pattern.filter { $0 }.count) / Double(pattern.count)
        #expect(abs(rate - ge.expectedLoss) < 0.015, "loss \(rate) expected \(ge.expectedLoss)")
        var bursts: [Int] = []
        var run = 0
        for lost in pattern {
            if lost { run += 1 } else if run > 0 { bursts.append(run); run = 0 }
        }
        let mean = Double(bursts.reduce(0, +)) / Double(bursts.count)
        #expect(abs(mean - 1 / ge.r) < 0.5, "mean burst \(mean)")
    }

    @Test func delayJitterReorderDuplicate() throws {
        let net = try ImpairedNetwork(seed: 3)
        net.inFlight.removeAll()
        net.countersToAnswerer = PathCounters()
        net.toAnswerer = Impairment(delay: .milliseconds(40), jitter: .milliseconds(10), reorder: 0.1,
                                    reorderDelay: .milliseconds(50), duplicate: 0.05)
        sendMany(net, 2000)
        let delays = net.inFlight.map { ($0.due - net.now).nanoseconds }
        // Every delay is base + [0, jitter) (+ reorderDelay) (+ up to jitter + 1 ms for copies).
        #expect(delays.allSatisfy { $0 >= 40_000_000 && $0 < 40_000_000 + 10_000_000 + 50_000_000 + 11_000_000 })
        #expect(net.countersToAnswerer.reordered > 150 && net.countersToAnswerer.reordered < 250)
        #expect(net.countersToAnswerer.duplicated > 60 && net.countersToAnswerer.duplicated < 140)
        #expect(net.inFlight.count == 2000 + net.countersToAnswerer.duplicated)
    }
}

/// A 440 Hz sine as 20 ms Opus frames.
final class ToneEncoder {
    let encoder: OpusEncoder
    var phase = 0.0
    var pcm = [Int16](repeating: 0, count: 960)
    var packet = [UInt8](repeating: 0, count: 1275)

    init() throws {
        encoder = try OpusEncoder(sampleRate: 48_000, channels: 1)
        try encoder.setBitrate(24_000)
    }

    func next() throws -> [UInt8] {
        for i in 0..<960 {
            pcm[i] = Int16(8000 * sin(phase))
            phase += 2 * Double.pi * 440 / 48_000
        }
        let enc = encoder
        let n = try pcm.withUnsafeBufferPointer { p in try packet.withUnsafeMutableBytes { try enc.encode(p, into: $0) } }
        return Array(packet[0..<n])
    }
}

/// Goertzel power of `f` Hz in 48 kHz samples (an independent frequency check).
func goertzel(_ x: ArraySlice<Int16>, _ f: Double) -> Double {
    let w = 2 * Double.pi * f / 48_000, c = 2 * cos(w)
    var s1 = 0.0, s2 = 0.0
    for v in x {
        let s = Double(v) + c * s1 - s2
        s2 = s1
        s1 = s
    }
    return s1 * s1 + s2 * s2 - c * s1 * s2
}

@Suite struct ImpairedCallTests {
    /// 10 % random loss and 0–30 ms jitter both ways, real Opus through the jitter
    /// buffer and decoder: ≈ 90 % of RTP arrives, every lost frame the jitter buffer
    /// notices is concealed (PLC) or recovered (FEC), the decoder output is continuous
    /// (960 samples per 20 ms tick from the first packet on), and the 440 Hz tone
    /// dominates the output.
    @Test(arguments: [101, 102] as [UInt64])
    func audioThroughTenPercentLoss(seed: UInt64) throws {
        let net = try ImpairedNetwork(seed: seed)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let path = Impairment(loss: 0.10, delay: .milliseconds(20), jitter: .milliseconds(30))
        net.toAnswerer = path
        net.toOfferer = path
        let tone = try ToneEncoder()
        let decoder = try OpusDecoder(sampleRate: 48_000, channels: 1)
        var jitter = JitterBuffer()
        var output: [Int16] = []
        var pcm = [Int16](repeating: 0, count: 960)
        var sent = 0, consumed = 0, ticks = 0, plcFrames = 0
        var plcEnergy = 0.0
        let before = net.offerer.stats.rtpSent
        let start = net.now
        net.run(until: start + .seconds(10), each: { now in
            if now < start + .milliseconds(9_800) {
                let p = try! tone.next()
                p.withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
                sent += 1
            }
            let got = net.audio(false)
            for a in got[consumed...] {
                jitter.insert(sequence: a.sequence, timestamp: a.timestamp, payload: a.payload, arrival: a.arrival)
            }
            consumed = got.count
            let out = jitter.pop(now: now)
            let n: Int
            switch out {
            case .packet(let p):
                n = try! p.payload.withUnsafeBytes { b in try pcm.withUnsafeMutableBufferPointer { try decoder.decode(b, into: $0) } }
            case .lost(let fec):
                if fec, let next = jitter.nextPayload {
                    n = try! next.withUnsafeBytes { b in try pcm.withUnsafeMutableBufferPointer { try decoder.decode(b, into: $0, fec: true) } }
                } else {
                    n = try! pcm.withUnsafeMutableBufferPointer { try decoder.decode(nil, into: $0) }
                    plcFrames += 1
                    plcEnergy += pcm.reduce(0.0) { $0 + Double($1) * Double($1) } / 960
                }
            case .empty:
                guard !output.isEmpty else { return }
                n = try! pcm.withUnsafeMutableBufferPointer { try decoder.decode(nil, into: $0) }
            }
            ticks += 1
            output += pcm[0..<n]
        })
        let received = consumed
        let ratio = Double(received) / Double(sent)
        print("BENCH audio_10pct seed \(seed): sent \(sent) (rtp \(net.offerer.stats.rtpSent - before)), received \(received) (\(Int(ratio * 1000)) ‰), jitter buffer \(jitter.counters), PLC frames \(plcFrames), network \(net.countersToAnswerer)")
        #expect(net.offerer.stats.rtpSent - before == sent)
        #expect(ratio > 0.85 && ratio < 0.95)
        // Every loss the buffer saw became a `.lost` (concealed or FEC); late packets are
        // the only other way to miss one.
        let missing = sent - received
        #expect(jitter.counters.lost + jitter.counters.late >= missing * 8 / 10)
        #expect(jitter.counters.concealed > 0)
        // Continuous output: 960 samples for every tick since decoding began.
        #expect(output.count == ticks * 960)
        // Concealment is not silence: PLC continues the tone (mean square well above 0).
        #expect(plcFrames > 0 && plcEnergy / Double(plcFrames) > 1e5)
        // The tone survives: 440 Hz dominates 1 kHz by 20 dB over the decoded output.
        let body = output[(output.count / 10)...]
        #expect(goertzel(body, 440) > 100 * goertzel(body, 1000))
        #expect(net.offerer.iceState == .connected && net.answerer.iceState == .connected)
    }

    /// Bursty loss (Gilbert–Elliott, ≈ 7 % long-run with bursts of 4 packets): the call
    /// stays up, and the jitter buffer reports the gaps as concealment.
    @Test func audioThroughBurstLoss() throws {
        let net = try ImpairedNetwork(seed: 103)
        #expect(net.run(within: .seconds(5)) { net.offerer.connected && net.answerer.connected } != nil)
        let ge = GilbertElliott(p: 0.02, r: 0.25)
        net.toAnswerer = Impairment(burst: ge, delay: .milliseconds(20), jitter: .milliseconds(10))
        var jitter = JitterBuffer()
        var sent = 0, consumed = 0
        net.run(until: net.now + .seconds(20), each: { now in
            frame(sent, tag: 0xC3).withUnsafeBytes { net.offerer.sendAudio($0, samples: 960, now: now) }
            sent += 1
            let got = net.audio(false)
            for a in got[consumed...] {
                jitter.insert(sequence: a.sequence, timestamp: a.timestamp, payload: a.payload, arrival: a.arrival)
            }
            consumed = got.count
            _ = jitter.pop(now: now)
        })
        let ratio = Double(consumed) / Double(sent)
        print("BENCH audio_burst: sent \(sent), received \(consumed) (\(Int(ratio * 1000)) ‰, model \(Int((1 - ge.expectedLoss) * 1000)) ‰), jitter buffer \(jitter.counters)")
        #expect(abs(ratio - (1 - ge.expectedLoss)) < 0.04)
        #expect(jitter.counters.lost >= (sent - consumed) * 7 / 10)
        #expect(net.offerer.iceState == .connected)
    }

    /// 20 % loss both ways, jitter, reordering and duplication: 200 data-channel messages
    /// of 1 byte to 3 KB each way all arrive once, in order, intact (SCTP retransmission).
    @Test func dataChannelThroughTwentyPercentLoss() throws {
        let net = try ImpairedNetwork(seed: 104)
        let channel = try net.connectWithChannel()
        let path = Impairment(loss: 0.20, delay: .milliseconds(15), jitter: .milliseconds(20), reorder: 0.05, duplicate: 0.02)
        net.toAnswerer = path
        net.toOfferer = path
        var rng = SeededRandom(seed: 77)
        let payloads: [[UInt8]] = (0..<200).map { i in
            let n = 1 + Int(rng.next() % 3000)
            return (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
        }
        var nextA = 0, nextB = 0
        let start = net.now
        let done = net.run(within: .seconds(300)) {
            // Send what the buffers take; `sendBufferFull` waits for the next round.
            while nextA < payloads.count, (try? net.offerer.send(channel: channel, binary: payloads[nextA], now: net.now)) != nil { nextA += 1 }
            while nextB < payloads.count, (try? net.answerer.send(channel: channel, binary: payloads[nextB], now: net.now)) != nil { nextB += 1 }
            net.drain()
            return net.messages(false).count >= payloads.count && net.messages(true).count >= payloads.count
        }
        #expect(done != nil)
        let atAnswerer = net.messages(false).map { $0.data }, atOfferer = net.messages(true).map { $0.data }
        #expect(atAnswerer == payloads)
        #expect(atOfferer == payloads)
        let sctpA = net.offerer.channels?.association.stats, sctpB = net.answerer.channels?.association.stats
        print("BENCH datachannel_20pct: 2 × 200 messages (\(payloads.reduce(0) { $0 + $1.count }) bytes each way) in \((net.now - start).milliseconds) ms simulated; offerer SCTP retransmissions \(sctpA?.retransmissions ?? -1), answerer \(sctpB?.retransmissions ?? -1); network → answerer \(net.countersToAnswerer), → offerer \(net.countersToOfferer)")
        #expect((sctpA?.retransmissions ?? 0) > 0)
    }
}
