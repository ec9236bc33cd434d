// The automatic gain control hook and its per-frame state: one of the built-in
// fixed-point hooks (HookCoefficients.swift gives their common rule).
import Wire

struct AGCState {
    /// Current gain, log2 of the amplitude ratio in Q24: the extra 8 bits below the Q16
    /// the gain is made from keep the one-pole step from stalling a few Q16 units short
    /// of the target (the step is error·k, k ≈ 0.02).
    var gainLog2Q24: Int64
    var gain: FixedGain
}

/// Automatic gain control towards a target RMS level, in the log domain.
///
/// Once per frame: the frame's mean square → log2 (Q16); if the level is above the noise
/// floor, the wanted gain is (target − level)/2 in log2-amplitude units, clamped to the
/// gain range; the gain moves towards it by a one-pole step per frame, with the attack
/// coefficient when the gain must fall (too loud) and the release one when it may rise.
/// Below the noise floor the gain holds, so pauses are not pumped up. The new gain
/// (2^x by polynomial) is applied as a linear ramp from the previous frame's gain.
public final class AutomaticGainControl: AudioHook, @unchecked Sendable {
    public let targetDBFS: Double
    public let attackMilliseconds: Double
    public let releaseMilliseconds: Double
    public let maxGainDB: Double
    public let minGainDB: Double
    public let noiseFloorDBFS: Double
    private let targetLog2: Int32
    private let floorLog2: Int32
    private let maxLog2: Int32
    private let minLog2: Int32
    private let attackQ15: Int32
    private let releaseQ15: Int32
    private let state: UnsafeMutablePointer<AGCState>

    /// - targetDBFS: −40…−3 (RMS; a full-scale sine is −3.01).
    /// - attackMilliseconds: 1…2000, time constant of gain decrease.
    /// - releaseMilliseconds: 10…10000, time constant of gain increase.
    /// - maxGainDB: 0…40; minGainDB: −40…0.
    /// - noiseFloorDBFS: −90…−20; quieter frames leave the gain alone.
    public init(targetDBFS: Double = -18, attackMilliseconds: Double = 20, releaseMilliseconds: Double = 400,
                maxGainDB: Double = 24, minGainDB: Double = -12, noiseFloorDBFS: Double = -60) throws(AudioError) {
        try checkRange(.targetDBFS, targetDBFS, -40, -3)
        try checkRange(.attackMilliseconds, attackMilliseconds, 1, 2000)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 10, 10000)
        try checkRange(.maxGainDB, maxGainDB, 0, 40)
        try checkRange(.minGainDB, minGainDB, -40, 0)
        try checkRange(.noiseFloorDBFS, noiseFloorDBFS, -90, -20)
        self.targetDBFS = targetDBFS
        self.attackMilliseconds = attackMilliseconds
        self.releaseMilliseconds = releaseMilliseconds
        self.maxGainDB = maxGainDB
        self.minGainDB = minGainDB
        self.noiseFloorDBFS = noiseFloorDBFS
        targetLog2 = meanSquareLog2Q16(dBFS: targetDBFS)
        floorLog2 = meanSquareLog2Q16(dBFS: noiseFloorDBFS)
        maxLog2 = amplitudeLog2Q16(dB: maxGainDB)
        minLog2 = amplitudeLog2Q16(dB: minGainDB)
        attackQ15 = onePoleQ15(milliseconds: attackMilliseconds)
        releaseQ15 = onePoleQ15(milliseconds: releaseMilliseconds)
        state = .allocate(capacity: 1)
        state.initialize(to: AGCState(gainLog2Q24: 0, gain: .unity))
    }

    deinit { state.deallocate() }

    /// The gain in effect, in dB (any thread may read it approximately; tests use it).
    public var currentGainDB: Double { Double(state.pointee.gainLog2Q24) / 16777216 * 20 * ConfigMath.log10(2) }
    /// The per-frame attack and release coefficients as quantised (Q15 / 32768).
    public var attackCoefficient: Double { Double(attackQ15) / 32768 }
    public var releaseCoefficient: Double { Double(releaseQ15) / 32768 }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = AGCState(gainLog2Q24: 0, gain: .unity)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        let cached = cachedLevels(info)
        let e = cached?.energy ?? energy(frame)
        var g = state.pointee.gainLog2Q24
        if e > 0 {
            let level = meanSquareLog2Q16(energy: e, count: frame.count)
            if level >= floorLog2 {
                let wanted = Int64(min(max((targetLog2 &- level) &>> 1, minLog2), maxLog2)) &<< 8
                let k = Int64(wanted < g ? attackQ15 : releaseQ15)
                g = g &+ (((wanted &- g) &* k &+ 0x4000) &>> 15)
            }
        }
        let newGain = FixedGain(log2Q16: Int32(truncatingIfNeeded: (g &+ 128) &>> 8))
        let oldGain = state.pointee.gain
        // (Locals only in the condition: an `&&` over `state` would capture self.)
        if let cached, newGain == .unity && oldGain == .unity {
            publishLevels(info, peak: cached.peak, energy: cached.energy) // unity: unchanged
        }
        applyGainRamp(frame, channels: info.channels, from: oldGain, to: newGain)
        state.pointee.gainLog2Q24 = g
        state.pointee.gain = newGain
        return .pass
    }
}
