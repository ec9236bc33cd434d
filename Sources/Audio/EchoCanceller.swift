// The echo canceller hook (`EchoCanceller`: speexdsp's MDF with Linnet's tuning), the
// state of its echo-delay search and double-talk detector, and the figures it reports.
import Synchronization
import Wire
import CSpeexDSP

// As for user hooks (HookChain.swift): the reference source is chosen at run time, so
// this one call is excluded from the `@_noLocks` audit; the sources Linnet ships are
// audited themselves.
@_semantics("no_performance_analysis") @inline(never)
func callRead(_ canceller: EchoCanceller, _ into: UnsafeMutablePointer<Int16>, _ count: Int, _ info: FrameInfo) -> Bool {
    canceller.reference.read(into: into, count: count, for: info)
}

/// The bulk-delay estimator's state: the reference and the microphone at 2 kHz, and
/// per lag the running cross-correlation and reference energy.
struct DelaySearch {
    static let decimatedRate = 2000
    /// Lags searched: 0…350 ms at 2 kHz.
    static let lags = 700
    /// Decimated samples per 10 ms frame.
    static let perFrame = 20
    static let historyLength = 1024 // ≥ lags + perFrame, a power of two
    var history: UnsafeMutablePointer<Int32> // decimated reference ring
    var written: Int
    var correlation: UnsafeMutablePointer<Int64>
    var energy: UnsafeMutablePointer<Int64>
    var micDecimated: UnsafeMutablePointer<Int32>
    /// Frames with far-end signal since the last decision.
    var activeFrames: Int
    /// The decimated lag the delay in use came from (−1: none yet), and how many
    /// decisions in a row have agreed on another one.
    var lockedLag: Int
    var agreeing: Int
    /// Decisions since the delay last moved.
    var sinceMove: Int
    /// The microphone's energy (leaky as the correlations), and at the last decision the
    /// peak's correlation² over the reference's and the microphone's energy: the share of
    /// the microphone's power the reference explains at that one lag.
    var micEnergy: Int64 = 0
    var coherence = 0.0
}

/// The double-talk detector's and the echo measures' state (capture thread), per 10 ms
/// frame at the work rate. Powers are sums of squares over a frame.
struct EchoTalk {
    /// The delayed reference's power and the microphone's, held with a decay of 0.5 dB a
    /// frame (`heldDecay`): the echo lingers after the reference falls silent (the room's
    /// tail, and what the filter makes of the reference still in its memory).
    var farHeld = 0.0
    var inputHeld = 0.0
    /// The delayed reference's power held with a decay of 0.75 dB a frame (an RT60 of
    /// 0.8 s, past the room grid's longest, 0.6 s), for whether echo is expected at all
    /// (under −60 dBFS: not). With `farHeld`'s 0.5 dB (an RT60 of 1.2 s) a reply at
    /// −20 dBFS kept echo expected 800 ms after it ended, and a user who answered 250 ms
    /// after it lost their first words to the hold (bench/duplex-wer.sh, speaker board:
    /// "turn on the kitchen light" sent as "kitchen light"). 1 dB a frame lost no word
    /// there, but left one grid cell (300 ms, RT60 0.4 s, echo 10 dB over the talker)
    /// at 24.6 dB ERLE, under the 25 dB goal: the residual suppressor lets near-end
    /// frames through, and the tail of a loud echo behind a long delay is one.
    var farTail = 0.0
    /// The output's noise floor: its quietest recent power (falls at once, rises about
    /// 7 dB a second).
    var outputFloor = 1e12
    /// Over frames of echo alone, leaky sums (`learnShift`: a 1.3 s time constant) of
    /// the delayed reference's, the microphone's, the filter's output's and the sent
    /// power (behind the residual suppressor): the echo return loss, and what the filter
    /// and the whole canceller take off.
    var far = 0.0, input = 0.0, output = 0.0, sent = 0.0
    /// The microphone's power as `input`, for the weak-coupling rule alone, learned
    /// only from frames the rule does not give to the user (`coupleSkipped` of them in
    /// a row so far, 200 at most).
    var coupleInput = 0.0
    var coupleSkipped = 0
    /// The sent echo over the last frames of echo alone (a 1.3 s time constant), and
    /// the sent signal's noise floor where no echo is expected (0: not yet measured):
    /// what `echoAudible` compares.
    var residual = 0.0
    var sentFloor = 0.0
    /// The share of recent frames with echo expected that were judged double talk (a
    /// 640 ms time constant: the path-change escape), frames since the last one judged
    /// so, far-active frames since the filter started.
    var talkShare = 0.0
    var relearning = false
    var sinceTalk = 0
    var farFrames = 0
    /// Frames left in which the near end counts as talking since the detector last said
    /// so (`talkHoldFrames`): `echoAudible` is false while it does.
    var talkHold = 0
    /// This frame's and the last one's verdicts.
    var talk = false
    var lastTalk = false
    var expected = false
}

