import Wire

/// Keeps the uplink on the capture clock: decides, on the loop, for each 20 ms frame
/// (by its capture time) whether it is still worth sending, and how far RTP time must
/// jump first. Pure: time comes in as arguments.
///
/// Why: when the process is stopped (SIGSTOP, a debugger, a starved board) or the loop
/// is held (a blocking call), audio piles up behind it; sent late it arrives as a burst
/// (117 packets in one go after a 10 s stop) that the far end's jitter buffer can only
/// discard or play with seconds of delay. And where audio was never captured (the
/// process stopped, an overrun dropped it), RTP time must still move on, or every later
/// packet is stamped that much early (RFC 3550 §5.1: the timestamp follows the sampling
/// clock, which kept running).
///
/// Rules, per frame with capture time `t`, at `now`:
/// - `now − t > staleAfter` (200 ms): drop it; its 20 ms of RTP time still pass.
/// - a gap in capture times (`t` later than the previous frame's time + one frame) of at
///   least `gapThreshold` (60 ms, far above read jitter): skip that many frames of RTP
///   time before it. Measured frame to frame, so clock drift never accumulates.
/// - a stall (counted once per event): a run of stale frames, or a capture gap of at
///   least `staleAfter`.
public struct UplinkClock: Sendable {
    /// What to do with one frame: skip `skipBefore` frames of RTP time, then send it or
    /// (if `send` is false) skip its time too.
    public struct Decision: Equatable, Sendable {
        public var skipBefore: Int
        public var send: Bool

        public init(skipBefore: Int, send: Bool) {
            self.skipBefore = skipBefore
            self.send = send
        }

        /// Frames of RTP time to skip in all (the gap, and this frame when dropped).
        public var framesToSkip: Int { skipBefore + (send ? 0 : 1) }
    }

    public let frameDuration: Duration
    public let staleAfter: Duration
    public let gapThreshold: Duration
    /// Times capture stalled: stale runs and capture gaps of `staleAfter` or more.
    public private(set) var stalls = 0
    /// Frames dropped as stale.
    public private(set) var staleFrames = 0
    /// Frames of RTP time skipped for capture gaps (dropped frames not included).
    public private(set) var gapFrames = 0
    var expected: Instant? = nil
    var inStaleRun = false

    public init(frameDuration: Duration = .milliseconds(20), staleAfter: Duration = .milliseconds(200),
                gapThreshold: Duration = .milliseconds(60)) {
        self.frameDuration = frameDuration
        self.staleAfter = staleAfter
        self.gapThreshold = gapThreshold
    }

    public mutating func admit(captureTime t: Instant, now: Instant) -> Decision {
        var skip = 0
        if let e = expected {
            let gap = t - e
            if gap >= gapThreshold {
                // Round to whole frames: RTP time moves in frames of 960 samples.
                skip = Int(truncatingIfNeeded: (gap.nanoseconds + frameDuration.nanoseconds / 2) / frameDuration.nanoseconds)
                gapFrames += skip
                // A stale run already counted this stop (the frames from before it).
                if gap >= staleAfter && !inStaleRun { stalls += 1 }
            }
        }
        expected = t + frameDuration
        if now - t > staleAfter {
            if !inStaleRun { stalls += 1 }
            inStaleRun = true
            staleFrames += 1
            return Decision(skipBefore: skip, send: false)
        }
        inStaleRun = false
        return Decision(skipBefore: skip, send: true)
    }
}
