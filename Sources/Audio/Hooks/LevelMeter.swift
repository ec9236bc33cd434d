// The level meter hook (peak and RMS of each frame, for LEDs and logs): one of the
// built-in fixed-point hooks (HookCoefficients.swift gives their common rule).
import Synchronization
import Wire

/// Peak and RMS level of each frame, for LEDs and logs, readable from any thread. Both
/// values of a frame are published together in one atomic word (peak in the top 16
/// bits, mean square in Q8 below), so a reader never mixes two frames.
public final class LevelMeter: AudioHook, @unchecked Sendable {
    private let reading = Atomic<UInt64>(0)
    private let frames = Atomic<Int>(0)

    public init() {}

    /// Largest magnitude of the last frame, 0…32768.
    public var peak: Int { Int(reading.load(ordering: .relaxed) &>> 48) }
    /// Mean square of the last frame (sample units squared).
    public var meanSquare: Double { Double(reading.load(ordering: .relaxed) & 0xFFFF_FFFF_FFFF) / 256 }
    /// Peak level in dBFS (0 dBFS = 32768); −∞ for silence.
    public var peakDBFS: Double { ConfigMath.linearToDB(Double(peak) / 32768) }
    /// RMS level in dBFS (full-scale square wave = 0, full-scale sine = −3.01); −∞ for silence.
    public var rmsDBFS: Double { 10 * ConfigMath.log10(meanSquare / 1073741824) }
    /// Frames measured so far.
    public var frameCount: Int { frames.load(ordering: .relaxed) }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        // Measured by the hook before (and the frame unchanged since) or here; either
        // way unchanged for the hook after.
        let (peak, e) = cachedLevels(info) ?? peakAndEnergy(frame)
        publishLevels(info, peak: peak, energy: e)
        // E·256/n ≤ 2^30·256 = 2^38: fits the low 48 bits.
        let msQ8 = frame.count > 0 ? UInt64(e &<< 8) / UInt64(frame.count) : 0
        reading.store(UInt64(peak) &<< 48 | msQ8, ordering: .relaxed)
        frames.store(frames.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        return .pass
    }
}
