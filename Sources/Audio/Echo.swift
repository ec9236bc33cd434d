import Synchronization
import Wire
import CSpeexDSP

// Acoustic echo cancellation, residual echo and noise suppression, and a voice-activity
// flag: speexdsp's MDF canceller and preprocessor behind the hook API. speexdsp takes
// int16 frames (inside, this build works in floating point: its fixed-point MDF cancelled
// 3–5 dB less, see scripts/build-speexdsp.sh); its states are allocated once here, and
// `speex_echo_cancellation` / `speex_preprocess_run` work in them without allocating,
// locking or logging (the library is built with DISABLE_WARNINGS).

/// Where the echo canceller gets the playback reference for a capture frame: the samples
/// the speaker played while the frame was captured, mono, at the frame's rate.
///
/// Called on the capture thread: no allocation, no lock, no logging.
public protocol EchoReference: AnyObject {
    /// Writes `count` samples for the capture frame `info` to `reference`; false when
    /// there is no reference for it (the canceller then treats the speaker as silent).
    func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool
}

// As for user hooks (HookChain.swift): the reference source is chosen at run time, so
// this one call is excluded from the `@_noLocks` audit; the sources Linnet ships are
// audited themselves.
@_semantics("no_performance_analysis") @inline(never)
func callRead(_ source: any EchoReference, _ into: UnsafeMutablePointer<Int16>, _ count: Int, _ info: FrameInfo) -> Bool {
    source.read(into: into, count: count, for: info)
}

/// A reference the caller sets before each capture frame, on the capture thread (the
/// offline `linnet audio --reference`, tests).
public final class StagedReference: EchoReference, @unchecked Sendable {
    private let buffer: UnsafeMutablePointer<Int16>
    private let staged: UnsafeMutablePointer<Int>
    public let capacity: Int

    public init(capacity: Int = 480) {
        self.capacity = capacity
        buffer = .allocate(capacity: capacity)
        buffer.initialize(repeating: 0, count: capacity)
        staged = .allocate(capacity: 1)
        staged.initialize(to: 0)
    }

    deinit {
        buffer.deallocate()
        staged.deallocate()
    }

    /// The next frame's reference (at most `capacity` samples; the rest reads as silence).
    public func stage(_ samples: UnsafeBufferPointer<Int16>) {
        let n = min(samples.count, capacity)
        if let b = samples.baseAddress { buffer.update(from: b, count: n) }
        staged.pointee = n
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool {
        let n = min(count, staged.pointee)
        reference.update(from: buffer, count: n)
        if n < count { (reference + n).update(repeating: 0, count: count &- n) }
        let had = staged.pointee > 0
        staged.pointee = 0
        return had
    }
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
    /// The canceller's input and output power over frames with far end (leaky sums,
    /// a 1.3 s time constant): how much it cancels.
    var inputPower: Int64 = 0
    var outputPower: Int64 = 0
    /// The same behind the residual suppressor (what is sent): for `converged`. The
    /// filter alone decides whether it works: a suppressor can hide a filter that lost
    /// the echo path.
    var suppressedPower: Int64 = 0
}

/// The live reference: a duplex pipeline's `PlaybackReference`, which the capture
/// pipeline aligns to each capture frame before the hooks run (Devices/Pipeline.swift),
/// so frame k of it was playing while capture frame k was captured; what is left for
/// the canceller is the acoustic path. `source` is set on the loop thread before the
/// audio threads start (the hook chain is built before the duplex pipeline that owns
/// the reference).
public final class LiveReference: EchoReference, @unchecked Sendable {
    public var source: PlaybackReference?

