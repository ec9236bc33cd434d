// The agent's audio ends on the loop. Devices' `DuplexAudio` owns both audio threads:
// the microphone (a capture device or a WAV file, through the hook chain and the mute
// gate) and the speaker (a playback device, a WAV file, or nothing, each on its own
// clock). A generated voice (the demo) or silence (`capture = none`) can stand in for
// the microphone on a loop timer. The loop sees media frames (`frame-ms`) at the
// pipeline rate.
//
// Uplink frames carry their capture time; `UplinkClock` drops those that waited more
// than 200 ms (behind a stopped process or a held loop) instead of sending them as a
// burst, and reports how much RTP time to skip (`onSkip`) for audio dropped or never
// captured, so RTP time keeps following real time.
//
// Downlink: the playback thread signals each period it consumed; the duplex pipeline
// then asks `onPlayout` for audio until its ring is at target, so the jitter buffer is
// read at the speaker's rate.
import CSystem
import Synchronization
import Wire
import Platform
import Audio
import Devices
import Media
import Agent
import Settings

/// Where uplink PCM comes from when it is not a capture thread: one media frame per
/// call, or false when nothing is available yet (the frame is then skipped: RTP time
/// moves on).
public protocol FrameSource: AnyObject {
    func nextFrame(into frame: inout [Int16]) -> Bool
}

public final class AudioIO {
    let loop: EventLoop
    /// Both audio threads (nil only in tests that drive the uplink by hand).
    let duplex: DuplexAudio?
    /// Stands in for the microphone on a loop timer (the demo's voice, silence).
    let generator: FrameSource?
    public let frameClock: FrameClock
    public let rate: Int
    let frameSamples: Int
    let mute: MuteGate
    let meter: LevelMeter?
    /// With `voice-flag`: the preprocessor whose voice flag drives Linnet's barge-in.
    let voice: SpeexPreprocessor?
    /// With `aec`: the echo canceller, whose measure of the echo decides when the
    /// microphone is held (`duplex = auto`).
    let canceller: EchoCanceller?
    /// `--output`, when the speaker is a WAV file.
    let outputPath: String?
    /// With a wake word: the copy of the capture its detector reads.
    let wakeTap: WakeTap?
    var frame: [Int16]
    var onFrame: ([Int16]) -> Void = { _ in }
    /// Frames of uplink time that passed without a frame to send: stale frames dropped,
    /// capture gaps. The session's RTP time must move on by as much.
    var onSkip: (Int) -> Void = { _ in }
    /// Writes the provider's voice into the buffer (which holds 120 ms) and returns the
    /// samples written (0 when there is nothing to play: silence is played) and how many
    /// of them are the provider's stream (`MediaPath.streamSamples`).
    var onPlayout: (UnsafeMutableBufferPointer<Int16>) -> (samples: Int, stream: Int, concealed: Bool) = { _ in (0, 0, false) }
    /// What was queued for the speaker, to tell what of it has been heard.
    var ledger: PlayoutLedger
    /// The decoded frame being handed over in 10 ms pieces (`playout`).
    var pending: [Int16]
    var pendingStart = 0
    var pendingCount = 0
    var pendingIsStream = false
    var pendingConcealed = false
    /// The wake word's earcon (made at the first wake), and how much of it has played
    /// (`earcon.count`: not playing). Mixed over the call on the loop's playout, so the
    /// echo canceller's reference (what the speaker played) holds it too.
    var earcon: [Int16] = []
    var earconAt = 0
    var clock: UplinkClock
    var uplinkTimer: EventLoop.TimerID?
    var source: EventLoop.SourceID?
    var started = false
    var stopped = false
    /// Why the `--output` recording is incomplete (the first write error, or the header
    /// patch at close failing); nil while it is whole.
    private(set) var incomplete: String?

    init(loop: EventLoop, duplex: DuplexAudio?, generator: FrameSource?, frameClock: FrameClock = .standard,
         mute: MuteGate, meter: LevelMeter?, voice: SpeexPreprocessor? = nil, canceller: EchoCanceller? = nil,
         outputPath: String? = nil, wakeTap: WakeTap? = nil) {
        self.loop = loop
        self.wakeTap = wakeTap
        self.duplex = duplex
        self.generator = generator
        self.frameClock = frameClock
        rate = frameClock.sampleRate
        frameSamples = frameClock.samples
        self.mute = mute
        self.meter = meter
        self.voice = voice
        self.canceller = canceller
        self.outputPath = outputPath
        frame = [Int16](repeating: 0, count: frameClock.samples)
        clock = UplinkClock(frameDuration: frameClock.duration)
        ledger = PlayoutLedger(rate: frameClock.sampleRate)
        // The longest Opus packet is 120 ms (RFC 6716 §3.2.1).
        pending = [Int16](repeating: 0, count: frameClock.sampleRate * 12 / 100)
    }

