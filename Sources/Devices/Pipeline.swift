import CSystem
import Synchronization
import Wire
import Audio
import Platform

/// The capture side of the pipeline, run on the capture thread for every period:
/// device bytes → Int16 (format conversion, channel pick or downmix) → the pipeline
/// rate (fixed-point resampler) → 10 ms frames → hook chain (mute gate last) → the
/// uplink ring → an eventfd write to wake the loop.
///
/// Everything is allocated here, at construction; `captured` touches only that memory
/// (ARCHITECTURE.md "Threads"; the allocation test in Tests/AudioTests drives this path).
///
/// Each 10 ms frame's capture time travels beside it (`popFrame` returns it), so the
/// loop can tell fresh audio from audio that waited behind a stall and drop the latter
/// (`UplinkClock`). Frames go into the ring whole or not at all, which keeps the
/// samples and their times in step. A frame's time is its first sample's: the period's
/// capture time (the thread's, from `snd_pcm_delay`) plus the samples before it.
///
/// With a `reference` (a duplex pipeline), each frame's playback reference is cut out
/// for that same instant before the hooks run, so a capture hook (echo cancellation)
/// finds in `reference.samples` what the speaker played while this frame was captured.
public final class CapturePipeline: CaptureSink, @unchecked Sendable {
    public let device: DeviceFormat
    public let format: AudioFormat
    public let chain: HookChain
    public let ring: SampleRing
    let notify: EventFD
    /// Samples waiting in the ring that make a wake-up worth it.
    let wakeSamples: Int
    let converter: InputConverter
    let resampler: Resampler?
    let converted: UnsafeMutableBufferPointer<Int16>
    let resampled: UnsafeMutableBufferPointer<Int16>
    let frame: UnsafeMutableBufferPointer<Int16>
    var filled = 0
    var sequence: UInt64 = 0
    /// Frames the ring had no room for (the loop fell behind): counted, dropped.
    public let overflows = AudioThreadCounters()
    /// Capture time (monotonic ns) of frame k of the ring's stream at `times[k & timeMask]`.
    /// Written by the capture thread before the frame's samples are pushed, so the ring's
    /// release/acquire on its write index publishes it; a slot is rewritten only
    /// `timeMask + 1` frames later, when the ring has long given that frame's room back.
    let times: UnsafeMutablePointer<Int64>
    let timeMask: Int
    /// Frames pushed (capture thread only).
    var pushedFrames = 0
    /// Samples taken with `popFrame` (loop only).
    var poppedSamples = 0
    /// What the speaker played, aligned to each frame here (capture thread).
    public let reference: PlaybackReference?

    /// - Parameters:
    ///   - channel: the device channel to use (nil: average all channels).
    ///   - ringFrames: 10 ms frames the uplink ring holds (rounded up to a power of two).
    ///   - wakeFrames: 10 ms frames the consumer takes at a time (the loop's 20 ms
    ///     packets: 2); `notify` is signalled only once that much is waiting, not after
    ///     every frame (else half the loop's wake-ups would find nothing to take).
    public init(device: DeviceFormat, rate: SampleRate, channel: Int?, chain: HookChain, notify: EventFD,
                ringFrames: Int = 32, wakeFrames: Int = 1, reference: PlaybackReference? = nil) throws(AudioError) {
        self.device = device
        self.reference = reference
        wakeSamples = max(wakeFrames, 1) * rate.samplesPerFrame
        self.chain = chain
        self.notify = notify
        format = try AudioFormat(sampleRate: rate, channels: 1)
        let mix: ChannelMix = device.channels == 1 ? .all : (channel.map { .select($0) } ?? .average)
        converter = try InputConverter(format: device.sampleFormat, channels: device.channels, mix: mix)
        resampler = device.sampleRate == rate.hertz ? nil
            : try Resampler(inputRate: device.sampleRate, outputRate: rate, channels: 1, maxInputFrames: max(device.periodFrames, 1) * 2)
        converted = .allocate(capacity: max(device.periodFrames, 1) * 2)
        converted.initialize(repeating: 0)
        let maxOut = resampler?.maxOutputSamples(forInputFrames: max(device.periodFrames, 1) * 2) ?? converted.count
        resampled = .allocate(capacity: maxOut)
        resampled.initialize(repeating: 0)
        frame = .allocate(capacity: rate.samplesPerFrame)
        frame.initialize(repeating: 0)
        var capacity = 1
        while capacity < ringFrames * rate.samplesPerFrame { capacity <<= 1 }
        ring = try SampleRing(capacity: capacity)
        // More slots than frames the ring can hold, plus two for a consumer mid-frame.
        var slots = 1
        while slots < capacity / rate.samplesPerFrame + 2 { slots <<= 1 }
        times = .allocate(capacity: slots)
        times.initialize(repeating: 0, count: slots)
        timeMask = slots - 1
    }

