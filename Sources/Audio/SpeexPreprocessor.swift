// speexdsp's preprocessor as a hook (`SpeexPreprocessor`): residual echo and noise
// suppression and the voice-activity flag. Its own file: it runs with or without the
// echo canceller in front of it.
import Synchronization
import Wire
import CSpeexDSP

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
    /// The same for the capture thread, without a retain.
    private let cancellerRef: Borrowed<EchoCanceller>?
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
        cancellerRef = echo.map { Borrowed($0) }
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
        let inputEnergy = frameEnergy(base, frameSamples)
        // Behind a canceller: its double-talk detector's verdict on this frame.
        let nearEnd = cancellerRef?.use { $0.nearEnd } ?? true
        if echoSuppressDB > 0 {
            if let cancellerRef {
                // The canceller's double-talk detector chooses the echo suppression level
                // (speexdsp's own speech probability counts the echo left as speech), and
                // after 0.6 s of echo alone the residual estimate counts 12 dB more
                // (EchoCanceller.detectTalk).
                let hard = cancellerRef.use { $0.suppressHard }
                speexPreSet(state, LINNET_PREPROCESS_SET_TALK, nearEnd ? 1 : 0)
                speexPreSet(state, LINNET_PREPROCESS_SET_ECHO_SCALE, hard ? 4096 : 256)
            }
        }
        let output: UnsafeMutablePointer<Int16>
        if suppresses {
            speexPreprocess(state, base)
            output = base
        } else {
            // The probability comes only from a full run: on a copy, so the frame stays.
            copySamples(scratch, base, frameSamples)
            speexPreprocess(state, scratch)
            output = scratch
        }
        // speexdsp's probability does not tell the user from the echo left behind the
        // canceller (its flag held on through echo alone for up to 1.6 s after
        // convergence, VoiceFlagBehindEchoTests): a frame the suppressors cut by more
        // than 6 dB was mostly echo, and one near the floor is noise or residue.
        let outputEnergy = frameEnergy(output, frameSamples)
        floorEnergy = min(outputEnergy, floorEnergy &+ floorEnergy >> 6 &+ 1)
        // (Nested ifs: `&&` takes an autoclosure, which the RT audit counts.)
        var kept = false
        if outputEnergy &* 4 >= lastInputEnergy {
            if outputEnergy >= floorEnergy &* 64 { kept = true }
        }
        // Behind a canceller: only where it says the near end may talk (its double-talk
        // detector, or the weak-coupling rule: EchoCanceller.voiceNearEnd).
        if let cancellerRef {
            if !cancellerRef.use({ $0.voiceNearEnd }) { kept = false }
        }
        lastInputEnergy = inputEnergy
        let p = Int(speexPreGet(state, SPEEX_PREPROCESS_GET_PROB))
        probability.store(p, ordering: .relaxed)
        let was = active.load(ordering: .relaxed)
        let now = was ? p >= 50 : p >= 80
        active.store(now, ordering: .relaxed)
        if now { voiceFrames.store(voiceFrames.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
        let run = voiceRun.load(ordering: .relaxed)
        if now && kept {
            gapFrames = 0
            voiceRun.store(run &+ 1, ordering: .relaxed)
        } else if run > 0 {
            // A gap of up to `bridgedFrames` (3) does not end the stretch.
            if gapFrames < 3 {
                gapFrames &+= 1
                voiceRun.store(run &+ 1, ordering: .relaxed)
            } else {
                gapFrames = 0
                voiceRun.store(0, ordering: .relaxed)
            }
        } else {
            gapFrames = 0
            voiceRun.store(0, ordering: .relaxed)
        }
    }

}

/// The energy of `n` samples (a free function: `Self.` in the audited `run` counts as a
/// metadata access).
@inline(__always)
func frameEnergy(_ p: UnsafeMutablePointer<Int16>, _ n: Int) -> Int {
    var e = 0
    for i in 0..<n { let x = Int(p[i]); e &+= x &* x }
    return e
}