/// Acoustic echo cancellation with speexdsp's MDF (multidelay block frequency-domain)
/// adaptive filter, behind a bulk-delay search: the echo of the reference is estimated
/// and subtracted from the microphone frame.
///
/// Delay and tail: MDF models `filterMilliseconds` of echo path (the room's tail; default
/// 300 ms: with 250 ms, RT60 0.6 s rooms left up to 23 dB of uncancellable tail and the
/// double-talk goal failed there; with 350 ms the filter converged too slowly, on the
/// echo grid of Tests/AudioTests/EchoGrid.swift). The echo delay (device buffers plus air, 10–300 ms here, unknown) is found
/// first and the reference delayed by it, less a 20 ms margin: a filter long enough for
/// delay and tail together (550 ms) converged far too slowly and stayed at 3–9 dB ERLE in
/// the tests for 120 and 250 ms delays, against 16–19 dB for the delay-compensated one.
///
/// The search: both signals are averaged down to 2 kHz (boxcar, decimation by 8, 12 or
/// 24), and for every lag of 0–350 ms a leaky (time constant 1.3 s) cross-correlation
/// and reference energy are kept; every 0.25 s of far-end signal the lag maximising
/// correlation²/energy (or the earliest lag within 6 dB of it) becomes the delay if its
/// peak stands out (6 dB over the mean of the lags), agrees with the previous decision
/// within 10 ms and lies more than 5 ms before the filter or more than 40 ms into it
/// (once a delay is in use: four decisions in a row, a peak twice the one at the lag in
/// use, and later than the filter's first half); then the filter restarts (its taps no
/// longer line up).
/// A filter that cancels 6 dB or more is never restarted, and the search neither learns
/// nor decides in double talk. Its cost is 28,000 multiply-adds a frame (bench/audio.sh
/// prints it).
///
/// Double talk (the user talks over the assistant). A detector on the filter's
/// output (`detectTalk`): the near end talks when the output stands 6 dB over what the
/// filter leaves of the echo, measured on frames of echo alone. It
/// - slows the filter's adaptation to a quarter (speexdsp's own step control already
///   backs off when the error grows; freezing gained nothing in the grid and stops the
///   filter from following the echo path where the live alignment moves it by a sample,
///   which clock drift does every 0.2 s at 100 ppm and 48 kHz);
/// - keeps the delay search from learning or deciding (a talker 10 dB over the echo
///   made it restart a working filter every 0.4 s of double talk: the grid's 3 dB);
/// - sets the residual suppressor (patch, tuning 3): it learns per frequency bin what
///   the filter leaves of the echo on frames of echo alone, uses speexdsp's full echo
///   suppression on echo alone and its milder double-talk level while the near end talks,
///   and 12 dB more on its residual estimate once the near end has been silent for
///   0.6 s and the filter cancels;
/// - feeds the attached preprocessor's voice flag (`nearEnd`), and the echo measures
///   (`echoAudible`, `echoReturnLossDB`, `echoReturnLossEnhancementDB`).
///
/// The work rate: at 24 and 48 kHz the canceller works at 16 kHz. The microphone and the
/// reference are decimated to 16 kHz (the same polyphase filter for both, so the echo
/// path it learns is the room's), the residual is cancelled and, with a preprocessor
/// attached, suppressed there, then interpolated back (Resampler: Kaiser sinc, cutoff
/// 7.2 kHz). Why: at 48 kHz MDF cost 2.1 M instructions a frame (float; 3.0 M fixed)
/// and converged slower (20 dB after 8.1 s against 4.6–5.8 s at 16 kHz, the same
/// room); at 16 kHz the same 250 ms tail is a third of the taps. What is sent with `aec`
/// is then band-limited to 7.2 kHz (speech recognisers listen at 16 kHz), and delayed
/// by `latencySamples` (143 samples, 3 ms at 48 kHz: the two filters' group delays).
///
/// Mono at one rate, fixed at configuration: frames of another rate or channel count
/// pass unchanged.
public final class EchoCanceller: AudioHook, @unchecked Sendable {
    /// The version of Linnet's MDF tuning (scripts/speexdsp/linnet-mdf-tuning.patch) the
    /// linked speexdsp must carry; a build that found another speexdsp says so rather
    /// than cancel slower than the tests measured.
    public static let tuning = 3
    public let rate: SampleRate
    /// The rate the adaptive filter runs at: 16 kHz, or `rate` when that is 16 kHz.
    public let workRate: SampleRate
    public let filterMilliseconds: Int
    public let reference: any EchoReference
    let state: OpaquePointer
    /// The reference frame at the pipeline rate, as read.
    private let farFull: UnsafeMutablePointer<Int16>
    /// At the work rate: the reference, the microphone and the canceller's output.
    private let far: UnsafeMutablePointer<Int16>
    private let work: UnsafeMutablePointer<Int16>
    private let out: UnsafeMutablePointer<Int16>
    /// To and from the work rate (nil at 16 kHz).
    private let micDown: Resampler?
    private let farDown: Resampler?
    private let upsampler: Resampler?
    /// The same for the capture thread, without a retain (the properties above keep them
    /// alive).
    private let micDownRef: Borrowed<Resampler>?
    private let farDownRef: Borrowed<Resampler>?
    private let upsamplerRef: Borrowed<Resampler>?
    private let upOut: UnsafeMutablePointer<Int16>
    /// The preprocessor run on the work-rate output (residual echo and noise
    /// suppression, voice flag), when one was made with this canceller; set before
    /// audio starts.
    private(set) var post: SpeexPreprocessor?
    private var postRef: Borrowed<SpeexPreprocessor>?
    /// The full-rate reference ring the delayed reference is read from.
    private let line: UnsafeMutablePointer<Int16>
    private let lineLength: Int
    private let lineWritten: UnsafeMutablePointer<Int>
    private let search: UnsafeMutablePointer<DelaySearch>
    private let frameSamples: Int
    /// Samples in one 10 ms frame at the work rate.
    private let workSamples: Int
    private let decimation: Int
    private let frames = Atomic<Int>(0)
    /// The reference delay in use, samples.
    private let delay = Atomic<Int>(0)
    /// The last estimate (the echo's bulk delay), samples; −1 before the first.
    private let estimate = Atomic<Int>(-1)
    private let restarts = Atomic<Int>(0)
    /// Whether the filter has converged (`converged`), and the far-end frames since it
    /// last started from nothing.
    private let convergedFlag = Atomic<Bool>(false)
    private var trainingFrames = 0
    /// Whether this frame may hold the near end: double talk, or no far end to echo
    /// (`detectTalk`); capture thread only, for the attached preprocessor.
    private(set) var nearEnd = true
    /// Whether the voice flag may count this frame as the user: `nearEnd`, or the
    /// microphone standing well over the echo a weak coupling explains (`detectTalk`'s
    /// `userTalks`), which fires before the filter has learned the path; capture
    /// thread only.
    private(set) var voiceNearEnd = true
    /// Whether the residual suppressor may treat this frame as echo alone at full
    /// strength (`detectTalk`); capture thread only.
    private(set) var suppressHard = false
    private let talk: UnsafeMutablePointer<EchoTalk>
    /// Tests: false runs the canceller without its double-talk detector (every frame
    /// with far end is echo alone), to show what it is for. Set before audio starts.
    var detectsDoubleTalk = true
    /// The measures other threads read (`echoAudible`, …).
    private let audible = Atomic<Bool>(false)
    private let erlTenths = Atomic<Int>(Int.min)
    private let erleTenths = Atomic<Int>(Int.min)
    private let filterERLETenths = Atomic<Int>(Int.min)
    /// A fixed delay instead of the search (tests); nil: search.
    public let fixedDelaySamples: Int?

