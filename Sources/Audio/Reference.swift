import Synchronization
import Wire

/// The playback → capture reference: what the speaker played, after the playback hooks,
/// each 10 ms frame stamped with when it is heard, carried from the playback thread to
/// the capture thread through an SPSC ring; the capture side cuts out, for each capture
/// frame, the samples that were playing while it was captured.
///
/// Why: echo cancellation subtracts an estimate of the speaker's sound from
/// the microphone. Its adaptive filter covers the acoustic path (tens to hundreds of
/// milliseconds), but not an unknown, changing offset between the two streams: that is
/// taken out here, from the devices' own delays (`snd_pcm_delay` on both sides, see
/// Devices/ALSA.swift), so reference frame k and capture frame k start at the same
/// instant. What is left is the room.
///
/// Threads: `played` and `flushed` belong to the playback thread (the producer),
/// `align` to the capture thread (the consumer), and `samples`, `coverage` and
/// `captureTime` are read by capture hooks on the capture thread during `process`,
/// after the pipeline aligned them for the frame being processed. Nothing allocates,
/// locks or counts references after `init`.
///
/// Ring: slots of one 10 ms frame each, with the frame's play time and the flush
/// generation it was written in. Indices count up forever; the consumer reads slots in
/// place (between its read index and the producer's write index, which it loads with
/// acquire) and hands back only those wholly in its past, so it never copies a slot
/// twice. The producer drops a frame (counted) when the ring is full: the capture side
/// is stopped or far behind.
///
/// Flush (barge-in): frames written before a flush at time T but due at or after T
/// are never heard. The playback thread records T and moves to a new generation; the
/// capture side treats what an older generation said about times ≥ T as silence. Only
/// the latest flush time is kept: two flushes within one device buffer (tens of ms)
/// leave the audio between them in the reference (said, not worth a table).
public final class PlaybackReference: @unchecked Sendable {
    public let format: AudioFormat
    /// Samples in one frame (10 ms at the pipeline rate).
    public let frameSamples: Int
    let slotCount: Int
    let mask: Int
    let slotSamples: UnsafeMutablePointer<Int16>
    let slotTimes: UnsafeMutablePointer<Int64>
    let slotGenerations: UnsafeMutablePointer<UInt64>
    let readIndex = Atomic<Int>(0)
    let writeIndex = Atomic<Int>(0)
    /// The flush generation and the time of the latest flush (producer writes, the
    /// consumer loads the generation with acquire, then the time).
    let generation = Atomic<UInt64>(0)
    let flushedAtNanoseconds = Atomic<Int64>(Int64.max)
    /// Frames the producer could not store (the ring was full).
    public let overflows = Atomic<UInt64>(0)
    /// Capture frames aligned while something had been played (consumer).
    public let aligned = Atomic<UInt64>(0)
    /// Times the reference moved against the microphone by half a sample or more from
    /// one slot to the next (consumer): the clocks' drift spending the slack, or a
    /// timeline's jump. The echo canceller's filter has to learn the path again after
    /// a move of a sample (at 16 kHz, one sample costs most of its ERLE).
    public let placementMoves = Atomic<UInt64>(0)
    let frameNanoseconds: Int64

    // Consumer (capture thread) state.
    let window: UnsafeMutableBufferPointer<Int16>
    let consumer: UnsafeMutablePointer<ConsumerState>

    struct ConsumerState {
        var coverage: Int
        var captureTime: Int64
        /// The last slot's position less the whole samples it was placed at, in
        /// 1/1024 sample (`steadyOffset`).
        var phase: Int64
    }

    /// Hysteresis, in 1/1024 sample: a slot may sit up to 1.5 samples from where its
    /// stamp puts it (0.75 still moved it every second or two with ±0.25 ms of
    /// measurement jitter; a constant misplacement is harmless to the canceller, whose
    /// filter models it with the room).
    static let phaseSlack: Int64 = 1536

