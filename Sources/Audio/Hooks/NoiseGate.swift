// The noise gate hook and its per-frame state: one of the built-in fixed-point hooks
// (HookCoefficients.swift gives their common rule).
import Wire

struct GateState {
    var gainQ15: Int32
    var holdLeft: Int
}

/// Noise gate: open (unity) while the frame RMS is at or above the threshold and for
/// `hold` after it falls below, then the gain decays exponentially with the release
/// time constant to zero. Opening takes one frame (a ramp up). Gain changes are ramped
/// across the frame. A fully closed frame returns `.silence`.
public final class NoiseGate: AudioHook, @unchecked Sendable {
    public let thresholdDBFS: Double
    public let holdMilliseconds: Double
    public let releaseMilliseconds: Double
    private let thresholdLog2: Int32
    private let holdFrames: Int
    /// e^(−10 ms/τ) in Q15: the gain kept per frame while releasing.
    private let keepQ15: Int32
    private let state: UnsafeMutablePointer<GateState>

    /// - thresholdDBFS: −90…0 (frame RMS).
    /// - holdMilliseconds: 0…5000 (rounded to whole frames).
    /// - releaseMilliseconds: 1…5000, time constant of the closing decay.
    public init(thresholdDBFS: Double = -50, holdMilliseconds: Double = 200, releaseMilliseconds: Double = 100) throws(AudioError) {
        try checkRange(.thresholdDBFS, thresholdDBFS, -90, 0)
        try checkRange(.holdMilliseconds, holdMilliseconds, 0, 5000)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 1, 5000)
        self.thresholdDBFS = thresholdDBFS
        self.holdMilliseconds = holdMilliseconds
        self.releaseMilliseconds = releaseMilliseconds
        thresholdLog2 = meanSquareLog2Q16(dBFS: thresholdDBFS)
        holdFrames = Int(saturating: (holdMilliseconds / 10).rounded())
        keepQ15 = Int32(saturating: (ConfigMath.exp(-10 / releaseMilliseconds) * 32768).rounded())
        state = .allocate(capacity: 1)
        state.initialize(to: GateState(gainQ15: 32768, holdLeft: holdFrames))
    }

    deinit { state.deallocate() }

    /// The per-frame release factor as quantised (Q15 / 32768), for reference models.
    public var releaseFactor: Double { Double(keepQ15) / 32768 }
    public var holdFrameCount: Int { holdFrames }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = GateState(gainQ15: 32768, holdLeft: holdFrames)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        let cached = cachedLevels(info)
        let e = cached?.energy ?? energy(frame)
        let g0 = state.pointee.gainQ15
        var g1: Int32
        // (No `&&`: its autoclosure captures self, which the RT audit counts as a retain.)
        var loud = false
        if e > 0 { loud = meanSquareLog2Q16(energy: e, count: frame.count) >= thresholdLog2 }
        if loud {
            g1 = 32768
            state.pointee.holdLeft = holdFrames
        } else if state.pointee.holdLeft > 0 {
            state.pointee.holdLeft &-= 1
            g1 = 32768
        } else {
            g1 = mul16x16Q15(g0, keepQ15)
            if g1 < 4 { g1 = 0 } // below −78 dB: closed
        }
        state.pointee.gainQ15 = g1
        if g0 == 0 && g1 == 0 {
            zeroFrame(frame)
            return .silence
        }
        if let cached, g0 == 32768 && g1 == 32768 {
            publishLevels(info, peak: cached.peak, energy: cached.energy) // open: unchanged
        }
        applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                      to: FixedGain(mantissa: g1, shift: 15))
        return .pass
    }
}
