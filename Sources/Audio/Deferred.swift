import Synchronization
import Wire

/// Capture-thread state of a `DeferredHook`.
struct DeferredState {
    var framesInSession: Int
    /// Bit (sequence mod 64) set when that frame reached the consumer.
    var delivered: UInt64
}

/// Counters of a `DeferredHook` (a snapshot; each is monotonic).
public struct DeferredCounters: Sendable, Equatable {
    /// Frames handed to the consumer.
    public var hooked: Int
    /// Frames put back in time and sent.
    public var putBack: Int
    /// Frames handed to the consumer but not put back by their deadline: sent as silence.
    public var late: Int
    /// Frames that could not be handed to the consumer (its ring was full): sent as silence.
    public var dropped: Int
}

/// The "hook and put back" path, for work that cannot run on the capture thread
/// (speech recognition, wake word, voice changers).
///
/// On the capture thread the hook copies each frame into a ring for the consumer and
/// sends, in its place, the frame that was captured `deadlineFrames` frames earlier, as
/// the consumer put it back, or silence if it did not come back in time (`late`), or if
/// it never reached the consumer because its ring was full (`dropped`). So the path adds
/// `deadlineFrames` × 10 ms of latency, and the consumer has that long per frame. The
/// first `deadlineFrames` frames of a session are silence while the delay line fills.
///
/// The consumer thread calls `receive(into:)`, changes the samples if it likes (never the
/// format), and `putBack(_:_:)` with the `FrameInfo` it received; a frame that is not
/// to be changed must still be put back (as with the mobile SDKs' put-back APIs).
/// Nothing is allocated per frame: both rings are fixed slots made at init.
/// Sequence numbers must count up by one per frame and keep increasing across sessions.
public final class DeferredHook: AudioHook, @unchecked Sendable {
    /// Frames of delay the consumer has to put a frame back.
    public let deadlineFrames: Int
    // The rings, owned here and used through `Borrowed` views (no reference counting
    // on the capture thread).
    private let outboxRing: FrameRing // capture → consumer
    private let inboxRing: FrameRing  // consumer → capture
    private let outboxRef: Borrowed<FrameRing>
    private let inboxRef: Borrowed<FrameRing>
    /// hooked, putBack, late, dropped: atomics in raw memory so the capture-side helpers
    /// can reach them without capturing `self` (which the RT audit counts as a retain).
    private let counts: UnsafeMutablePointer<Atomic<Int>>
    private let state: UnsafeMutablePointer<DeferredState>


    /// - deadlineFrames: 1…32 frames of delay (default 2 = 20 ms).
    /// - slotCount: frames each ring holds, a power of two greater than `deadlineFrames`.
    /// - slotSamples: the largest frame, interleaved (default 960 = 48 kHz stereo).
    public init(deadlineFrames: Int = 2, slotCount: Int = 8, slotSamples: Int = 960) throws(AudioError) {
        try checkRange(.deadlineFrames, Double(deadlineFrames), 1, 32)
        try checkRange(.slotCount, Double(slotCount), Double(deadlineFrames &+ 1), 1024)
        self.deadlineFrames = deadlineFrames
        outboxRing = try FrameRing(slotCount: slotCount, slotSamples: slotSamples)
        inboxRing = try FrameRing(slotCount: slotCount, slotSamples: slotSamples)
        outboxRef = Borrowed(outboxRing)
        inboxRef = Borrowed(inboxRing)
        state = .allocate(capacity: 1)
        state.initialize(to: DeferredState(framesInSession: 0, delivered: 0))
        counts = .allocate(capacity: 4)
        for i in 0..<4 { (counts + i).initialize(to: Atomic<Int>(0)) }
    }

    deinit {
        state.deallocate()
        counts.deinitialize(count: 4)
        counts.deallocate()
    }

    public var counters: DeferredCounters {
        DeferredCounters(hooked: counts[0].load(ordering: .relaxed), putBack: counts[1].load(ordering: .relaxed),
                         late: counts[2].load(ordering: .relaxed), dropped: counts[3].load(ordering: .relaxed))
    }

    // MARK: consumer thread

    /// The next hooked frame, copied into `buffer` (which should hold `slotSamples`);
    /// nil when none is waiting.
    public func receive(into buffer: UnsafeMutableBufferPointer<Int16>) -> FrameInfo? {
        outboxRef.use { $0.pop(into: buffer) }
    }

    /// Hands a (possibly changed) frame back for sending. False if the return ring is
    /// full or the sample count is not the frame's; a frame put back after its deadline
    /// is accepted here and discarded by the capture side.
    @discardableResult
    public func putBack(_ samples: UnsafeBufferPointer<Int16>, _ info: FrameInfo) -> Bool {
        if samples.count != info.sampleCount { return false }
        return inboxRef.use { $0.push(samples, info: info) }
    }

    // MARK: capture thread

    #if RT_AUDIT
    @_noLocks
    #endif
    public func captureDidStart(_ format: AudioFormat) {
        state.pointee.framesInSession = 0
        state.pointee.delivered = 0
        inboxRef.use { inbox in
            while inbox.discard() {}
        }
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let seq = info.sequence
        let bit = UInt64(1) &<< (seq & 63)
        let pushed = outboxRef.use { $0.push(UnsafeBufferPointer(samples), info: info) }
        if pushed {
            bumpCounter(counts, 0) // hooked
            state.pointee.delivered |= bit
        } else {
            bumpCounter(counts, 3) // dropped
            state.pointee.delivered &= ~bit
        }
        state.pointee.framesInSession &+= 1
        if state.pointee.framesInSession <= deadlineFrames {
            zeroFrame(samples)
            return .silence
        }
        let due = seq &- UInt64(deadlineFrames)
        let state = self.state
        let counts = self.counts
        return inboxRef.use { inbox in
            deferredTakeBack(inbox, samples, info, due, state, counts)
        }
    }
}

#if RT_AUDIT
@_noLocks
#endif
@inline(__always)
private func deferredTakeBack(_ inbox: FrameRing, _ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo,
                             _ due: UInt64, _ state: UnsafeMutablePointer<DeferredState>,
                             _ counts: UnsafeMutablePointer<Atomic<Int>>) -> HookVerdict {
    // Frames for earlier slots came back too late (they were counted then): drop them.
    while let head = inbox.peek(), head.sequence < due { inbox.discard() }
    if let head = inbox.peek(), head.sequence == due {
        if head.sampleCount == info.sampleCount {
            _ = inbox.pop(into: samples)
            bumpCounter(counts, 1) // putBack
            return .pass
        }
        inbox.discard()
    }
    zeroFrame(samples)
    if state.pointee.delivered & (UInt64(1) &<< (due & 63)) != 0 { bumpCounter(counts, 2) } // late
    return .silence
}

/// Single-writer counter increment: a relaxed load and store, no read-modify-write.
@inline(__always)
private func bumpCounter(_ counts: UnsafeMutablePointer<Atomic<Int>>, _ i: Int) {
    counts[i].store(counts[i].load(ordering: .relaxed) &+ 1, ordering: .relaxed)
}
