import CSystem
import Synchronization
import Wire
import Audio
import Platform

/// What a duplex pipeline is built from.
public struct DuplexConfiguration {
    /// The pipeline rate (both directions, mono).
    public var rate: SampleRate = .hz48000
    /// The microphone; nil for none (the uplink then comes from elsewhere: the demo's
    /// generated voice, silence for `capture = none`).
    public var capture: CaptureInput?
    /// The device channel to capture (nil: average all).
    public var channel: Int? = nil
    /// The speaker: a device, a WAV file, or nothing (still paced on its own clock).
    public var playback: PlaybackOutput
    /// 10 ms frames each ring holds.
    public var captureRingFrames = 32
    public var playbackRingFrames = 32
    /// 10 ms frames the loop takes from the capture ring at a time (one uplink packet);
    /// the loop is woken only once that much is waiting.
    public var captureWakeFrames = 1
    /// How much audio the loop keeps queued ahead of the playback thread, at least:
    /// enough to cover the loop's reaction to a period's signal (a wake-up, a decode).
    /// The ring's level moves between the target and the target plus what one top-up
    /// adds (10 ms when the downlink is handed over in 10 ms pieces, as `run` does).
    /// The target rises by 10 ms at each ring underrun (a loop held up: a TLS handshake
    /// on a slow board), up to `playoutTargetMost`, and comes back down after 30 s
    /// without one: every 10 ms of it is 10 ms more between the network and the speaker.
    public var playoutTarget: Duration = .milliseconds(30)
    public var playoutTargetMost: Duration = .milliseconds(40)
    /// 10 ms frames of playback reference in flight to the capture side: the device's
    /// buffer plus how far capture may lag.
    public var referenceFrames = 64

    public init(rate: SampleRate = .hz48000, capture: CaptureInput?, channel: Int? = nil, playback: PlaybackOutput) {
        self.rate = rate
        self.capture = capture
        self.channel = channel
        self.playback = playback
    }
}

/// Which side of a duplex pipeline could not be set up, and why.
public enum DuplexError: Error, Equatable, Sendable, CustomStringConvertible {
    case capture(DeviceError)
    case playback(DeviceError)

    public var description: String {
        switch self {
        case .capture(let e): return "capture: \(e)"
        case .playback(let e): return "playback: \(e)"
        }
    }
}

/// The one owner of duplex audio: the capture and playback threads, their pipelines and
/// rings, the playback → capture reference, and the loop side of both directions. Every
/// command that plays and records (`run`, `demo`, `linnet audio`) builds its audio here.
///
/// Directions:
/// - **Uplink**: capture thread (device or paced file) → `CapturePipeline` (format
///   conversion, resampling, the reference aligned to each frame, capture hooks, the
///   mute gate) → ring → eventfd → the loop pops media frames with their capture times.
/// - **Downlink, on the device clock**: the playback thread pulls a period from its ring
///   (playback hooks, the reference, the device) and, when that left the ring below
///   `playoutTarget`, writes an eventfd; the loop tops the ring up to the target from
///   the downlink (the jitter buffer and decoder).
///   So the far end's frames are taken at exactly the rate the speaker plays them: a
///   difference between the two clocks shows up as the jitter buffer filling or
///   draining, where its drift control handles it (Media, RTP/JitterBuffer.swift),
///   not as a timer dropping samples.
/// - **Reference**: what the speaker played, after playback hooks, stamped with when it
///   is heard (now + `snd_pcm_delay` at write time, or the file sink's own clock), goes
///   through an SPSC ring to the capture thread, which cuts out for every capture frame
///   the samples heard while it was captured (its time from the capture device's own
///   delay): `reference.samples` during a capture hook's `process`.
/// - **Flush** (barge-in): `flushPlayback()` makes the playback thread drop its ring and
///   the device's buffer at its next period (`snd_pcm_drop` + `snd_pcm_prepare`).
///
/// Threads: `init`, `start`, `attach`, `stop` and the loop-side calls belong to one
/// thread (the loop); the rest runs on the two audio threads (see their types).
public final class DuplexAudio {
    public let rate: SampleRate
    public let reference: PlaybackReference
    public let capture: CaptureThread<CapturePipeline>?
    public let playback: PlaybackThread<PlaybackPipeline>
    public let captureNotify: EventFD
    public let playbackNotify: EventFD
    /// Samples the loop keeps queued for the playback thread (now; it adapts), and its
    /// bounds.
    public private(set) var targetSamples: Int
    let leastTargetSamples: Int
    let mostTargetSamples: Int
    var underrunsSeen: UInt64 = 0
    var calmTopUps = 0
    /// Whether the last top-up had downlink audio to queue (a call's stream), or only
    /// silence (no call yet, between sessions).
    var downlinkFlowing = false
    var loop: EventLoop?
    var sources: [EventLoop.SourceID] = []
    var uplinkFrame: [Int16] = []
    var downlinkFrame: [Int16] = []
    var downlink: (UnsafeMutableBufferPointer<Int16>) -> Int = { _ in 0 }
    var silenceSamples = 0
    var started = false

