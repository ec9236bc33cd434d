import CSystem
import CALSA
import Synchronization
import Wire
import Audio
import Platform

/// Receives what the capture thread reads. Called on the real-time thread: an
/// implementation must not allocate, lock, log, block or make system calls other than
/// an eventfd write (ARCHITECTURE.md "Threads").
public protocol CaptureSink: AnyObject {
    /// Before the first period of a capture session (again after a device came back).
    func captureStarted(_ format: DeviceFormat)
    /// One period of raw interleaved samples in `format`; `time` is when its first
    /// frame was captured (a device's: from `snd_pcm_delay`, on the thread's timeline).
    func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant)
    /// After the last period of a capture session (stop, end of file, device lost).
    func captureStopped(_ format: DeviceFormat)
}

/// Supplies what the playback thread writes. Same real-time rules as `CaptureSink`.
public protocol PlaybackSource: AnyObject {
    func playbackStarted(_ format: DeviceFormat)
    /// Fills `buffer` with up to `frames` frames in `format`; returns how many it filled
    /// (the rest is played as silence). `time` is when the first of them will be heard
    /// (a device's: now plus `snd_pcm_delay`; a file's or the discard sink's: its own
    /// clock, the moment it is written).
    func render(into buffer: UnsafeMutableRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) -> Int
    /// The device's buffer was just dropped (a flush asked for with
    /// `PlaybackThread.requestFlush`): drop what is queued here too.
    func playbackFlushed(at time: Instant)
    /// After `render`: whether the loop should be told to queue more (the thread then
    /// writes its `notify` eventfd).
    var wantsMore: Bool { get }
    func playbackStopped(_ format: DeviceFormat)
}

extension PlaybackSource {
    public func playbackFlushed(at time: Instant) {}
    public var wantsMore: Bool { true }
}

/// Where capture reads from.
public enum CaptureInput {
    /// An ALSA PCM by name.
    case device(String, PCMRequest)
    /// A WAV file, read whole at start so the real-time thread makes no file I/O;
    /// `paced` delivers it at the real-time rate (as a microphone would), `loop`
    /// starts again at the end instead of stopping.
    case file(String, paced: Bool, loop: Bool)
}

/// Where playback writes to.
public enum PlaybackOutput {
    case device(String, PCMRequest)
    /// A WAV file (16-bit); `paced` consumes at the real-time rate, on the thread's own
    /// clock, as a device would: playback hooks, the reference and the playout pull
    /// work with it as with a speaker.
    case file(String, format: DeviceFormat, paced: Bool)
    /// No speaker (`playback = none`): consumed at the real-time rate on the thread's
    /// own clock and written nowhere, so the downlink is still played out (decoded,
    /// counted) as it would be to a device.
    case discard(DeviceFormat)
}

/// The states an audio thread reports (read by the loop for logs and the watchdog).
public enum AudioThreadState: Int, Sendable {
    case starting = 0, running, reopening, finished, stopped
}

/// Counters shared between an audio thread and the loop: written with relaxed atomics
/// on the real-time side, read by the loop for stats, logs and the watchdog.
public final class AudioThreadCounters: Sendable {
    public let periods = Atomic<UInt64>(0)
    public let frames = Atomic<UInt64>(0)
    public let xruns = Atomic<UInt64>(0)
    public let reopenings = Atomic<UInt64>(0)
    /// Playback: flushes carried out (the buffer dropped on request).
    public let flushes = Atomic<UInt64>(0)
    /// Times the thread's timeline jumped to a measurement instead of counting on
    /// (FrameTimeline: a start, an xrun, a stall): each one can move the echo
    /// canceller's reference against the microphone.
    public let timelineJumps = Atomic<UInt64>(0)
    /// Monotonic nanoseconds of the last period handled: the watchdog's heartbeat.
    public let lastPeriodNanoseconds = Atomic<Int64>(0)
    let stateRaw = Atomic<Int>(AudioThreadState.starting.rawValue)
    /// The last ALSA error code seen (negative errno), for the loop to log.
    public let lastError = Atomic<Int32>(0)

    public init() {}