    deinit {
        converted.deallocate()
        resampled.deallocate()
        frame.deallocate()
        times.deallocate()
    }

    /// Loop side: pops exactly `destination.count` samples (one media frame, a whole
    /// number of 10 ms frames) if that many are waiting, and returns the capture time of
    /// the 10 ms frame its first sample belongs to; nil (nothing popped) otherwise. Use either this or `ring.pop`, not
    /// both: the time lookup counts the samples taken here.
    public func popFrame(into destination: UnsafeMutableBufferPointer<Int16>) -> Instant? {
        guard ring.availableToRead >= destination.count else { return nil }
        // Read the time before the pop hands the frame's room back to the producer.
        let t = times[(poppedSamples / frame.count) & timeMask]
        let n = ring.pop(into: destination)
        poppedSamples &+= n
        return Instant(nanoseconds: t)
    }

    public func captureStarted(_ format: DeviceFormat) {
        filled = 0
        chain.start(self.format)
    }

    public func captureStopped(_ format: DeviceFormat) {
        chain.stop()
        notify.signal()
    }

    public func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) {
        // Conversion cannot fail for whole frames of the format it was built for; a
        // short read is skipped rather than trusted.
        guard let n = try? converter.convert(samples, into: converted) else { return }
        var source = UnsafeBufferPointer(rebasing: converted[0..<n])
        if let resampler {
            guard let m = try? resampler.process(source, into: resampled) else { return }
            source = UnsafeBufferPointer(rebasing: resampled[0..<m])
        }
        let perFrame = frame.count
        var offset = 0
        while offset < source.count {
            let take = min(perFrame - filled, source.count - offset)
            for i in 0..<take { frame[filled &+ i] = source[offset &+ i] }
            filled &+= take
            offset &+= take
            if filled == perFrame {
                filled = 0
                // The frame's first sample, counted from this period's first (negative:
                // it began in the previous period).
                let first = Int64(offset &- perFrame)
                let frameTime = Instant(nanoseconds: time.nanoseconds &+ first &* 1_000_000_000 / Int64(self.format.sampleRate.hertz))
                reference?.align(to: frameTime)
                let info = FrameInfo(format: self.format, sequence: sequence, captureTime: frameTime)
                sequence &+= 1
                // `.silence` has already zeroed the frame inside the chain.
                _ = chain.process(frame, info)
                // Whole frames only: a partly pushed frame would put the loop's 20 ms
                // frames out of step with their capture times.
                if ring.capacity &- ring.availableToRead < perFrame {
                    overflows.xruns.add(1, ordering: .relaxed)
                } else {
                    times[pushedFrames & timeMask] = frameTime.nanoseconds
                    _ = ring.push(UnsafeBufferPointer(frame))
                    pushedFrames &+= 1
                }
                if ring.availableToRead >= wakeSamples { notify.signal() }
            }
        }
    }
}