    /// - filterMilliseconds: 20…1000, the echo path the filter models after the delay.
    /// - fixedDelayMilliseconds: a known delay instead of the search (0…300).
    public init(rate: SampleRate, filterMilliseconds: Int = 300, fixedDelayMilliseconds: Int? = nil,
                reference: any EchoReference) throws(AudioError) {
        try checkRange(.filterMilliseconds, Double(filterMilliseconds), 20, 1000)
        if let d = fixedDelayMilliseconds { try checkRange(.filterMilliseconds, Double(d), 0, 300) }
        self.rate = rate
        let work: SampleRate = rate == .hz16000 ? rate : .hz16000
        workRate = work
        self.filterMilliseconds = filterMilliseconds
        self.reference = reference
        frameSamples = rate.samplesPerFrame
        workSamples = work.samplesPerFrame
        decimation = work.hertz / DelaySearch.decimatedRate
        fixedDelaySamples = fixedDelayMilliseconds.map { $0 * work.hertz / 1000 }
        if work != rate {
            micDown = try Resampler(inputRate: rate.hertz, outputRate: work, maxInputFrames: frameSamples)
            farDown = try Resampler(inputRate: rate.hertz, outputRate: work, maxInputFrames: frameSamples)
            upsampler = try Resampler(inputRate: work.hertz, outputRate: rate, maxInputFrames: workSamples)
        } else {
            micDown = nil
            farDown = nil
            upsampler = nil
        }
        micDownRef = micDown.map { Borrowed($0) }
        farDownRef = farDown.map { Borrowed($0) }
        upsamplerRef = upsampler.map { Borrowed($0) }
        let taps = Int32(work.hertz / 1000 * filterMilliseconds)
        let made = speex_echo_state_init(Int32(workSamples), taps)!
        let version = Int(linnet_echo_tuning(made))
        guard version == EchoCanceller.tuning else {
            speex_echo_state_destroy(made)
            throw .echoCancellerUntuned(version: version)
        }
        state = made
        _ = linnet_echo_set_rate(state, Int32(work.hertz))
        farFull = .allocate(capacity: frameSamples)
        farFull.initialize(repeating: 0, count: frameSamples)
        // Two spare samples each: Resampler.process asks for room for them.
        far = .allocate(capacity: workSamples &+ 2)
        far.initialize(repeating: 0, count: workSamples &+ 2)
        self.work = .allocate(capacity: workSamples &+ 2)
        self.work.initialize(repeating: 0, count: workSamples &+ 2)
        upOut = .allocate(capacity: frameSamples &+ 2)
        upOut.initialize(repeating: 0, count: frameSamples &+ 2)
        out = .allocate(capacity: workSamples)
        out.initialize(repeating: 0, count: workSamples)
        // 350 ms of search plus a frame, rounded up to whole frames.
        lineLength = (work.hertz * 36 / 100 / workSamples + 1) * workSamples
        line = .allocate(capacity: lineLength)
        line.initialize(repeating: 0, count: lineLength)
        lineWritten = .allocate(capacity: 1)
        lineWritten.initialize(to: 0)
        let h = UnsafeMutablePointer<Int32>.allocate(capacity: DelaySearch.historyLength)
        h.initialize(repeating: 0, count: DelaySearch.historyLength)
        let c = UnsafeMutablePointer<Int64>.allocate(capacity: DelaySearch.lags)
        c.initialize(repeating: 0, count: DelaySearch.lags)
        let e = UnsafeMutablePointer<Int64>.allocate(capacity: DelaySearch.lags)
        e.initialize(repeating: 0, count: DelaySearch.lags)
        let m = UnsafeMutablePointer<Int32>.allocate(capacity: DelaySearch.perFrame)
        m.initialize(repeating: 0, count: DelaySearch.perFrame)
        search = .allocate(capacity: 1)
        search.initialize(to: DelaySearch(history: h, written: 0, correlation: c, energy: e, micDecimated: m, activeFrames: 0, lockedLag: -1, agreeing: 0, sinceMove: 0))
        talk = .allocate(capacity: 1)
        talk.initialize(to: EchoTalk())
        if let d = fixedDelaySamples { delay.store(d, ordering: .relaxed) }
    }

    deinit {
        speex_echo_state_destroy(state)
        farFull.deallocate()
        upOut.deallocate()
        far.deallocate()
        work.deallocate()
        out.deallocate()
        line.deallocate()
        lineWritten.deallocate()
        search.pointee.history.deallocate()
        search.pointee.correlation.deallocate()
        search.pointee.energy.deallocate()
        search.pointee.micDecimated.deallocate()
        search.deallocate()
        talk.deallocate()
    }

