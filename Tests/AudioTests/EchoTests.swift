import Testing
import Wire
@testable import Audio

/// Runs `mic` through an echo canceller fed with `reference`, 10 ms at a time, the way
/// the capture chain does; the residual echo suppressor behind it when `suppressDB` > 0.
func cancel(_ s: EchoScenario.Signals, mic: [Int16], rate: SampleRate, filterMilliseconds: Int = 250,
            suppressDB: Int = 0, noiseSuppressDB: Int = 0) throws -> [Int16] {
    let staged = StagedReference()
    let aec = try EchoCanceller(rate: rate, filterMilliseconds: filterMilliseconds, reference: staged)
    let chain = HookChain()
    try chain.add(aec)
    if suppressDB > 0 || noiseSuppressDB > 0 {
        try chain.add(try SpeexPreprocessor(rate: rate, noiseSuppressDB: noiseSuppressDB, echoSuppressDB: suppressDB, echo: aec))
    }
    let n = rate.samplesPerFrame
    var out = mic
    let format = try AudioFormat(sampleRate: rate, channels: 1)
    var seq: UInt64 = 0
    var i = 0
    while i + n <= mic.count {
        s.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + n)])) }
        out.withUnsafeMutableBufferPointer { p in
            _ = chain.process(UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)]),
                              FrameInfo(format: format, sequence: seq, captureTime: .zero + .milliseconds(Int64(seq) * 10)))
        }
        seq += 1
        i += n
    }
    lastDelay = aec.estimatedDelayMilliseconds ?? -1
    lastRestarts = aec.restartCount
    // Lined up with the input: above 16 kHz the canceller's resampling delays its
    // output (latencySamples); the last samples, never output, read as silence.
    let lag = Int(aec.latencySamples.rounded())
    return lag == 0 ? out : Array(out[lag...]) + [Int16](repeating: 0, count: lag)
}
nonisolated(unsafe) var lastDelay = 0.0
nonisolated(unsafe) var lastRestarts = 0

struct EchoFigures {
    var erle: Double
    var convergence: Double?
    var snr: Double
    var snrWithoutEcho: Double
    var snrUncancelled: Double
    var delay = 0.0
    var restarts = 0
}

func measure(_ scenario: EchoScenario, filterMilliseconds: Int = 250, suppressDB: Int = 0) throws -> EchoFigures {
    let s = scenario.make()
    let rate = SampleRate(rawValue: scenario.rate)!
    let out = try cancel(s, mic: s.mic, rate: rate, filterMilliseconds: filterMilliseconds, suppressDB: suppressDB)
    let d = lastDelay, r = lastRestarts
    let clean = try cancel(s, mic: s.micWithoutEcho, rate: rate, filterMilliseconds: filterMilliseconds, suppressDB: suppressDB)
    let fs = scenario.rate
    let nearStart = Int(scenario.nearStart * Double(fs))
    // Far-end only, the last 4 s before the near end joins (after convergence).
    let erle = erleDB(mic: s.mic, out: out, (nearStart - 4 * fs)..<nearStart)
    let conv = convergenceSeconds(mic: s.mic, out: out, echo: s.echo, rate: fs, start: 0, end: nearStart, targetDB: 20)
    let dt = nearStart..<(s.mic.count / rate.samplesPerFrame * rate.samplesPerFrame - rate.samplesPerFrame)
    return EchoFigures(erle: erle, convergence: conv,
                       snr: snrDB(reference: s.near, out, dt),
                       snrWithoutEcho: snrDB(reference: s.near, clean, dt),
                       snrUncancelled: snrDB(reference: s.near, s.mic, dt), delay: d, restarts: r)
}

func tenths(_ x: Double) -> String {
    let t = Int((x * 10).rounded())
    return String(t / 10) + "." + String(abs(t % 10))
}

