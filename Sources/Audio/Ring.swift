import Synchronization
import Wire

// Single-producer single-consumer rings over preallocated storage (the shape of
// PipeWire's spa/utils/ringbuffer.h). Indices count up forever (wrapping) and are masked
// with capacity − 1, so "full" and "empty" are told apart without a spare slot.
// Ordering: the producer writes the data, then publishes the write index with a
// release store; the consumer reads the write index with an acquire load before
// reading the data, and hands the space back with a release store of the read index,
// which the producer loads with acquire before overwriting. Exactly one thread may push
// and exactly one (other) thread may pop.

/// An SPSC ring of Int16 samples, e.g. capture thread → encoder.
public final class SampleRing: @unchecked Sendable {
    public let capacity: Int
    private let mask: Int
    private let storage: UnsafeMutablePointer<Int16>
    private let readIndex = Atomic<Int>(0)
    private let writeIndex = Atomic<Int>(0)

    /// `capacity` samples, a power of two.
    public init(capacity: Int) throws(AudioError) {
        guard capacity > 0 && capacity & (capacity &- 1) == 0 else { throw .capacityNotPowerOfTwo(capacity) }
        self.capacity = capacity
        self.mask = capacity &- 1
        storage = .allocate(capacity: capacity)
        storage.initialize(repeating: 0, count: capacity)
    }

    deinit { storage.deallocate() }

    /// Samples waiting to be read (either side may ask; the answer is a snapshot).
    public var availableToRead: Int {
        writeIndex.load(ordering: .acquiring) &- readIndex.load(ordering: .acquiring)
    }

    /// Producer: appends as many of `samples` as fit and returns how many that was.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func push(_ samples: UnsafeBufferPointer<Int16>) -> Int {
        guard let src = samples.baseAddress else { return 0 }
        let w = writeIndex.load(ordering: .relaxed)
        let r = readIndex.load(ordering: .acquiring)
        let n = min(samples.count, capacity &- (w &- r))
        if n <= 0 { return 0 }
        let start = w & mask
        let first = min(n, capacity &- start)
        copySamples(storage + start, src, first)
        if first < n { copySamples(storage, src + first, n &- first) }
        writeIndex.store(w &+ n, ordering: .releasing)
        return n
    }

    /// Consumer: moves up to `destination.count` samples out and returns how many.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func pop(into destination: UnsafeMutableBufferPointer<Int16>) -> Int {
        guard let dst = destination.baseAddress else { return 0 }
        let r = readIndex.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        let n = min(destination.count, w &- r)
        if n <= 0 { return 0 }
        let start = r & mask
        let first = min(n, capacity &- start)
        copySamples(dst, storage + start, first)
        if first < n { copySamples(dst + first, storage, n &- first) }
        readIndex.store(r &+ n, ordering: .releasing)
        return n
    }

    /// Producer: the position after the last sample pushed (it counts up forever, as
    /// the indices do): a mark for `discard(upTo:)`.
    public var writePosition: Int { writeIndex.load(ordering: .relaxed) }

    /// Consumer: the position of the next sample to be popped (counts up forever, as
    /// `writePosition`).
    public var readPosition: Int { readIndex.load(ordering: .relaxed) }

    /// Consumer: drops what was pushed before the producer's `mark` (a `writePosition`
    /// it took), or everything waiting when `mark` is nil, and returns how many samples
    /// that was. A flush at barge-in: audio pushed after the mark stays. Only the
    /// consumer may call it: it moves the read index.
    #if RT_AUDIT
    @_noLocks
    #endif
    @discardableResult
    public func discard(upTo mark: Int? = nil) -> Int {
        let r = readIndex.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        var end = w
        // Wrapping distances: a mark behind the read index drops nothing.
        if let mark, mark &- r < w &- r { end = (mark &- r) > 0 ? mark : r }
        readIndex.store(end, ordering: .releasing)
        return end &- r
    }
}