    /// Opens the devices (or files) named in `configuration` and builds both pipelines.
    public convenience init(_ configuration: DuplexConfiguration, captureChain: HookChain = HookChain(),
                            playbackChain: HookChain = HookChain()) throws(DuplexError) {
        try self.init(configuration: configuration, capturePCM: nil, playbackPCM: nil,
                      captureChain: captureChain, playbackChain: playbackChain)
    }

    /// Test seam: the same with stand-in devices (known delays, a shared "air") in place
    /// of ALSA's; `configuration.capture`/`playback` are then only consulted where a
    /// stand-in is nil. `clock` is what both threads read and sleep on (the stand-ins'
    /// virtual clock).
    public init(configuration: DuplexConfiguration, capturePCM: (any PCMDevice)?, playbackPCM: (any PCMDevice)?,
                captureChain: HookChain = HookChain(), playbackChain: HookChain = HookChain(),
                clock: DeviceClock = .monotonic) throws(DuplexError) {
        let rate = configuration.rate
        self.rate = rate
        do throws(AudioError) {
            reference = try PlaybackReference(format: try AudioFormat(sampleRate: rate, channels: 1),
                                              slots: DuplexAudio.powerOfTwo(configuration.referenceFrames))
        } catch {
            throw .playback(.pipeline(error))
        }
        do throws(SystemError) {
            captureNotify = try EventFD()
            playbackNotify = try EventFD()
        } catch {
            throw .capture(.thread(error))
        }
        targetSamples = Int(configuration.playoutTarget.milliseconds) * rate.hertz / 1000
        leastTargetSamples = targetSamples
        mostTargetSamples = max(targetSamples, Int(configuration.playoutTargetMost.milliseconds) * rate.hertz / 1000)
        let reference = self.reference
        // Capture first: of two missing devices, the microphone is the one reported.
        let notify = captureNotify
        let channel = configuration.channel
        let captureRing = configuration.captureRingFrames
        let captureWake = configuration.captureWakeFrames
        func capturePipeline(_ f: DeviceFormat) throws(DeviceError) -> CapturePipeline {
            do throws(AudioError) {
                return try CapturePipeline(device: f, rate: rate, channel: channel, chain: captureChain, notify: notify,
                                           ringFrames: captureRing, wakeFrames: captureWake, reference: reference)
            } catch {
                throw .pipeline(error)
            }
        }
        do throws(DeviceError) {
            if let capturePCM {
                capture = CaptureThread(pcm: capturePCM, sink: try capturePipeline(capturePCM.format), clock: clock)
            } else if let input = configuration.capture {
                capture = try CaptureThread(input: input, clock: clock) { (f: DeviceFormat) throws(DeviceError) in try capturePipeline(f) }
            } else {
                capture = nil
            }
        } catch {
            throw .capture(error)
        }
        let playbackRing = configuration.playbackRingFrames
        func playbackPipeline(_ f: DeviceFormat) throws(DeviceError) -> PlaybackPipeline {
            do throws(AudioError) {
                return try PlaybackPipeline(rate: rate, deviceRate: f.sampleRate, maxPeriodFrames: f.periodFrames,
                                            ringFrames: playbackRing, chain: playbackChain, reference: reference)
            } catch {
                throw .pipeline(error)
            }
        }
        do throws(DeviceError) {
            if let playbackPCM {
                playback = PlaybackThread(pcm: playbackPCM, source: try playbackPipeline(playbackPCM.format), clock: clock)
            } else {
                playback = try PlaybackThread(output: configuration.playback, clock: clock) { (f: DeviceFormat) throws(DeviceError) in try playbackPipeline(f) }
            }
        } catch {
            throw .playback(error)
        }
        playback.notify = playbackNotify
        playback.source.lowWater.store(targetSamples, ordering: .relaxed)
    }