    /// Frames cancelled so far.
    public var frameCount: Int { frames.load(ordering: .relaxed) }
    /// The reference delay in use, in milliseconds (the estimate less the margin).
    public var delayMilliseconds: Double { Double(delay.load(ordering: .relaxed)) * 1000 / Double(workRate.hertz) }
    /// The echo's estimated bulk delay in milliseconds; nil before the first estimate.
    public var estimatedDelayMilliseconds: Double? {
        let e = estimate.load(ordering: .relaxed)
        return e < 0 ? nil : Double(e) * 1000 / Double(workRate.hertz)
    }
    /// How far the output lags the input, in samples at `rate`: 0 at 16 kHz; the
    /// decimator's and the interpolator's group delays otherwise (each prototype has
    /// 144 taps at 48 kHz, centred at 71.5: 143 samples at 48 kHz, 71.5 at 24 kHz).
    public var latencySamples: Double { workRate == rate ? 0 : 143 * Double(rate.hertz) / 48_000 }

    /// Runs `p` on the work-rate output of every frame (SpeexPreprocessor.init does it).
    func attach(_ p: SpeexPreprocessor) {
        post = p
        postRef = Borrowed(p)
    }
    /// How often the filter restarted for a new delay.
    public var restartCount: Int { restarts.load(ordering: .relaxed) }
    /// How often speexdsp's canceller reset itself: its output stayed louder than its
    /// input for half a second (the filter diverged, or the reference stopped matching
    /// what the microphone hears), and it learns the room again. Not thread-safe against
    /// `process`: read it when audio has stopped, or as a figure that may lag.
    public var selfResetCount: Int { Int(linnet_echo_resets(state)) }

    /// Whether the filter has learnt the room: over about a second of far end it (with
    /// the residual suppressor, when one is attached) took 15 dB or more off the
    /// microphone, or it has heard 8 s of far end (in a room where the echo barely
    /// stands above the noise the ratio never gets there, and speexdsp's 250 ms filter
    /// reached its floor in 4.5–8.5 s in the simulated rooms). It stays set until the
    /// filter starts from nothing again (a new delay, a capture restart). Until then the
    /// echo left behind it is loud enough to pass for the user (speexdsp's flag held
    /// for seconds on it, VoiceFlagBehindEchoTests): the agent keeps voice mode half
    /// duplex meanwhile (AgentCore.waitForCanceller). Any thread.
    public var converged: Bool { convergedFlag.load(ordering: .relaxed) }

    /// Whether echo of what the speaker plays reaches what is sent loud enough to be
    /// heard as speech by the provider (for the agent's half duplex: judged by
    /// measurement, not by elapsed speech). Any thread; computed on the capture thread.
    ///
    /// - No far end (nothing played for about 0.5 s, `detectTalk`): false.
    /// - Before it knows, at the start and after the filter restarts: true for the first
    ///   35 frames (350 ms) of far-end signal, the longest echo delay the search looks for.
    /// - Then true while what is sent on frames the double-talk detector calls echo alone
    ///   (averaged over about 1.3 s of them) stands over `audibleDBFS` (−47 dBFS to come
    ///   back on) and 6 dB over the sent signal's floor measured where nothing played,
    ///   and is measured to be echo: the filter cancels 6 dB or more, or the delay search
    ///   found the reference explaining a tenth of the microphone's power at one lag (it
    ///   decides every 250 ms of far end; loud but not shown to be echo after 500 ms, it
    ///   is not echo). With no echo (a headset, a file) it is false from 350 ms of far end
    ///   on, and stays false while the user talks over the far end (the reference then
    ///   explains at most 5 % of the microphone); once the canceller cancels the echo,
    ///   false; a changed echo path shows as echo again. While the double-talk detector
    ///   hears the user over the echo (and 500 ms after), false: their voice goes out.
    ///
    /// Why −50 dBFS: a talker at a board's microphone reaches −26 to −35 dBFS (the grid's
    /// −32 dBFS); echo 18–24 dB under the user's speech and under −50 dBFS absolute does
    /// not hold a speech detector tuned for that user (the canceller's own voice flag
    /// needs 18 dB over the floor, `SpeexPreprocessor.standOutRatio`), and the goal's
    /// double-talk SNR of 10 dB leaves echo 10 dB under a talker. Half duplex costs the
    /// user barge-in; a residual of −50 dBFS costs at worst a stray turn.
    public var echoAudible: Bool { audible.load(ordering: .relaxed) }
    /// The level `echoAudible` calls audible, dBFS (RMS over frames of echo alone).
    public static let audibleDBFS = -50.0
    /// The echo return loss, dB: the delayed reference's power over the microphone's on
    /// frames of echo alone (about the last 1.3 s of them); nil before the first. With no
    /// echo it is the reference over the microphone's noise. For logs.
    public var echoReturnLossDB: Double? { Self.decibels(erlTenths.load(ordering: .relaxed)) }
    /// What the canceller takes off the echo, dB: the microphone's power over what is sent
    /// (behind the residual suppressor, when one is attached) on frames of echo alone;
    /// nil before the first. For logs.
    public var echoReturnLossEnhancementDB: Double? { Self.decibels(erleTenths.load(ordering: .relaxed)) }
    /// The same for the adaptive filter alone (before the residual suppressor).
    public var filterEchoReturnLossEnhancementDB: Double? { Self.decibels(filterERLETenths.load(ordering: .relaxed)) }

    private static func decibels(_ tenths: Int) -> Double? { tenths == Int.min ? nil : Double(tenths) / 10 }

