// The capture thread: one period at a time from a device or a file to its sink, with
// the capture time of each period and recovery from xruns and lost devices.
import CSystem
import Synchronization
import Wire
import Audio
import Platform

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
    let control: ThreadControl
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
    /// `clock`: what the thread reads and sleeps on (tests: a virtual clock).
    public convenience init(input: CaptureInput, sink: Sink, clock: DeviceClock = .monotonic) throws(DeviceError) {
        try self.init(input: input, clock: clock) { (_: DeviceFormat) throws(DeviceError) -> Sink in sink }
    }

    /// The same, with the sink built once the device's format is known (the pipeline's
    /// converter and resampler depend on it).
    public init(input: CaptureInput, clock: DeviceClock = .monotonic,
                sink build: (DeviceFormat) throws(DeviceError) -> Sink) throws(DeviceError) {
        self.input = input
        control = ThreadControl(clock: clock)
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
    public init(pcm: any PCMDevice, sink: Sink, paced: Bool = false, clock: DeviceClock = .monotonic) {
        control = ThreadControl(clock: clock)
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
        let clock = control.clock
        var pacer = Pacer(periodFrames: frames, sampleRate: format.sampleRate, now: clock.now().nanoseconds)
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
            if request.paced { deadline = pacer.wait(on: clock) }
            let n = pcm.readRaw(buffer, frames: frames)
            if n > 0 {
                // The first frame of what was just read was digitized delay + n frames ago.
                let (now, delay, trusted) = measureDelay(pcm, on: clock)
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
            // Retried with backoff until it works: no log from this thread, the open's
            // code is kept for the loop; a device back with another format is waited out.
            let p: PCM
            do throws(ALSAError) { p = try PCM(device: name, stream: .capture, request: request) } catch {
                counters.lastError.store(error.code, ordering: .relaxed)
                return false
            }
            guard p.format == format else { return false }
            pcm = p
            timeline.reset()
            sink.captureStarted(format)
            return true
        }
    }

    func runFile(paced: Bool, loop: Bool) {
        let bytesPerPeriod = format.periodFrames * format.bytesPerFrame
        let clock = control.clock
        var pacer = Pacer(periodFrames: format.periodFrames, sampleRate: format.sampleRate, now: clock.now().nanoseconds)
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
                if paced { pacer.wait(on: clock) }
                let now = clock.now()
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
