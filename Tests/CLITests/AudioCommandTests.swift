import Testing
import Foundation

/// Test signals and analysis computed here, independently of Linnet's code.
enum Signal {
    /// Speech-like: twelve partials between 200 and 3400 Hz under a syllable envelope
    /// (120–250 ms bursts with 30–100 ms gaps), seeded.
    static func speechLike(seconds: Double, rate: Int, seed: UInt64 = 5) -> [Int16] {
        var state = seed &* 6364136223846793005 &+ 1442695040888963407
        func uniform(_ a: Double, _ b: Double) -> Double {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return a + (b - a) * Double(state >> 11) / Double(1 << 53)
        }
        let partials = (0..<12).map { _ in (uniform(200, 3400), uniform(0, 2 * .pi), uniform(0.3, 1.0)) }
        let count = Int(seconds * Double(rate))
        var envelope: [Double] = []
        while envelope.count < count {
            let on = Int(Double(rate) * uniform(0.12, 0.25)), off = Int(Double(rate) * uniform(0.03, 0.1))
            envelope += (0..<on).map { sin(Double.pi * Double($0) / Double(on)) }
            envelope += [Double](repeating: 0, count: off)
        }
        return (0..<count).map { i in
            let s = partials.reduce(0.0) { $0 + $1.2 * sin(2 * .pi * $1.0 * Double(i) / Double(rate) + $1.1) }
            return Int16(2500 * s * envelope[i])
        }
    }

    static func tone(_ f: Double, amplitude: Double, seconds: Double, rate: Int) -> [Double] {
        (0..<Int(seconds * Double(rate))).map { amplitude * sin(2 * .pi * f * Double($0) / Double(rate)) }
    }

    /// The lag (in `y` relative to `x`) with the largest correlation, within `range`.
    static func bestLag(_ x: [Int16], _ y: [Int16], range: Range<Int>, from: Int, length: Int) -> Int {
        var best = range.lowerBound, bestValue = -Double.infinity
        for lag in range {
            var s = 0.0
            var i = from
            while i < from + length { s += Double(x[i]) * Double(y[i + lag]); i += 2 }
            if s > bestValue { bestValue = s; best = lag }
        }
        return best
    }

    /// SNR of `y` against `x` after the delay and with the least-squares gain.
    static func alignedSNR(_ x: [Int16], _ y: [Int16], lag: Int, from: Int, length: Int) -> Double {
        var xy = 0.0, xx = 0.0
        for i in from..<(from + length) { xy += Double(x[i]) * Double(y[i + lag]); xx += Double(x[i]) * Double(x[i]) }
        let g = xy / xx
        var err = 0.0, sig = 0.0
        for i in from..<(from + length) {
            let e = Double(y[i + lag]) - g * Double(x[i])
            err += e * e
            sig += g * g * Double(x[i]) * Double(x[i])
        }
        return 10 * log10(sig / err)
    }

    static func rms(_ x: ArraySlice<Int16>) -> Double {
        (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count)).squareRoot()
    }

    /// Goertzel power at `f`.
    static func power(_ x: ArraySlice<Int16>, _ f: Double, rate: Int) -> Double {
        let c = 2 * cos(2 * .pi * f / Double(rate))
        var s1 = 0.0, s2 = 0.0
        for v in x { let s = Double(v) + c * s1 - s2; s2 = s1; s1 = s }
        return s1 * s1 + s2 * s2 - c * s1 * s2
    }
}

