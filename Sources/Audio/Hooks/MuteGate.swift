// The mute gate hook (what push-to-talk and the mute button drive): one of the
// built-in fixed-point hooks (HookCoefficients.swift gives their common rule).
import Synchronization
import Wire

/// Mute: while muted, frames become silence, but they keep flowing, so sequence numbers
/// and timestamps continue and the far end hears silence rather than a gap. Muting and
/// unmuting fade over one frame to avoid a click. `setMuted` may be called from any thread.
public final class MuteGate: AudioHook, @unchecked Sendable {
    private let muted: Atomic<Bool>
    private let wasMuted: UnsafeMutablePointer<Bool>

    public init(muted: Bool = false) {
        self.muted = Atomic<Bool>(muted)
        wasMuted = .allocate(capacity: 1)
        wasMuted.initialize(to: muted)
    }

    deinit { wasMuted.deallocate() }

    public var isMuted: Bool { muted.load(ordering: .relaxed) }
    public func setMuted(_ value: Bool) { muted.store(value, ordering: .relaxed) }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        wasMuted.pointee = muted.load(ordering: .relaxed)
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let m = muted.load(ordering: .relaxed)
        let was = wasMuted.pointee
        wasMuted.pointee = m
        let frame = UnsafeMutableBufferPointer(rebasing: samples[0..<min(info.sampleCount, samples.count)])
        if m && was {
            zeroFrame(frame)
            return .silence
        }
        if m != was {
            applyGainRamp(frame, channels: info.channels, from: m ? .unity : .zero, to: m ? .zero : .unity)
        } else if let l = cachedLevels(info) {
            publishLevels(info, peak: l.peak, energy: l.energy) // unmuted: unchanged
        }
        return .pass
    }
}
