import Foundation
import Testing
import Wire
@testable import Audio

/// The DC remover's mono 4-sample-block path (the product's 80 Hz at 48 kHz) in one
/// pass, each block a 4-lane vector, the update rounded twice: the reference the
/// product's form, split into passes, must match bit for bit.
private func referenceRemoveDC4(_ x: UnsafeMutablePointer<Int16>, blocks: Int, kQ30: Int64,
                                dc: inout Int32, last: inout Int32) {
    var d = dc
    var xp = last
    for b in 0..<blocks {
        var v = [Int32](repeating: 0, count: 4)
        for i in 0..<4 { v[i] = Int32(x[4 * b + i]) }
        let sum = v[0] &+ v[1] &+ v[2] &+ v[3]
        let xl = v[3]
        let meanQ14 = (sum &<< 12) &+ ((xp &- xl) &<< 11)
        xp = xl
        let delta = (Int64(meanQ14 &- d) &* kQ30 &+ (1 << 29)) &>> 30
        let step = Int32(truncatingIfNeeded: (delta &+ 2) &>> 2)
        let r = d &+ 0x2000
        let ramp = [r &+ step, r &+ (step &<< 1), r &+ (step &<< 1) &+ step, r &+ (step &<< 2)]
        for i in 0..<4 { x[4 * b + i] = Int16(max(-32768, min(32767, v[i] &- (ramp[i] &>> 14)))) }
        d = d &+ (step &<< 2)
    }
    dc = d
    last = xp
}

@Suite struct HookEquivalenceTests {
    /// Inputs that reach every corner: seeded full-scale noise (saturation both ways),
    /// speech-like (harmonics in syllables, pauses of quiet noise, a DC offset), full-
    /// scale square waves at several periods (the block mean's trapezoid term at its
    /// extremes), constant full scale, and a step from −32768 to 32767.
    static func inputs(count: Int) -> [[Int16]] {
        var speech = [Int16](repeating: 0, count: count)
        var rng = SeededRandom(seed: 99)
        for i in 0..<count {
            let t = Double(i) / 48000
            var v = 300 + Double(Int.random(in: -12...12, using: &rng))
            if (i / 48000 * 10) % 10 < 7 {
                var voiced = 0.0
                for h in 1...8 { voiced += sin(2 * Double.pi * 150 * Double(h) * t) / Double(h) }
                v += 9000 * (0.5 - 0.5 * cos(2 * Double.pi * 4 * t)) * voiced
            }
            speech[i] = Int16(max(-32768, min(32767, v.rounded())))
        }
        var cases = [noise(count, amplitude: 32767, seed: 5).map { $0 == -32767 ? -32768 : $0 }, speech,
                     noise(count, amplitude: 300, seed: 6)]
        for period in [2, 3, 5, 8, 480] {
            cases.append((0..<count).map { ($0 / period) % 2 == 0 ? 32767 : -32768 })
        }
        cases.append([Int16](repeating: 32767, count: count))
        cases.append((0..<count).map { $0 < count / 2 ? -32768 : 32767 })
        return cases
    }

    /// HighPassFilter at 80 Hz, 48 kHz mono, against the one-pass reference: the same
    /// output sample for sample and the same state carried across frames, for 10 ms
    /// frames and for odd lengths (121 blocks and 3 leftover samples, and 300 blocks,
    /// more than one scratch chunk).
    @Test(arguments: [480, 487, 1200])
    func highPass80MatchesOnePassForm(samplesPerChannel: Int) throws {
        let hpf = try HighPassFilter(cutoffHz: 80)
        #expect(hpf.blockLength(at: .hz48000) == 4)
        let p = HighPassFilter.pole(cutoffHz: 80, sampleRate: 48000)
        let kQ30 = Int64(((1 - p * p * p * p) * 1073741824).rounded())
        for input in Self.inputs(count: samplesPerChannel * 60) {
            hpf.captureDidStart(.standard)
            var dc: Int32 = 0, last: Int32 = 0
            var frame = [Int16](repeating: 0, count: samplesPerChannel)
            var expected = frame
            var seq: UInt64 = 0
            var mismatches = 0
            for start in stride(from: 0, to: input.count, by: samplesPerChannel) {
                for i in 0..<samplesPerChannel { frame[i] = input[start + i] }
                expected = frame
                let info = FrameInfo(format: .standard, samplesPerChannel: samplesPerChannel, sequence: seq,
                                     captureTime: .zero)
                _ = frame.withUnsafeMutableBufferPointer { hpf.process($0, info) }
                expected.withUnsafeMutableBufferPointer {
                    referenceRemoveDC4($0.baseAddress!, blocks: samplesPerChannel / 4, kQ30: kQ30, dc: &dc, last: &last)
                }
                if frame != expected { mismatches += 1 }
                seq += 1
            }
            #expect(mismatches == 0, "first sample \(input[0])…, \(samplesPerChannel) samples a frame")
        }
    }
}

/// Halves every sample: a user hook between built-in ones, which changes the frame
/// without knowing of the chain's level cache.
private final class HalvingHook: AudioHook {
    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        for i in samples.indices { samples[i] /= 2 }
        return .pass
    }
}

@Suite struct LevelSharingTests {
    static func hooks(agcAndGate: Bool) throws -> [any AudioHook] {
        var h: [any AudioHook] = [try HighPassFilter(cutoffHz: 80)]
        if agcAndGate { h += [try AutomaticGainControl(), try NoiseGate()] }
        h += [try Limiter(), HalvingHook(), LevelMeter(), MuteGate()]
        return h
    }