@Suite struct EchoCancellerTests {
    /// Every delay and room of the goals at 16 kHz, 16 s: far end alone for 12 s, then
    /// double talk. ERLE over the last 4 s of far end alone (after convergence), the time
    /// until ERLE over 500 ms first reaches 20 dB, and the near end kept in double talk
    /// against the same measure with no echo at all. Thresholds: what speexdsp (Debian's
    /// float build; `make bench` prints the release build's fixed-point figure) measured
    /// here, less a margin; the figures are printed.
    /// Measured (the canceller alone; Linnet's speexdsp tuning, whose suppressor-backed
    /// figures are `residualSuppressor`'s): RT60 0.2 s: 20 dB after 4.6–8.5 s (speexdsp's
    /// own constants 4.6–5.8 s; the slowest is the 250 ms delay); RT60 0.5 s: 20 dB after
    /// 8.2–8.5 s untuned. The bound is the slowest measured with a little room.
    @Test(arguments: [0.2, 0.5], [0.02, 0.12, 0.25])
    func echoPath(rt60: Double, delay: Double) throws {
        var sc = EchoScenario()
        sc.rt60 = rt60
        sc.delay = delay
        let f = try measure(sc)
        print("AEC 16 kHz rt60 \(tenths(rt60)) s delay \(Int(delay * 1000)) ms: ERLE \(tenths(f.erle)) dB, converged to 20 dB in \(f.convergence.map { tenths($0) + " s" } ?? "never"), double-talk near-end SNR \(tenths(f.snr)) dB (no echo \(tenths(f.snrWithoutEcho)) dB, uncancelled \(tenths(f.snrUncancelled)) dB); delay found \(tenths(f.delay)) ms, \(f.restarts) restarts")
        // The search finds the direct path (within the 20 ms margin the filter starts by).
        #expect(f.delay >= delay * 1000 - 2 && f.delay <= delay * 1000 + 18)
        #expect(f.restarts <= 1)
        #expect(f.erle >= (rt60 < 0.3 ? 19 : 14))
        #expect((f.convergence ?? 99) <= (rt60 < 0.3 ? 9 : 10))
        #expect(f.snrWithoutEcho - f.snr <= (rt60 < 0.3 ? 2 : 3))
        #expect(f.snr >= f.snrUncancelled + 5)
    }

    /// 48 kHz (the default pipeline rate), the 120 ms delay in the 0.2 s room: the
    /// canceller works at 16 kHz and its output is compared lined up (`cancel`).
    /// Measured: ERLE 20.1 dB, 20 dB after 8.1 s, double-talk SNR 11.0 dB (no echo
    /// 11.5 dB). Working at 48 kHz it was ERLE 21.4 dB, SNR 9.4 dB (no echo 6.8 dB:
    /// speexdsp's DC notch turned low partials more at 48 kHz) at three times the cost.
    @Test func at48kHz() throws {
        var sc = EchoScenario()
        sc.rate = 48_000
        let f = try measure(sc)
        print("AEC 48 kHz rt60 0.2 s delay 120 ms: ERLE \(tenths(f.erle)) dB, converged to 20 dB in \(f.convergence.map { tenths($0) + " s" } ?? "never"), double-talk SNR \(tenths(f.snr)) dB (no echo \(tenths(f.snrWithoutEcho)) dB, uncancelled \(tenths(f.snrUncancelled)) dB); delay found \(tenths(f.delay)) ms")
        #expect(f.erle >= 18)
        #expect(f.snr >= f.snrWithoutEcho - 3)
        #expect(f.snr >= f.snrUncancelled + 3)
    }

    /// The two clocks 100 ppm apart either way (1.2 ms by the measured stretch) with the
    /// reference as two files have it, without time stamps: MDF does not follow a delay
    /// that keeps moving (measured ERLE 2.4–2.7 dB, SNR losses of 7.8–8.1 dB). Live, the
    /// reference is aligned by the two devices' timelines, which takes the drift out
    /// (EchoDriftTests: 19.7–20.6 dB); this is the offline form's limit, kept as the
    /// contrast.
    @Test(arguments: [100.0, -100.0])
    func drift(ppm: Double) throws {
        var sc = EchoScenario()
        sc.driftPPM = ppm
        let f = try measure(sc)
        print("AEC 16 kHz rt60 0.2 s delay 120 ms drift \(Int(ppm)) ppm: ERLE \(tenths(f.erle)) dB, double-talk SNR \(tenths(f.snr)) dB (no echo \(tenths(f.snrWithoutEcho)) dB, uncancelled \(tenths(f.snrUncancelled)) dB)")
        #expect(f.erle >= 1.5)
        #expect(f.snr >= f.snrUncancelled - 1)
    }

