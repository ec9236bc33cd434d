// The playback thread: one period at a time from its source to a device, a file or
// nowhere, with the play-out time of each period, flushes on request, and recovery from
// underruns and lost devices; and how full it keeps the device (`JustInTime`).
import CSystem
import CALSA
import Synchronization
import Wire
import Audio
import Platform

/// How full the playback thread keeps the device (`PlaybackThread.run`), in half
/// periods: a period and a half queued when it writes the next (one playing, half of
/// the next ready), which a real-time thread keeps up with, since rendering a period
/// takes microseconds; half a period more at each underrun (a thread held up, a device
/// that reports its delay coarsely), up to three periods, and back down after 10 s
/// without one. Every half period of it is 5 ms between the network and the speaker.
struct JustInTime {
    static let least = 3
    static let most = 6
    static let calmPeriods = 1_000
    var halfPeriods = JustInTime.least
    var calm = 0

    mutating func underrun() {
        halfPeriods = min(halfPeriods + 1, JustInTime.most)
        calm = 0
    }

    mutating func period() {
        calm &+= 1
        if calm >= JustInTime.calmPeriods, halfPeriods > JustInTime.least {
            halfPeriods -= 1
            calm = 0
        }
    }

    /// Frames the device may hold when the next period is rendered.
    func frames(period: Int) -> Int { halfPeriods * period / 2 }
}

/// The playback thread: asks the source for one period at a time and writes it.
///
/// Play-out time: just before a period is written, `snd_pcm_delay` says how long a
/// frame written now takes to be heard, so the period's first frame is heard at now +
/// delay (smoothed by a `FrameTimeline`). A file or the discard sink runs on its own
/// clock (paced) and "plays" a period the moment it is due. After rendering, the
/// thread writes the eventfd given as `notify`: the loop then tops the ring up, so
/// playout follows this device's clock.
///
/// Flush (barge-in): `requestFlush()` from the loop; at the top of its next period
/// (within one period, the time one blocking write can take) the thread drops the
/// ring (through the source) and the device's buffer (`snd_pcm_drop` +
/// `snd_pcm_prepare`): the thread that writes the PCM is the one that drops it, so no
/// other thread touches the handle.
///
/// Underruns (-EPIPE) are recovered and counted; a device that disappears is reopened
/// with backoff like capture. A file output is written as 16-bit WAV; its writes are
/// system calls, which a file stand-in for a speaker may make.
public final class PlaybackThread<Source: PlaybackSource> {
    public let counters = AudioThreadCounters()
    public let source: Source
    let output: PlaybackOutput
    let control: ThreadControl
    public var realtime: Bool { control.realtime }
    public let format: DeviceFormat
    var pcm: (any PCMDevice)?
    var writer: WAVWriter?
    let buffer: UnsafeMutableRawPointer
    /// Written after every period rendered (set before `start`).
    public var notify: EventFD?
    let flushRequests = Atomic<UInt64>(0)
    var flushesDone: UInt64 = 0
    /// Set (release) once the file output failed: `fileFailure` may then be read.
    let fileFailed = Atomic<Bool>(false)

    /// `clock`: what the thread reads and sleeps on (tests: a virtual clock).
    public convenience init(output: PlaybackOutput, source: Source, clock: DeviceClock = .monotonic) throws(DeviceError) {
        try self.init(output: output, clock: clock) { (_: DeviceFormat) throws(DeviceError) -> Source in source }
    }

    /// The same, with the source built once the device's format is known.
    public init(output: PlaybackOutput, clock: DeviceClock = .monotonic,
                source build: (DeviceFormat) throws(DeviceError) -> Source) throws(DeviceError) {
        self.output = output
        control = ThreadControl(clock: clock)
        switch output {
        case .device(let name, let request):
            do throws(ALSAError) {
                let p = try PCM(device: name, stream: .playback, request: request)
                pcm = p
                format = p.format
            } catch {
                throw .alsa(error)
            }
        case .file(let path, let f, _):
            var f16 = f
            f16.sampleFormat = .s16LE
            do throws(FileError) {
                writer = try WAVWriter(path: path, sampleRate: f.sampleRate, channels: f.channels)
            } catch {
                throw .file(error)
            }
            format = f16
        case .discard(let f):
            var f16 = f
            f16.sampleFormat = .s16LE
            format = f16
        }
        buffer = .allocate(byteCount: format.bytesPerFrame * max(format.periodFrames, 1) + 64, alignment: 16)
        do throws(DeviceError) { source = try build(format) } catch {
            buffer.deallocate()
            throw error
        }
    }

