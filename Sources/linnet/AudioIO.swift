// The agent's audio ends: the microphone (a capture device or a WAV file on the capture
// thread, through the hook chain and the mute gate; or a generated voice for the demo)
// and the speaker (a playback device on its thread, a WAV file, or nothing). The loop
// sees 20 ms frames at the pipeline rate in both directions.
//
// Uplink frames carry their capture time; `UplinkClock` drops those that waited more
// than 200 ms (behind a stopped process or a held loop) instead of sending them as a
// burst, and reports how much RTP time to skip (`onSkip`) for audio dropped or never
// captured, so RTP time keeps following real time.
import CSystem
import Synchronization
import Wire
import Platform
import Audio
import Devices
import Agent
import Settings

final class AudioIO {
    enum Uplink {
        case capture(CaptureThread<PipelineBox>, CapturePipeline, EventFD)
        /// Loop-paced frames from a generator (the demo's test voice), 48 kHz.
        case generated(FrameSource)
    }

    enum Downlink {
        case none
        case file(WAVFrameSink)
        case playback(PlaybackThread<PlaybackBox>, PlaybackPipeline)
    }

    let loop: EventLoop
    let uplink: Uplink
    let downlink: Downlink
    let rate: Int
    let frameSamples: Int
    let mute: MuteGate
    let meter: LevelMeter?
    var frame: [Int16]
    var onFrame: ([Int16]) -> Void = { _ in }
    /// Frames (20 ms each) of uplink time that passed without a frame to send: stale
    /// frames dropped, capture gaps. The session's RTP time must move on by as much.
    var onSkip: (Int) -> Void = { _ in }
    var clock = UplinkClock()
    var uplinkTimer: EventLoop.TimerID?
    var source: EventLoop.SourceID?
    var started = false

    init(loop: EventLoop, uplink: Uplink, downlink: Downlink, rate: Int, mute: MuteGate, meter: LevelMeter?) {
        self.loop = loop
        self.uplink = uplink
        self.downlink = downlink
        self.rate = rate
        frameSamples = rate / 50
        self.mute = mute
        self.meter = meter
        frame = [Int16](repeating: 0, count: rate / 50)
    }

    /// Builds the capture side from config: the device (or `input` file, paced in real
    /// time as a microphone would deliver it), the hook chain, the mute gate last.
    static func capture(config: Config, loop: EventLoop) throws(CLIFailure) -> (Uplink, MuteGate, LevelMeter) {
        let hooks = try AudioSetup(config: config)
        var request = PCMRequest()
        request.channels = hooks.channel.map { $0 + 1 } ?? 1
        let input: CaptureInput = config.input.map { .file($0, paced: true, loop: config.loopInput) } ?? .device(config.capture, request)
        // (capture = none is handled by the caller: a silent generator.)
        let notify = try wrap { () throws(SystemError) in try EventFD() }
        let box = PipelineBox()
        let thread: CaptureThread<PipelineBox>
        do throws(DeviceError) { thread = try CaptureThread(input: input, sink: box) } catch {
            let what = config.input.map { "--input '\($0)'" } ?? "capture device '\(config.capture)'"
            throw CLIFailure(error.isMissing ? .unavailable : .dataError, "\(what): \(error)")
        }
        let pipeline: CapturePipeline
        do throws(AudioError) {
            pipeline = try CapturePipeline(device: thread.format, rate: hooks.rate, channel: hooks.channel, chain: hooks.chain, notify: notify,
                                           wakeFrames: 2) // `drain` takes 20 ms frames
        } catch {
            throw CLIFailure(.config, "capture: \(error)")
        }
        box.pipeline = pipeline
        return (.capture(thread, pipeline, notify), hooks.mute, hooks.meter)
    }

    static func playback(config: Config) throws(CLIFailure) -> Downlink {
        if let output = config.output { return .file(try WAVFrameSink(path: output, rate: config.rate)) }
        let name = config.playback
        if name == "none" { return .none }
        var request = PCMRequest()
        request.acceptedRates = [config.rate, 48_000, 24_000, 16_000]
        let box = PlaybackBox()
        let thread: PlaybackThread<PlaybackBox>
        do throws(DeviceError) { thread = try PlaybackThread(output: .device(name, request), source: box) } catch {
            throw CLIFailure(error.isMissing ? .unavailable : .config, "playback device '\(name)': \(error)")
        }
        let pipeline: PlaybackPipeline
        do throws(AudioError) {
            guard let r = SampleRate(rawValue: config.rate) else { throw AudioError.unsupportedSampleRate(config.rate) }
            pipeline = try PlaybackPipeline(rate: r, deviceRate: thread.format.sampleRate, maxPeriodFrames: thread.format.periodFrames)
        } catch {
            throw CLIFailure(.config, "playback: \(error)")
        }
        box.pipeline = pipeline
        return .playback(thread, pipeline)
    }