    /// Without a reference (silent speaker) the canceller leaves the microphone alone
    /// but for speexdsp's DC notch: no echo is invented.
    @Test func silentReferenceKeepsTheNearEnd() throws {
        var sc = EchoScenario()
        sc.gainDB = -200
        let s = sc.make()
        var quiet = s
        quiet.reference = [Int16](repeating: 0, count: s.reference.count)
        let out = try cancel(quiet, mic: s.mic, rate: .hz16000)
        let snr = snrDB(reference: s.mic, out, 16000..<s.mic.count)
        print("AEC silent reference: output against input \(tenths(snr)) dB")
        #expect(snr >= 10)
    }

    /// The residual echo suppressor (speexdsp's preprocessor fed with the canceller's
    /// state) behind the canceller: more ERLE, the near end as kept. The preprocessor
    /// delays its output by one frame (its overlap-add), so the SNR is taken one frame
    /// on. Measured with Linnet's MDF tuning: RT60 0.2 s 24.1 → 31.3 dB, 0.5 s 19.8 →
    /// 27.8 dB at 40 dB, 20 dB reached after 2.0 and 2.2 s; SNR unchanged within 0.1 dB
    /// (untuned speexdsp: 23.8 → 26.7 and 17.9 → 21.3 dB, 3.3 and 3.7 s). The restart
    /// when the delay search first locks (0.8 s in) is most of what is left to 2 s.
    @Test(arguments: [0.2, 0.5])
    func residualSuppressor(rt60: Double) throws {
        var sc = EchoScenario()
        sc.rt60 = rt60
        let s = sc.make()
        let fs = sc.rate, nearStart = Int(sc.nearStart) * fs
        let plain = try cancel(s, mic: s.mic, rate: .hz16000)
        let suppressed = try cancel(s, mic: s.mic, rate: .hz16000, suppressDB: 40)
        let shifted = Array(suppressed[160...]) + [Int16](repeating: 0, count: 160)
        let far = (nearStart - 4 * fs)..<nearStart, dt = nearStart..<(s.mic.count - 480)
        let e0 = erleDB(mic: s.mic, out: plain, far), e1 = erleDB(mic: s.mic, out: suppressed, far)
        let c0 = convergenceSeconds(mic: s.mic, out: plain, echo: s.echo, rate: fs, start: 0, end: nearStart, targetDB: 20)
        let c1 = convergenceSeconds(mic: s.mic, out: shifted, echo: s.echo, rate: fs, start: 0, end: nearStart, targetDB: 20)
        print("AEC + residual suppression 40 dB, rt60 \(tenths(rt60)) s: 20 dB after \(c0.map { tenths($0) + " s" } ?? "never") → \(c1.map { tenths($0) + " s" } ?? "never")")
        let snr0 = snrDB(reference: s.near, plain, dt), snr1 = snrDB(reference: s.near, shifted, dt)
        print("AEC + residual suppression 40 dB, rt60 \(tenths(rt60)) s: ERLE \(tenths(e0)) → \(tenths(e1)) dB, double-talk SNR \(tenths(snr0)) → \(tenths(snr1)) dB")
        #expect(e1 >= e0 + 2)
        #expect(e1 >= (rt60 < 0.3 ? 30 : 25))
        #expect((c1 ?? 99) <= (rt60 < 0.3 ? 3.5 : 5))
        #expect(snr1 >= snr0 - 0.5)
    }