    deinit { stop() }

    static func powerOfTwo(_ n: Int) -> Int {
        var p = 1
        while p < n { p <<= 1 }
        return p
    }

    public var capturePipeline: CapturePipeline? { capture?.sink }
    public var playbackPipeline: PlaybackPipeline { playback.source }
    /// Whether the threads got SCHED_FIFO.
    public var realtime: Bool { capture?.realtime ?? playback.realtime }

    // MARK: Loop side

    /// Watches both eventfds on `loop`: `uplink` gets every media frame of
    /// `frameSamples` samples the capture side completes, with its capture time (nil:
    /// the caller watches `captureNotify` and pops `capturePipeline` itself);
    /// `downlink` is asked for the next stretch of audio whenever the playback ring is
    /// below target (it writes into the buffer it is given, which holds 120 ms, and
    /// returns how many samples it wrote; 0 plays a frame of silence). The ring is
    /// primed to its target now, so the device does not start on an underrun.
    public func attach(to loop: EventLoop, frameSamples: Int,
                       uplink: ((UnsafeMutableBufferPointer<Int16>, Instant) -> Void)?,
                       downlink: @escaping (UnsafeMutableBufferPointer<Int16>) -> Int) {
        detach()
        self.loop = loop
        self.downlink = downlink
        // Silence, when the downlink has nothing, in 10 ms pieces: no more than that is
        // queued ahead of what the far end may send next.
        silenceSamples = rate.samplesPerFrame
        uplinkFrame = [Int16](repeating: 0, count: frameSamples)
        // The longest Opus packet is 120 ms (RFC 6716 §3.2.1).
        downlinkFrame = [Int16](repeating: 0, count: max(rate.hertz * 12 / 100, frameSamples))
        if let pipeline = capturePipeline, let uplink {
            let notify = captureNotify
            sources.append(loop.watch(fd: notify.fd) { _ in
                _ = notify.drain()
                while true {
                    let got = self.uplinkFrame.withUnsafeMutableBufferPointer { f -> Bool in
                        guard let t = pipeline.popFrame(into: f) else { return false }
                        uplink(f, t)
                        return true
                    }
                    if !got { return }
                }
            })
        }
        let played = playbackNotify
        sources.append(loop.watch(fd: played.fd) { _ in
            _ = played.drain()
            self.topUp()
        })
        topUp()
    }

    /// Stops watching the eventfds (the threads go on until `stop`), and lets go of
    /// the downlink closure (it holds its owner, which holds this pipeline).
    public func detach() {
        if let loop { for s in sources { loop.unwatch(s) } }
        sources = []
        loop = nil
        downlink = { _ in 0 }
    }

    /// Samples to queue to bring the playback ring to its target.
    public var playoutWanted: Int { max(0, targetSamples - playbackPipeline.ring.availableToRead) }

    /// Queues downlink audio for the speaker; returns how much fitted.
    @discardableResult
    public func play(_ samples: UnsafeBufferPointer<Int16>) -> Int { playbackPipeline.ring.push(samples) }

