// Where the echo canceller's playback reference comes from: the protocol, the staged
// reference (offline runs, tests) and the live one (a duplex pipeline's playback).
// Apart from the canceller, which only reads through the protocol.

/// Where the echo canceller gets the playback reference for a capture frame: the samples
/// the speaker played while the frame was captured, mono, at the frame's rate.
///
/// Called on the capture thread: no allocation, no lock, no logging.
public protocol EchoReference: AnyObject {
    /// Writes `count` samples for the capture frame `info` to `reference`; false when
    /// there is no reference for it (the canceller then treats the speaker as silent).
    func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool
}

/// A reference the caller sets before each capture frame, on the capture thread (the
/// offline `linnet audio --reference`, tests).
public final class StagedReference: EchoReference, @unchecked Sendable {
    private let buffer: UnsafeMutablePointer<Int16>
    private let staged: UnsafeMutablePointer<Int>
    public let capacity: Int

    public init(capacity: Int = 480) {
        self.capacity = capacity
        buffer = .allocate(capacity: capacity)
        buffer.initialize(repeating: 0, count: capacity)
        staged = .allocate(capacity: 1)
        staged.initialize(to: 0)
    }

    deinit {
        buffer.deallocate()
        staged.deallocate()
    }

    /// The next frame's reference (at most `capacity` samples; the rest reads as silence).
    public func stage(_ samples: UnsafeBufferPointer<Int16>) {
        let n = min(samples.count, capacity)
        if let b = samples.baseAddress { buffer.update(from: b, count: n) }
        staged.pointee = n
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool {
        let n = min(count, staged.pointee)
        copySamples(reference, buffer, n)
        if n < count { zeroFrame(UnsafeMutableBufferPointer(start: reference + n, count: count &- n)) }
        let had = staged.pointee > 0
        staged.pointee = 0
        return had
    }
}

/// The live reference: a duplex pipeline's `PlaybackReference`, which the capture
/// pipeline aligns to each capture frame before the hooks run (Devices/Pipeline.swift),
/// so frame k of it was playing while capture frame k was captured; what is left for
/// the canceller is the acoustic path. `source` is set on the loop thread before the
/// audio threads start (the hook chain is built before the duplex pipeline that owns
/// the reference).
public final class LiveReference: EchoReference, @unchecked Sendable {
    public var source: PlaybackReference? {
        didSet { sourceRef = source.map { Borrowed($0) } }
    }
    /// `source` for the capture thread, without a retain (`source` keeps it alive).
    private var sourceRef: Borrowed<PlaybackReference>?

    public init(source: PlaybackReference? = nil) {
        self.source = source
        sourceRef = source.map { Borrowed($0) }
    }

    #if RT_AUDIT
    @_noLocks
    #endif
    public func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool {
        let covered = sourceRef?.use { source -> Int in
            guard source.frameSamples == count, let b = source.samples.baseAddress else { return -1 }
            copySamples(reference, b, count)
            return source.coverage
        } ?? -1
        if covered < 0 { zeroFrame(UnsafeMutableBufferPointer(start: reference, count: count)) }
        return covered > 0
    }
}
