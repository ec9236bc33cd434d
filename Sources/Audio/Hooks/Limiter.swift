// The peak limiter hook and its per-frame state: one of the built-in fixed-point hooks
// (HookCoefficients.swift gives their common rule).
import Wire

struct LimiterState {
    var gainQ15: Int32
    var previousPeak: Int32
    var delayedCount: Int
}

/// Peak limiter with a ceiling in dBFS. Per frame the gain needed to bring the frame's
/// peak to the ceiling is ceiling/peak (Q15); the gain falls to it at once (attack) and
/// recovers towards unity with the release time constant, ramped across the frame. The
/// recovery moves at least one Q15 unit a frame, so it ends exactly at unity, at most
/// ln(2^15)·τ (10.4 time constants, 520 ms for the default 50 ms) plus two frames after
/// the last frame above the ceiling (checked exhaustively for every Q15 coefficient of
/// τ in 1…5000 ms and every gain a ceiling allows); from then on frames pass unchanged.
///
/// Without lookahead a falling gain is applied as a step at the frame start, so no
/// sample exceeds the ceiling. With lookahead (10 ms more latency) the frame is delayed
/// by one frame and the gain ramps down across the delayed frame to the minimum needed
/// by both the delayed and the incoming frame: the output never exceeds the ceiling and
/// has no gain steps.
public final class Limiter: AudioHook, @unchecked Sendable {
    public let ceilingDBFS: Double
    public let releaseMilliseconds: Double
    public let lookahead: Bool
    /// The ceiling as a sample magnitude.
    public let ceiling: Int32
    private let releaseQ15: Int32
    private let delay: UnsafeMutablePointer<Int16>
    private let delayCapacity: Int
    private let state: UnsafeMutablePointer<LimiterState>

    /// - ceilingDBFS: −30…0 (peak, relative to 32768).
    /// - releaseMilliseconds: 1…5000.
    /// - lookahead: delay by one frame to ramp the gain down before peaks.
    public init(ceilingDBFS: Double = -1, releaseMilliseconds: Double = 50, lookahead: Bool = false) throws(AudioError) {
        try checkRange(.ceilingDBFS, ceilingDBFS, -30, 0)
        try checkRange(.releaseMilliseconds, releaseMilliseconds, 1, 5000)
        self.ceilingDBFS = ceilingDBFS
        self.releaseMilliseconds = releaseMilliseconds
        self.lookahead = lookahead
        ceiling = min(Int32(saturating: (32768 * ConfigMath.dbToLinear(ceilingDBFS)).rounded(.down)), 32767)
        releaseQ15 = onePoleQ15(milliseconds: releaseMilliseconds)
        delayCapacity = lookahead ? SampleRate.hz48000.samplesPerFrame * AudioFormat.maxChannels : 0
        delay = .allocate(capacity: max(delayCapacity, 1))
        delay.initialize(repeating: 0, count: max(delayCapacity, 1))
        state = .allocate(capacity: 1)
        state.initialize(to: LimiterState(gainQ15: 32768, previousPeak: 0, delayedCount: 0))
    }

    deinit {
        delay.deallocate()
        state.deallocate()
    }

    /// The per-frame release coefficient as quantised, for reference models.
    public var releaseCoefficient: Double { Double(releaseQ15) / 32768 }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee = LimiterState(gainQ15: 32768, previousPeak: 0, delayedCount: 0)
        if delayCapacity > 0 { zeroFrame(UnsafeMutableBufferPointer(start: delay, count: delayCapacity)) }
    }

    /// Gain (Q15) that brings `peak` down to the ceiling; unity if it is below.
    @inline(__always)
    private func needed(_ peak: Int32) -> Int32 {
        peak > ceiling ? (ceiling &<< 15) / peak : 32768
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        // The peak from the chain's cache if the hook before measured this frame; in a
        // chain otherwise peak and energy in one pass, for the hooks after it (the meter).
        var peak: Int32
        var e: Int64 = -1
        if let l = cachedLevels(info) {
            peak = l.peak
            e = l.energy
        } else if hasLevelCache(info) {
            (peak, e) = peakAndEnergy(frame)
        } else {
            peak = Audio.peak(frame)
        }
        let g0 = state.pointee.gainQ15
        // At least one Q15 unit up while below unity: once (32768 − g)·k < 2^14 the
        // rounded step is zero, and the gain would stay at 32766 or 32767 for ever,
        // scaling every frame (and never handing the levels on in a chain).
        let released = g0 &+ max(mul16x16Q15(32768 &- g0, releaseQ15), min(32768 &- g0, 1))
        var direct = !lookahead
        if frame.count > delayCapacity { direct = true }
        if direct {
            let g1 = min(needed(peak), released)
            state.pointee.gainQ15 = g1
            // At unity throughout the frame is unchanged: its levels stay valid.
            if g0 == 32768 && g1 == 32768 && e >= 0 { publishLevels(info, peak: peak, energy: e) }
            if g1 < g0 {
                applyGain(frame, FixedGain(mantissa: g1, shift: 15))
            } else if g0 != 32768 || g1 != 32768 { // (at unity, not even the call: -Osize keeps it out of line)
                applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                              to: FixedGain(mantissa: g1, shift: 15))
            }
            return .pass
        }
        // Lookahead: out ← delayed frame, delay ← this frame.
        let g1 = min(min(needed(peak), needed(state.pointee.previousPeak)), released)
        for i in frame.indices {
            let t = frame[i]
            frame[i] = delay[i]
            delay[i] = t
        }
        state.pointee.previousPeak = peak
        state.pointee.gainQ15 = g1
        applyGainRamp(frame, channels: info.channels, from: FixedGain(mantissa: g0, shift: 15),
                      to: FixedGain(mantissa: g1, shift: 15))
        return .pass
    }
}
