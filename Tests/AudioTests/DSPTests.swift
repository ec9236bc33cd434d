import Foundation
import Testing
import Wire
@testable import Audio

@Suite struct ConfigMathTests {
    @Test func agreesWithLibm() {
        for x in stride(from: -30.0, through: 30.0, by: 0.37) {
            #expect(abs(ConfigMath.exp(x) - Foundation.exp(x)) <= 1e-14 * Foundation.exp(x))
            #expect(abs(ConfigMath.sin(x) - Foundation.sin(x)) <= 1e-13)
            #expect(abs(ConfigMath.cos(x) - Foundation.cos(x)) <= 1e-13)
        }
        for x in [1e-9, 0.001, 0.5, 1, 1.5, 2, 10, 12345.678, 1e12] {
            #expect(abs(ConfigMath.log(x) - Foundation.log(x)) <= 1e-14 * max(1, abs(Foundation.log(x))))
        }
        #expect(abs(ConfigMath.besselI0(8) - 427.56411572180474) < 1e-9) // I0(8), tables
    }

    @Test func fixedLog2AndExp2AreAccurate() {
        // log2Q16 against Double log2: within 2/65536 (polynomial error 1.5e-5 + rounding).
        var rng = SeededRandom(seed: 7)
        for _ in 0..<20000 {
            let x = UInt64.random(in: 1...(1 << 50), using: &rng)
            let err = abs(Double(log2Q16(x)) / 65536 - log2(Double(x)))
            #expect(err <= 2.0 / 65536)
        }
        // 2^x gains: relative error ≤ 2^-14 (mantissa is 15 bits).
        for l in stride(from: -6 * 65536, through: 6 * 65536, by: 997) {
            let g = FixedGain(log2Q16: Int32(l))
            let exact = pow(2, Double(l) / 65536)
            #expect(abs(g.linear / exact - 1) <= 1.0 / 16384)
        }
    }

    @Test func errorsReadWell() {
        let e = AudioError.parameterOutOfRange(.gainDB, value: 50, minimum: -40, maximum: 40)
        #expect(e.description == "gain (dB) 50.00 is out of range -40.00…40.00")
        #expect(throws: AudioError.parameterOutOfRange(.gainDB, value: 41, minimum: -40, maximum: 40)) { try GainHook(gainDB: 41) }
        #expect(throws: AudioError.parameterOutOfRange(.cutoffHz, value: 0.5, minimum: 1, maximum: 1000)) { try HighPassFilter(cutoffHz: 0.5) }
        #expect(throws: AudioError.self) { try AutomaticGainControl(targetDBFS: 0) }
        #expect(throws: AudioError.self) { try NoiseGate(thresholdDBFS: 3) }
        #expect(throws: AudioError.self) { try Limiter(ceilingDBFS: -31) }
        #expect(throws: AudioError.unsupportedChannelCount(9)) { try AudioFormat(channels: 9) }
        #expect(throws: AudioError.unsupportedSampleRate(22050)) { try SampleRate(hertz: 22050) }
    }
}

@Suite struct HookDSPTests {
    /// The DC remover's design in Double (block means, block pole p^B, a linear ramp
    /// between block estimates): the fixed-point one within 1 LSB. The cases cover block
    /// lengths 16 (20 Hz at 48 kHz), 1 (100 Hz at 16 kHz: the per-sample first-order
    /// filter), 2 (50 Hz at 24 kHz, stereo), and the mono fast paths of 4 (the product's
    /// default 80 Hz at 48 kHz, 4-lane vectors) and 8 (40 Hz at 48 kHz).
    @Test(arguments: [(SampleRate.hz48000, 20.0, 1, 16), (.hz16000, 100.0, 1, 1), (.hz24000, 50.0, 2, 2),
                      (.hz48000, 80.0, 1, 4), (.hz48000, 40.0, 1, 8)])
    func highPassMatchesDoubleReference(rate: SampleRate, cutoff: Double, channels: Int, block: Int) throws {
        let hpf = try HighPassFilter(cutoffHz: cutoff)
        #expect(hpf.blockLength(at: rate) == block)
        let n = rate.samplesPerFrame * channels * 200
        let noise = noise(n, amplitude: 8000, seed: 3)
        let input = noise.enumerated().map { Int16(clamping: Int($0.element) + ($0.offset % channels == 0 ? 6000 : -9000)) }
        let (out, _) = run(hpf, input, rate: rate, channels: channels)
        // The pole of the bilinear first-order high-pass, computed here independently.
        let t = tan(Double.pi * cutoff / Double(rate.hertz))
        let p = (1 - t) / (1 + t)
        let k = 1 - pow(p, Double(block))
        var ref = [Int16](repeating: 0, count: n)
        let frames = n / channels
        for c in 0..<channels {
            var d = 0.0, xp = 0.0
            for b in 0..<(frames / block) {
                // Trapezoidal mean: for block = 1, d = p·d + (1 − p)·(x + x₋₁)/2 and
                // x − d is y = p·y₋₁ + (1 + p)/2·(x − x₋₁), the bilinear high-pass itself.
                var sum = 0.0
                for i in 0..<block { sum += Double(input[(b * block + i) * channels + c]) }
                let xl = Double(input[(b * block + block - 1) * channels + c])
                sum += (xp - xl) / 2
                xp = xl
                let next = d + k * (sum / Double(block) - d)
                for i in 0..<block {
                    let j = (b * block + i) * channels + c
                    let r = d + (next - d) * Double(i + 1) / Double(block)
                    ref[j] = Int16(max(-32768, min(32767, (Double(input[j]) - r).rounded())))
                }
                d = next
            }
        }
        #expect(maxAbsDiff(out, ref) <= 1)
        // And it removes DC: the last 50 frames have a mean near 0 per channel.
        let tail = out.suffix(rate.samplesPerFrame * channels * 50)
        let mean = Double(tail.reduce(0) { $0 + Int($1) }) / Double(tail.count)
        #expect(abs(mean) < 100)
    }