/// WAV files written and read here with their own code (canonical 44-byte headers).
enum WAVFile {
    static func write(_ path: String, rate: Int, channels: Int, bits: Int, samples: [Int32], formatTag: UInt16 = 1) throws {
        var d = Data()
        func le<T: FixedWidthInteger>(_ v: T) { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
        let bytesPerSample = bits / 8
        let dataBytes = samples.count * bytesPerSample
        d.append(contentsOf: Array("RIFF".utf8)); le(UInt32(36 + dataBytes)); d.append(contentsOf: Array("WAVE".utf8))
        d.append(contentsOf: Array("fmt ".utf8)); le(UInt32(16)); le(formatTag); le(UInt16(channels)); le(UInt32(rate))
        le(UInt32(rate * channels * bytesPerSample)); le(UInt16(channels * bytesPerSample)); le(UInt16(bits))
        d.append(contentsOf: Array("data".utf8)); le(UInt32(dataBytes))
        for s in samples {
            switch bits {
            case 16: le(Int16(truncatingIfNeeded: s))
            case 24: d.append(contentsOf: [UInt8(truncatingIfNeeded: s), UInt8(truncatingIfNeeded: s >> 8), UInt8(truncatingIfNeeded: s >> 16)])
            default: le(s)
            }
        }
        try d.write(to: URL(fileURLWithPath: path))
    }

    /// 16-bit PCM samples and the rate of a canonical WAV file.
    static func read16(_ path: String) throws -> (rate: Int, samples: [Int16]) {
        let d = try Data(contentsOf: URL(fileURLWithPath: path))
        let rate = Int(d[24]) | Int(d[25]) << 8 | Int(d[26]) << 16
        let body = d[44...]
        let samples = stride(from: body.startIndex, to: body.endIndex - 1, by: 2).map { Int16(bitPattern: UInt16(d[$0]) | UInt16(d[$0 + 1]) << 8) }
        return (rate, samples)
    }
}

func temporary(_ name: String) -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("linnet-\(getpid())-\(name)").path
}