    func start() throws(CLIFailure) {
        guard !started else { return }
        started = true
        switch uplink {
        case .capture(let thread, let pipeline, let notify):
            source = loop.watch(fd: notify.fd) { _ in
                notify.drain()
                self.drain(pipeline)
            }
            do throws(DeviceError) { try thread.start() } catch { throw CLIFailure(.unavailable, error.description) }
            if !thread.realtime { Log.info("real-time scheduling not permitted (no CAP_SYS_NICE or LimitRTPRIO): audio threads run at normal priority") }
        case .generated(let generator):
            tick(generator, at: loop.now)
        }
        if case .playback(let thread, _) = downlink {
            do throws(DeviceError) { try thread.start() } catch { throw CLIFailure(.unavailable, error.description) }
        }
    }

    /// Every whole 20 ms frame waiting in the capture ring, each sent or dropped by its
    /// capture time.
    func drain(_ pipeline: CapturePipeline) {
        while true {
            guard let t = frame.withUnsafeMutableBufferPointer({ pipeline.popFrame(into: $0) }) else { return }
            deliver(captureTime: t)
        }
    }

    func deliver(captureTime t: Instant) {
        let d = clock.admit(captureTime: t, now: loop.now)
        if d.framesToSkip > 0 { onSkip(d.framesToSkip) }
        if d.send { onFrame(frame) }
    }

    func tick(_ generator: FrameSource, at deadline: Instant) {
        uplinkTimer = loop.schedule(at: deadline) {
            // A loop-paced source is "captured" when its tick was due. Ticks that come
            // late past the stale bound (the loop was held, the process stopped) are not
            // caught up in a burst: the schedule restarts from now, and the clock sees
            // the gap and moves RTP time on.
            var due = deadline
            let now = self.loop.now
            if now - deadline > self.clock.staleAfter { due = now }
            if generator.nextFrame(into: &self.frame) {
                if self.mute.isMuted { for i in 0..<self.frame.count { self.frame[i] = 0 } }
                self.deliver(captureTime: due)
            }
            self.tick(generator, at: due + .milliseconds(20))
        }
    }

    /// One 20 ms frame of the provider's voice (nil: nothing to play this time).
    func play(_ samples: [Int16]?) {
        switch downlink {
        case .none: break
        case .file(let sink):
            sink.play(samples ?? [Int16](repeating: 0, count: frameSamples))
        case .playback(_, let pipeline):
            // The ring absorbs the difference between the loop's 20 ms and the
            // device's clock; when it is full the oldest audio is what is lost.
            if let samples { _ = samples.withUnsafeBufferPointer { pipeline.ring.push($0) } }
        }
    }

    /// Progress counters for the watchdog: nil for a side with no thread, or whose
    /// thread ended on purpose (a non-looping input file played out).
    var progress: PipelineProgress {
        var c: Int? = nil, p: Int? = nil
        if case .capture(let thread, _, _) = uplink, !thread.finished { c = Int(thread.counters.periods.load(ordering: .relaxed)) }
        if case .playback(let thread, _) = downlink { p = Int(thread.counters.periods.load(ordering: .relaxed)) }
        return PipelineProgress(captureFrames: c, playbackFrames: p)
    }

    /// Overruns and underruns: the device's, plus the rings' (a capture frame the loop had
    /// no room for, a playback period the ring could not fill).
    var xruns: (capture: Int, playback: Int) {
        var c = 0, p = 0
        if case .capture(let thread, let pipeline, _) = uplink {
            c = Int(thread.counters.xruns.load(ordering: .relaxed)) + Int(pipeline.overflows.xruns.load(ordering: .relaxed))
        }
        if case .playback(let thread, let pipeline) = downlink {
            p = Int(thread.counters.xruns.load(ordering: .relaxed)) + Int(pipeline.underruns.xruns.load(ordering: .relaxed))
        }
        return (c, p)
    }

    func stop() {
        if let uplinkTimer { loop.cancel(uplinkTimer) }
        uplinkTimer = nil
        if let source { loop.unwatch(source) }
        source = nil
        if case .capture(let thread, _, _) = uplink { thread.stop() }
        switch downlink {
        case .none: break
        case .file(let sink): sink.close()
        case .playback(let thread, _):
            do throws(DeviceError) { try thread.finish() } catch { Log.warning(error.description) }
        }
    }
}