    public init(source: PlaybackReference? = nil) { self.source = source }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool {
        guard let source, source.frameSamples == count, let b = source.samples.baseAddress else {
            reference.update(repeating: 0, count: count)
            return false
        }
        reference.update(from: b, count: count)
        return source.coverage > 0
    }
}

/// Acoustic echo cancellation with speexdsp's MDF (multidelay block frequency-domain)
/// adaptive filter, behind a bulk-delay search: the echo of the reference is estimated
/// and subtracted from the microphone frame.
///
/// Delay and tail: MDF models `filterMilliseconds` of echo path (the room's tail; default
/// 250 ms). The echo delay (device buffers plus air, 10–300 ms here, unknown) is found
/// first and the reference delayed by it, less a 20 ms margin: a filter long enough for
/// delay and tail together (550 ms) converged far too slowly and stayed at 3–9 dB ERLE in
/// the tests for 120 and 250 ms delays, against 16–19 dB for the delay-compensated one.
///
/// The search: both signals are averaged down to 2 kHz (boxcar, decimation by 8, 12 or
/// 24), and for every lag of 0–350 ms a leaky (time constant 1.3 s) cross-correlation
/// and reference energy are kept; every 0.25 s of far-end signal the lag maximising
/// correlation²/energy (or the earliest lag within 3 dB of it) becomes the delay if its
/// peak stands out (6 dB over the mean of
/// the lags), agrees with the previous decision within 10 ms and no longer lies 5–40 ms
/// into the filter (once a delay is in use: four decisions in a row, a peak twice the one at
/// the lag in use, and later than the filter's first half); then the filter restarts (its
/// taps no longer line up). Its cost is 28,000 multiply-adds a frame (bench/audio.sh prints it).
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
    public static let tuning = 2
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
    private let upOut: UnsafeMutablePointer<Int16>
    /// The preprocessor run on the work-rate output (residual echo and noise
    /// suppression, voice flag), when one was made with this canceller; set before
    /// audio starts.
    private(set) var post: SpeexPreprocessor?
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
    /// Whether this frame's residual is more than the echo the filter leaves (`process`);
    /// capture thread only, for the attached preprocessor.
    private(set) var nearEnd = true
    /// A fixed delay instead of the search (tests); nil: search.
    public let fixedDelaySamples: Int?