    public var state: AudioThreadState { AudioThreadState(rawValue: stateRaw.load(ordering: .acquiring)) ?? .stopped }
    func set(_ s: AudioThreadState) { stateRaw.store(s.rawValue, ordering: .releasing) }
}

/// Scheduling set-up for the audio threads.
public enum RealTime {
    /// Locks current and future pages in RAM so a page fault never stalls audio;
    /// false when not permitted (no CAP_IPC_LOCK / LimitMEMLOCK too low).
    public static func lockMemory() -> Bool {
        mlockall(Int32(MCL_CURRENT | MCL_FUTURE)) == 0
    }

    final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// The SCHED_FIFO priority the audio threads ask for: `wanted`, or the process's
    /// RLIMIT_RTPRIO when that is lower (systemd's `LimitRTPRIO=`, PAM's `rtprio`): a
    /// thread that asks for more than the limit gets no real-time scheduling at all
    /// (EPERM), whereas one at the limit is granted it. Root (CAP_SYS_NICE) may exceed
    /// the limit: with a limit of 0 it asks for `wanted`, and the kernel decides.
    public static func priority(wanted: Int32 = 60) -> Int32 {
        let limit = csystem_rtprio_limit()
        if limit < 0 || limit == 0 { return wanted }
        return min(wanted, Int32(limit))
    }

    /// Starts a thread running `body`, with SCHED_FIFO at `priority` when permitted.
    /// Returns the thread and whether it got real-time scheduling.
    static func spawn(priority: Int32, _ body: @escaping () -> Void) throws(SystemError) -> (pthread_t, Bool) {
        let entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
            let box = Unmanaged<Box>.fromOpaque(context!).takeRetainedValue()
            box.body()
            return nil
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        var param = sched_param()
        param.sched_priority = priority
        pthread_attr_setinheritsched(&attributes, Int32(PTHREAD_EXPLICIT_SCHED))
        pthread_attr_setschedpolicy(&attributes, SCHED_FIFO)
        pthread_attr_setschedparam(&attributes, &param)
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        if pthread_create(&thread, &attributes, entry, context) == 0 {
            return (thread, true)
        }
        // EPERM without CAP_SYS_NICE / LimitRTPRIO: run at normal priority instead.
        let r = pthread_create(&thread, nil, entry, context)
        guard r == 0 else {
            Unmanaged<Box>.fromOpaque(context).release()
            throw SystemError("pthread_create", code: r)
        }
        return (thread, false)
    }
}

/// How full the playback thread keeps the device (`PlaybackThread.run`): two periods
/// queued when it writes the next (one playing, one ready), which a real-time thread
/// keeps up with; one more after an underrun (a thread held up, a device that reports
/// its delay coarsely), and back down after 10 s without one.
struct JustInTime {
    static let least = 2
    static let most = 3
    static let calmPeriods = 1_000
    var periods = JustInTime.least
    var calm = 0

    mutating func underrun() {
        periods = min(periods + 1, JustInTime.most)
        calm = 0
    }

    mutating func period() {
        calm &+= 1
        if calm >= JustInTime.calmPeriods, periods > JustInTime.least {
            periods -= 1
            calm = 0
        }
    }
}

/// Paces a loop at one period per `period` nanoseconds on the monotonic clock, with
/// absolute deadlines so a late wake-up does not accumulate drift.
///
/// Falling more than `maxLag` behind (the process was stopped, SIGSTOP; the thread was
/// starved or frozen) is not caught up: absolute deadlines would then all be in the past
/// and the periods missed would go out as fast as the CPU goes (a 10 s stop became a
/// burst of 117 packets). A microphone does not deliver the past either: the schedule
/// restarts from now, and the gap shows in the capture times, where the loop moves RTP
/// time on by it (`UplinkClock`).
struct Pacer {
    var next: Int64
    let period: Int64
    /// Times the schedule was restarted after falling behind.
    private(set) var resyncs = 0
    static let maxLag: Int64 = 200_000_000

    init(periodFrames: Int, sampleRate: Int, now: Int64 = MonotonicClock.now().nanoseconds) {
        period = Int64(periodFrames) * 1_000_000_000 / Int64(max(sampleRate, 1))
        next = now
    }