    /// The hooks in a chain (which shares one frame's peak and energy between them) and
    /// the same hooks called one by one (each measuring for itself): the same samples,
    /// verdicts and meter readings every frame, while the user hook between the limiter
    /// and the meter is switched on and off and the mute gate toggles.
    @Test(arguments: [false, true])
    func chainMatchesHooksRunAlone(agcAndGate: Bool) throws {
        let chained = try Self.hooks(agcAndGate: agcAndGate)
        let alone = try Self.hooks(agcAndGate: agcAndGate)
        let chain = HookChain()
        for h in chained { try chain.add(h) }
        let userIndex = chained.firstIndex { $0 is HalvingHook }!
        let meterIndex = chained.firstIndex { $0 is LevelMeter }!
        let muteIndex = chained.firstIndex { $0 is MuteGate }!
        var mismatches = 0
        for (c, input) in HookEquivalenceTests.inputs(count: 480 * 100).enumerated() {
            // A session per input (the limiter starts at unity again after full scale).
            chain.start(.standard)
            for h in alone { h.captureDidStart(.standard) }
            for f in 0..<100 {
                let seq = UInt64(c * 100 + f)
                let userOn = (f / 7) % 2 == 0
                let muted = (f / 23) % 2 == 1
                try chain.setEnabled(chained[userIndex], userOn)
                (chained[muteIndex] as! MuteGate).setMuted(muted)
                (alone[muteIndex] as! MuteGate).setMuted(muted)
                var a = Array(input[(f * 480)..<((f + 1) * 480)])
                var b = a
                let info = frameInfo(seq: seq)
                let va = a.withUnsafeMutableBufferPointer { chain.process($0, info) }
                var vb = HookVerdict.pass
                b.withUnsafeMutableBufferPointer { p in
                    for (i, h) in alone.enumerated() where i != userIndex || userOn {
                        if h.process(p, info) == .silence {
                            for j in p.indices { p[j] = 0 }
                            vb = .silence
                        }
                    }
                }
                let ma = chained[meterIndex] as! LevelMeter, mb = alone[meterIndex] as! LevelMeter
                if a != b || va != vb || ma.peak != mb.peak || ma.meanSquare != mb.meanSquare { mismatches += 1 }
            }
        }
        #expect(mismatches == 0)
        chain.stop()
    }
}

@Suite struct LevelKernelTests {
    /// `energy` and `peak` against plain 64-bit loops: the corners of every input, odd
    /// lengths, and more than one 2^16-sample chunk of full-scale −32768 (each pair sum
    /// 2^31, the halves at their largest).
    @Test func energyAndPeakMatchPlainLoops() {
        var inputs = HookEquivalenceTests.inputs(count: 480 * 3)
        inputs.append([Int16](repeating: -32768, count: 200_001))
        inputs.append([Int16](repeating: 32767, count: 131_072))
        inputs.append([-32768])
        inputs.append([])
        for input in inputs {
            for count in Set([input.count, max(input.count - 1, 0), min(input.count, 487)]) {
                var x = Array(input[0..<count])
                let expectedEnergy = x.reduce(Int64(0)) { $0 + Int64($1) * Int64($1) }
                let expectedPeak = x.map { abs(Int32($0)) }.max() ?? 0
                let (p, e) = x.withUnsafeMutableBufferPointer { (peak($0), energy($0)) }
                #expect(e == expectedEnergy, "\(count) samples from \(input.first ?? 0)")
                #expect(p == expectedPeak, "\(count) samples from \(input.first ?? 0)")
            }
        }
    }
}

@Suite struct HighPassLevelTests {
    /// The 80 Hz high-pass hands its output's peak and energy on in a chain: the meter
    /// after it reads the same levels as a meter measuring the frame itself, for 10 ms
    /// frames and for lengths with samples after the last whole block (487, 1203).
    @Test(arguments: [480, 487, 1203])
    func chainedMeterReadsWhatItWouldMeasure(samplesPerChannel: Int) throws {
        let chained = try HighPassFilter(cutoffHz: 80), alone = try HighPassFilter(cutoffHz: 80)
        let chainedMeter = LevelMeter(), aloneMeter = LevelMeter()
        let chain = HookChain()
        try chain.add(chained)
        try chain.add(chainedMeter)
        var mismatches = 0
        for input in HookEquivalenceTests.inputs(count: samplesPerChannel * 20) {
            chain.start(.standard)
            alone.captureDidStart(.standard)
            for f in 0..<20 {
                var a = Array(input[(f * samplesPerChannel)..<((f + 1) * samplesPerChannel)])
                var b = a
                let info = FrameInfo(format: .standard, samplesPerChannel: samplesPerChannel, sequence: UInt64(f),
                                     captureTime: .zero)
                _ = a.withUnsafeMutableBufferPointer { chain.process($0, info) }
                _ = b.withUnsafeMutableBufferPointer { alone.process($0, info) }
                _ = b.withUnsafeMutableBufferPointer { aloneMeter.process($0, info) }
                if a != b || chainedMeter.peak != aloneMeter.peak || chainedMeter.meanSquare != aloneMeter.meanSquare {
                    mismatches += 1
                }
            }
            chain.stop()
        }
        #expect(mismatches == 0)
    }
}