    /// The whole-sample offset of a slot that starts `nanoseconds` after the capture
    /// frame. Rounding each stamp to the nearest sample made the reference step back and
    /// forth by a sample whenever the two timelines' jitter (tens of microseconds after
    /// FrameTimeline's smoothing) straddled a half sample, and the echo canceller's
    /// filter cannot follow a path that moves like that (EchoDriftTests measured 16 dB
    /// ERLE without drift, against 24 dB with a fixed reference). So the fraction the
    /// last slot was placed with (its phase) is kept while it stays within 1.5 samples;
    /// a real drift between the two clocks still moves the placement, one sample at a
    /// time, when the phase runs out of slack.
    @inline(__always)
    func steadyOffset(_ nanoseconds: Int64, rate: Int64) -> Int {
        // Position in 1/1024 sample, to the nearest (|nanoseconds| < 1 s here: no overflow).
        let scaled = nanoseconds &* rate &* 1024
        let p = (scaled &+ (scaled >= 0 ? 500_000_000 : -500_000_000)) / 1_000_000_000
        let previous = consumer.pointee.phase
        // The nearest whole sample, or a neighbour that keeps the phase closer to the
        // previous one, if its phase is within the slack.
        let nearest = (p &+ (p >= 0 ? 512 : -512)) / 1024
        var best = nearest
        var bestPhase = p &- nearest &* 1024
        // (A range, not an array literal: that would allocate on the capture thread.)
        for delta in -2...2 where delta != 0 {
            let candidate = nearest &+ Int64(delta)
            let phase = p &- candidate &* 1024
            if abs(phase) <= Self.phaseSlack && abs(phase &- previous) < abs(bestPhase &- previous) {
                best = candidate
                bestPhase = phase
            }
        }
        if abs(bestPhase &- previous) >= 512 { placementMoves.add(1, ordering: .relaxed) }
        consumer.pointee.phase = bestPhase
        return Int(best)
    }

    /// - slots: frames the ring holds (a power of two): the playback device's buffer plus
    ///   how far the capture thread may lag (64: 640 ms).
    public init(format: AudioFormat, slots: Int = 64) throws(AudioError) {
        guard slots > 0 && slots & (slots &- 1) == 0 else { throw .capacityNotPowerOfTwo(slots) }
        guard format.channels == 1 else { throw .unsupportedChannelCount(format.channels) }
        self.format = format
        frameSamples = format.samplesPerFrame
        slotCount = slots
        mask = slots &- 1
        slotSamples = .allocate(capacity: slots &* frameSamples)
        slotSamples.initialize(repeating: 0, count: slots &* frameSamples)
        slotTimes = .allocate(capacity: slots)
        slotTimes.initialize(repeating: 0, count: slots)
        slotGenerations = .allocate(capacity: slots)
        slotGenerations.initialize(repeating: 0, count: slots)
        window = .allocate(capacity: frameSamples)
        window.initialize(repeating: 0)
        consumer = .allocate(capacity: 1)
        consumer.initialize(to: ConsumerState(coverage: 0, captureTime: 0, phase: 0))
        frameNanoseconds = 10_000_000
    }

    deinit {
        slotSamples.deallocate()
        slotTimes.deallocate()
        slotGenerations.deallocate()
        window.deallocate()
        consumer.deallocate()
    }

    // MARK: Producer (playback thread)

    /// One frame (`frameSamples` samples) the speaker plays, first sample heard at `time`.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func played(_ frame: UnsafeBufferPointer<Int16>, at time: Instant) {
        let w = writeIndex.load(ordering: .relaxed)
        let r = readIndex.load(ordering: .acquiring)
        if w &- r >= slotCount {
            overflows.add(1, ordering: .relaxed)
            return
        }
        let slot = w & mask
        let n = min(frame.count, frameSamples)
        if let src = frame.baseAddress { copySamples(slotSamples + slot &* frameSamples, src, n) }
        if n < frameSamples { zeroFrame(UnsafeMutableBufferPointer(start: slotSamples + (slot &* frameSamples &+ n), count: frameSamples &- n)) }
        slotTimes[slot] = time.nanoseconds
        slotGenerations[slot] = generation.load(ordering: .relaxed)
        writeIndex.store(w &+ 1, ordering: .releasing)
    }

    /// The speaker was silenced at `time` (its buffer dropped): frames written before
    /// now that were due from `time` on will not be heard.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func flushed(at time: Instant) {
        flushedAtNanoseconds.store(time.nanoseconds, ordering: .relaxed)
        generation.add(1, ordering: .releasing)
    }

    // MARK: Consumer (capture thread)

    /// Cuts out the reference for the capture frame whose first sample was captured at
    /// `captureTime`: `samples` then holds what was playing from that instant for 10 ms
    /// (silence where nothing was), `coverage` how many of them were really played.
    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func align(to captureTime: Instant) {
        let t = captureTime.nanoseconds
        let f = frameSamples
        zeroFrame(window)
        var covered = 0
        let currentGeneration = generation.load(ordering: .acquiring)
        let cut = flushedAtNanoseconds.load(ordering: .relaxed)
        let w = writeIndex.load(ordering: .acquiring)
        var r = readIndex.load(ordering: .relaxed)
        let rate = Int64(format.sampleRate.hertz)
        let flushed = cut != Int64.max
        // Frames that ended (or were cut by a flush) before this capture frame began are
        // no longer needed: capture times only move forward.
        while r != w {
            let slot = r & mask
            var stop = slotTimes[slot] &+ frameNanoseconds
            // (Nested ifs: `&&` takes an autoclosure, which the RT audit counts as a retain.)
            if flushed { if slotGenerations[slot] != currentGeneration { stop = min(stop, cut) } }
            if stop > t { break }
            r &+= 1
        }
        // The rest is scanned whole (a device buffer's worth, a few slots): after a flush
        // the newest frames are due before the oldest ones were.
        let end = t &+ frameNanoseconds
        var k = r
        while k != w {
            let slot = k & mask
            let start = slotTimes[slot]
            k &+= 1
            if start >= end { continue }
            // Where the slot's first sample falls in the capture frame (negative: it
            // began before the frame), to a sample, with hysteresis (`steadyOffset`).
            let offset = steadyOffset(start &- t, rate: rate)
            var last = f
            if flushed {
                if slotGenerations[slot] != currentGeneration {
                    // Written before a flush: what was due from the flush on never played.
                    last = min(last, sampleOffset(cut &- t, rate: rate))
                }
            }
            let lo = max(0, offset)
            let hi = min(last, offset &+ f)
            if hi > lo {
                copySamples(window.baseAddress.unsafelyUnwrapped + lo, slotSamples + (slot &* f &+ (lo &- offset)), hi &- lo)
                covered &+= hi &- lo
            }
        }
        readIndex.store(r, ordering: .releasing)
        consumer.pointee.coverage = min(covered, f)
        consumer.pointee.captureTime = t
        if covered > 0 { aligned.add(1, ordering: .relaxed) }
    }

    // MARK: For capture hooks (capture thread, during `process`)

    /// The reference for the capture frame being processed: `frameSamples` samples,
    /// valid only during the hook's `process` call.
    public var samples: UnsafeBufferPointer<Int16> { UnsafeBufferPointer(window) }
    /// How many of `samples` hold played audio (0: nothing was playing).
    public var coverage: Int { consumer.pointee.coverage }
    /// The capture time the reference was aligned to.
    public var captureTime: Instant { Instant(nanoseconds: consumer.pointee.captureTime) }
}

