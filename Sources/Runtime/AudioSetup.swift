// The capture hooks and the Opus settings, from a Config's `hooks` and `codec` rows: the
// one function `run` (AudioIO.capture) and `linnet audio` build their pipeline with, so
// the same keys give the same chain (a test compares them).
import Audio
import Codec
import Agent
import Settings

public struct AudioSetup {
    public let rate: SampleRate
    /// The device channel that becomes the voice; nil: the average of all.
    public let channel: Int?
    public let bitrate: Int32
    public let complexity: Int32
    public let fec: Bool
    public let dtx: Bool
    /// `frame-ms`: the media frame (10 or 20 ms), as the call's Opus and RTP use it.
    public let frameMilliseconds: Int
    public let chain = HookChain()
    public let meter = LevelMeter()
    let mute = MuteGate()
    /// With `aec`: the echo canceller, first in the chain.
    public let canceller: EchoCanceller?
    /// With `noise-suppress-db` or `voice-flag`: speexdsp's preprocessor.
    public let preprocessor: SpeexPreprocessor?
    public let voiceFlag: Bool
    /// With `aec` and no reference given: set its `source` to the duplex pipeline's.
    public let liveReference: LiveReference?
    /// With a wake word: the copy of the capture its detector reads (`WakeListener`).
    public let wakeTap: WakeTap?

    /// The chain, in this order: echo cancellation, the speexdsp preprocessor (residual
    /// echo and noise suppression, voice flag), DC removal (high-pass), gain, AGC, noise gate, limiter, level meter, the wake word's tap, and the mute
    /// gate last (what push-to-talk drives). A hook whose key leaves it doing nothing
    /// (gain 0 dB, high-pass 0) is left out. The canceller comes first because it needs
    /// a linear echo path: AGC, gate and limiter change their gain with the signal.
    ///
    /// - reference: the playback reference for `aec` (offline: the speaker's file); nil:
    ///   `liveReference`, which the caller points at its duplex pipeline's reference.
    public init(config: Config, reference: (any EchoReference)? = nil) throws(CLIFailure) {
        guard let r = SampleRate(rawValue: config.rate) else { throw CLIFailure(.config, "rate must be 16000, 24000 or 48000") }
        rate = r
        if case .index(let k) = config.captureChannel { channel = k } else { channel = nil }
        bitrate = Int32(config.bitrate)
        complexity = Int32(config.complexity)
        fec = config.fec
        dtx = config.dtx
        // Live, the reference is the duplex pipeline's (set once it is built).
        let live: LiveReference? = config.aec && reference == nil ? LiveReference() : nil
        liveReference = live
        let reference = reference ?? live
        voiceFlag = config.voiceFlag
        frameMilliseconds = config.frameMS
        do throws(AudioError) {
            if config.aec, let reference {
                let c = try EchoCanceller(rate: r, filterMilliseconds: config.aecFilterMS, reference: reference)
                try chain.add(c)
                canceller = c
            } else {
                canceller = nil
            }
            // One speexdsp preprocessor for the residual echo suppressor, noise
            // suppression and the voice flag, right behind the canceller: it reads the
            // canceller's estimate of the echo left in this frame.
            let echoSuppress = canceller != nil ? config.aecSuppressDB : 0
            if echoSuppress > 0 || config.noiseSuppressDB > 0 || config.voiceFlag {
                // Behind a canceller it runs inside it, at its 16 kHz work rate.
                let p = try SpeexPreprocessor(rate: r, noiseSuppressDB: config.noiseSuppressDB, echoSuppressDB: echoSuppress, echo: canceller)
                if !p.attached { try chain.add(p) }
                preprocessor = p
            } else {
                preprocessor = nil
            }
            if config.highPassHz > 0 { try chain.add(try HighPassFilter(cutoffHz: Double(config.highPassHz))) }
            if config.gainDB != 0 { try chain.add(try GainHook(gainDB: config.gainDB)) }
            if config.agc { try chain.add(try AutomaticGainControl(targetDBFS: config.agcTargetDBFS)) }
            if config.noiseGate { try chain.add(try NoiseGate(thresholdDBFS: config.noiseGateDBFS)) }
            if config.limiter { try chain.add(try Limiter(ceilingDBFS: config.limiterDBFS)) }
            try chain.add(meter)
            // The wake word hears the room with the microphone muted: before the gate.
            if config.wakeEnabled {
                let t = try WakeTap()
                try chain.add(t)
                wakeTap = t
            } else {
                wakeTap = nil
            }
            try chain.add(mute)
        } catch {
            throw CLIFailure(.config, error.description)
        }
    }

    func encoder() throws(CLIFailure) -> OpusEncoder {
        do throws(CodecError) {
            let e = try OpusEncoder(sampleRate: Int32(rate.hertz), channels: 1)
            try e.setBitrate(bitrate)
            try e.setComplexity(complexity)
            try e.setFEC(fec)
            try e.setDTX(dtx)
            return e
        } catch {
            throw CLIFailure(.usage, error.description)
        }
    }
}