/// The playback side: the downlink ring (pipeline rate, mono) → playback hooks (the same
/// hook API as capture, on remote audio before the speaker) → device channels and
/// sample format. An empty ring plays silence and counts an underrun.
///
/// Each 10 ms frame's `captureTime` is when it will be heard (the thread's play-out
/// time for the period plus the samples before the frame). With a `reference`, what
/// the hooks left is handed to the capture side in whole 10 ms frames, each stamped
/// with the time its first sample is heard.
public final class PlaybackPipeline: PlaybackSource, @unchecked Sendable {
    public let ring: SampleRing
    public let rate: SampleRate
    /// Hooks run on the playback thread on each 10 ms frame before it is written.
    public let chain: HookChain
    /// Where what the speaker plays goes for the capture side (nil: nobody needs it).
    public let reference: PlaybackReference?
    let format: AudioFormat
    var sequence: UInt64 = 0
    let mono: UnsafeMutableBufferPointer<Int16>
    let resampler: Resampler?
    let resampled: UnsafeMutableBufferPointer<Int16>
    /// A 10 ms frame of what was played, filling up for the reference, and when its first
    /// sample is heard.
    let staged: UnsafeMutableBufferPointer<Int16>
    var stagedCount = 0
    var stagedTime: Int64 = 0
    /// Periods with fewer samples than needed (the network or the loop fell behind).
    public let underruns = AudioThreadCounters()
    /// Samples dropped from the ring by flushes.
    public let flushedSamples = Atomic<UInt64>(0)
    /// Below this many samples in the ring after a period, the loop is asked for more
    /// (`wantsMore`); DuplexAudio sets its playout target here. Int.max: every period.
    public let lowWater = Atomic<Int>(Int.max)
    /// The ring's write position when the loop asked for the flush (`markFlush`): what
    /// was queued after it is new audio and stays. Int.max: drop everything.
    let flushMark = Atomic<Int>(Int.max)
    /// The last period rendered: the ring position of its first sample, how many
    /// samples it took from the ring, and when its first sample is heard (ns on the
    /// monotonic clock). The loop reads them to tell how much of what it queued has
    /// come out of the speaker (`heardPosition`); each is one relaxed store, so a read
    /// may pair one period's start with the next one's time: off by a period at most.
    let periodStart = Atomic<Int>(0)
    let periodTaken = Atomic<Int>(0)
    let periodHeardAt = Atomic<Int64>(Int64.max)

    public init(rate: SampleRate, deviceRate: Int, maxPeriodFrames: Int, ringFrames: Int = 32,
                chain: HookChain = HookChain(), reference: PlaybackReference? = nil) throws(AudioError) {
        self.rate = rate
        self.chain = chain
        self.reference = reference
        format = try AudioFormat(sampleRate: rate, channels: 1)
        var capacity = 1
        while capacity < ringFrames * rate.samplesPerFrame { capacity <<= 1 }
        ring = try SampleRing(capacity: capacity)
        let inputFrames = maxPeriodFrames * rate.hertz / max(deviceRate, 1) + 2
        resampler = deviceRate == rate.hertz ? nil
            : try Resampler(inputRate: rate.hertz, outputRate: try SampleRate(hertz: deviceRate), channels: 1, maxInputFrames: inputFrames * 2)
        mono = .allocate(capacity: inputFrames * 2)
        mono.initialize(repeating: 0)
        resampled = .allocate(capacity: (resampler?.maxOutputSamples(forInputFrames: inputFrames * 2) ?? 1) + maxPeriodFrames)
        resampled.initialize(repeating: 0)
        staged = .allocate(capacity: rate.samplesPerFrame)
        staged.initialize(repeating: 0)
    }

    deinit {
        mono.deallocate()
        resampled.deallocate()
        staged.deallocate()
    }

    public func playbackStarted(_ format: DeviceFormat) {
        stagedCount = 0
        chain.start(self.format)
    }

    public func playbackStopped(_ format: DeviceFormat) { chain.stop() }

    public var wantsMore: Bool { ring.availableToRead < lowWater.load(ordering: .relaxed) }

    /// Loop side, before asking the playback thread to flush: marks where the audio to
    /// drop ends in the ring.
    public func markFlush() { flushMark.store(ring.writePosition, ordering: .relaxed) }

    /// Loop side: the ring position up to which samples have come out of the speaker at
    /// `now` (what the last period took, as far as its play-out has gone by the device's
    /// clock); samples queued after it are still in the ring or the device.
    public func heardPosition(at now: Instant) -> Int {
        let start = periodStart.load(ordering: .relaxed)
        let taken = periodTaken.load(ordering: .relaxed)
        let at = periodHeardAt.load(ordering: .relaxed)
        guard at != Int64.max, now.nanoseconds > at else { return start }
        let elapsed = (now.nanoseconds &- at) &* Int64(rate.hertz) / 1_000_000_000
        return start &+ Int(min(Int64(taken), elapsed))
    }