/// An SPSC ring of fixed-size frame slots, each holding up to `slotSamples` interleaved
/// samples and the frame's `FrameInfo`. Used by the deferred ("hook and put back") path
/// in both directions.
public final class FrameRing: @unchecked Sendable {
    public let slotCount: Int
    public let slotSamples: Int
    private let mask: Int
    private let samples: UnsafeMutablePointer<Int16>
    private let infos: UnsafeMutablePointer<FrameInfo>
    private let counts: UnsafeMutablePointer<Int>
    private let readIndex = Atomic<Int>(0)
    private let writeIndex = Atomic<Int>(0)

    /// `slotCount` (a power of two) slots of `slotSamples` samples each.
    public init(slotCount: Int, slotSamples: Int) throws(AudioError) {
        guard slotCount > 0 && slotCount & (slotCount &- 1) == 0 else { throw .capacityNotPowerOfTwo(slotCount) }
        try checkRange(.slotSamples, Double(slotSamples), 1, 65536)
        self.slotCount = slotCount
        self.slotSamples = slotSamples
        self.mask = slotCount &- 1
        samples = .allocate(capacity: slotCount &* slotSamples)
        samples.initialize(repeating: 0, count: slotCount &* slotSamples)
        let blank = FrameInfo(format: .standard, samplesPerChannel: 0, sequence: 0, captureTime: .zero)
        infos = .allocate(capacity: slotCount)
        infos.initialize(repeating: blank, count: slotCount)
        counts = .allocate(capacity: slotCount)
        counts.initialize(repeating: 0, count: slotCount)
    }

    deinit {
        samples.deallocate()
        infos.deallocate()
        counts.deallocate()
    }

    /// Frames waiting to be read (a snapshot).
    public var availableToRead: Int {
        writeIndex.load(ordering: .acquiring) &- readIndex.load(ordering: .acquiring)
    }

    /// Producer: copies a frame into the next free slot. False when the ring is full or
    /// the frame is larger than a slot (nothing is written then).
    #if RT_AUDIT
    @_noLocks
    #endif
    public func push(_ frame: UnsafeBufferPointer<Int16>, info: FrameInfo) -> Bool {
        let w = writeIndex.load(ordering: .relaxed)
        let r = readIndex.load(ordering: .acquiring)
        // (Two ifs: `||` takes an autoclosure, which the RT audit counts as a retain of self.)
        if w &- r >= slotCount { return false }
        if frame.count > slotSamples { return false }
        let slot = w & mask
        if let src = frame.baseAddress {
            copySamples(samples + slot &* slotSamples, src, frame.count)
        }
        infos[slot] = info
        counts[slot] = frame.count
        writeIndex.store(w &+ 1, ordering: .releasing)
        return true
    }

    /// Consumer: the metadata of the oldest frame without removing it.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func peek() -> FrameInfo? {
        let r = readIndex.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        if w == r { return nil }
        return infos[r & mask]
    }

    /// Consumer: copies the oldest frame into `destination` (at most `destination.count`
    /// samples; the frame's own count is `info.sampleCount`), removes it and returns its
    /// metadata; nil when empty.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func pop(into destination: UnsafeMutableBufferPointer<Int16>) -> FrameInfo? {
        let r = readIndex.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        if w == r { return nil }
        let slot = r & mask
        let n = min(counts[slot], destination.count)
        if n > 0, let dst = destination.baseAddress {
            copySamples(dst, samples + slot &* slotSamples, n)
        }
        let info = infos[slot]
        readIndex.store(r &+ 1, ordering: .releasing)
        return info
    }

    /// Consumer: drops the oldest frame; false when empty.
    #if RT_AUDIT
    @_noLocks
    #endif
    @discardableResult
    public func discard() -> Bool {
        let r = readIndex.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        if w == r { return false }
        readIndex.store(r &+ 1, ordering: .releasing)
        return true
    }
}
