// The constant-gain hook (`GainHook`): one of the built-in fixed-point hooks
// (HookCoefficients.swift gives their common rule).
import Synchronization
import Wire

/// A constant gain in dB (−40…+40), changeable from any thread while audio runs; a
/// change ramps over one frame.
public final class GainHook: AudioHook, @unchecked Sendable {
    /// The requested gain packed as mantissa << 8 | shift.
    private let requested: Atomic<Int>
    private let current: UnsafeMutablePointer<FixedGain>

    public init(gainDB: Double = 0) throws(AudioError) {
        try checkRange(.gainDB, gainDB, -40, 40)
        let g = FixedGain(linear: ConfigMath.dbToLinear(gainDB))
        requested = Atomic<Int>(GainHook.pack(g))
        current = .allocate(capacity: 1)
        current.initialize(to: g)
    }

    deinit { current.deallocate() }

    /// Sets the gain (any thread); the audio thread ramps to it over the next frame.
    public func setGain(dB: Double) throws(AudioError) {
        try checkRange(.gainDB, dB, -40, 40)
        requested.store(GainHook.pack(FixedGain(linear: ConfigMath.dbToLinear(dB))), ordering: .relaxed)
    }

    /// The gain in effect as a linear factor (as quantised).
    public var gain: FixedGain { GainHook.unpack(requested.load(ordering: .relaxed)) }

    static func pack(_ g: FixedGain) -> Int { Int(g.mantissa) &<< 8 | Int(g.shift) }
    @inline(__always) static func unpack(_ v: Int) -> FixedGain {
        FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        let v = requested.load(ordering: .relaxed)
        current.pointee = FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let v = requested.load(ordering: .relaxed)
        let target = FixedGain(mantissa: Int32(truncatingIfNeeded: v &>> 8), shift: Int32(truncatingIfNeeded: v & 0xFF))
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        applyGainRamp(frame, channels: info.channels, from: current.pointee, to: target)
        current.pointee = target
        return .pass
    }
}