@Suite struct AudioCommandTests {
    /// A speech-like signal through hooks (transparent settings), Opus at 64 kbit/s and
    /// back: after aligning by cross-correlation, the output matches the input with an
    /// SNR above 10 dB (measured 14.8 dB here), and the delay is Opus' 6.5 ms lookahead.
    @Test func speechThroughThePipelineOffline() throws {
        let input = temporary("speech.wav"), output = temporary("speech-out.wav")
        defer { unlink(input); unlink(output) }
        let x = Signal.speechLike(seconds: 3, rate: 48_000)
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: x.map(Int32.init))
        let r = try Linnet.run(["audio", "--input", input, "--output", output, "--no-high-pass", "--no-limiter", "--bitrate", "64000"])
        #expect(r.status == 0, "\(r.err)")
        let (rate, y) = try WAVFile.read16(output)
        #expect(rate == 48_000 && y.count == x.count)
        let lag = Signal.bestLag(x, y, range: 0..<2000, from: 24_000, length: 72_000)
        #expect(abs(lag - 312) <= 24, "delay \(lag) samples")
        let snr = Signal.alignedSNR(x, y, lag: lag, from: 24_000, length: 96_000)
        #expect(snr > 10, "SNR \(snr) dB")
    }

    /// Device-style formats: the wanted channel of a 32-bit stereo 44.1 kHz file (an I2S
    /// MEMS microphone's shape), 24-bit packed stereo at 16 kHz averaged, 16-bit at 24 kHz
    /// with a 24 kHz pipeline. The tone comes out at its frequency and level.
    @Test(arguments: [
        (44_100, 32, 2, "0", 48_000, 1000.0),
        (16_000, 24, 2, nil, 48_000, 440.0),
        (24_000, 16, 1, nil, 24_000, 700.0),
    ] as [(Int, Int, Int, String?, Int, Double)])
    func formatsAndRates(rate: Int, bits: Int, channels: Int, channel: String?, pipeline: Int, frequency: Double) throws {
        let input = temporary("fmt-\(rate)-\(bits).wav"), output = temporary("fmt-\(rate)-\(bits)-out.wav")
        defer { unlink(input); unlink(output) }
        let full = Double(Int64(1) << (bits - 1))
        let tone = Signal.tone(frequency, amplitude: 0.25, seconds: 2, rate: rate)
        var samples: [Int32] = []
        for v in tone {
            let s = Int32(v * full)
            if channels == 2 { samples += channel == nil ? [s, s] : [s, 0] } else { samples.append(s) }
        }
        try WAVFile.write(input, rate: rate, channels: channels, bits: bits, samples: samples)
        var args = ["audio", "--input", input, "--output", output, "--rate", String(pipeline), "--bitrate", "48000"]
        if let channel { args += ["--channel", channel] }
        let r = try Linnet.run(args)
        #expect(r.status == 0, "\(r.err)")
        let (outRate, y) = try WAVFile.read16(output)
        #expect(outRate == pipeline)
        let steady = y[(pipeline / 2)..<(pipeline * 3 / 2)]
        let expected = 0.25 * 32_768 / 2.0.squareRoot()
        let level = 20 * log10(Signal.rms(steady) / expected)
        #expect(abs(level) < 1.0, "level \(level) dB")
        let atTone = Signal.power(steady, frequency, rate: pipeline)
        for other in [frequency * 0.7, frequency * 1.4] {
            #expect(10 * log10(atTone / Signal.power(steady, other, rate: pipeline)) > 30)
        }
    }

    /// Capture and playback through ALSA itself: the `file` plugin feeds the capture PCM
    /// from a raw file and writes the playback PCM to another (slave `null`, paced by
    /// Linnet since neither runs on a clock). What was played is what was captured,
    /// through hooks and Opus, with a measured delay.
    @Test func throughALSAFilePlugins() throws {
        let home = temporary("alsa-home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let x = Signal.speechLike(seconds: 10, rate: 48_000, seed: 9)
        try x.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: home + "/in.raw")) }
        try """
            pcm.linnet_in { type file slave.pcm "null" file "/dev/null" infile "\(home)/in.raw" format "raw" }
            pcm.linnet_out { type file slave.pcm "null" file "\(home)/out.raw" format "raw" }
            """.write(toFile: home + "/.asoundrc", atomically: true, encoding: .utf8)
        let r = try Linnet.run(["audio", "--capture", "linnet_in", "--playback", "linnet_out", "--seconds", "3", "--pace",
                                "--no-high-pass", "--no-limiter", "--bitrate", "64000"], environment: ["HOME": home])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("capture S16_LE 48000 Hz 1 ch"))
        let raw = try Data(contentsOf: URL(fileURLWithPath: home + "/out.raw"))
        let y = stride(from: 0, to: raw.count - 1, by: 2).map { Int16(bitPattern: UInt16(raw[$0]) | UInt16(raw[$0 + 1]) << 8) }
        #expect(y.count >= 48_000 * 2)
        // Delay: capture → 20 ms framing → codec lookahead → the playback ring's priming.
        // The threads run in real time beside the rest of the suite, so a starved loop
        // can make the playback ring underrun and shift the delay by a period or two:
        // align each 200 ms window on its own, then ask that most windows match.
        let lag = Signal.bestLag(x, y, range: 0..<9600, from: 12_000, length: 48_000)
        #expect(lag > 312 && lag < 9600, "delay \(lag) samples")
        var good = 0, windows = 0
        var start = 12_000
        while start + 9_600 + lag + 4_800 < y.count && start + 9_600 < x.count {
            let local = Signal.bestLag(x, y, range: max(0, lag - 2_400)..<(lag + 2_400), from: start, length: 9_600)
            if Signal.alignedSNR(x, y, lag: local, from: start, length: 9_600) > 10 { good += 1 }
            windows += 1
            start += 9_600
        }
        #expect(windows >= 8 && good * 10 >= windows * 7, "\(good) of \(windows) windows above 10 dB SNR")
    }

    @Test func badInputsAreClearErrors() throws {
        let float = temporary("float.wav"), truncated = temporary("trunc.wav"), out = temporary("bad-out.wav")
        defer { unlink(float); unlink(truncated); unlink(out) }
        try WAVFile.write(float, rate: 48_000, channels: 1, bits: 32, samples: [0, 0, 0], formatTag: 3)
        try Data(Array("RIFF\u{0}\u{0}\u{0}\u{0}WAVEfmt ".utf8)).write(to: URL(fileURLWithPath: truncated))
        let f = try Linnet.run(["audio", "--input", float, "--output", out])
        #expect(f.status == 65 && f.err.contains("unsupported WAV encoding (format tag 3, 32 bits)"))
        let t = try Linnet.run(["audio", "--input", truncated, "--output", out])
        #expect(t.status == 65 && t.err.contains("truncated"))
        let m = try Linnet.run(["audio", "--input", "/nonexistent.wav", "--output", out])
        #expect(m.status == 65 && m.err.contains("'/nonexistent.wav': No such file or directory"))
        let d = try Linnet.run(["audio", "--capture", "hw:CARD=NoSuchCard", "--output", out, "--seconds", "1"])
        #expect(d.status == 69 && d.err.contains("cannot open capture device 'hw:CARD=NoSuchCard'"))
        let g = try Linnet.run(["audio", "--input", float, "--output", out, "--gain-db", "60"])
        #expect(g.status == 64 && g.err.contains("--gain-db"))
        let u = try Linnet.run(["audio", "--input", float, "--output", out, "--frobnicate"])
        // One error style for every command (run's): the flag in quotes.
        #expect(u.status == 64 && u.err.contains("unknown option '--frobnicate'"))
    }
}