    /// A new session starts from an untrained filter (the echo path may have changed).
    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        speexEchoReset(state)
        startTraining()
        micDownRef?.use { $0.reset() }
        farDownRef?.use { $0.reset() }
        upsamplerRef?.use { $0.reset() }
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        guard let near = speexFrame(samples, info, rate: rate, frameSamples: frameSamples) else { return .pass }
        let n = workSamples
        if let micDownRef, let farDownRef {
            if !callRead(self, farFull, frameSamples, info) { zeroFrame(UnsafeMutableBufferPointer(start: farFull, count: frameSamples)) }
            // 10 ms in gives exactly 10 ms out (Resampler); the sizes are fixed at init,
            // so neither call can throw.
            // (Locals: a closure that reads `self` retains it.)
            let full = UnsafeBufferPointer(start: farFull, count: frameSamples), mic = UnsafeBufferPointer(start: near, count: frameSamples)
            let farOut = UnsafeMutableBufferPointer(start: far, count: n &+ 2), micOut = UnsafeMutableBufferPointer(start: work, count: n &+ 2)
            farDownRef.use { _ = try? $0.process(full, into: farOut) }
            micDownRef.use { _ = try? $0.process(mic, into: micOut) }
        } else {
            if !callRead(self, far, n, info) { zeroFrame(UnsafeMutableBufferPointer(start: far, count: n)) }
            copySamples(work, near, n)
        }
        // The newest reference frame into the line, then the delayed one out of it.
        let w = lineWritten.pointee
        copySamples(line + w, far, n)
        lineWritten.pointee = w &+ n == lineLength ? 0 : w &+ n
        var r = w &- delay.load(ordering: .relaxed)
        if r < 0 { r &+= lineLength }
        var farPower: Int64 = 0
        for i in 0..<n {
            let x = line[r]
            far[i] = x
            farPower &+= Int64(x) &* Int64(x)
            r &+= 1
            if r == lineLength { r = 0 }
        }
        speexCancel(state, work, far, out)
        var pi: Int64 = 0, po: Int64 = 0
        for i in 0..<n {
            pi &+= Int64(work[i]) &* Int64(work[i])
            po &+= Int64(out[i]) &* Int64(out[i])
        }
        let doubleTalk = detectTalk(far: Double(farPower), input: Double(pi), output: Double(po))
        // The next update learns from this frame's error: a quarter of it in double talk.
        speexEchoAdapt(state, doubleTalk ? 8192 : 32768)
        let alone = talk.pointee.expected && !doubleTalk
        // What the filter leaves of the echo, per bin, averaged over 128 frames of echo
        // alone (1.3 s, as the detector's sums): over 64 (0.64 s) the suppressor let
        // more of it through, the estimate dipping with the filter's good stretches
        // (the echo grid: worst ERLE 25.3 dB against 26.5, worst double-talk SNR 10.1
        // against 10.2, no cell's SNR more than 0.6 dB lower;
        // EchoCancellerTests.residualSuppressor, RT60 0.2 s: 29.9 dB against 31.3).
        if alone { speexEchoLearn(state, 128) }
        // The search listens to echo alone (the line holds the undelayed frame at w).
        if fixedDelaySamples == nil { searchDelay(line + w, work, listen: !doubleTalk) }
        let sent = out
        postRef?.use { $0.run(sent) }
        var ps: Int64 = 0
        for i in 0..<n { ps &+= Int64(out[i]) &* Int64(out[i]) }
        measure(far: Double(farPower), input: Double(pi), output: Double(po), sent: Double(ps), alone: alone)
        if let upsamplerRef {
            let from = UnsafeBufferPointer(start: out, count: n), to = UnsafeMutableBufferPointer(start: upOut, count: frameSamples &+ 2)
            // Sizes fixed at init as for the downsamplers: it cannot throw (were it to,
            // the frame goes out silent: nothing is logged on the audio thread).
            let m = upsamplerRef.use { (try? $0.process(from, into: to)) ?? 0 }
            let k = min(m, frameSamples)
            copySamples(near, upOut, k)
            if k < frameSamples { zeroFrame(UnsafeMutableBufferPointer(start: near + k, count: frameSamples &- k)) }
        } else {
            copySamples(near, out, n)
        }
        frames.store(frames.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        return .pass
    }


