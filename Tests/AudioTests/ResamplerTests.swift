import Foundation
import Testing
import Wire
@testable import Audio

/// Runs `input` through `r` in 10 ms chunks; returns the output and per-call counts.
func resample(_ r: Resampler, _ input: [Int16]) throws -> ([Int16], [Int]) {
    let chunk = r.inputRate / 100 * r.channels
    var out: [Int16] = []
    var counts: [Int] = []
    var buffer = [Int16](repeating: 0, count: r.maxOutputSamples(forInputFrames: chunk / r.channels))
    var i = 0
    while i + chunk <= input.count {
        let n = try input[i..<(i + chunk)].withUnsafeBufferPointer { src throws(AudioError) in
            try buffer.withMutableBuffer { dst throws(AudioError) in try r.process(src, into: dst) }
        }
        out.append(contentsOf: buffer[0..<n])
        counts.append(n)
        i += chunk
    }
    return (out, counts)
}

@Suite struct ResamplerTests {
    static let pairs: [(Int, SampleRate)] = [
        (16000, .hz48000), (16000, .hz24000), (44100, .hz48000), (44100, .hz16000), (44100, .hz24000),
        (48000, .hz16000), (48000, .hz24000), (24000, .hz48000), (48000, .hz48000),
    ]

    /// Tones at 0.05, 0.2 and 0.4 of the lower rate: each comes out at the same frequency
    /// (±0.01 %), with passband gain within 0.05 dB and an SNR against the best-fit ideal
    /// sine above 70 dB (images, aliases, ripple and 16-bit rounding all count as noise).
    @Test(arguments: pairs)
    func tonesKeepFrequencyAndPurity(input: Int, output: SampleRate) throws {
        let r = try Resampler(inputRate: input, outputRate: output)
        let fmin = Double(min(input, output.hertz))
        var worst = 200.0
        for fraction in [0.05, 0.2, 0.4] {
            let f = (fmin * fraction).rounded()
            let x = quantise(sine(f, amplitude: 16000, rate: Double(input), count: input / 100 * 40))
            r.reset()
            let (y, counts) = try resample(r, x)
            #expect(counts.allSatisfy { $0 == output.hertz / 100 }, "10 ms in → 10 ms out")
            let settled = y.dropFirst(output.hertz / 100 * 5).map(Double.init) // skip the filter's start
            let fit = fitTone(settled, frequency: f, rate: Double(output.hertz))
            let measured = measuredFrequency(settled, rate: Double(output.hertz))
            #expect(abs(measured / f - 1) < 1e-4, "\(input)→\(output.hertz) \(f) Hz measured \(measured)")
            #expect(abs(20 * log10(fit.amplitude / 16000)) < 0.05, "gain at \(f) Hz")
            worst = min(worst, fit.snrDB)
        }
        #expect(worst > 70, "\(input)→\(output.hertz): worst SNR \(worst) dB")
        print("resampler \(input)→\(output.hertz): worst in-band SNR \(String(format: "%.1f", worst)) dB, \(r.tapsPerPhase) taps/phase")
    }

    /// Decimating 48 → 16 kHz, a 12 kHz tone (above the new Nyquist) must not alias to
    /// 4 kHz: output below −70 dB relative to the input.
    @Test func aliasRejection() throws {
        for (input, output, tone) in [(48000, SampleRate.hz16000, 12000.0), (44100, .hz16000, 10000.0), (48000, .hz24000, 15000.0)] {
            let r = try Resampler(inputRate: input, outputRate: output)
            let x = quantise(sine(tone, amplitude: 16000, rate: Double(input), count: input / 100 * 30))
            let (y, _) = try resample(r, x)
            let tail = y.dropFirst(output.hertz / 100 * 5)
            let level = rmsDB(tail) - 20 * log10(16000 / 32768 / 2.0.squareRoot())
            #expect(level < -70, "\(input)→\(output.hertz) \(tone) Hz leaks \(level) dB")
        }
    }

    /// Interpolating 16 → 48 kHz, a 3 kHz tone's images at 13 and 19 kHz are below −70 dB.
    @Test func imageRejection() throws {
        let r = try Resampler(inputRate: 16000, outputRate: .hz48000)
        let x = quantise(sine(3000, amplitude: 16000, rate: 16000, count: 160 * 40))
        let (y, _) = try resample(r, x)
        let settled = y.dropFirst(480 * 5).map(Double.init)
        for image in [13000.0, 19000.0] {
            let a = fitTone(settled, frequency: image, rate: 48000).amplitude
            #expect(20 * log10(max(a, 1e-9) / 16000) < -70, "image at \(image) Hz")
        }
    }

    @Test func stereoChannelsStaySeparateAndErrorsAreTyped() throws {
        let r = try Resampler(inputRate: 44100, outputRate: .hz48000, channels: 2)
        let left = quantise(sine(1000, amplitude: 10000, rate: 44100, count: 441 * 20))
        let right = quantise(sine(2500, amplitude: 5000, rate: 44100, count: 441 * 20))
        var x: [Int16] = []
        for i in 0..<left.count { x.append(left[i]); x.append(right[i]) }
        let (y, counts) = try resample(r, x)
        #expect(counts.allSatisfy { $0 == 960 })
        let l = stride(from: 0, to: y.count, by: 2).dropFirst(2400).map { Double(y[$0]) }
        let rr = stride(from: 1, to: y.count, by: 2).dropFirst(2400).map { Double(y[$0]) }
        #expect(fitTone(l, frequency: 1000, rate: 48000).snrDB > 70)
        #expect(fitTone(rr, frequency: 2500, rate: 48000).snrDB > 70)
        #expect(throws: AudioError.unsupportedSampleRate(22050)) { try Resampler(inputRate: 22050) }
        var small = [Int16](repeating: 0, count: 10)
        let input = [Int16](repeating: 0, count: 882)
        #expect(throws: AudioError.self) {
            try input.withBuffer { src throws(AudioError) in try small.withMutableBuffer { dst throws(AudioError) in try r.process(src, into: dst) } }
        }
    }
}