    /// The next deadline to sleep until, given the time `now` (pure, for tests).
    mutating func advance(now: Int64) -> Int64 {
        next += period
        if now - next > Pacer.maxLag {
            next = now
            resyncs += 1
        }
        return next
    }

    /// Sleeps until the next deadline and returns it (monotonic nanoseconds): the time
    /// a paced stream's period is due, its own clock.
    @discardableResult
    mutating func wait() -> Int64 {
        let deadline = advance(now: MonotonicClock.now().nanoseconds)
        var ts = timespec(tv_sec: time_t(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        clock_nanosleep(CLOCK_MONOTONIC, Int32(TIMER_ABSTIME), &ts, nil)
        return deadline
    }
}

/// Start, stop and the interruptible sleeps shared by the capture and playback threads.
final class ThreadControl {
    let running = Atomic<Bool>(false)
    /// Test seam: while set, the thread delivers nothing (a driver stuck in a read), so
    /// the watchdog's reaction to a stalled audio thread can be shown.
    let frozen = Atomic<Bool>(false)
    var thread: pthread_t? = nil
    var realtime = false

    var isRunning: Bool { running.load(ordering: .relaxed) }

    /// Runs `body` on a new (real-time when permitted) thread.
    func start(_ body: @escaping () -> Void) throws(DeviceError) {
        guard thread == nil else { return }
        running.store(true, ordering: .releasing)
        do throws(SystemError) {
            let (t, rt) = try RealTime.spawn(priority: RealTime.priority(), body)
            thread = t
            realtime = rt
        } catch {
            running.store(false, ordering: .releasing)
            throw .thread(error)
        }
    }

    /// Asks the thread to end and waits for it; false if it was not running.
    @discardableResult
    func stop() -> Bool {
        guard let t = thread else { return false }
        running.store(false, ordering: .releasing)
        pthread_join(t, nil)
        thread = nil
        return true
    }

    /// Sleeps in short steps so `stop()` is honoured within 50 ms.
    func sleep(nanoseconds: Int64) {
        var left = nanoseconds
        while left > 0 && isRunning {
            let step = min(left, 50_000_000)
            var ts = timespec(tv_sec: 0, tv_nsec: Int(step))
            nanosleep(&ts, nil)
            left -= step
        }
    }

    /// Retries `attempt` with backoff (0.25 s doubling to 4 s) until it succeeds or the
    /// thread is stopped; the device is gone meanwhile, so no audio deadline is missed.
    func reopen(_ counters: AudioThreadCounters, _ attempt: () -> Bool) {
        counters.set(.reopening)
        var delay: Int64 = 250_000_000
        while isRunning {
            if attempt() {
                counters.reopenings.add(1, ordering: .relaxed)
                counters.set(.running)
                return
            }
            sleep(nanoseconds: delay)
            delay = min(delay * 2, 4_000_000_000)
        }
    }
}

/// The device's delay and the instant it held: the clock is read on both sides of
/// `snd_pcm_delay` and the midpoint taken. A thread pre-empted between the two (the
/// clock reads more than 0.5 ms apart) cannot say which instant the delay belongs to:
/// the measurement is not trusted, and the timeline counts on instead of following it.
@inline(__always)
func measureDelay(_ pcm: any PCMDevice) -> (now: Instant, delay: Int, trusted: Bool) {
    let before = MonotonicClock.now().nanoseconds
    let delay = pcm.delayFrames()
    let after = MonotonicClock.now().nanoseconds
    let trusted = delay != nil && after &- before <= 500_000
    return (Instant(nanoseconds: before &+ (after &- before) / 2), delay ?? 0, trusted)
}

/// Frames as nanoseconds at `rate`.
@inline(__always)
func framesToNanoseconds(_ frames: Int, rate: Int) -> Int64 {
    Int64(frames) &* 1_000_000_000 / Int64(max(rate, 1))
}

/// The capture thread: reads one period at a time and hands it to the sink.
///
/// Capture time: right after a read of n frames, `snd_pcm_delay` says how long ago the
/// next frame to read was digitized (the frames still in the buffer plus the ADC path),
/// so the first frame of this period was digitized (delay + n) frames before now. A
/// `FrameTimeline` smooths those measurements (the delay is only as fine as the driver's
/// pointer updates). A file stands in for a microphone: its period was "captured" over
/// the period that just went by.
///
/// Recovery: an xrun (-EPIPE) or suspend is recovered in place and counted; a device
/// that disappears (ENODEV, EBADFD, EIO: a USB microphone unplugged) is closed and
/// reopened with backoff (0.25 s doubling to 4 s) until it comes back, state
/// `.reopening` meanwhile. Reopening allocates inside ALSA, but only while there is no
/// audio to miss.
public final class CaptureThread<Sink: CaptureSink> {
    public let counters = AudioThreadCounters()
    public let sink: Sink
    let input: CaptureInput
    let control = ThreadControl()
    /// Whether the thread got SCHED_FIFO.
    public var realtime: Bool { control.realtime }
    /// The format of the current capture session.
    public private(set) var format: DeviceFormat

    var pcm: (any PCMDevice)?
    var fileSamples: [UInt8] = []
    var buffer: UnsafeMutableRawPointer
    var timeline: FrameTimeline

    /// Opens the input now (so a missing device or bad file is an error here, on the
    /// caller's thread) and allocates every buffer the thread will use.
    public convenience init(input: CaptureInput, sink: Sink) throws(DeviceError) {
        try self.init(input: input) { (_: DeviceFormat) throws(DeviceError) -> Sink in sink }
    }

    /// The same, with the sink built once the device's format is known (the pipeline's
    /// converter and resampler depend on it).
    public init(input: CaptureInput, sink build: (DeviceFormat) throws(DeviceError) -> Sink) throws(DeviceError) {
        self.input = input
        switch input {
        case .device(let name, let request):
            do throws(ALSAError) {
                let p = try PCM(device: name, stream: .capture, request: request)
                pcm = p
                format = p.format
            } catch {
                throw .alsa(error)
            }
        case .file(let path, _, _):
            do throws(FileError) {
                let reader = try WAVReader(path: path)
                let f = reader.format
                // Read whole so the real-time thread never touches the file system. 256
                // MiB (about 45 minutes of 48 kHz mono 32-bit) bounds what a wrong path
                // (a huge recording) can make us allocate.
                guard reader.remainingBytes <= 256 << 20 else {
                    throw FileError.tooLarge(path: path, bytes: reader.remainingBytes)
                }
                var all = [UInt8](repeating: 0, count: reader.remainingBytes)
                let total = try all.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(FileError) -> Int in
                    try reader.read(into: raw)
                }
                fileSamples = Array(all[0..<total])
                format = DeviceFormat(sampleFormat: f.sampleFormat, sampleRate: f.sampleRate, channels: f.channels,
                                      periodFrames: f.sampleRate / 100)
            } catch {
                throw .file(error)
            }
        }
        buffer = .allocate(byteCount: 4 * format.bytesPerFrame * max(format.periodFrames, 1) + 64, alignment: 16)
        timeline = FrameTimeline(sampleRate: format.sampleRate)
        do throws(DeviceError) { sink = try build(format) } catch {
            buffer.deallocate()
            throw error
        }
    }

    /// Captures from a PCM the caller already opened (tests open one with a local ALSA
    /// configuration, or a stand-in device; reopening after a disappearance then uses
    /// the system's configuration).
    /// `paced`: the device has no clock of its own (as ALSA's null and file plugins):
    /// the thread paces it, and the pacer's deadlines are its clock.
    public init(pcm: any PCMDevice, sink: Sink, paced: Bool = false) {
        var request = PCMRequest()
        request.paced = paced
        self.input = .device(pcm.device, request)
        self.sink = sink
        self.pcm = pcm
        format = pcm.format
        buffer = .allocate(byteCount: 4 * format.bytesPerFrame * max(format.periodFrames, 1) + 64, alignment: 16)
        timeline = FrameTimeline(sampleRate: format.sampleRate)
    }

    deinit {
        stop()
        buffer.deallocate()
    }

    /// Starts the thread. It holds no reference of its own: stop() (also run by
    /// deinit) joins it before this object can go away.
    public func start() throws(DeviceError) {
        let me = Unmanaged.passUnretained(self)
        try control.start { me.takeUnretainedValue().run() }
    }

    /// Stops the thread and waits for it (the sink gets `captureStopped` first).
    public func stop() { control.stop() }

    /// Test seam: freezes (or thaws) the thread in place, as a driver stuck in `read`.
    public func freezeForTesting(_ on: Bool) { control.frozen.store(on, ordering: .relaxed) }

    /// Whether the thread has ended by itself (end of a non-looping file).
    public var finished: Bool { counters.state == .finished }

    // MARK: The real-time loop

    func run() {
        counters.set(.running)
        sink.captureStarted(format)
        switch input {
        case .device(let name, let request): runDevice(name: name, request: request)
        case .file(_, let paced, let loop): runFile(paced: paced, loop: loop)
        }
        sink.captureStopped(format)
        if counters.state != .finished { counters.set(.stopped) }
    }

    func runDevice(name: String, request: PCMRequest) {
        let frames = format.periodFrames
        var pacer = Pacer(periodFrames: frames, sampleRate: format.sampleRate)
        while control.isRunning {
            if control.frozen.load(ordering: .relaxed) { control.sleep(nanoseconds: 1_000_000); continue }
            guard let pcm else {
                reopen(name: name, request: request)
                continue
            }
            // A paced device has no clock of its own (ALSA's null and file plugins): the
            // pacer's deadline is its clock, not the moment the thread woke. Measured
            // from the wake-up, an idle machine's jitter made the timeline jump 2–55 times
            // in 12 s, each jump moved the echo canceller's reference against the
            // microphone, and the echo came back for a second or more (EchoCommandTests).
            var deadline: Int64? = nil
            if request.paced { deadline = pacer.wait() }
            let n = pcm.readRaw(buffer, frames: frames)
            if n > 0 {
                // The first frame of what was just read was digitized delay + n frames ago.
                let (now, delay, trusted) = measureDelay(pcm)
                let behind = framesToNanoseconds(delay &+ n, rate: format.sampleRate)
                let at = deadline ?? now.nanoseconds
                let time = timeline.time(measured: Instant(nanoseconds: at &- behind), frames: n, trusted: trusted || deadline != nil)
                counters.timelineJumps.store(UInt64(timeline.reanchors), ordering: .relaxed)
                deliver(frames: n, bytes: n * format.bytesPerFrame, time: time, now: now)
                continue
            }
            let code = Int32(n)
            counters.lastError.store(code, ordering: .relaxed)
            if code == -EPIPE || code == -ESTRPIPE {
                counters.xruns.add(1, ordering: .relaxed)
                timeline.reset()
                if pcm.recover(code) >= 0 { continue }
            }
            if code == -EAGAIN || code == -EINTR { continue }
            // Disappeared (or unrecoverable): close and reopen with backoff.
            sink.captureStopped(format)
            self.pcm = nil
        }
    }

    func reopen(name: String, request: PCMRequest) {
        control.reopen(counters) {
            guard let p = try? PCM(device: name, stream: .capture, request: request), p.format == format else { return false }
            pcm = p
            timeline.reset()
            sink.captureStarted(format)
            return true
        }
    }

    func runFile(paced: Bool, loop: Bool) {
        let bytesPerPeriod = format.periodFrames * format.bytesPerFrame
        var pacer = Pacer(periodFrames: format.periodFrames, sampleRate: format.sampleRate)
        var offset = 0
        fileSamples.withUnsafeBytes { all in
            while control.isRunning {
                if control.frozen.load(ordering: .relaxed) { control.sleep(nanoseconds: 1_000_000); continue }
                if offset >= all.count {
                    if loop && all.count >= format.bytesPerFrame { offset = 0 } else {
                        counters.set(.finished)
                        return
                    }
                }
                let n = min(bytesPerPeriod, all.count - offset)
                buffer.copyMemory(from: all.baseAddress! + offset, byteCount: n)
                offset += n
                if paced { pacer.wait() }
                let now = MonotonicClock.now()
                // A paced file is "captured" over the period that just went by.
                let frames = n / format.bytesPerFrame
                let time = paced ? Instant(nanoseconds: now.nanoseconds &- framesToNanoseconds(frames, rate: format.sampleRate)) : now
                deliver(frames: frames, bytes: n, time: time, now: now)
            }
        }
    }

    @inline(__always)
    func deliver(frames: Int, bytes: Int, time: Instant, now: Instant) {
        sink.captured(UnsafeRawBufferPointer(start: buffer, count: bytes), frames: frames, format: format, time: time)
        counters.periods.add(1, ordering: .relaxed)
        counters.frames.add(UInt64(frames), ordering: .relaxed)
        counters.lastPeriodNanoseconds.store(now.nanoseconds, ordering: .relaxed)
    }
}

/// Why an audio device or file could not be used.
public enum DeviceError: Error, Equatable, Sendable, CustomStringConvertible {
    case alsa(ALSAError)
    case file(FileError)
    case thread(SystemError)
    /// The pipeline for the device's format could not be built (a rate or channel
    /// count the converter or resampler does not take).
    case pipeline(AudioError)

