import Testing
import Foundation

/// `linnet audio --input MIC.wav --reference SPEAKER.wav --aec --output OUT.wav`: the whole
/// offline path (conversion of both files, the canceller in the chain, Opus and back),
/// against signals and measures computed here.
@Suite struct EchoCommandTests {
    /// A far end heard through a 150 ms delay at −6 dB with two reflections; the near end
    /// joins at 12 s (the canceller has converged). Echo removed in far-end-only speech
    /// (8–12 s), near end kept in double talk (12–15 s), against the same path with no
    /// echo at all (the near end alone, a silent speaker: the goal's measure) and against
    /// no echo and no canceller (the Opus round trip alone) (aligned SNR).
    @Test(arguments: [48_000, 16_000])
    func cancelsOffline(rate: Int) throws {
        let mic = temporary("aec-mic-\(rate).wav"), speaker = temporary("aec-spk-\(rate).wav")
        let clean = temporary("aec-clean-\(rate).wav")
        let out = temporary("aec-out-\(rate).wav"), outClean = temporary("aec-out-clean-\(rate).wav")
        let silent = temporary("aec-silent-\(rate).wav"), outQuiet = temporary("aec-out-quiet-\(rate).wav")
        defer { for p in [mic, speaker, clean, out, outClean, silent, outQuiet] { unlink(p) } }
        let far = Signal.speechLike(seconds: 15, rate: rate, seed: 5)
        let nearStart = 12 * rate
        let near = [Int16](repeating: 0, count: nearStart) + Signal.speechLike(seconds: 3, rate: rate, seed: 11)
        let d = rate * 150 / 1000
        var echoed = [Int32](repeating: 0, count: far.count)
        var dry = [Int32](repeating: 0, count: far.count)
        for i in 0..<far.count {
            var e = 0.0
            for (lag, g) in [(d, 0.45), (d + rate / 200, -0.2), (d + rate * 13 / 1000, 0.1)] where i >= lag { e += g * Double(far[i - lag]) }
            let n = Double(near[i]) * 0.7
            echoed[i] = Int32(max(-32768, min(32767, (e + n).rounded())))
            dry[i] = Int32(n.rounded())
        }
        try WAVFile.write(mic, rate: rate, channels: 1, bits: 16, samples: echoed)
        try WAVFile.write(clean, rate: rate, channels: 1, bits: 16, samples: dry)
        try WAVFile.write(speaker, rate: rate, channels: 1, bits: 16, samples: far.map(Int32.init))
        try WAVFile.write(silent, rate: rate, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: far.count))
        let common = ["--rate", String(rate), "--no-limiter", "--bitrate", "64000"]
        let r = try Linnet.run(["audio", "--input", mic, "--output", out, "--reference", speaker, "--aec"] + common)
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("echo delay"), "\(r.out)")
        // The baseline: no echo and no canceller, the Opus round trip alone.
        let r2 = try Linnet.run(["audio", "--input", clean, "--output", outClean] + common)
        #expect(r2.status == 0, "\(r2.err)")
        // The goal's measure "with no echo at all": the same path (canceller, Opus) with
        // the near end alone and a silent speaker.
        let r3 = try Linnet.run(["audio", "--input", clean, "--output", outQuiet, "--reference", silent, "--aec"] + common)
        #expect(r3.status == 0, "\(r3.err)")
        let y = try WAVFile.read16(out).samples, y0 = try WAVFile.read16(outClean).samples
        let y1 = try WAVFile.read16(outQuiet).samples
        let m = echoed.map { Int16($0) }
        let reduction = 20 * log10(Signal.rms(m[(8 * rate)..<nearStart]) / Signal.rms(y[(8 * rate)..<nearStart]))
        let nearScaled = near.map { Int16((Double($0) * 0.7).rounded()) }
        // Each output against the near end at its own delay (Opus' lookahead; the
        // residual echo suppressor adds a frame).
        let lag0 = Signal.bestLag(nearScaled, y0, range: 0..<(rate / 25), from: nearStart, length: 2 * rate)
        let lag = Signal.bestLag(nearScaled, y, range: 0..<(rate / 25), from: nearStart, length: 2 * rate)
        let snr = Signal.alignedSNR(nearScaled, y, lag: lag, from: nearStart, length: 2 * rate + rate / 4)
        let snr0 = Signal.alignedSNR(nearScaled, y0, lag: lag0, from: nearStart, length: 2 * rate + rate / 4)
        let lag1 = Signal.bestLag(nearScaled, y1, range: 0..<(rate / 25), from: nearStart, length: 2 * rate)
        let snr1 = Signal.alignedSNR(nearScaled, y1, lag: lag1, from: nearStart, length: 2 * rate + rate / 4)
        print("linnet audio --aec \(rate / 1000) kHz: echo reduced \(String(format: "%.1f", reduction)) dB in far-end-only speech (8–12 s); double-talk aligned SNR \(String(format: "%.1f", snr)) dB, no echo \(String(format: "%.1f", snr1)) dB, no echo and no canceller \(String(format: "%.1f", snr0)) dB (delays \(lag) / \(lag0) samples); \(r.out.split(separator: ";").last ?? "")")
        // Measured (16 / 48 kHz): echo reduced 20.4 / 19.7 dB; SNR 9.3 / 9.9 dB against
        // 11.7 / 12.3 dB with no echo (2.4 dB lost: the goal is at most 3) and 15.6 /
        // 14.7 dB for Opus alone (the difference is speexdsp's DC notch, which turns the
        // phase of the lowest partials, and at 48 kHz the 7.2 kHz band limit). With the
        // near end joining at 6 s (the canceller still converging) the loss was 3.0–3.3 dB.
        // The path is deterministic (the same files give the same output).
        #expect(reduction >= 17)
        #expect(snr >= 7)
        #expect(snr1 - snr <= 3)
    }

    /// The canceller through the live audio threads, with ALSA's `file` plugin as both
    /// devices (slave `null`, paced by Linnet): the speaker plays far.wav (`--far-end`)
    /// into out.raw; the microphone reads in.raw, prepared as the far end heard through
    /// a 100 ms echo path at −6 dB with two reflections, a near end joining at 8 s, and
    /// low noise. The delay between what the playback thread plays and what the capture
    /// thread reads is Linnet's own (both threads' clocks, the reference's alignment by
    /// the devices' delays) plus the prepared 100 ms; the canceller must find it. What
    /// would be sent (`--sent`, after Opus and back) is measured against in.raw: the
    /// echo reduced in far-end-only speech, the near end kept in double talk. Without
    /// --aec (the contrast) the echo stays.
    ///
    /// The threads run in real time beside the rest of the suite on a loaded machine:
    /// the figures are taken over 500 ms windows and asked of most of them. Measured on
    /// an idle machine, six runs: echo delay found 64–73 ms; echo reduced 23.8–27.7 dB
    /// over 4–8 s (no window under 19.9 dB); double talk 9.9–12.9 dB against the
    /// microphone's 1.6–3.3 dB; no timeline jump, no placement move. With six busy
    /// processes beside it: 14.2–24.1 dB, one run short. Without --aec 0.4 dB.
    ///
    /// Before the paced devices took the pacer's deadline as their clock (they have none
    /// of their own), the threads' timelines jumped 0–55 times a run on an idle machine,
    /// each jump moved the reference, and 2 of 8 runs failed (windows down to 1.4 dB,
    /// double talk kept in 1 or 2 windows of 6): the echo "came back" of earlier notes.
    @Test(arguments: [true, false])
    func cancelsThroughALSAFilePlugins(aec: Bool) throws {
        let rate = 48_000
        let home = temporary("aec-alsa-\(aec)")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let far = Signal.speechLike(seconds: 12, rate: rate, seed: 5)
        let nearStart = 8 * rate
        let total = far.count + rate / 2
        let nearVoice = Signal.speechLike(seconds: 4.5, rate: rate, seed: 11)
        let near = [Int16](repeating: 0, count: nearStart) + nearVoice.map { Int16((Double($0) * 0.7).rounded()) }
        let d = rate * 100 / 1000
        // Low noise (about −60 dBFS), seeded: the sum of four uniforms.
        var state: UInt64 = 7
        func uniform() -> Double {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Double(state >> 11) / Double(1 << 53) - 0.5
        }
        var mic = [Int16](repeating: 0, count: total)
        for i in 0..<total {
            var e = 0.0
            for (lag, g) in [(d, 0.5), (d + rate / 200, -0.2), (d + rate * 13 / 1000, 0.1)] where i >= lag && i - lag < far.count {
                e += g * Double(far[i - lag])
            }
            let n = i < near.count ? Double(near[i]) : 0
            let noise = 35 * (uniform() + uniform() + uniform() + uniform())
            mic[i] = Int16(max(-32768, min(32767, (e + n + noise).rounded())))
        }
        let farPath = home + "/far.wav", sentPath = home + "/sent.wav"
        try WAVFile.write(farPath, rate: rate, channels: 1, bits: 16, samples: far.map(Int32.init))
        try mic.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: home + "/in.raw")) }
        try """
            pcm.linnet_in { type file slave.pcm "null" file "/dev/null" infile "\(home)/in.raw" format "raw" }
            pcm.linnet_out { type file slave.pcm "null" file "\(home)/out.raw" format "raw" }
            """.write(toFile: home + "/.asoundrc", atomically: true, encoding: .utf8)
        let args = ["audio", "--capture", "linnet_in", "--playback", "linnet_out", "--pace", "--far-end", farPath, "--sent", sentPath,
                    "--seconds", "12", "--no-high-pass", "--no-limiter", "--bitrate", "64000"] + (aec ? ["--aec"] : ["--no-aec"])
        // The echo in in.raw was prepared for a speaker that plays on time: a run whose
        // playback underran or was late (a starved loop on a loaded machine: the summary
        // counts underruns, and out.raw shows the far end shifted) no longer matches it,
        // as no room would. Such a run is said and made again, up to three times; the
        // canceller is judged on a run that played on time.
        var attempt = 0
        while true {
            attempt += 1
            let r = try Linnet.run(args, environment: ["HOME": home])
            #expect(r.status == 0, "\(r.err)")
            #expect(r.out.contains("far end: "), "\(r.out)")

            // The speaker played the far end: out.raw is far.wav, window by window (a
            // starved loop may have let the ring underrun, which shifts what follows).
            let raw = try Data(contentsOf: URL(fileURLWithPath: home + "/out.raw"))
            let played = stride(from: 0, to: raw.count - 1, by: 2).map { Int16(bitPattern: UInt16(raw[$0]) | UInt16(raw[$0 + 1]) << 8) }
            #expect(played.count >= 10 * rate, "\(played.count) samples played")
            var exact = 0, playedWindows = 0
            var start = rate / 2
            var playedLag = Signal.bestLag(far, played, range: 0..<4_800, from: start, length: rate / 5)
            while start + rate / 5 + playedLag + 4_800 <= played.count && start + rate / 5 <= far.count {
                var snr = Signal.alignedSNR(far, played, lag: playedLag, from: start, length: rate / 5)
                if snr <= 40 {
                    playedLag = Signal.bestLag(far, played, range: playedLag..<(playedLag + 4_800), from: start, length: rate / 5)
                    snr = Signal.alignedSNR(far, played, lag: playedLag, from: start, length: rate / 5)
                }
                if snr > 40 { exact += 1 }
                playedWindows += 1
                start += rate / 5
            }
            var underruns = 0
            if let m = r.out.range(of: #"[0-9]+ underruns"#, options: .regularExpression) {
                underruns = Int(r.out[m].split(separator: " ")[0]) ?? 0
            }
            if underruns > 0 || exact < playedWindows {
                print("linnet audio --far-end\(aec ? " --aec" : ""): run \(attempt) disturbed (\(underruns) underruns, \(exact) of \(playedWindows) windows played exactly)")
                if attempt < 3 { continue }
                // Under a sanitizer every thread runs several times slower: said, not judged.
                if ProcessInfo.processInfo.environment["SANITIZER_UNDER_TEST"] != nil { return }
                Issue.record("three runs in a row did not play on time: the threads were starved")
                return
            }
            #expect(playedWindows >= 40 && exact * 10 >= playedWindows * 8, "\(exact) of \(playedWindows) windows of out.raw are far.wav")

            // What would be sent, against the microphone: aligned on the near end (Opus'
            // lookahead, the canceller's resampling and its suppressor's frame).
            let sent = try WAVFile.read16(sentPath).samples
            #expect(sent.count >= 11 * rate, "\(sent.count) samples sent")
            guard sent.count >= 11 * rate + 4_800 else { return }
            let lag = Signal.bestLag(near, sent, range: 0..<4_800, from: nearStart, length: 2 * rate)
            // Echo reduction (ERLE) in far-end-only speech after the canceller's first 4 s.
            let window = rate / 2
            var reductions: [Double] = []
            for a in stride(from: 4 * rate, to: nearStart, by: window) {
                reductions.append(20 * log10(Signal.rms(mic[a..<(a + window)]) / max(Signal.rms(sent[(a + lag)..<(a + lag + window)]), 1)))
            }
            let overall = 20 * log10(Signal.rms(mic[(4 * rate)..<nearStart]) / max(Signal.rms(sent[(4 * rate + lag)..<(nearStart + lag)]), 1))
            // The near end in double talk (8–11 s), 500 ms windows: at the delay found
            // over 2 s, or at one of their own (a frame the loop dropped shifts the rest).
            var kept: [(sent: Double, mic: Double)] = []
            for a in stride(from: nearStart, to: 11 * rate, by: window) {
                let local = Signal.bestLag(near, sent, range: max(0, lag - 480)..<(lag + 480), from: a, length: window)
                let snr = max(Signal.alignedSNR(near, sent, lag: lag, from: a, length: window), Signal.alignedSNR(near, sent, lag: local, from: a, length: window))
                kept.append((snr, Signal.alignedSNR(near, mic, lag: 0, from: a, length: window)))
            }
            func f(_ x: Double) -> String { String(format: "%.1f", x) }
            print("linnet audio --far-end\(aec ? " --aec" : "") through ALSA file plugins: echo reduced \(f(overall)) dB over 4–8 s, "
                  + "windows \(reductions.map(f).joined(separator: " ")); double talk aligned SNR sent \(kept.map { f($0.sent) }.joined(separator: " ")) "
                  + "against the microphone's \(kept.map { f($0.mic) }.joined(separator: " ")) dB (sent delay \(lag) samples); \(exact) of \(playedWindows) windows played exactly; \(r.out.trimmingCharacters(in: .whitespacesAndNewlines))")
            if aec {
                #expect(r.out.contains("aec: echo delay "), "\(r.out)")
                // Measured on a loaded 2-core machine: the median window 17–22 dB; a run
                // whose delay search moved a few times (load average 11) started at 4 and
                // 9 dB, then 16–26. The median and a majority, not the mean, carry that.
                // The live threads' timing moves what the canceller sees from run to run
                // (the delay found here 64–81 ms, one or two restarts), and on a starved
                // machine a run can start late (a pacer 200 ms behind starts over, and its
                // timeline jumps). Such a run is said and made again once; a canceller
                // that does not cancel fails both.
                let sorted = reductions.sorted()
                let cancels = (sorted[3] + sorted[4]) / 2 >= 15 && reductions.filter { $0 >= 10 }.count >= 6
                if !cancels && attempt < 2 {
                    print("linnet audio --far-end --aec: run \(attempt) fell short (windows \(reductions.map(f).joined(separator: " ")) dB); made again")
                    continue
                }
                #expect((sorted[3] + sorted[4]) / 2 >= 15, "echo reduced \(reductions) dB")
                #expect(reductions.filter { $0 >= 10 }.count >= 6, "echo reduced \(reductions) dB")
                #expect(kept.filter { $0.sent >= $0.mic + 4 }.count >= 4, "\(kept)")
            } else {
                #expect(overall < 3 && reductions.allSatisfy { $0 < 3 }, "echo reduced \(reductions) dB without the canceller")
            }
            return
        }
    }

    /// --far-end and --sent where they cannot apply: usage errors (64) naming what to
    /// do; a FIFO or a directory as the far end, as for --input: 65 at once, never a
    /// wait; --sent that cannot be created, as for --output: 78.
    @Test func refusesFarEndAndSentWhereTheyDoNotApply() throws {
        let far = temporary("far-usage.wav"), out = temporary("far-usage-out.wav"), dir = temporary("far-usage-dir")
        try WAVFile.write(far, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let fifo = makeFIFO("far-usage.fifo")
        defer { unlink(far); unlink(out); unlink(fifo); rmdir(dir) }
        // Devices that do not exist: every refusal must come before they are opened.
        let live = ["audio", "--capture", "hw:CARD=NoSuchCard", "--playback", "hw:CARD=NoSuchCard", "--seconds", "1"]
        let cases: [([String], Int32, String)] = [
            (["audio", "--input", far, "--output", out, "--far-end", far], 64, "--far-end is what a speaker plays live; offline, give the speaker's file as --reference"),
            (["audio", "--capture", "hw:CARD=NoSuchCard", "--output", out, "--far-end", far], 64, "--far-end is what the speaker plays: give a playback device"),
            (live + ["--playback", "none", "--far-end", far], 64, "give a playback device (--playback PCM), not --output or playback none"),
            (["audio", "--input", far, "--output", out, "--sent", temporary("far-usage-sent.wav")], 64, "--sent records live runs"),
            (live + ["--far-end", far, "--sent", far], 64, "--sent and --far-end name the same file"),
            (live + ["--far-end", fifo], 65, "--far-end: '\(fifo)': a FIFO (named pipe), not a regular file"),
            (live + ["--far-end", dir], 65, "--far-end: '\(dir)': a directory, not a regular file"),
            (live + ["--far-end", "/nonexistent/far.wav"], 65, "'/nonexistent/far.wav': No such file or directory"),
            (live + ["--sent", dir], 78, "--sent '\(dir)': Is a directory"),
        ]
        for (args, status, message) in cases {
            let r = try runBounded(args, limit: 20, name: "far-usage")
            #expect(r.status == status, "\(args): exit \(r.status) (-1: hung), \(r.err)")
            #expect(r.err.contains(message), "\(args): \(r.err)")
        }
        // The far end is still intact after the refusal to record over it.
        #expect(try WAVFile.read16(far).samples.count == 4_800)
    }

    @Test func refusesReferenceWithoutAEC() throws {
        // `aec = auto` turns the canceller on for a reference; turned off, the reference
        // has nothing to serve.
        let r = try Linnet.run(["audio", "--input", "/dev/null", "--output", temporary("x.wav"), "--reference", "/dev/null", "--no-aec"])
        #expect(r.status == 64, "\(r.err)")
        #expect(r.err.contains("--aec"), "\(r.err)")
        let r2 = try Linnet.run(["audio", "--input", "/dev/null", "--output", temporary("x.wav"), "--aec"])
        #expect(r2.status == 64, "\(r2.err)")
        #expect(r2.err.contains("--reference"), "\(r2.err)")
        let r3 = try Linnet.run(["audio", "--input", "/nonexistent/mic.wav", "--output", temporary("x.wav"), "--aec", "--reference", "/nonexistent/spk.wav"])
        #expect(r3.status != 0 && r3.err.contains("reference"), "\(r3.err)")
    }
}