    /// Against the first-order high-pass it stands for (bilinear, −3 dB at the cutoff):
    /// tones at ¼, 1 and 10 times the cutoff and across the voice band come out at that
    /// filter's gain (±0.05 dB), and from 10 times the cutoff up with everything that is
    /// not the tone (the block interpolation's products, rounding) 45 dB or more below it.
    /// Where the block length is 1 (100 Hz at 16 kHz, 300 Hz at 48 kHz) it is the
    /// bilinear filter itself. 80 Hz at 48 kHz is the product's default (blocks of 4:
    /// measured 0.001 dB off, products 50 dB down at worst; blocks of 8 would save about
    /// 700 instructions a frame for −0.06 dB at 3 kHz and 49 dB, past this tolerance).
    @Test(arguments: [(SampleRate.hz48000, 20.0), (.hz16000, 20.0), (.hz24000, 50.0), (.hz16000, 100.0), (.hz48000, 300.0), (.hz48000, 80.0)])
    func highPassResponseIsFirstOrder(rate: SampleRate, cutoff: Double) throws {
        let fs = Double(rate.hertz)
        let t = tan(Double.pi * cutoff / fs)
        let p = (1 - t) / (1 + t)
        func exactGainDB(_ f: Double) -> Double {
            // H(z) = (1 + p)/2 · (1 − z⁻¹)/(1 − p·z⁻¹) on the unit circle.
            let w = 2 * Double.pi * f / fs
            let num = (1 + p) / 2 * (2 - 2 * cos(w)).squareRoot()
            let den = (1 - 2 * p * cos(w) + p * p).squareRoot()
            return 20 * log10(num / den)
        }
        let seconds = max(1.0, 40 / cutoff) // settle for many time constants
        let count = Int(fs * seconds) / rate.samplesPerFrame * rate.samplesPerFrame
        for f in [cutoff / 4, cutoff, 10 * cutoff, 300, 1000, 3000] where f < fs / 2 {
            let hpf = try HighPassFilter(cutoffHz: cutoff)
            let input = quantise(sine(f, amplitude: 10000, rate: fs, count: count))
            let (out, _) = run(hpf, input, rate: rate)
            let tail = out.suffix(count / 2).map(Double.init)
            let (amplitude, snr) = fitTone(tail, frequency: f, rate: fs)
            let gain = 20 * log10(amplitude / 10000)
            let tolerance = 0.05
            #expect(abs(gain - exactGainDB(f)) <= tolerance, "\(f) Hz at cutoff \(cutoff): \(gain) dB")
            if f >= 10 * cutoff { #expect(snr >= 45, "\(f) Hz at cutoff \(cutoff): \(snr) dB") }
        }
    }

    @Test func gainMatchesDoubleReference() throws {
        let input = noise(48000, amplitude: 32767, seed: 11)
        for db in [-40.0, -6.02, -0.5, 0, 3.3, 12, 40] {
            let (out, _) = run(try GainHook(gainDB: db), input)
            let ref = quantise(input.map { Double($0) * pow(10, db / 20) })
            #expect(maxAbsDiff(out, ref) <= 1, "gain \(db) dB")
        }
    }

    @Test func gainChangeRampsOverOneFrame() throws {
        let hook = try GainHook(gainDB: 0)
        let input = [Int16](repeating: 10000, count: 480 * 3)
        hook.captureDidStart(.standard)
        var frames: [[Int16]] = []
        for seq in 0..<3 {
            if seq == 1 { try hook.setGain(dB: -6.0206) }
            var f = Array(input[(seq * 480)..<((seq + 1) * 480)])
            _ = f.withUnsafeMutableBufferPointer { hook.process($0, frameInfo(seq: UInt64(seq))) }
            frames.append(f)
        }
        #expect(frames[0].allSatisfy { $0 == 10000 })
        // Ramp from 1 to 0.5: sample i has gain 1 − 0.5·(i+1)/480 (±2 LSB).
        let ref = (0..<480).map { Int16((10000 * (1 - 0.5 * Double($0 + 1) / 480)).rounded()) }
        #expect(maxAbsDiff(frames[1], ref) <= 2)
        #expect(frames[2].allSatisfy { abs(Int($0) - 5000) <= 1 })
    }

    /// The AGC in Double with the same (quantised) coefficients: the fixed-point one
    /// stays within 2 LSB, and it reaches the target in the frames the time constant
    /// predicts.
    @Test func agcMatchesReferenceAndConverges() throws {
        let agc = try AutomaticGainControl(targetDBFS: -18, attackMilliseconds: 20, releaseMilliseconds: 200,
                                           maxGainDB: 24, minGainDB: -12, noiseFloorDBFS: -60)
        // −30 dBFS RMS sine at 1 kHz (10 whole periods per frame, so frame RMS is exact), 300 frames.
        let amp = 32768 * pow(10, -30.0 / 20) * 2.0.squareRoot()
        let input = quantise(sine(1000, amplitude: amp, rate: 48000, count: 480 * 300))
        let (out, _) = run(agc, input)

        let kA = agc.attackCoefficient, kR = agc.releaseCoefficient
        #expect(abs(kR - (1 - exp(-10.0 / 200))) <= 1.0 / 32768)
        let target = -18.0 / (10 * log10(2.0)) + 30, floor = -60.0 / (10 * log10(2.0)) + 30
        let maxG = 24 / (20 * log10(2.0)), minG = -12 / (20 * log10(2.0))
        var g = 0.0, lin = 1.0
        var ref: [Int16] = []
        for f in 0..<300 {
            let x = input[(f * 480)..<((f + 1) * 480)]
            let e = x.reduce(0.0) { $0 + Double($1) * Double($1) }
            if e > 0 {
                let level = log2(e / 480)
                if level >= floor {
                    let wanted = min(max((target - level) / 2, minG), maxG)
                    g += (wanted - g) * (wanted < g ? kA : kR)
                }
            }
            let newLin = pow(2, g)
            for (i, s) in x.enumerated() {
                let gi = lin + (newLin - lin) * Double(i + 1) / 480
                ref.append(Int16(max(-32768, min(32767, (Double(s) * gi).rounded()))))
            }
            lin = newLin
        }
        #expect(maxAbsDiff(out, ref) <= 2)

        // Convergence: the log-domain error shrinks by (1 − k) per frame, so 12 dB comes
        // within 0.5 dB after ln(0.5/12)/ln(1−k) frames and within 0.1 dB after ln(0.1/12)/ln(1−k).
        let n05 = Int((log(0.5 / 12) / log(1 - kR)).rounded(.up))
        let n01 = Int((log(0.1 / 12) / log(1 - kR)).rounded(.up))
        let level05 = rmsDB(out[((n05 + 1) * 480)..<((n05 + 2) * 480)])
        let level01 = rmsDB(out[((n01 + 1) * 480)..<((n01 + 2) * 480)])
        #expect(abs(level05 + 18) <= 0.5, "after \(n05) frames: \(level05) dBFS")
        #expect(abs(level01 + 18) <= 0.1, "after \(n01) frames: \(level01) dBFS")
        #expect(n01 < 200)
    }

    @Test func agcHoldsGainBelowNoiseFloorAndCapsBoost() throws {
        let agc = try AutomaticGainControl(targetDBFS: -18, maxGainDB: 10, noiseFloorDBFS: -70)
        // −50 dBFS: wants +32 dB, capped at +10 dB.
        let amp = 32768 * pow(10, -50.0 / 20) * 2.0.squareRoot()
        let input = quantise(sine(1000, amplitude: amp, rate: 48000, count: 480 * 600))
        let (out, _) = run(agc, input)
        #expect(abs(rmsDB(out.suffix(480)) - (-40)) <= 0.1)
        // A quieter-than-floor stretch leaves the gain where it was.
        let agc2 = try AutomaticGainControl(targetDBFS: -18, noiseFloorDBFS: -60)
        let (out2, _) = run(agc2, noise(480 * 50, amplitude: 20, seed: 5)) // ≈ −67 dBFS
        #expect(agc2.currentGainDB == 0)
        #expect(out2 == noise(480 * 50, amplitude: 20, seed: 5))
    }

    @Test func noiseGateOpensHoldsAndReleases() throws {
        let gate = try NoiseGate(thresholdDBFS: -40, holdMilliseconds: 50, releaseMilliseconds: 30)
        let loud = quantise(sine(500, amplitude: 3000, rate: 48000, count: 480 * 20))  // ≈ −24 dBFS
        let quiet = noise(480 * 60, amplitude: 300, seed: 9)                           // ≈ −45 dBFS
        let input = loud + quiet + loud
        let (out, verdicts) = run(gate, input)
        // Open: the loud part passes unchanged; hold: 5 quiet frames pass unchanged.
        #expect(Array(out[0..<(480 * 25)]) == Array(input[0..<(480 * 25)]))
        // Release: per frame the gain is multiplied by e^(−10/30); the frame's end gain
        // after r release frames is keep^r (ramped within the frame) — within 2 LSB.
        let keep = gate.releaseFactor
        #expect(abs(keep - exp(-10.0 / 30)) <= 1.0 / 32768)
        var g = 1.0
        var ref: [Int16] = []
        for f in 25..<80 {
            let g1raw = g * keep
            let g1 = g1raw * 32768 < 4 ? 0 : g1raw
            for i in 0..<480 {
                let gi = g + (g1 - g) * Double(i + 1) / 480
                ref.append(Int16((Double(input[f * 480 + i]) * gi).rounded()))
            }
            g = g1
        }
        #expect(maxAbsDiff(Array(out[(480 * 25)..<(480 * 80)]), ref) <= 2)
        // Closed by the end of the quiet part: silence verdicts, zero samples.
        #expect(verdicts[75] == .silence)
        #expect(out[(480 * 75)..<(480 * 80)].allSatisfy { $0 == 0 })
        // Reopens within one frame: the first loud frame ramps up, the second is exact.
        #expect(verdicts[80] == .pass)
        #expect(Array(out[(480 * 81)..<(480 * 82)]) == Array(input[(480 * 81)..<(480 * 82)]))
    }

    @Test func limiterKeepsPeaksUnderCeiling() throws {
        let lim = try Limiter(ceilingDBFS: -6, releaseMilliseconds: 50)
        let ceiling = Int(lim.ceiling)
        #expect(ceiling == Int((32768 * pow(10, -6.0 / 20)).rounded(.down)))
        let quietPart = quantise(sine(300, amplitude: 8000, rate: 48000, count: 480 * 10))
        let loudPart = quantise(sine(300, amplitude: 32767, rate: 48000, count: 480 * 10))
        let input = quietPart + loudPart + quietPart + quietPart
        let (out, _) = run(lim, input)
        #expect(out.allSatisfy { abs(Int($0)) <= ceiling })
        // Below the ceiling nothing changes.
        #expect(Array(out[0..<4800]) == Array(quietPart))
        // In the loud part the peak reaches the ceiling (gain = ceiling/peak exactly).
        #expect(out[(4800 + 480)..<9600].map { abs(Int($0)) }.max()! >= ceiling - 2)
        // Double reference of the same rule (instant attack, ramped release): ≤ 2 LSB.
        let r = lim.releaseCoefficient
        var g = 1.0
        var ref: [Int16] = []
        for f in 0..<40 {
            let x = input[(f * 480)..<((f + 1) * 480)]
            let peak = Double(x.map { abs(Int($0)) }.max()!)
            let need = peak > Double(ceiling) ? Double(ceiling) / peak : 1
            let g1 = min(need, g + (1 - g) * r)
            for (i, s) in x.enumerated() {
                let gi = g1 < g ? g1 : g + (g1 - g) * Double(i + 1) / 480
                ref.append(Int16((Double(s) * gi).rounded()))
            }
            g = g1
        }
        #expect(maxAbsDiff(out, ref) <= 2)
    }

    /// After one loud frame the gain must come back to exactly unity (Limiter's doc: within
    /// ln(2^15)·τ plus two frames), and then frames pass bit-exact. The quiet part peaks at
    /// 20000, above 16384, so a gain one Q15 unit short of unity (32767) changes samples:
    /// exact frames prove the gain is 32768. Rounding the recovery step to nearest left the
    /// gain at 32766 or 32767 for ever (a step of (32768 − g)·k/32768 < ½ rounds to zero).
    @Test(arguments: [50.0, 20, 500])
    func limiterRecoversToExactlyUnity(releaseMilliseconds: Double) throws {
        let lim = try Limiter(ceilingDBFS: -1, releaseMilliseconds: releaseMilliseconds)
        let loud = (0..<480).map { $0 % 2 == 0 ? Int16(32767) : Int16.min }
        let bound = Int((log(32768) * releaseMilliseconds / 10).rounded(.up)) + 2
        let quietFrames = bound + 20
        let quiet = quantise(sine(300, amplitude: 20000, rate: 48000, count: 480 * quietFrames))
        let (out, _) = run(lim, loud + quiet)
        let exact = (0..<quietFrames).map { f in
            Array(out[(480 * (f + 1))..<(480 * (f + 2))]) == Array(quiet[(480 * f)..<(480 * (f + 1))])
        }
        let first = exact.firstIndex(of: true)
        #expect(first != nil && first! <= bound, "first exact frame \(String(describing: first)), bound \(bound)")
        if let first { #expect(exact[first...].allSatisfy { $0 }) }
    }

    @Test func limiterLookaheadDelaysOneFrameAndNeverClips() throws {
        let lim = try Limiter(ceilingDBFS: -3, releaseMilliseconds: 20, lookahead: true)
        let ceiling = Int(lim.ceiling)
        var input = quantise(sine(200, amplitude: 5000, rate: 48000, count: 480 * 30))
        // A full-scale click in the middle of frame 12.
        for i in (480 * 12 + 200)..<(480 * 12 + 260) { input[i] = i % 2 == 0 ? 32767 : -32768 }
        let (out, _) = run(lim, input)
        #expect(out.allSatisfy { abs(Int($0)) <= ceiling })
        // Quiet frames before the click come out one frame late and unchanged.
        #expect(Array(out[480..<(480 * 11)]) == Array(input[0..<(480 * 10)]))
        #expect(out[0..<480].allSatisfy { $0 == 0 })
    }

    @Test func meterReadsSineLevels() throws {
        let meter = LevelMeter()
        // 1 kHz at 48 kHz: 480 samples are exactly 10 periods.
        _ = run(meter, quantise(sine(1000, amplitude: 32767, rate: 48000, count: 480, phase: 0.3)))
        let expectRMS = 20 * log10(32767.0 / 32768 / 2.0.squareRoot()) // −3.0105
        #expect(abs(meter.rmsDBFS - expectRMS) <= 0.01)
        #expect(abs(meter.rmsDBFS - (-3.01)) <= 0.01)
        #expect(abs(meter.peakDBFS - 20 * log10(32767.0 / 32768)) <= 0.01)
        _ = run(meter, quantise(sine(1000, amplitude: 32768 * pow(10, -20.0 / 20), rate: 48000, count: 480, phase: 0.3)))
        #expect(abs(meter.rmsDBFS - (-23.0103)) <= 0.01)
        _ = run(meter, [Int16](repeating: 0, count: 480))
        #expect(meter.rmsDBFS == -.infinity)
        #expect(meter.frameCount == 3)
    }

    @Test func muteGateSilencesButFramesContinue() throws {
        let chain = HookChain()
        let mute = MuteGate()
        let recorder = Recorder(id: 1)
        try chain.add(mute)
        try chain.add(recorder)
        var verdicts: [HookVerdict] = []
        var outputs: [[Int16]] = []
        chain.start(.standard)
        for seq in 0..<6 {
            if seq == 2 { mute.setMuted(true) }
            if seq == 4 { mute.setMuted(false) }
            var f = [Int16](repeating: 1000, count: 480)
            verdicts.append(f.withUnsafeMutableBufferPointer { chain.process($0, frameInfo(seq: UInt64(seq))) })
            outputs.append(f)
        }
        chain.stop()
        #expect(verdicts == [.pass, .pass, .pass, .silence, .pass, .pass])
        #expect(outputs[2].first! > 990 && outputs[2].last! == 0) // fade out
        #expect(outputs[3].allSatisfy { $0 == 0 })
        #expect(outputs[4].first! < 10 && outputs[4].last! == 1000) // fade in
        #expect(outputs[5].allSatisfy { $0 == 1000 })
        // Every frame, muted or not, reached the hooks after the gate, in sequence.
        #expect(recorder.sequences == [0, 1, 2, 3, 4, 5])
    }
}