    public var description: String {
        switch self {
        case .alsa(let e): return e.description
        case .file(let e): return e.description
        case .thread(let e): return "cannot start the audio thread: \(e)"
        case .pipeline(let e): return e.description
        }
    }
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
    let control = ThreadControl()
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

    public convenience init(output: PlaybackOutput, source: Source) throws(DeviceError) {
        try self.init(output: output) { (_: DeviceFormat) throws(DeviceError) -> Source in source }
    }

    /// The same, with the source built once the device's format is known.
    public init(output: PlaybackOutput, source build: (DeviceFormat) throws(DeviceError) -> Source) throws(DeviceError) {
        self.output = output
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
    public init(pcm: any PCMDevice, source: Source) {
        output = .device(pcm.device, PCMRequest())
        self.source = source
        self.pcm = pcm
        format = pcm.format
        buffer = .allocate(byteCount: format.bytesPerFrame * max(format.periodFrames, 1) + 64, alignment: 16)
    }

    deinit {
        stop()
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
        var pacer = Pacer(periodFrames: frames, sampleRate: format.sampleRate)
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
            // `fill.periods` of them, so what is written goes out at once instead of
            // waiting in a blocking write (a period) behind a full buffer (another): the
            // speaker's share of the downlink's delay is `fill.periods`, not the whole
            // buffer. The ring's audio waits in the ring meanwhile, where a flush finds it.
            if !ownClock, !paced, let pcm, let queued = pcm.bufferedFrames(), queued > fill.periods * frames {
                control.sleep(nanoseconds: framesToNanoseconds(queued - fill.periods * frames, rate: format.sampleRate))
            }
            let requests = flushRequests.load(ordering: .acquiring)
            if requests != flushesDone {
                flush(requests)
                timeline.reset()
            }
            let time: Instant
            if ownClock {
                // Heard the moment it is due: the pacer's deadline is this sink's clock.
                time = paced ? Instant(nanoseconds: pacer.wait()) : MonotonicClock.now()
            } else {
                guard let pcm else {
                    if case .device(let name, let request) = output { reopen(name: name, request: request) }
                    timeline.reset()
                    continue
                }
                // Paced (no clock of its own): the deadline is its clock, as for capture.
                var deadline: Int64? = nil
                if paced { deadline = pacer.wait() }
                // Before the write: a frame written now is heard `delay` frames from now.
                let (now, delay, trusted) = measureDelay(pcm)
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
        let now = MonotonicClock.now()
        source.playbackFlushed(at: now)
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
        counters.lastPeriodNanoseconds.store(MonotonicClock.now().nanoseconds, ordering: .relaxed)
    }

    func reopen(name: String, request: PCMRequest) {
        control.reopen(counters) {
            guard let p = try? PCM(device: name, stream: .playback, request: request), p.format == format else { return false }
            pcm = p
            source.playbackStarted(format)
            return true
        }
    }
}