    /// Barge-in: what waited in the ring (up to the mark) is never played, and the
    /// reference learns that what was queued in the device from `time` on was not heard
    /// either.
    public func playbackFlushed(at time: Instant) {
        let mark = flushMark.exchange(Int.max, ordering: .acquiring)
        let n = ring.discard(upTo: mark == Int.max ? nil : mark)
        flushedSamples.add(UInt64(n), ordering: .relaxed)
        stagedCount = 0
        reference?.flushed(at: time)
    }

    public func render(into buffer: UnsafeMutableRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) -> Int {
        // Samples at the pipeline rate that make `frames` at the device rate.
        let need = min(resampler == nil ? frames : frames * rate.hertz / format.sampleRate, mono.count)
        let first = ring.readPosition
        let got = ring.pop(into: UnsafeMutableBufferPointer(rebasing: mono[0..<need]))
        periodStart.store(first, ordering: .relaxed)
        periodTaken.store(got, ordering: .relaxed)
        periodHeardAt.store(time.nanoseconds, ordering: .relaxed)
        if got < need {
            underruns.xruns.add(1, ordering: .relaxed)
            for i in got..<need { mono[i] = 0 }
        }
        let hz = Int64(rate.hertz)
        // Playback hooks see whole 10 ms frames (a period is 10 ms; any remainder of an
        // odd-sized period is played unhooked rather than split).
        let perFrame = rate.samplesPerFrame
        var start = 0
        while start + perFrame <= need {
            let heard = Instant(nanoseconds: time.nanoseconds &+ Int64(start) &* 1_000_000_000 / hz)
            let info = FrameInfo(format: self.format, sequence: sequence, captureTime: heard)
            sequence &+= 1
            _ = chain.process(UnsafeMutableBufferPointer(rebasing: mono[start..<(start + perFrame)]), info)
            start += perFrame
        }
        if let reference {
            // Whole 10 ms frames for the capture side, whatever the period's size.
            var i = 0
            while i < need {
                if stagedCount == 0 { stagedTime = time.nanoseconds &+ Int64(i) &* 1_000_000_000 / hz }
                let take = min(perFrame &- stagedCount, need &- i)
                for k in 0..<take { staged[stagedCount &+ k] = mono[i &+ k] }
                stagedCount &+= take
                i &+= take
                if stagedCount == perFrame {
                    reference.played(UnsafeBufferPointer(staged), at: Instant(nanoseconds: stagedTime))
                    stagedCount = 0
                }
            }
        }
        var source = UnsafeBufferPointer(rebasing: mono[0..<need])
        // `need` is capped at `mono`'s size, which is the resampler's input bound and
        // `resampled` is sized for its output: nothing for it to refuse (and no logging
        // on this thread, were it to).
        if let resampler, let m = try? resampler.process(source, into: resampled) {
            source = UnsafeBufferPointer(rebasing: resampled[0..<m])
        }
        let count = min(frames, source.count)
        let channels = format.channels
        switch format.sampleFormat {
        case .s16LE:
            let out = buffer.bindMemory(to: Int16.self)
            #if _endian(little)
            // Mono S16_LE is the pipeline's own format: one copy, not a sample loop.
            if channels == 1, let dst = out.baseAddress, let src = source.baseAddress {
                dst.update(from: src, count: count)
                break
            }
            #endif
            for i in 0..<count { for c in 0..<channels { out[i &* channels &+ c] = source[i] } }
        case .s32LE, .s24LE:
            let out = buffer.bindMemory(to: Int32.self)
            // S24_LE keeps the value in the low 24 bits (sign-extended).
            let shift: Int32 = format.sampleFormat == .s32LE ? 16 : 8
            for i in 0..<count { for c in 0..<channels { out[i &* channels &+ c] = Int32(source[i]) &<< shift } }
        case .s24_3LE:
            for i in 0..<count {
                let v = Int32(source[i]) &<< 8
                for c in 0..<channels {
                    let o = (i &* channels &+ c) &* 3
                    buffer[o] = UInt8(truncatingIfNeeded: v)
                    buffer[o &+ 1] = UInt8(truncatingIfNeeded: v &>> 8)
                    buffer[o &+ 2] = UInt8(truncatingIfNeeded: v &>> 16)
                }
            }
        }
        return count
    }
}