    /// A reverberant room (RT60 0.5 s, echo 120 ms late) where a reflection's correlation
    /// peak outgrows the direct path's 3 s in: the delay search must not move the filter
    /// past the direct path. Measured: one restart (the first lock) and 25.5 dB ERLE over
    /// 8–12 s with the residual suppressor; moving to the reflection, 4 restarts and 7.5 dB.
    @Test func reflectionDoesNotMoveALockedDelay() throws {
        var sc = EchoScenario()
        sc.rt60 = 0.5
        sc.seed = 4
        let s = sc.make()
        let fs = sc.rate, nearStart = Int(sc.nearStart) * fs
        let out = try cancel(s, mic: s.mic, rate: .hz16000, suppressDB: 40)
        let erle = erleDB(mic: s.mic, out: out, (nearStart - 4 * fs)..<nearStart)
        print("AEC reverberant room, seed 4: \(lastRestarts) restarts, delay found \(tenths(lastDelay)) ms, ERLE \(tenths(erle)) dB")
        #expect(lastRestarts == 1)
        #expect(erle >= 20)
    }

    /// Above 16 kHz the output lags the input by `latencySamples` (the resamplers' group
    /// delays): found by cross-correlating a speech-like input with the output, with a
    /// silent reference (the canceller then only resamples and notches DC).
    @Test(arguments: [SampleRate.hz48000, .hz24000, .hz16000])
    func outputLagsByItsLatency(rate: SampleRate) throws {
        let fs = rate.hertz
        let x = toInt16(speechLike(seconds: 2, rate: fs, seed: 5, rmsDBFS: -20))
        let silent = EchoScenario.Signals(reference: [Int16](repeating: 0, count: x.count), mic: x, micWithoutEcho: x, near: x, echo: x)
        let staged = StagedReference(capacity: rate.samplesPerFrame)
        let aec = try EchoCanceller(rate: rate, reference: staged)
        var y = x
        let format = try AudioFormat(sampleRate: rate, channels: 1)
        let n = rate.samplesPerFrame
        var i = 0, seq: UInt64 = 0
        while i + n <= x.count {
            silent.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + n)])) }
            y.withUnsafeMutableBufferPointer { p in
                _ = aec.process(UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)]), FrameInfo(format: format, sequence: seq, captureTime: .zero))
            }
            i += n; seq += 1
        }
        var best = 0, bestC = -Double.infinity
        for lag in 0..<400 {
            var c = 0.0
            for k in fs / 2..<(fs * 3 / 2) { c += Double(x[k]) * Double(y[k + lag]) }
            if c > bestC { bestC = c; best = lag }
        }
        print("AEC \(fs) Hz: output lags \(best) samples (latencySamples \(tenths(aec.latencySamples)))")
        #expect(abs(Double(best) - aec.latencySamples) <= 1)
        #expect(aec.workRate == .hz16000)
    }

    /// `converged` (what keeps voice mode half duplex until the filter has learnt the
    /// room): off at the start, on once the filter (and the suppressor) take 15 dB off,
    /// which the ERLE over the next second confirms; off again when capture restarts.
    /// Measured: RT60 0.2 s 5.7 s with the suppressor (8.3 s without), 0.5 s 8.3 s
    /// (10.5 s: the limit).
    /// With a silent reference (a board without one) it never comes on: the agent stays
    /// half duplex.
    @Test(arguments: [0.2, 0.5], [false, true])
    func convergedComesOnWhenTheFilterCancels(rt60: Double, suppress: Bool) throws {
        var sc = EchoScenario()
        sc.rt60 = rt60
        let s = sc.make()
        let rate = SampleRate.hz16000, n = rate.samplesPerFrame, fs = 16_000
        let staged = StagedReference(capacity: n)
        let aec = try EchoCanceller(rate: rate, reference: staged)
        if suppress { _ = try SpeexPreprocessor(rate: rate, echoSuppressDB: 40, echo: aec) }
        let format = try AudioFormat(sampleRate: rate, channels: 1)
        var out = s.mic
        var at: Int? = nil
        var i = 0, seq: UInt64 = 0
        while i + n <= s.mic.count {
            s.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + n)])) }
            out.withUnsafeMutableBufferPointer { p in
                _ = aec.process(UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)]), FrameInfo(format: format, sequence: seq, captureTime: .zero))
            }
            if at == nil && aec.converged { at = i + n }
            i += n; seq += 1
        }
        let when = try #require(at, "never converged")
        // ERLE over the second after the flag came on, and over 500 ms windows before it.
        let after = erleDB(mic: s.mic, out: out, when..<(when + fs))
        print("AEC rt60 \(tenths(rt60)) s\(suppress ? " + residual suppressor" : ""): converged after \(tenths(Double(when) / Double(fs))) s of far end; ERLE over the next second \(tenths(after)) dB")
        // The 0.5 s room without the suppressor never reaches 15 dB: the 8 s of far end
        // (10.5 s here, with the pauses) end the wait.
        #expect(Double(when) / Double(fs) >= 1 && Double(when) / Double(fs) <= 11)
        #expect(after >= 12)
        aec.captureDidStart(format)
        #expect(!aec.converged)

        let silent = try EchoCanceller(rate: rate, reference: StagedReference(capacity: n))
        var quiet = s.mic
        i = 0
        while i + n <= quiet.count {
            quiet.withUnsafeMutableBufferPointer { p in
                _ = silent.process(UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)]), FrameInfo(format: format, sequence: 0, captureTime: .zero))
            }
            i += n
        }
        #expect(!silent.converged)
    }

    @Test func rejectsOutOfRangeFilter() {
        #expect(throws: AudioError.self) { try EchoCanceller(rate: .hz16000, filterMilliseconds: 5, reference: StagedReference()) }
    }
}

