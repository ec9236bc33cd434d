import Synchronization
import Wire

/// A copy of every captured frame for the wake-word detector's thread; the frame itself
/// goes on unchanged.
///
/// It sits behind the echo canceller and the preprocessor and before the mute gate: the
/// detector hears the room while the microphone is muted (a wake word is said to a
/// muted device), with the assistant's own voice cancelled (no self-wakes).
/// On the capture thread it only copies into a lock-free ring; when the detector falls
/// behind and the ring is full the rest of the frame is dropped and counted, and the
/// capture thread never waits.
public final class WakeTap: AudioHook, @unchecked Sendable {
    private let ring: SampleRing
    // Used through a `Borrowed` view: no reference counting on the capture thread.
    private let ringRef: Borrowed<SampleRing>
    private let droppedCount: UnsafeMutablePointer<Atomic<Int>>

    /// - capacity: samples the ring holds, a power of two: 16384 is 341 ms at 48 kHz,
    ///   ten of the detector's 30 ms periods.
    public init(capacity: Int = 1 << 14) throws(AudioError) {
        ring = try SampleRing(capacity: capacity)
        ringRef = Borrowed(ring)
        droppedCount = .allocate(capacity: 1)
        droppedCount.initialize(to: Atomic<Int>(0))
    }

    deinit {
        droppedCount.deinitialize(count: 1)
        droppedCount.deallocate()
    }

    /// Samples dropped because the detector's thread did not keep up.
    public var dropped: Int { droppedCount.pointee.load(ordering: .relaxed) }

    // MARK: capture thread

    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let pushed = ringRef.use { $0.push(UnsafeBufferPointer(samples)) }
        if pushed < samples.count {
            droppedCount.pointee.wrappingAdd(samples.count &- pushed, ordering: .relaxed)
        }
        return .pass
    }

    // MARK: detector thread

    /// Moves what has been captured since the last call into `buffer`; returns the count.
    public func read(into buffer: UnsafeMutableBufferPointer<Int16>) -> Int {
        ringRef.use { $0.pop(into: buffer) }
    }
}