    /// Builds both ends from config: the microphone (the device, or `input` paced in real
    /// time as a microphone would deliver it, through the hook chain, the mute gate
    /// last), or `generator` / silence in its place; and the speaker (the device, the
    /// `output` file, or nothing), all in one duplex pipeline.
    public static func open(config: Config, loop: EventLoop, generator: FrameSource? = nil) throws(CLIFailure) -> AudioIO {
        let frameClock: FrameClock
        do throws(MediaError) { frameClock = try FrameClock(milliseconds: config.frameMS, sampleRate: config.rate) } catch {
            throw CLIFailure(.config, error.description)
        }
        guard let rate = SampleRate(rawValue: config.rate) else { throw CLIFailure(.config, "rate must be 16000, 24000 or 48000") }
        var stand = generator
        var capture: CaptureInput? = nil
        var hooks: AudioSetup? = nil
        if stand == nil {
            if config.input == nil && config.capture.bytesEqual("none") {
                stand = SilenceSource()
            } else {
                let h = try AudioSetup(config: config)
                var request = PCMRequest()
                request.channels = h.channel.map { $0 + 1 } ?? 1
                capture = config.input.map { .file($0, paced: true, loop: config.loopInput) } ?? .device(config.capture, request)
                hooks = h
            }
        }
        let file = DeviceFormat(sampleFormat: .s16LE, sampleRate: config.rate, channels: 1, periodFrames: config.rate / 100)
        let playback: PlaybackOutput
        if let output = config.output {
            playback = .file(output, format: file, paced: true)
        } else if config.playback.bytesEqual("none") {
            // Nobody listens: 20 ms periods, half the wake-ups of a device's 10 ms.
            var none = file
            none.periodFrames = config.rate / 50
            playback = .discard(none)
        } else {
            var request = PCMRequest()
            request.acceptedRates = [config.rate, 48_000, 24_000, 16_000]
            playback = .device(config.playback, request)
        }
        var duplexConfig = DuplexConfiguration(rate: rate, capture: capture, channel: hooks?.channel, playback: playback)
        // One downlink frame beyond a period, so a loop that is a period late still finds
        // audio queued.
        // 10 ms ahead of the playback thread at least, handed over in 10 ms pieces
        // (`playout`): the ring is 10–20 ms of the downlink's delay, not 30–50; it grows
        // by itself when the loop cannot keep up (DuplexAudio.adaptTarget).
        duplexConfig.playoutTarget = .milliseconds(10)
        // Wake the loop once a whole uplink packet is waiting, not after every 10 ms
        // frame (else half the wake-ups would find nothing to send).
        duplexConfig.captureWakeFrames = max(1, frameClock.milliseconds / 10)
        let duplex: DuplexAudio
        do throws(DuplexError) {
            duplex = try DuplexAudio(duplexConfig, captureChain: hooks?.chain ?? HookChain())
            // The echo canceller's reference: what this pipeline's speaker plays.
            hooks?.liveReference?.source = duplex.reference
        } catch {
            switch error {
            case .capture(let e):
                if case .pipeline = e { throw CLIFailure(.config, "capture: \(e)") }
                let what = config.input.map { "--input '\($0)'" } ?? "capture device '\(config.capture)'"
                var f = CLIFailure(e.isMissing ? .unavailable : .dataError, "\(what): \(e)")
                f.deviceMissing = config.input == nil && e.isMissing
                throw f
            case .playback(let e):
                if case .pipeline = e { throw CLIFailure(.config, "playback: \(e)") }
                if config.output != nil {
                    // Opened, then the header could not be written (/dev/full, a full
                    // disk): the recording failed, not the configuration.
                    if case .file(.write) = e { throw CLIFailure(.ioError, "--output \(e)") }
                    throw CLIFailure(.config, "--output \(e)")
                }
                var f = CLIFailure(e.isMissing ? .unavailable : .config, "playback device '\(config.playback)': \(e)")
                f.deviceMissing = e.isMissing
                throw f
            }
        }
        return AudioIO(loop: loop, duplex: duplex, generator: stand, frameClock: frameClock,
                       mute: hooks?.mute ?? MuteGate(), meter: hooks?.meter,
                       voice: hooks?.voiceFlag == true ? hooks?.preprocessor : nil, canceller: hooks?.canceller,
                       outputPath: config.output, wakeTap: hooks?.wakeTap)
    }