    /// - filterMilliseconds: 20…1000, the echo path the filter models after the delay.
    /// - fixedDelayMilliseconds: a known delay instead of the search (0…300).
    public init(rate: SampleRate, filterMilliseconds: Int = 250, fixedDelayMilliseconds: Int? = nil,
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
    func attach(_ p: SpeexPreprocessor) { post = p }
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

    /// A new session starts from an untrained filter (the echo path may have changed).
    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        speex_echo_state_reset(state)
        startTraining()
        micDown?.reset()
        farDown?.reset()
        upsampler?.reset()
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        guard let near = speexFrame(samples, info, rate: rate, frameSamples: frameSamples) else { return .pass }
        let n = workSamples
        if let micDown, let farDown {
            if !callRead(reference, farFull, frameSamples, info) { farFull.update(repeating: 0, count: frameSamples) }
            // 10 ms in gives exactly 10 ms out (Resampler); the sizes are fixed at init,
            // so neither call can throw.
            _ = try? farDown.process(UnsafeBufferPointer(start: farFull, count: frameSamples), into: UnsafeMutableBufferPointer(start: far, count: n &+ 2))
            _ = try? micDown.process(UnsafeBufferPointer(start: near, count: frameSamples), into: UnsafeMutableBufferPointer(start: work, count: n &+ 2))
        } else {
            if !callRead(reference, far, n, info) { far.update(repeating: 0, count: n) }
            work.update(from: near, count: n)
        }
        // The newest reference frame into the line, then the delayed one out of it.
        let w = lineWritten.pointee
        (line + w).update(from: far, count: n)
        lineWritten.pointee = w &+ n == lineLength ? 0 : w &+ n
        if fixedDelaySamples == nil { searchDelay(work) }
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
        // The delayed reference is what this frame's echo comes from: above −60 dBFS RMS,
        // the frame counts for the convergence measures.
        let farActive = farPower > Int64(n) &* 32 &* 32
        speex_echo_cancellation(state, work, far, out)
        var pi: Int64 = 0, po: Int64 = 0
        if farActive {
            for i in 0..<n {
                pi &+= Int64(work[i]) &* Int64(work[i])
                po &+= Int64(out[i]) &* Int64(out[i])
            }
        }
        // Double talk: the filter's residual stands 6 dB over what it leaves of the echo
        // on average (its output-to-input power over the last second or so of far end):
        // something the reference does not explain, the near end. Without far end
        // anything heard is near end. The attached preprocessor's voice flag counts only
        // such frames (the residual echo alone held it for up to 250 ms before).
        if farActive {
            let s = search.pointee
            nearEnd = Double(po) * Double(s.inputPower) > 2 * Double(s.outputPower) * Double(pi)
        } else {
            nearEnd = true
        }
        if let post { post.run(out) }
        if farActive {
            var ps: Int64 = 0
            for i in 0..<n { ps &+= Int64(out[i]) &* Int64(out[i]) }
            let s = search
            s.pointee.inputPower = s.pointee.inputPower &- (s.pointee.inputPower &>> 7) &+ pi
            s.pointee.outputPower = s.pointee.outputPower &- (s.pointee.outputPower &>> 7) &+ po
            s.pointee.suppressedPower = s.pointee.suppressedPower &- (s.pointee.suppressedPower &>> 7) &+ ps
            trainingFrames &+= 1
            // After a second of far end at least, so the sums hold more than a start.
            // (Nested ifs and literals: `&&` takes an autoclosure, which the RT audit
            // counts, and a static's first use on this thread would initialise it here.)
            if trainingFrames >= 100 {
                if s.pointee.suppressedPower &* 32 <= s.pointee.inputPower || trainingFrames >= 800 {
                    convergedFlag.store(true, ordering: .relaxed)
                }
            }
        }
        if let upsampler {
            let m = (try? upsampler.process(UnsafeBufferPointer(start: out, count: n), into: UnsafeMutableBufferPointer(start: upOut, count: frameSamples &+ 2))) ?? 0
            let k = min(m, frameSamples)
            near.update(from: upOut, count: k)
            if k < frameSamples { (near + k).update(repeating: 0, count: frameSamples &- k) }
        } else {
            near.update(from: out, count: n)
        }
        frames.store(frames.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        return .pass
    }

    /// The filter starts from nothing: not converged, its measures forgotten.
    @inline(__always)
    private func startTraining() {
        trainingFrames = 0
        search.pointee.inputPower = 0
        search.pointee.outputPower = 0
        search.pointee.suppressedPower = 0
        convergedFlag.store(false, ordering: .relaxed)
    }

    /// One frame of the bulk-delay search at the work rate (`far` holds the undelayed
    /// reference frame).
    /// Returns whether the frame had far-end signal.
    @inline(__always) @discardableResult
    private func searchDelay(_ near: UnsafeMutablePointer<Int16>) -> Bool {
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
        let corr = s.pointee.correlation, energy = s.pointee.energy
        let mic = s.pointee.micDecimated
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
        guard bestScore > 4 * total / Double(DelaySearch.lags) else { return true }
        // The earliest lag within 3 dB of the peak: in a room a reflection can correlate
        // more than the direct path, and a filter that starts after the direct path
        // cannot model it (the tests saw a 0.5 s room lock 44 ms late without this).
        for lag in 0..<best {
            let c = Double(corr[lag])
            if energy[lag] > 0 && c * c / Double(energy[lag]) >= bestScore / 2 { best = lag; break }
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
        if settled {
            let c = Double(corr[locked])
            let lockedScore = energy[locked] > 0 ? c * c / Double(energy[locked]) : 0
            // A filter that cancels is never restarted: over the last second or so of far
            // end it took 6 dB or more off the microphone (with the near end talking
            // too, less: that cannot make it move). Without this, EchoDriftTests saw a
            // settled filter at 21 dB restarted 10.5 s in by a reflection's peak.
            let working = s.pointee.outputPower &* 4 <= s.pointee.inputPower
            if working || abs(best &- locked) * decimation <= workRate.hertz / 100 || bestScore < 2 * lockedScore {
                s.pointee.agreeing = 0
                return true
            }
        }
        if previous >= 0 && abs(previous &- found) <= workRate.hertz / 100 { s.pointee.agreeing &+= 1 } else { s.pointee.agreeing = 0 }
        guard s.pointee.agreeing >= (settled ? 3 : 1) else { return true }
        let wanted = max(0, found &- workRate.hertz / 50)
        let current = delay.load(ordering: .relaxed)
        // The delay in use fits while the direct path lies 5–40 ms into the filter. Once a
        // delay is locked, a later peak moves it only past half the filter: in a
        // reverberant room a reflection's peak can outgrow the direct path's for a while,
        // and moving to it put the direct path before the filter's start and restarted it
        // three more times (RT60 0.5 s, 120 ms: ERLE 7.5 dB after 12 s; with this rule one
        // restart and 25.5 dB). A filter still holds a peak in its first half.
        let latest = locked < 0 ? workRate.hertz / 25 : workRate.hertz / 1000 * filterMilliseconds / 2
        if found < current &+ workRate.hertz / 200 || found > current &+ latest {
            s.pointee.agreeing = 0
            s.pointee.lockedLag = best
            s.pointee.sinceMove = 0
            delay.store(wanted, ordering: .relaxed)
            speex_echo_state_reset(state)
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

/// speexdsp's preprocessor as a hook: noise suppression (`noiseSuppressDB`), residual
/// echo suppression behind an `EchoCanceller` (`echoSuppressDB`), and a voice-activity
/// flag from its speech probability. Each part is off unless configured; with noise and
/// echo suppression both off the samples are not changed (the preprocessor still
/// analyses them for the flag).
///
/// The flag: the speech probability (0…100 %) with hysteresis, on at ≥ 80 % and off
/// below 50 %. (speexdsp's SET_VAD path is called a placeholder by speexdsp itself, and
/// its 35/20 % thresholds flag white noise at −50 dBFS as speech: the tests measured
/// 35–64 % there and 63–99 % in speech.)
public final class SpeexPreprocessor: AudioHook, @unchecked Sendable {
    public let rate: SampleRate
    public let noiseSuppressDB: Int
    public let echoSuppressDB: Int
    let state: OpaquePointer
    /// The canceller this preprocessor runs inside (which keeps it, `post`). Unowned: a
    /// strong reference back would make the two a cycle that outlives them; the
    /// canceller is the only caller of `run` behind it, so it is alive whenever this
    /// reads it. (unsafe: no reference counting on the audio thread.)
    private unowned(unsafe) let canceller: EchoCanceller?
    private let frameSamples: Int
    private let active = Atomic<Bool>(false)
    private let probability = Atomic<Int>(0)
    private let voiceFrames = Atomic<Int>(0)
    /// How long the voice has held, in 10 ms frames (0: off): the loop debounces
    /// barge-in with it, exactly, however seldom it reads (AgentCore.localVoice).
    /// Only frames where speexdsp's flag is on and the frame is voice rather than what
    /// the echo canceller left count (`process`); gaps of up to `bridgedFrames` (the
    /// pauses between syllables) do not end the stretch.
    private let voiceRun = Atomic<Int>(0)
    /// The input's energy one frame back: the preprocessor's output lags by a frame.
    private var lastInputEnergy = 0
    /// The output's floor: the quietest recent frames' energy (it falls at once and
    /// rises about 7 dB a second).
    private var floorEnergy = Int.max >> 8
    private var gapFrames = 0
    /// A voice frame keeps at least a quarter of its input's power (−6 dB) …
    static let keptPowerRatio = 4
    /// … and stands 18 dB over the floor (noise, and the echo left under it, do not).
    static let standOutRatio = 64
    static let bridgedFrames = 3
    /// Whether the samples are changed at all (a suppression is on).
    private let suppresses: Bool
    private let scratch: UnsafeMutablePointer<Int16>

    /// - noiseSuppressDB: 0 (off) or 1…60, the attenuation of stationary noise.
    /// - echoSuppressDB: 0 (off) or 1…60, the attenuation of residual echo; needs `echo`.
    /// - echo: a canceller to work behind. The preprocessor then runs inside it, at its
    ///   work rate, on each frame it cancelled (before it goes back to the pipeline
    ///   rate); as a hook in the chain it passes frames unchanged. `rate` is then the
    ///   canceller's work rate.
    public init(rate: SampleRate, noiseSuppressDB: Int = 0, echoSuppressDB: Int = 0,
                echo: EchoCanceller? = nil) throws(AudioError) {
        try checkRange(.suppressDB, Double(noiseSuppressDB), 0, 60)
        try checkRange(.suppressDB, Double(echoSuppressDB), 0, 60)
        let rate = echo?.workRate ?? rate
        self.rate = rate
        attached = echo != nil
        self.noiseSuppressDB = noiseSuppressDB
        self.echoSuppressDB = echo == nil ? 0 : echoSuppressDB
        canceller = echo
        frameSamples = rate.samplesPerFrame
        state = speex_preprocess_state_init(Int32(frameSamples), Int32(rate.hertz))
        scratch = .allocate(capacity: frameSamples)
        scratch.initialize(repeating: 0, count: frameSamples)
        suppresses = noiseSuppressDB > 0 || self.echoSuppressDB > 0
        // speexdsp applies its echo suppression only with denoise on; a noise
        // suppression of 0 dB leaves the noise floor alone.
        _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_DENOISE, suppresses ? 1 : 0)
        _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, Int32(0 &- noiseSuppressDB))
        _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_AGC, 0)
        _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_DEREVERB, 0)
        if let echo, self.echoSuppressDB > 0 {
            _ = linnet_pre_set_echo(state, echo.state)
            _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, Int32(0 &- self.echoSuppressDB))
            // During double talk, 15 dB less (speexdsp's default ratio of the two).
            _ = linnet_pre_set_int(state, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, Int32(0 &- max(1, self.echoSuppressDB &- 25)))
        }
        echo?.attach(self)
    }