@Suite struct SpeexPreprocessorTests {
    /// Noise suppression lowers stationary noise in the pauses; the voice flag is on in
    /// speech far more often than in noise alone.
    @Test func suppressesNoiseAndFlagsVoice() throws {
        let rate = SampleRate.hz16000
        let fs = 16_000
        let speech = toInt16(speechLike(seconds: 6, rate: fs, seed: 9, rmsDBFS: -24).enumerated().map { $0.offset < 3 * fs ? 0 : $0.element })
        let noise = toInt16(whiteNoise(count: speech.count, rmsDBFS: -50, seed: 10))
        let mic = zip(speech, noise).map { Int16(clamping: Int($0) + Int($1)) }
        let ns = try SpeexPreprocessor(rate: rate, noiseSuppressDB: 20)
        let format = try AudioFormat(sampleRate: rate, channels: 1)
        var out = mic
        var voiceInNoise = 0, voiceInSpeech = 0
        let n = rate.samplesPerFrame
        for f in 0..<(mic.count / n) {
            out.withUnsafeMutableBufferPointer { p in
                _ = ns.process(UnsafeMutableBufferPointer(rebasing: p[(f * n)..<((f + 1) * n)]),
                               FrameInfo(format: format, sequence: UInt64(f), captureTime: .zero))
            }
            if ns.voiceActive { if f < 100 { } else if f < 300 { voiceInNoise += 1 } else { voiceInSpeech += 1 } }
        }
        // Noise alone, after 1 s of learning.
        let reduction = simDB(sumSquares(mic, fs..<(3 * fs)) / max(sumSquares(out, fs..<(3 * fs)), 1))
        print("NS 20 dB: noise reduced by \(tenths(reduction)) dB; voice flag on in \(voiceInNoise) of 200 noise frames (after 1 s), \(voiceInSpeech) of 300 speech frames")
        #expect(reduction >= 10)
        #expect(voiceInSpeech > voiceInNoise + 50)
        #expect(throws: AudioError.self) { try SpeexPreprocessor(rate: rate, noiseSuppressDB: 61) }
    }
}