    /// Plays to a PCM the caller already opened (tests: a stand-in with a known delay).
    public init(pcm: any PCMDevice, source: Source, clock: DeviceClock = .monotonic) {
        control = ThreadControl(clock: clock)
        output = .device(pcm.device, PCMRequest())
        self.source = source
        self.pcm = pcm
        format = pcm.format
        buffer = .allocate(byteCount: format.bytesPerFrame * max(format.periodFrames, 1) + 64, alignment: 16)
    }

    deinit {
        stop()
        // The owner's finish() is where a failed close is reported; here, past it,
        // there is no one left to tell.
        try? writer?.close()
        buffer.deallocate()
    }

    /// Starts the thread (joined by stop(), which deinit runs: see CaptureThread).
    public func start() throws(DeviceError) {
        let me = Unmanaged.passUnretained(self)
        try control.start { me.takeUnretainedValue().run() }
    }

    /// Stops the thread, waits for it, and (for a file) completes the WAV header.
    public func stop() {
        guard control.stop() else { return }
        pcm?.drain()
    }

    /// Asks the thread to drop what is queued, in the ring and in the device, at the
    /// start of its next period (any thread; `counters.flushes` counts it done).
    public func requestFlush() { flushRequests.add(1, ordering: .releasing) }

    /// The first write error of a file output, if any. Read it after `stop()` or
    /// `finish()`, or once `fileFailedNow` is true (the thread writes nothing after it).
    public var fileFailure: FileError? { writer?.failure }

    /// Whether the file output has failed (safe to ask while the thread runs).
    public var fileFailedNow: Bool { fileFailed.load(ordering: .acquiring) }

    /// Seconds of audio in the file output: read it under the same rule as `fileFailure`.
    public var fileSeconds: Double { writer?.seconds ?? 0 }

    /// Closes a file output now (its header gets the final sizes).
    public func finish() throws(DeviceError) {
        stop()
        do throws(FileError) { try writer?.close() } catch { throw .file(error) }
    }