    /// The double-talk detector, once per frame after the filter ran: `far` is the delayed
    /// reference's power, `input` and `output` the frame's power before and after the
    /// filter. Returns whether the near end talks over the echo.
    ///
    /// The near end talks when the output stands 6 dB over the echo the filter is
    /// expected to leave and 6 dB over the output's floor. The expected echo is the
    /// filter's output-to-input power ratio on frames of echo alone (about the last 1.3 s
    /// of them) times the microphone's recent power (held with a 0.5 dB-a-frame decay,
    /// so that the echo of a syllable that just ended is still expected in the gap after
    /// it; a frame judged near end does not raise it, or the talker's own syllables would
    /// hide the next ones). Frames where no echo is expected (the reference, held the
    /// same way, under −60 dBFS) are near end for the voice flag and for the suppressor,
    /// but not double talk.
    /// A change of the echo path looks like double talk that never pauses: after 150 far
    /// frames in a row judged double talk the measure learns again.
    @inline(__always)
    private func detectTalk(far: Double, input: Double, output: Double) -> Bool {
        let t = talk
        let n = Double(workSamples)
        t.pointee.outputFloor = min(max(output, n), t.pointee.outputFloor * (1 + 1.0 / 64) + 1)
        // (Literals, not statics: a static's first use on this thread would initialise it.)
        // The held powers decay by 0.5 dB a frame (0.891), the far end's tail by 0.75 (0.841).
        t.pointee.farHeld = max(far, t.pointee.farHeld * 0.891)
        t.pointee.farTail = max(far, t.pointee.farTail * 0.841)
        let held = t.pointee.inputHeld * 0.891
        t.pointee.inputHeld = max(input, held)
        t.pointee.lastTalk = t.pointee.talk
        // (Nested ifs: `&&` takes an autoclosure, which the RT audit counts.)
        guard t.pointee.farTail > n * 1024 else {
            t.pointee.expected = false
            t.pointee.talk = false
            t.pointee.sinceTalk = 0
            nearEnd = true
            voiceNearEnd = true
            suppressHard = false
            return false
        }
        t.pointee.expected = true
        var doubleTalk = false
        if detectsDoubleTalk {
            if t.pointee.input > 0 {
                if output * t.pointee.input > 4 * t.pointee.output * t.pointee.inputHeld {
                    if output > 4 * t.pointee.outputFloor { doubleTalk = true }
                }
            }
        }
        if doubleTalk { t.pointee.inputHeld = held }
        // For `echoAudible` only: the user talks when the detector says so, or when the
        // microphone stands 9 dB over the echo the room's coupling explains (its power
        // over the reference's on frames of echo alone, times the held reference) and
        // 6 dB over the floor. The detector compares against what the *filter* leaves,
        // so it cannot fire before the filter has learned the path: with a weak echo (a
        // handset, echo 20 dB under the talker) that took seconds, and the hold swallowed
        // the first word of every barge-in (bench/duplex-wer.sh: uplink WER 0.07).
        // Only where the coupling is weak (ERL 9 dB and more, learned over half a second
        // of echo alone at least): with a loud echo, a changed path or a delay not yet
        // found looks just like a talker to this rule, and the detector learns there fast.
        var userTalks = doubleTalk
        var byCoupling = false
        if t.pointee.far > 8 * t.pointee.coupleInput, trainingFrames >= 50 {
            if input * t.pointee.far > 8 * t.pointee.farHeld * t.pointee.coupleInput {
                if input > 4 * t.pointee.outputFloor {
                    userTalks = true
                    // Not where the delay search finds the reference in the microphone:
                    // that is echo (a moved board), which the coupling must learn.
                    if !doubleTalk { if search.pointee.coherence < 0.1 { byCoupling = true } }
                }
            }
        }
        // The coupling is learned from the frames the rule does not give to the user.
        // Where there is no echo the detector never fires (the filter leaves the whole
        // microphone), so `input` learns the user's own voice too: a user talking over a
        // reply raised it to their level within a syllable, the rule stopped firing,
        // and the voice flag lost them (a barge-in 850 ms before a reply's end never
        // cut it: bench/duplex-wer.sh --variants own-flag). Not for more than 2 s in a
        // row: a coupling that really grew (the speaker moved closer) is learned then.
        if byCoupling { t.pointee.coupleSkipped &+= 1 } else { t.pointee.coupleSkipped = 0 }
        if !byCoupling || t.pointee.coupleSkipped > 200 {
            if doubleTalk ? t.pointee.relearning : true {
                t.pointee.coupleInput += (input - t.pointee.coupleInput) / 128
            }
        }
        if userTalks {
            t.pointee.talkHold = 50
        } else if t.pointee.talkHold > 0 {
            t.pointee.talkHold &-= 1
        }
        t.pointee.talkShare += ((doubleTalk ? 1 : 0) - t.pointee.talkShare) / 64
        t.pointee.sinceTalk = doubleTalk ? 0 : t.pointee.sinceTalk &+ 1
        // Relearning from 92 % down to 50 %: a real talker pauses between syllables.
        if t.pointee.talkShare > 0.92 { t.pointee.relearning = true }
        if t.pointee.talkShare < 0.5 { t.pointee.relearning = false }
        if doubleTalk ? t.pointee.relearning : true {
            let a = 1.0 / 128 // leaky sums over about 128 frames (1.3 s)
            t.pointee.input += a * (input - t.pointee.input)
            t.pointee.output += a * (output - t.pointee.output)
        }
        t.pointee.talk = doubleTalk
        nearEnd = doubleTalk
        voiceNearEnd = userTalks
        // Echo alone for 0.6 s and a filter that cancels 6 dB: the suppressor's full
        // strength (12 dB more on its residual estimate). Not sooner after the near end:
        // the detector misses a talker's quieter frames (at 10 dB of echo over the
        // talker, 8–12 % of the talker's energy), and suppressing those cost 1–2 dB of
        // double-talk SNR; not with no echo to cancel (a headset), where it would take
        // the user's voice.
        suppressHard = t.pointee.sinceTalk > 60 && t.pointee.output * 4 <= t.pointee.input
        return doubleTalk
    }