@Suite struct ConvertTests {
    func convert(_ bytes: [UInt8], _ format: SampleFormat, channels: Int = 1, mix: ChannelMix = .all) throws -> [Int16] {
        let c = try InputConverter(format: format, channels: channels, mix: mix)
        var out = [Int16](repeating: 0, count: 64)
        let n = try bytes.withBytes { raw throws(AudioError) in try out.withMutableBuffer { dst throws(AudioError) in try c.convert(raw, into: dst) } }
        return Array(out[0..<n])
    }

    @Test func s16LE() throws {
        #expect(try convert([0x34, 0x12, 0xFF, 0xFF, 0x00, 0x80, 0xFF, 0x7F], .s16LE) == [0x1234, -1, -32768, 32767])
    }

    /// 24 → 16 bits rounds to nearest (half up) and saturates; S24_LE ignores the top byte.
    @Test func s24LEAndPacked() throws {
        let values: [(Int32, Int16)] = [
            (0x123456, 0x1234), (0x123480, 0x1235), (0x12347F, 0x1234), (-0x800000, -32768),
            (0x7FFFFF, 32767), (-1, 0), (-0x81, -1), (0x000080, 1),
        ]
        var in32: [UInt8] = [], in3: [UInt8] = []
        for (i, (v, _)) in values.enumerated() {
            let u = UInt32(bitPattern: v) & 0xFFFFFF
            let b = [UInt8(u & 0xFF), UInt8((u >> 8) & 0xFF), UInt8(u >> 16)]
            in32 += b + [i % 2 == 0 ? 0xAB : 0x00] // garbage in the pad byte must not matter
            in3 += b
        }
        #expect(try convert(in32, .s24LE) == values.map { $0.1 })
        #expect(try convert(in3, .s24_3LE) == values.map { $0.1 })
    }

    @Test func s32LE() throws {
        let values: [(Int32, Int16)] = [(0x7FFF_FFFF, 32767), (Int32.min, -32768), (0x18000, 2), (0x17FFF, 1), (-0x10000, -1)]
        var bytes: [UInt8] = []
        for (v, _) in values { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } }
        #expect(try convert(bytes, .s32LE) == values.map { $0.1 })
    }

    @Test func channelSelectAndAverage() throws {
        // Stereo S16: (100, 201), (−100, −201), (32767, 32767), (−32768, 32767)
        let frames: [(Int16, Int16)] = [(100, 201), (-100, -201), (32767, 32767), (-32768, 32767)]
        var bytes: [UInt8] = []
        for (l, r) in frames { for v in [l, r] { withUnsafeBytes(of: v.littleEndian) { bytes += $0 } } }
        #expect(try convert(bytes, .s16LE, channels: 2, mix: .select(1)) == [201, -201, 32767, 32767])
        #expect(try convert(bytes, .s16LE, channels: 2, mix: .select(0)) == [100, -100, 32767, -32768])
        // Mean at full precision, rounded half up: 150.5 → 151, −150.5 → −150, −0.5 → 0.
        #expect(try convert(bytes, .s16LE, channels: 2, mix: .average) == [151, -150, 32767, 0])
        #expect(try convert(bytes, .s16LE, channels: 2) == frames.flatMap { [$0.0, $0.1] })
        // 3-channel S32 average against a Double reference (±1 LSB from truncation of the mean).
        var rng = SeededRandom(seed: 4)
        var b32: [UInt8] = []
        var ref: [Int16] = []
        for _ in 0..<20 {
            var sum = 0.0
            for _ in 0..<3 {
                let v = Int32.random(in: Int32.min...Int32.max, using: &rng)
                sum += Double(v)
                withUnsafeBytes(of: v.littleEndian) { b32 += $0 }
            }
            ref.append(Int16(max(-32768, min(32767, (sum / 3 / 65536).rounded()))))
        }
        #expect(maxAbsDiff(try convert(b32, .s32LE, channels: 3, mix: .average), ref) <= 1)
    }

    @Test func malformedInputIsATypedError() throws {
        #expect(throws: AudioError.partialFrame(bytes: 5, bytesPerFrame: 4)) { try convert([1, 2, 3, 4, 5], .s16LE, channels: 2) }
        #expect(throws: AudioError.partialFrame(bytes: 4, bytesPerFrame: 3)) { try convert([1, 2, 3, 4], .s24_3LE) }
        #expect(throws: AudioError.channelOutOfRange(channel: 2, channels: 2)) { try InputConverter(format: .s16LE, channels: 2, mix: .select(2)) }
        #expect(throws: AudioError.unsupportedChannelCount(0)) { try InputConverter(format: .s16LE, channels: 0) }
        let c = try InputConverter(format: .s16LE, channels: 1)
        var out = [Int16](repeating: 0, count: 1)
        #expect(throws: AudioError.bufferTooSmall(needed: 2, available: 1)) {
            try [UInt8](repeating: 0, count: 4).withBytes { raw throws(AudioError) in try out.withMutableBuffer { dst throws(AudioError) in try c.convert(raw, into: dst) } }
        }
    }
}