    func run() {
        counters.set(.running)
        source.playbackStarted(format)
        let frames = format.periodFrames
        let bytes = frames * format.bytesPerFrame
        let clock = control.clock
        var pacer = Pacer(periodFrames: frames, sampleRate: format.sampleRate, now: clock.now().nanoseconds)
        var timeline = FrameTimeline(sampleRate: format.sampleRate)
        var paced = false
        var ownClock = false
        switch output {
        case .file(_, _, let p): paced = p; ownClock = true
        case .discard: paced = true; ownClock = true
        case .device(_, let request): paced = request.paced
        }
        let raw = UnsafeMutableRawBufferPointer(start: buffer, count: bytes)
        var fill = JustInTime()
        while control.isRunning {
            // Just in time: a period is rendered only once the device holds no more than
            // `fill` of them, so what is written goes out at once instead of
            // waiting in a blocking write (a period) behind a full buffer (another): the
            // speaker's share of the downlink's delay is `fill`, not the whole
            // buffer. The ring's audio waits in the ring meanwhile, where a flush finds it.
            if !ownClock, !paced, let pcm, let queued = pcm.bufferedFrames(), queued > fill.frames(period: frames) {
                control.sleep(nanoseconds: framesToNanoseconds(queued - fill.frames(period: frames), rate: format.sampleRate))
            }
            let requests = flushRequests.load(ordering: .acquiring)
            if requests != flushesDone {
                flush(requests)
                timeline.reset()
            }
            let time: Instant
            if ownClock {
                // Heard the moment it is due: the pacer's deadline is this sink's clock.
                time = paced ? Instant(nanoseconds: pacer.wait(on: clock)) : clock.now()
            } else {
                guard let pcm else {
                    if case .device(let name, let request) = output { reopen(name: name, request: request) }
                    timeline.reset()
                    continue
                }
                // Paced (no clock of its own): the deadline is its clock, as for capture.
                var deadline: Int64? = nil
                if paced { deadline = pacer.wait(on: clock) }
                // Before the write: a frame written now is heard `delay` frames from now.
                let (now, delay, trusted) = measureDelay(pcm, on: clock)
                let ahead = framesToNanoseconds(delay, rate: format.sampleRate)
                let at = deadline ?? now.nanoseconds
                time = timeline.time(measured: Instant(nanoseconds: at &+ ahead), frames: frames, trusted: trusted || deadline != nil)
                counters.timelineJumps.store(UInt64(timeline.reanchors), ordering: .relaxed)
            }
            let filled = source.render(into: raw, frames: frames, format: format, time: time)
            // The ring has room now: the loop tops it up while this period is written
            // (only when it fell below its mark: one wake-up per downlink frame, not per
            // period).
            if source.wantsMore { notify?.signal() }
            if filled < frames {
                (buffer + filled * format.bytesPerFrame).initializeMemory(as: UInt8.self, repeating: 0, count: bytes - filled * format.bytesPerFrame)
            }
            if ownClock {
                if let writer, !fileFailed.load(ordering: .relaxed) {
                    let samples = UnsafeBufferPointer(start: buffer.assumingMemoryBound(to: Int16.self), count: frames * format.channels)
                    // The error itself stays in the writer (`fileFailure`, for the loop).
                    if (try? writer.write(samples)) == nil {
                        counters.lastError.store(-EIO, ordering: .relaxed)
                        fileFailed.store(true, ordering: .releasing)
                    }
                }
                account(frames: frames)
                continue
            }
            guard let pcm else { continue }
            var offset = 0
            while offset < frames && control.isRunning {
                let n = pcm.writeRaw(buffer + offset * format.bytesPerFrame, frames: frames - offset)
                if n > 0 { offset += n; continue }
                let code = Int32(n)
                counters.lastError.store(code, ordering: .relaxed)
                if code == -EPIPE || code == -ESTRPIPE {
                    counters.xruns.add(1, ordering: .relaxed)
                    timeline.reset()
                    fill.underrun()
                    if pcm.recover(code) >= 0 { continue }
                }
                if code == -EAGAIN || code == -EINTR { continue }
                source.playbackStopped(format)
                self.pcm = nil
                break
            }
            fill.period()
            account(frames: frames)
        }
        source.playbackStopped(format)
        counters.set(.stopped)
    }

    /// Drops the ring's audio (the source's) and the device's buffer.
    func flush(_ requests: UInt64) {
        source.playbackFlushed(at: control.clock.now())
        if let pcm {
            let r = pcm.discardPending()
            if r < 0 { counters.lastError.store(r, ordering: .relaxed) }
        }
        flushesDone = requests
        counters.flushes.add(1, ordering: .releasing)
    }

    @inline(__always)
    func account(frames: Int) {
        counters.periods.add(1, ordering: .relaxed)
        counters.frames.add(UInt64(frames), ordering: .relaxed)
        counters.lastPeriodNanoseconds.store(control.clock.now().nanoseconds, ordering: .relaxed)
    }

    func reopen(name: String, request: PCMRequest) {
        control.reopen(counters) {
            // Retried with backoff until it works: no log from this thread, the open's
            // code is kept for the loop; a device back with another format is waited out.
            let p: PCM
            do throws(ALSAError) { p = try PCM(device: name, stream: .playback, request: request) } catch {
                counters.lastError.store(error.code, ordering: .relaxed)
                return false
            }
            guard p.format == format else { return false }
            pcm = p
            source.playbackStarted(format)
            return true
        }
    }
}