    /// The echo measures and `echoAudible`, after the residual suppressor: `sent` is the
    /// power of what is sent (with a preprocessor attached, its output lags a frame, so
    /// it counts as echo alone only when the last frame was too).
    @inline(__always)
    private func measure(far: Double, input: Double, output: Double, sent: Double, alone: Bool) {
        let t = talk
        let n = Double(workSamples)
        guard t.pointee.expected else {
            // The sent signal's noise floor, where no echo is expected: its quietest
            // recent frames (falls at once, rises about 7 dB a second).
            let floor = t.pointee.sentFloor
            t.pointee.sentFloor = floor > 0 ? min(max(sent, n), floor * (1 + 1.0 / 64) + 1) : max(sent, n)
            audible.store(false, ordering: .relaxed)
            return
        }
        if far > n * 1024 { t.pointee.farFrames &+= 1 }
        var sentAlone = alone
        if postRef != nil { if t.pointee.lastTalk { sentAlone = false } }
        if sentAlone {
            let a = 1.0 / 128
            t.pointee.far += a * (far - t.pointee.far)
            t.pointee.sent += a * (sent - t.pointee.sent)
            t.pointee.residual += (sent - t.pointee.residual) / 128
            trainingFrames &+= 1
        }
        // The echo is measured to reach the microphone: the filter cancels 6 dB or more,
        // or the search's last decision found the reference explaining a tenth of the
        // microphone's power at one lag (with no echo and a user talking over the far
        // end, the grid's scenes stayed under 0.051; echo 10 dB over the talker: 0.12 and
        // over).
        var measured = search.pointee.coherence >= 0.1
        if t.pointee.input > 0 { if t.pointee.output * 4 <= t.pointee.input { measured = true } }
        // −50 dBFS RMS (−47 to come back on: the level swings by syllable), and 6 dB over
        // the floor where one was measured.
        let was = audible.load(ordering: .relaxed)
        var loud = t.pointee.residual > n * 32768 * 32768 * (was ? 1e-5 : 2e-5)
        if t.pointee.residual <= 4 * t.pointee.sentFloor { loud = false }
        var isAudible: Bool
        if t.pointee.farFrames < 35 {
            // Before it knows: the first 350 ms of far-end signal, the longest echo delay
            // the search looks for (an echo that has not arrived does not show yet).
            isAudible = true
        } else if !loud {
            isAudible = false
        } else {
            // Loud, but not yet measured to be echo: the search decides every 250 ms of
            // far end; after 500 ms it is not echo (a user talking over the far end).
            isAudible = measured ? true : t.pointee.farFrames < 50
        }
        // The user talks over the echo (the double-talk detector, held 500 ms over the
        // gaps between words): the microphone carries their voice, which half duplex
        // would throw away, and the echo under it is masked by it (the double-talk SNR).
        // On a speaker board a barge-in's first words were lost to the hold until the
        // voice flag cut the reply (bench/duplex-wer.sh: uplink WER 0.175 against 0.000).
        if t.pointee.talkHold > 0 { isAudible = false }
        audible.store(isAudible, ordering: .relaxed)
        if t.pointee.input > 0 {
            if t.pointee.sent > 0 { erleTenths.store(decibelTenths(t.pointee.input / t.pointee.sent), ordering: .relaxed) }
            if t.pointee.output > 0 { filterERLETenths.store(decibelTenths(t.pointee.input / t.pointee.output), ordering: .relaxed) }
            if t.pointee.far > 0 { erlTenths.store(decibelTenths(t.pointee.far / t.pointee.input), ordering: .relaxed) }
        }
        // `converged`: after a second of echo alone at least, so the sums hold more
        // than a start. (Nested ifs and literals: `&&` takes an autoclosure, which the
        // RT audit counts, and a static's first use on this thread would initialise it.)
        let trained = trainingFrames
        if trained >= 100 {
            if t.pointee.sent * 32 <= t.pointee.input { convergedFlag.store(true, ordering: .relaxed) }
            if trained >= 800 { convergedFlag.store(true, ordering: .relaxed) }
        }
    }

    /// The filter starts from nothing: not converged, its measures forgotten, and
    /// `echoAudible` assumed again until it knows.
    @inline(__always)
    private func startTraining() {
        trainingFrames = 0
        // What the filter left is forgotten; the signals' levels and floors are not.
        let t = talk
        t.pointee.input = 0
        t.pointee.coupleInput = 0
        t.pointee.coupleSkipped = 0
        t.pointee.output = 0
        t.pointee.far = 0
        t.pointee.sent = 0
        t.pointee.residual = 0
        t.pointee.talkShare = 0
        t.pointee.relearning = false
        t.pointee.sinceTalk = 0
        t.pointee.farFrames = 0
        t.pointee.talkHold = 0
        convergedFlag.store(false, ordering: .relaxed)
    }