    func start() throws(CLIFailure) {
        guard !started else { return }
        started = true
        if let duplex {
            if let pipeline = duplex.capturePipeline {
                let notify = duplex.captureNotify
                source = loop.watch(fd: notify.fd) { _ in
                    _ = notify.drain()
                    self.drain(pipeline)
                }
            }
            duplex.attach(to: loop, frameSamples: frameSamples, uplink: nil) { out in self.playout(out) }
            do throws(DeviceError) { try duplex.start() } catch { throw CLIFailure(.unavailable, error.description) }
            if duplex.capture != nil && !duplex.realtime {
                Log.info("real-time scheduling not permitted (no CAP_SYS_NICE or LimitRTPRIO): audio threads run at normal priority")
            }
        }
        if let generator { tick(generator, at: loop.now) }
    }

    /// Every whole media frame waiting in the capture ring, each sent or dropped by its
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
            self.tick(generator, at: due + self.frameClock.duration)
        }
    }

    /// The playback thread consumed a period: the next 10 ms of the provider's voice.
    /// A decoded frame (20 ms, or whatever the far end sends) is handed over 10 ms at a
    /// time, so the ring never holds more than its target and 10 ms.
    func playout(_ out: UnsafeMutableBufferPointer<Int16>) -> Int {
        noteOutputFailure()
        if pendingCount == 0 {
            let got = pending.withUnsafeMutableBufferPointer { onPlayout($0) }
            pendingStart = 0
            pendingCount = max(0, min(got.samples, pending.count))
            pendingIsStream = got.stream > 0
            pendingConcealed = got.concealed
        }
        let piece = rate / 100
        // Nothing decoded: DuplexAudio plays 10 ms of silence (or of the earcon).
        guard pendingCount > 0 else {
            if let duplex { ledger.queued(end: duplex.playbackPipeline.ring.writePosition &+ piece, samples: piece, stream: 0) }
            guard earconAt < earcon.count else { return 0 }
            let n = min(piece, out.count)
            for i in 0..<n { out[i] = 0 }
            mixEarcon(out, n)
            return n
        }
        let n = min(pendingCount, piece, out.count)
        var peak: Int32 = 0
        for i in 0..<n {
            let x = pending[pendingStart + i]
            out[i] = x
            peak = max(peak, Int32(x) < 0 ? -Int32(x) : Int32(x))
        }
        mixEarcon(out, n)
        pendingStart += n
        pendingCount -= n
        if let duplex {
            // Audible: over -60 dBFS at its peak, and decoded. A provider's silent
            // frames between replies decode to (near) zero, and concealment of a lost
            // packet is the decoder's guess: neither may end a reply heard.
            ledger.queued(end: duplex.playbackPipeline.ring.writePosition &+ n, samples: n,
                          stream: pendingIsStream ? n : 0, audible: peak > 32 && !pendingConcealed)
        }
        return n
    }

    /// Starts the earcon (from its beginning, if it is playing already).
    func playEarcon() {
        if earcon.isEmpty { earcon = Earcon.samples(rate: rate) }
        earconAt = 0
    }

    /// Adds what is left of the earcon to the first `n` samples of `out`, saturating.
    private func mixEarcon(_ out: UnsafeMutableBufferPointer<Int16>, _ n: Int) {
        guard earconAt < earcon.count else { return }
        let k = min(n, earcon.count - earconAt)
        for i in 0..<k {
            let v = Int32(out[i]) + Int32(earcon[earconAt + i])
            out[i] = Int16(max(-32768, min(32767, v)))
        }
        earconAt += k
    }

    /// How much of the provider's stream the speaker has played out by now, where the
    /// stretch now playing began, and where the audible part of what was played ended,
    /// in ms of the stream.
    func downlinkHeard() -> (heard: Int, spurtStart: Int?, voiceEnd: Int) {
        let spurt = ledger.spurtStart.map { ledger.milliseconds($0) }
        guard let duplex else {
            return (ledger.milliseconds(ledger.streamTotal), spurt, ledger.milliseconds(ledger.voiceEndTotal))
        }
        let position = duplex.playbackPipeline.heardPosition(at: MonotonicClock.now())
        return (ledger.milliseconds(ledger.heardStream(atRing: position)), spurt,
                ledger.milliseconds(ledger.heardVoiceEnd(atRing: position)))
    }

    /// A failing `--output` (a full disk, `EFBIG` past `LimitFSIZE=`) loses the rest of
    /// the recording, not the call: said once, with the path and the reason; the call
    /// goes on, and `finalStatus` makes the command end with 74 (EX_IOERR) so a script
    /// knows the file is short.
    func noteOutputFailure() {
        guard incomplete == nil, let duplex, let path = outputPath, duplex.playback.fileFailedNow else { return }
        // The thread writes nothing more once it has failed: its figures are final.
        let reason = duplex.playback.fileFailure.map(AudioIO.reasonText) ?? "write error"
        let at = tenths(duplex.playback.fileSeconds)
        incomplete = "\(reason) after \(at) s"
        Log.error("--output '\(path)': \(reason); the recording stops at \(at) s, the call goes on")
    }

    static func reasonText(_ e: FileError) -> String {
        switch e {
        case .system(_, let s), .write(_, let s): return SystemError.message(s.code)
        default: break
        }
        return e.description
    }

    /// After `stop`: logs why the recording is incomplete and returns 74, or `status`
    /// when it is whole (a failure status already set wins).
    public func finalStatus(_ status: ExitStatus) -> ExitStatus {
        guard let incomplete, let path = outputPath else { return status }
        Log.error("the recording '\(path)' is incomplete: \(incomplete)")
        return status == .ok ? .ioError : status
    }

    /// Barge-in: drops what waits for the speaker, in the ring and in the device, at
    /// once (the playback thread's next period). The caller stops the downlink itself.
    /// The decoded frame still being handed over goes too: its second half is the
    /// reply that was cut.
    func flushPlayback() {
        pendingCount = 0
        guard let duplex else { return }
        // What was queued and is not yet out of the speaker is never heard: a
        // truncate sent after this (a duck, then the cut) must not count it.
        ledger.dropped(atRing: duplex.playbackPipeline.heardPosition(at: MonotonicClock.now()))
        duplex.flushPlayback()
    }

    /// What the speaker played, aligned to each capture frame, for capture hooks (echo
    /// cancellation) added to the chain once the pipeline is built.
    var reference: PlaybackReference? { duplex?.reference }

    /// Progress counters for the watchdog: nil for a side with no thread, or whose
    /// thread ended on purpose (a non-looping input file played out).
    var progress: PipelineProgress {
        guard let duplex else { return PipelineProgress(captureFrames: nil, playbackFrames: nil) }
        let p = duplex.progress
        return PipelineProgress(captureFrames: p.capture, playbackFrames: p.playback)
    }

    /// Overruns and underruns: the devices', plus the rings' (a capture frame the loop had
    /// no room for, a playback period the ring could not fill).
    var xruns: (capture: Int, playback: Int) { duplex?.xruns ?? (0, 0) }

    var captureHealth = DeviceHealth(capture: true)
    var playbackHealth = DeviceHealth(capture: false)

    /// Says a device that stopped working (its ALSA error) or came back: the threads
    /// only leave their state in their counters.
    func sayDeviceChanges(now: Instant) {
        guard let duplex else { return }
        if let c = duplex.capture?.counters,
           let line = captureHealth.update(state: c.state, error: c.lastError.load(ordering: .relaxed), now: now) {
            Log.emit(line.level) { line.text }
        }
        let p = duplex.playback.counters
        if let line = playbackHealth.update(state: p.state, error: p.lastError.load(ordering: .relaxed), now: now) {
            Log.emit(line.level) { line.text }
        }
    }
    var timelineJumps: Int { duplex?.timelineJumps ?? 0 }

    func stop() {
        guard !stopped else { return }
        stopped = true
        if let uplinkTimer { loop.cancel(uplinkTimer) }
        uplinkTimer = nil
        if let source { loop.unwatch(source) }
        source = nil
        guard let duplex else { return }
        noteOutputFailure()
        do throws(DeviceError) { try duplex.finish() } catch {
            if outputPath != nil {
                if incomplete == nil {
                    let reason: String
                    if case .file(let f) = error { reason = AudioIO.reasonText(f) } else { reason = error.description }
                    incomplete = "its header could not be written (\(reason))"
                }
            } else {
                Log.warning(error.description)
            }
        }
        noteOutputFailure()
    }
}