/// The voice flag behind the echo canceller, as `run` builds it for barge-in (`aec`,
/// `aec-suppress-db` 40, `voice-flag`): the longest stretch per second of a call that
/// the hook's `voiceHeld` (what AgentCore debounces with) reaches, and the longest run
/// of speexdsp's own flag (`voiceActive`) beside it.
@Suite struct VoiceFlagBehindEchoTests {
    func longestHeld(_ s: EchoScenario.Signals, aec: Bool) throws -> (held: [Int], plain: [Int], converged: Int?) {
        let rate = SampleRate.hz16000
        let staged = StagedReference()
        let chain = HookChain()
        let pre: SpeexPreprocessor
        var canceller: EchoCanceller? = nil
        var converged: Int? = nil
        if aec {
            let c = try EchoCanceller(rate: rate, filterMilliseconds: 250, reference: staged)
            canceller = c
            try chain.add(c)
            pre = try SpeexPreprocessor(rate: rate, echoSuppressDB: 40, echo: c)
        } else {
            pre = try SpeexPreprocessor(rate: rate)
        }
        try chain.add(pre)
        let format = try AudioFormat(sampleRate: rate, channels: 1)
        let n = rate.samplesPerFrame
        var mic = s.mic
        var held = [Int](repeating: 0, count: mic.count / 16_000), plain = held
        var run = 0
        for f in 0..<(mic.count / n) {
            let i = f * n
            s.reference.withUnsafeBufferPointer { staged.stage(UnsafeBufferPointer(rebasing: $0[i..<(i + n)])) }
            mic.withUnsafeMutableBufferPointer { p in
                _ = chain.process(UnsafeMutableBufferPointer(rebasing: p[i..<(i + n)]),
                                  FrameInfo(format: format, sequence: UInt64(f), captureTime: .zero + .milliseconds(Int64(f) * 10)))
            }
            run = pre.voiceActive ? run + 10 : 0
            let second = i / 16_000
            if converged == nil, canceller?.converged == true { converged = second + 1 }
            if second < held.count {
                held[second] = max(held[second], Int(pre.voiceHeld.milliseconds))
                plain[second] = max(plain[second], run)
            }
        }
        return (held, plain, converged)
    }

    /// The assistant speaks alone for 12 s (its echo at −6 dB, 120 ms late), then the
    /// user talks over it; rooms of RT60 0.2 s (seeds 1–4) and 0.5 s (seeds 1–2). From the
    /// second after the canceller says it has converged (when the agent starts to listen
    /// to the flag, AgentCore.waitForCanceller) the echo alone never holds the hook's
    /// voice for the 200 ms barge-in debounce, though speexdsp's own flag stays on
    /// through it for longer; the user's voice holds it in most rooms (where it does
    /// not, the provider's VAD still hears the user: a missed local cut costs a network
    /// trip, a false one cuts the assistant off). Without the canceller the echo holds
    /// it (the control: what half duplex is for).
    /// Measured with Linnet's MDF tuning: converged in seconds 4–8 (untuned 6–9); after
    /// that the echo alone at most 140 ms; the user 210–280 ms in 5 of 6 rooms, 190 ms in
    /// seed 2's 0.5 s room (its near end is the quietest). Before the double-talk check
    /// (EchoCanceller.nearEnd) the echo alone reached 250 ms after 5 s in the 0.2 s room.
    /// speexdsp's own flag there is held by the echo in 5 of the 6 rooms.
    @Test func echoAloneDoesNotHoldTheFlagVoiceDoes() throws {
        var heard = 0, heldByEcho = 0
        for (seed, rt60) in [(UInt64(1), 0.2), (2, 0.2), (3, 0.2), (4, 0.2), (1, 0.5), (2, 0.5)] {
            var sc = EchoScenario()
            sc.noiseDBFS = -60
            sc.seed = seed
            sc.rt60 = rt60
            let s = sc.make()
            let cancelled = try longestHeld(s, aec: true)
            let raw = try longestHeld(s, aec: false)
            let from = try #require(cancelled.converged, "converged")
            print("voice held (seed \(seed), rt60 \(tenths(rt60)) s), longest per second (ms): behind aec \(cancelled.held) (converged in second \(from)), speexdsp's flag there \(cancelled.plain); without aec \(raw.held)")
            #expect(from <= 11)
            let echoAlone = cancelled.held[min(from + 1, 12)..<12], user = cancelled.held[12...]
            #expect(echoAlone.allSatisfy { $0 < 200 }, "echo alone after convergence: \(Array(echoAlone))")
            if cancelled.plain[5..<12].contains(where: { $0 >= 200 }) { heldByEcho += 1 }
            #expect(raw.held[5..<12].contains { $0 >= 200 }, "uncancelled echo: \(Array(raw.held[5..<12]))")
            if user.contains(where: { $0 >= 200 }) { heard += 1 }
        }
        #expect(heard >= 5, "the user over the echo held the flag in \(heard) of 6 rooms")
        // The control: what the double-talk check is for. With this canceller
        // (double-talk detector, residual suppressor by measurement) speexdsp's own flag
        // behind it is held by the echo alone in 1 room of 6; without the canceller in
        // every room (asserted per room above).
        #expect(heldByEcho >= 1, "speexdsp's flag alone was held by the echo in \(heldByEcho) of 6 rooms")
    }