    /// One frame of the bulk-delay search at the work rate: `far` is the undelayed
    /// reference frame, `near` the microphone's. The decimated reference is always kept
    /// (its history must stay continuous); in double talk (`listen` false) nothing is
    /// learnt or decided: a near end louder than the echo buried its correlation, and
    /// the search would restart a working filter every 0.4 s of double talk.
    /// Returns whether the frame had far-end signal.
    @inline(__always) @discardableResult
    private func searchDelay(_ far: UnsafeMutablePointer<Int16>, _ near: UnsafeMutablePointer<Int16>, listen: Bool) -> Bool {
        let s = search
        let hist = s.pointee.history
        let mask = DelaySearch.historyLength &- 1
        var farEnergy: Int64 = 0
        for k in 0..<DelaySearch.perFrame {
            var a: Int32 = 0, b: Int32 = 0
            for j in 0..<decimation {
                a &+= Int32(far[k &* decimation &+ j])
                b &+= Int32(near[k &* decimation &+ j])
            }
            let fa = a / Int32(decimation)
            hist[(s.pointee.written &+ k) & mask] = fa
            s.pointee.micDecimated[k] = b / Int32(decimation)
            farEnergy &+= Int64(fa) &* Int64(fa)
        }
        let newest = s.pointee.written &+ DelaySearch.perFrame &- 1
        s.pointee.written = (s.pointee.written &+ DelaySearch.perFrame) & mask
        // Far end present: above −60 dBFS RMS at 2 kHz (20 samples of 32).
        guard farEnergy > 20 * 32 * 32 else { return false }
        guard listen else { return true }
        let corr = s.pointee.correlation, energy = s.pointee.energy
        let mic = s.pointee.micDecimated
        var m: Int64 = 0
        for k in 0..<DelaySearch.perFrame { m &+= Int64(mic[k]) &* Int64(mic[k]) }
        s.pointee.micEnergy = s.pointee.micEnergy &- (s.pointee.micEnergy &>> 7) &+ m
        for lag in 0..<DelaySearch.lags {
            var c: Int64 = 0, e: Int64 = 0
            for k in 0..<DelaySearch.perFrame {
                let x = Int64(hist[(newest &- (DelaySearch.perFrame &- 1) &+ k &- lag) & mask])
                c &+= Int64(mic[k]) &* x
                e &+= x &* x
            }
            // Leak 1/128 a frame: a 1.3 s time constant.
            corr[lag] = corr[lag] &- (corr[lag] &>> 7) &+ c
            energy[lag] = energy[lag] &- (energy[lag] &>> 7) &+ e
        }
        s.pointee.activeFrames &+= 1
        guard s.pointee.activeFrames >= 25 else { return true }
        s.pointee.activeFrames = 0
        var best = 0, bestScore = 0.0, total = 0.0
        for lag in 0..<DelaySearch.lags {
            let c = Double(corr[lag])
            let score = energy[lag] > 0 ? c * c / Double(energy[lag]) : 0
            total += score
            if score > bestScore { bestScore = score; best = lag }
        }
        s.pointee.coherence = s.pointee.micEnergy > 0 ? bestScore / Double(s.pointee.micEnergy) : 0
        let floor = 4 * total / Double(DelaySearch.lags)
        guard bestScore > floor else { return true }
        // The earliest lag within 6 dB of the peak (and standing out as the peak must):
        // in a room a reflection can correlate more than the direct path, and a filter
        // that starts after the direct path cannot model it (the tests saw a 0.5 s room
        // lock 44 ms late without this; with 3 dB, the echo grid saw RT60 0.6 s rooms
        // lock 30 ms late, and restart once the direct path showed).
        for lag in 0..<best {
            let c = Double(corr[lag])
            if energy[lag] > 0 && c * c / Double(energy[lag]) >= max(bestScore / 4, floor) { best = lag; break }
        }
        let found = best &* decimation
        // Moves on two decisions in a row that agree within 10 ms (the 20 ms margin takes
        // up the difference). Once a delay has held
        // for 2 s of far-end signal (the filter may have converged), only on four, and
        // only for a peak twice the one at the lag in use: a reverberant room's
        // correlation has several near-equal peaks, and each move restarts the filter
        // (the tests saw a 0.5 s room's ERLE fall from 13 to 3 dB on such a move).
        let previous = estimate.load(ordering: .relaxed)
        estimate.store(found, ordering: .relaxed)
        s.pointee.sinceMove &+= 1
        let locked = s.pointee.lockedLag
        let settled = locked >= 0 && s.pointee.sinceMove > 8
        // A filter that cancels is never restarted: over the last second or so of echo
        // alone it took 6 dB or more off the microphone. Without this, EchoDriftTests saw
        // a settled filter at 21 dB restarted 10.5 s in by a reflection's peak, and the
        // echo grid one at 9 dB, not yet settled, 5.6 s in (300 ms, RT60 0.2 s).
        let t = talk.pointee
        if locked >= 0 && t.input > 0 && t.output * 4 <= t.input {
            s.pointee.agreeing = 0
            return true
        }
        if settled {
            let c = Double(corr[locked])
            let lockedScore = energy[locked] > 0 ? c * c / Double(energy[locked]) : 0
            // (Two ifs, not `||`: it takes an autoclosure, which the RT audit counts.)
            if abs(best &- locked) * decimation <= workRate.hertz / 100 {
                s.pointee.agreeing = 0
                return true
            }
            if bestScore < 2 * lockedScore {
                s.pointee.agreeing = 0
                return true
            }
        }
        var agrees = false
        if previous >= 0 { agrees = abs(previous &- found) <= workRate.hertz / 100 }
        if agrees { s.pointee.agreeing &+= 1 } else { s.pointee.agreeing = 0 }
        guard s.pointee.agreeing >= (settled ? 3 : 1) else { return true }
        let wanted = max(0, found &- workRate.hertz / 50)
        let current = delay.load(ordering: .relaxed)
        // The delay in use fits while the estimate lies from 5 ms before the filter's start
        // to 40 ms into it (the 20 ms margin leaves the direct path room either side of
        // an estimate's error). Once a delay is locked, a later peak moves it only past
        // half the filter: in a reverberant room a reflection's peak can outgrow the
        // direct path's for a while, and moving to it put the direct path before the
        // filter's start and restarted it three more times (RT60 0.5 s, 120 ms: ERLE 7.5 dB
        // after 12 s; with this rule one restart and 25.5 dB). A filter still holds a peak
        // in its first half. (The estimate need not lie 5 ms in: requiring that, one
        // 2.5 ms before the filter restarted a converging filter in an RT60 0.6 s room of
        // the grid, which then missed 25 dB.)
        let latest = locked < 0 ? workRate.hertz / 25 : workRate.hertz / 1000 * filterMilliseconds / 2
        if found < current &- workRate.hertz / 200 || found > current &+ latest {
            s.pointee.agreeing = 0
            s.pointee.lockedLag = best
            s.pointee.sinceMove = 0
            delay.store(wanted, ordering: .relaxed)
            speexEchoReset(state)
            startTraining()
            restarts.store(restarts.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        } else if locked < 0 {
            // The delay in use (none) already fits: it holds from here.
            s.pointee.lockedLag = best
            s.pointee.sinceMove = 0
        }
        return true
    }
}

/// 10·log10(x) in tenths of a dB (Embedded Swift has no log10): the binary exponent,
/// and ln(1 + m) = 2·atanh(m / (2 + m)) for the mantissa, four terms (t ≤ 1/3: within
/// 0.001 dB). Int.min for x ≤ 0.
@inline(__always)
func decibelTenths(_ x: Double) -> Int {
    guard x > 0, x.isFinite else { return Int.min }
    let m = x.significand - 1
    let t = m / (2 + m), t2 = t * t
    let ln = Double(x.exponent) * 0.6931471805599453 + 2 * t * (1 + t2 * (1.0 / 3 + t2 * (0.2 + t2 / 7)))
    let t10 = ln * 43.42944819032518
    return Int(t10 + (t10 >= 0 ? 0.5 : -0.5)) // (not `rounded()`: its rule type is a metadata access for the RT audit)
}