    deinit {
        speex_preprocess_state_destroy(state)
        scratch.deallocate()
    }

    /// Whether a canceller runs this preprocessor (`init(echo:)`).
    public let attached: Bool

    /// Whether the last frames hold speech (the voice-activity flag); any thread.
    public var voiceActive: Bool { active.load(ordering: .relaxed) }
    /// The last frame's speech probability, 0…100 %.
    public var speechProbability: Int { probability.load(ordering: .relaxed) }
    /// Frames the flag was on so far.
    public var voiceFrameCount: Int { voiceFrames.load(ordering: .relaxed) }
    /// How long the voice has held (`voiceRun`), in audio time (zero: off); any thread.
    public var voiceHeld: Duration { .milliseconds(Int64(voiceRun.load(ordering: .relaxed)) &* 10) }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        if attached { return .pass }
        guard let base = speexFrame(samples, info, rate: rate, frameSamples: frameSamples) else { return .pass }
        run(base)
        return .pass
    }

    /// One frame (`frameSamples` at `rate`) in place: the hook's work, and what an
    /// attached canceller calls on its work-rate output.
    #if RT_AUDIT
    @_noLocks
    #endif
    func run(_ base: UnsafeMutablePointer<Int16>) {
        let inputEnergy = Self.energy(base, frameSamples)
        let output: UnsafeMutablePointer<Int16>
        if suppresses {
            _ = speex_preprocess_run(state, base)
            output = base
        } else {
            // The probability comes only from a full run: on a copy, so the frame stays.
            scratch.update(from: base, count: frameSamples)
            _ = speex_preprocess_run(state, scratch)
            output = scratch
        }
        // speexdsp's probability does not tell the user from the echo left behind the
        // canceller (its flag held on through echo alone for up to 1.6 s after
        // convergence, VoiceFlagBehindEchoTests): a frame the suppressors cut by more
        // than 6 dB was mostly echo, and one near the floor is noise or residue.
        let outputEnergy = Self.energy(output, frameSamples)
        floorEnergy = min(outputEnergy, floorEnergy &+ floorEnergy >> 6 &+ 1)
        var kept = outputEnergy &* Self.keptPowerRatio >= lastInputEnergy && outputEnergy >= floorEnergy &* Self.standOutRatio
        // Behind a canceller: only where its residual says near end (EchoCanceller.nearEnd).
        if let canceller { if !canceller.nearEnd { kept = false } }
        lastInputEnergy = inputEnergy
        let p = Int(linnet_pre_get_int(state, SPEEX_PREPROCESS_GET_PROB))
        probability.store(p, ordering: .relaxed)
        let was = active.load(ordering: .relaxed)
        let now = was ? p >= 50 : p >= 80
        active.store(now, ordering: .relaxed)
        if now { voiceFrames.store(voiceFrames.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
        let run = voiceRun.load(ordering: .relaxed)
        if now && kept {
            gapFrames = 0
            voiceRun.store(run &+ 1, ordering: .relaxed)
        } else if run > 0 && gapFrames < Self.bridgedFrames {
            gapFrames &+= 1
            voiceRun.store(run &+ 1, ordering: .relaxed)
        } else {
            gapFrames = 0
            voiceRun.store(0, ordering: .relaxed)
        }
    }

    @inline(__always)
    static func energy(_ p: UnsafeMutablePointer<Int16>, _ n: Int) -> Int {
        var e = 0
        for i in 0..<n { let x = Int(p[i]); e &+= x &* x }
        return e
    }
}

/// The frame a speexdsp state was made for (mono, its rate, its frame length), or nil:
/// both speexdsp hooks pass any other frame through untouched.
@inline(__always)
func speexFrame(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo, rate: SampleRate, frameSamples: Int) -> UnsafeMutablePointer<Int16>? {
    guard info.channels == 1, info.sampleRate == rate, info.sampleCount == frameSamples, samples.count >= frameSamples else { return nil }
    return samples.baseAddress
}