    /// Fills the playback ring up to its target from the downlink.
    public func topUp() {
        adaptTarget()
        var guardFrames = 64
        while playoutWanted > 0 && guardFrames > 0 {
            guardFrames -= 1
            let n = downlinkFrame.withUnsafeMutableBufferPointer { out -> Int in
                let got = downlink(out)
                downlinkFlowing = got > 0
                if got > 0 { return min(got, out.count) }
                let silence = min(silenceSamples, out.count)
                for i in 0..<silence { out[i] = 0 }
                return silence
            }
            let pushed = downlinkFrame.withUnsafeBufferPointer { play(UnsafeBufferPointer(rebasing: $0[0..<n])) }
            if pushed < n || n == 0 { break }
        }
    }

    /// The ring's target follows its underruns (`DuplexConfiguration.playoutTarget`).
    func adaptTarget() {
        let underruns = playbackPipeline.underruns.xruns.load(ordering: .relaxed)
        let step = rate.samplesPerFrame
        if underruns != underrunsSeen {
            // The first period of all runs short by design (nothing queued yet). A ring
            // that ran dry of silence (the loop held by a handshake before the call's
            // audio flows) cost nothing audible: raising the target for it would cost the
            // whole next 30 s of the call 10 ms of delay each.
            if downlinkFlowing && (underrunsSeen != 0 || underruns > 1) {
                targetSamples = min(targetSamples + step, mostTargetSamples)
            }
            underrunsSeen = underruns
            calmTopUps = 0
        } else if targetSamples > leastTargetSamples {
            calmTopUps += 1
            // About 30 s: one top-up a 10 ms period at most.
            if calmTopUps >= 3_000 {
                targetSamples -= step
                calmTopUps = 0
            }
        }
        playbackPipeline.lowWater.store(targetSamples, ordering: .relaxed)
    }

    /// Barge-in: the playback thread drops what waits in its ring and what the device
    /// holds, at the start of its next period. Audio queued after this call is played.
    public func flushPlayback() {
        playbackPipeline.markFlush()
        playback.requestFlush()
    }

    // MARK: Threads

    /// Starts playback first (so the reference is there for the first capture frame),
    /// then capture.
    public func start() throws(DeviceError) {
        guard !started else { return }
        try playback.start()
        try capture?.start()
        started = true
    }

    /// Stops both threads and stops watching the loop.
    public func stop() {
        detach()
        capture?.stop()
        playback.stop()
    }

    /// Stops, and closes a file output (its header gets the final sizes).
    public func finish() throws(DeviceError) {
        detach()
        capture?.stop()
        try playback.finish()
    }

    // MARK: Figures

    /// Periods handled by each thread (nil: no capture thread, or its file played out):
    /// the watchdog's progress.
    public var progress: (capture: Int?, playback: Int?) {
        var c: Int? = nil
        if let capture, !capture.finished { c = Int(capture.counters.periods.load(ordering: .relaxed)) }
        return (c, Int(playback.counters.periods.load(ordering: .relaxed)))
    }

    /// Overruns and underruns: the devices', plus the rings' (a capture frame the loop
    /// had no room for, a playback period the ring could not fill).
    public var xruns: (capture: Int, playback: Int) {
        var c = 0
        if let capture {
            c = Int(capture.counters.xruns.load(ordering: .relaxed)) + Int(capture.sink.overflows.xruns.load(ordering: .relaxed))
        }
        let p = Int(playback.counters.xruns.load(ordering: .relaxed)) + Int(playbackPipeline.underruns.xruns.load(ordering: .relaxed))
        return (c, p)
    }

    /// Times either thread's timeline jumped to a measurement (a start, an xrun, a
    /// stall, a device whose delay reports jitter past 2 ms): each can move the echo
    /// reference against the microphone, and the canceller learns the room again.
    public var timelineJumps: Int {
        Int(capture?.counters.timelineJumps.load(ordering: .relaxed) ?? 0) + Int(playback.counters.timelineJumps.load(ordering: .relaxed))
    }
}