/// `nanoseconds` as samples at `rate`, to the nearest, halves away from zero (so slots
/// 10 ms apart land exactly a frame apart); no overflow below about 190 000 s at 48 kHz.
@inline(__always)
func sampleOffset(_ nanoseconds: Int64, rate: Int64) -> Int {
    Int((nanoseconds &* rate &+ (nanoseconds >= 0 ? 500_000_000 : -500_000_000)) / 1_000_000_000)
}

/// Timestamps for the consecutive periods of one device stream, from measured times
/// that jitter: `snd_pcm_delay` is only as fine as the driver's pointer updates (often
/// a period), and a thread is woken late now and then. The timeline counts on by the
/// samples between periods (the device clock), follows the measurements slowly (a
/// 1/64 step of the error per period absorbs the device clock's drift against the
/// monotonic clock, ±100 ppm or so) and re-anchors on the measurement when the two
/// disagree by more than `tolerance`: a start, an xrun, a flush, a stall.
public struct FrameTimeline: Sendable {
    public let sampleRate: Int
    public let tolerance: Duration
    /// Times the timeline jumped to a measurement.
    public private(set) var reanchors = 0
    var next: Int64? = nil
    var remainder: Int64 = 0

    public init(sampleRate: Int, tolerance: Duration = .milliseconds(2)) {
        self.sampleRate = max(sampleRate, 1)
        self.tolerance = tolerance
    }

    /// The time of the first of `frames` frames, measured at about `measured`; the
    /// timeline then expects the next period `frames` frames later. A measurement that
    /// is not `trusted` (the thread was pre-empted while taking it) is not followed when
    /// there is a prediction to go by.
    #if RT_AUDIT
    @_noLocks
    #endif
    public mutating func time(measured: Instant, frames: Int, trusted: Bool = true) -> Instant {
        let m = measured.nanoseconds
        var t = m
        if let predicted = next, !trusted {
            t = predicted
        } else if let predicted = next {
            let error = m &- predicted
            let limit = tolerance.nanoseconds
            if error > limit {
                reanchors &+= 1
            } else if error < 0 &- limit {
                reanchors &+= 1
            } else {
                t = predicted &+ error / 64
            }
        }
        // frames · 1e9 / rate, carrying the remainder so no nanosecond is lost.
        let total = Int64(frames) &* 1_000_000_000 &+ remainder
        let rate = Int64(sampleRate)
        remainder = total % rate
        next = t &+ total / rate
        return Instant(nanoseconds: t)
    }

    /// Forgets the history: the next measurement is taken as it is.
    public mutating func reset() {
        next = nil
        remainder = 0
    }
}