    /// A headset or a file: no echo reaches the microphone, and the user talks over the
    /// assistant for 4 s. The detector never fires where there is nothing to cancel, so
    /// the flag rests on the weak-coupling rule; that rule must not learn the user's own
    /// voice as the room's coupling. When it did, the flag held for 60 ms and then
    /// flickered under the 100 ms barge-in debounce for the rest of the sentence
    /// (bench/duplex-wer.sh --variants own-flag, a barge-in 850 ms before a reply's end).
    @Test func withNoEchoTheUserHoldsTheFlagOverTheAssistant() throws {
        for seed in [UInt64(1), 2, 3] {
            var sc = EchoScenario()
            sc.noiseDBFS = -60
            sc.seed = seed
            var s = sc.make()
            s.mic = s.micWithoutEcho
            let r = try longestHeld(s, aec: true)
            print("no echo, seed \(seed): voice held, longest per second (ms): \(r.held); speexdsp's flag \(r.plain)")
            // Every second of the user's 4 holds past the default debounce (barge-in-ms 100).
            #expect(r.held[12...].allSatisfy { $0 >= 100 }, "seed \(seed): \(Array(r.held[12...]))")
        }
    }
}

/// Two device clocks 100 ppm apart (a USB microphone and an I2S amplifier: two cards),
/// through the live reference path: the playback side stamps each frame it plays on its
/// own timeline, the capture side cuts out what was playing during each capture frame
/// (PlaybackReference), and the canceller reads that (LiveReference). The stamps come
/// from FrameTimeline fed with measured times that jitter by up to ±0.25 ms, as the
/// device threads feed it (Devices/CaptureThread.swift, PlaybackThread.swift). The
/// drift is taken out by the alignment, one sample at a time (at +100 ppm a playback
/// frame of 160 samples lasts 159.984 capture samples), so what is left for the filter
/// is the room.
@Suite struct EchoDriftTests {
    /// ERLE over the last 4 s of far end alone, double-talk SNR, with the reference
    /// (a) aligned by the two timelines, (b) as the files have it (no clock: the
    /// uncompensated case, kept as the contrast), at 0 and ±100 ppm.
    /// Measured at 16 kHz: no drift 22.6 dB; ±100 ppm aligned 19.7–20.6 dB; unaligned
    /// 2.4–2.7 dB; double-talk SNR 10.8–11.2 dB (no echo 12.3 dB). At 48 kHz (the
    /// canceller working at 16 kHz): no drift 18.7 dB, +100 ppm 18.7 dB, unaligned 1.5 dB
    /// (with a fixed reference, no aligner: 20.1 dB, EchoCancellerTests.at48kHz). Without the aligner's hysteresis
    /// and the canceller's "never restart a working filter" this jitter gave 9.7 dB.
    func run(ppm: Double, rate: SampleRate = .hz16000) throws -> (aligned: Double, raw: Double, snr: Double, snrClean: Double) {
        var sc = EchoScenario()
        sc.driftPPM = ppm
        sc.rate = rate.hertz
        let s = sc.make()
        let fs = rate.hertz, n = rate.samplesPerFrame
        let format = try AudioFormat(sampleRate: rate, channels: 1)
        let reference = try PlaybackReference(format: format, slots: 64)
        let live = LiveReference(source: reference)
        let aec = try EchoCanceller(rate: rate, reference: live)
        var playTimeline = FrameTimeline(sampleRate: fs), captureTimeline = FrameTimeline(sampleRate: fs)
        var rng = SimRandom(seed: 11)
        func jitter() -> Int64 { Int64(rng.symmetric() * 250_000) }
        // Playback frame j is heard from j·n / (fs·(1 + ppm·10⁻⁶)) s (its clock is fast
        // by ppm), capture frame k is taken at k·n / fs: both on the true (monotonic) time.
        let playNS = 1e9 * Double(n) / (Double(fs) * (1 + ppm * 1e-6))
        let captureNS = Int64(1e9 * Double(n) / Double(fs))
        var out = s.mic
        var j = 0
        var k = 0
        while (k + 1) * n <= s.mic.count {
            let t = Int64(k) * captureNS
            // The playback thread runs ahead by its buffer (40 ms here).
            while j * n + n <= s.reference.count && Int64(Double(j) * playNS) <= t + 40_000_000 {
                let heard = playTimeline.time(measured: Instant(nanoseconds: Int64(Double(j) * playNS) + jitter()), frames: n)
                s.reference.withUnsafeBufferPointer { reference.played(UnsafeBufferPointer(rebasing: $0[(j * n)..<(j * n + n)]), at: heard) }
                j += 1
            }
            let captured = captureTimeline.time(measured: Instant(nanoseconds: t + jitter()), frames: n)
            reference.align(to: captured)
            out.withUnsafeMutableBufferPointer { p in
                _ = aec.process(UnsafeMutableBufferPointer(rebasing: p[(k * n)..<(k * n + n)]), FrameInfo(format: format, sequence: UInt64(k), captureTime: captured))
            }
            k += 1
        }
        let nearStart = Int(sc.nearStart) * fs
        let far = (nearStart - 4 * fs)..<nearStart, dt = nearStart..<(s.mic.count - n)
        // Lined up with the input, as `cancel` does.
        let lag = Int(aec.latencySamples.rounded())
        out = Array(out[lag...]) + [Int16](repeating: 0, count: lag)
        let raw = try cancel(s, mic: s.mic, rate: rate)
        let clean = try cancel(s, mic: s.micWithoutEcho, rate: rate)
        return (erleDB(mic: s.mic, out: out, far), erleDB(mic: s.mic, out: raw, far),
                snrDB(reference: s.near, out, dt), snrDB(reference: s.near, clean, dt))
    }

    @Test(arguments: [(100.0, SampleRate.hz16000), (-100.0, .hz16000), (100.0, .hz48000)])
    func driftIsTakenOutByTheLiveAlignment(ppm: Double, rate: SampleRate) throws {
        let still = try run(ppm: 0, rate: rate)
        let f = try run(ppm: ppm, rate: rate)
        print("AEC drift \(Int(ppm)) ppm through the live reference at \(rate.hertz / 1000) kHz: ERLE \(tenths(f.aligned)) dB (no drift \(tenths(still.aligned)) dB; the reference unaligned \(tenths(f.raw)) dB), double-talk SNR \(tenths(f.snr)) dB (no echo \(tenths(f.snrClean)) dB)")
        // At 48 kHz the same jitter is three times as many samples, and the aligned
        // reference moves by one (a third of one at the canceller's 16 kHz) more often.
        // (Measured with this canceller: 22.8 dB at 16 kHz, 16.4 dB at 48 kHz, where
        // its residual suppressor's measures run on the resampled signal.)
        #expect(still.aligned >= (rate == .hz16000 ? 20 : 16))
        #expect(f.aligned >= 17)
        #expect(f.aligned >= f.raw + 12)
        #expect(f.snr >= f.snrClean - 3)
    }
}
