// `linnet audio`: the audio pipeline with no network. From a file, offline and faster
// than real time (capture conversion → hooks → Opus encode → decode → file); or from
// and to ALSA devices on the real-time threads for --seconds.
import CSystem
import Synchronization
import Wire
import Platform
import Audio
import Codec
import Devices
import Media
import Agent
import Settings
import Runtime

enum AudioCommand {
    static func run(_ args: [String]) -> ExitStatus {
        do throws(CLIFailure) {
            // The file, LINNET_* and flags, as run reads them: the same hooks and codec.
            let config = try loadConfig(.audio, args).0
            // The offline echo reference: what the speaker played, converted to the
            // pipeline's rate and channel as the microphone is.
            // --far-end and --sent first: what they need is the clearer message (an
            // offline --far-end also turns `aec = auto` on).
            try checkEchoTest(config)
            var reference: FileReference? = nil
            if let path = config.reference {
                guard config.aec else { throw CLIFailure(.usage, "audio: --reference is the echo canceller's, which is off here (--no-aec or aec = false): give --aec") }
                guard config.input != nil, config.output != nil else {
                    throw CLIFailure(.usage, "audio: --reference works offline: give --input MIC.wav and --output OUT.wav too")
                }
                reference = try FileReference(path: path, config: config)
            } else if config.aec && config.input != nil && config.output != nil {
                throw CLIFailure(.usage, "audio: --aec offline needs --reference SPEAKER.wav (what the speaker played)")
            }
            let hooks = try AudioSetup(config: config, reference: reference)
            // As for run, input and output replace capture and playback; with both, no
            // device is involved and the conversion runs as fast as it can.
            if let input = config.input, let output = config.output {
                return try offline(input: input, output: output, hooks: hooks)
            }
            return try live(config, hooks: hooks)
        } catch {
            // Most messages already name the command; say it once.
            Log.error(error.message.startsWithBytes("audio: ") ? error.message : "audio: " + error.message)
            return error.status
        }
    }

    /// `--far-end` and `--sent` belong to live runs: refused, as usage errors, where they
    /// would be ignored or would overwrite a file this run reads.
    static func checkEchoTest(_ config: Config) throws(CLIFailure) {
        let offline = config.input != nil && config.output != nil
        if config.farEnd != nil {
            if offline {
                throw CLIFailure(.usage, "audio: --far-end is what a speaker plays live; offline, give the speaker's file as --reference SPEAKER.wav")
            }
            if config.output != nil || config.playback.bytesEqual("none") {
                throw CLIFailure(.usage, "audio: --far-end is what the speaker plays: give a playback device (--playback PCM), not --output or playback none")
            }
        }
        if let sent = config.sent {
            if offline {
                throw CLIFailure(.usage, "audio: --sent records live runs; offline, --output is already what would be sent")
            }
            // Paths are bytes to the kernel: the same bytes name the same file.
            for (name, path) in [("--input", config.input), ("--output", config.output), ("--far-end", config.farEnd), ("--reference", config.reference)] where path?.bytesEqual(sent) == true {
                throw CLIFailure(.usage, "audio: --sent and \(name) name the same file '\(sent)'")
            }
        }
    }

    /// The media path `linnet audio` runs: the codec settings and frame-ms of the
    /// config, as run's calls use them.
    static func media(_ hooks: AudioSetup) throws(CLIFailure) -> MediaPath {
        do throws(MediaError) {
            return try MediaPath(MediaSettings(rate: hooks.rate.hertz, frameMilliseconds: hooks.frameMilliseconds,
                                               bitrate: hooks.bitrate, complexity: hooks.complexity, fec: hooks.fec, dtx: hooks.dtx))
        } catch {
            throw CLIFailure(.config, error.description)
        }
    }

    /// File to file, as fast as the CPU goes; the same stages as a live call (the capture
    /// pipeline a duplex one builds, the Media module's encoder and decoder).
    static func offline(input: String, output: String, hooks: AudioSetup) throws(CLIFailure) -> ExitStatus {
        _ = SignalSourceHolder.shared
        let reader: WAVReader
        do throws(FileError) { reader = try WAVReader(path: input) } catch { throw CLIFailure(.dataError, error.description) }
        let f = reader.format
        let device = DeviceFormat(sampleFormat: f.sampleFormat, sampleRate: f.sampleRate, channels: f.channels, periodFrames: max(1, f.sampleRate / 100))
        let notify = try wrap { () throws(SystemError) in try EventFD() }
        let pipeline: CapturePipeline
        do throws(AudioError) {
            pipeline = try CapturePipeline(device: device, rate: hooks.rate, channel: hooks.channel, chain: hooks.chain, notify: notify, ringFrames: 8)
        } catch {
            throw CLIFailure(.dataError, "'\(input)': \(error)")
        }
        let writer: WAVWriter
        do throws(FileError) { writer = try WAVWriter(path: output, sampleRate: hooks.rate.hertz, channels: 1) } catch {
            if case .write = error { throw CLIFailure(.ioError, error.description) }
            throw CLIFailure(.config, error.description)
        }
        let media = try Self.media(hooks)
        let frameSamples = media.clock.samples
        var pcm = [Int16](repeating: 0, count: frameSamples)
        var decoded = [Int16](repeating: 0, count: media.clock.maxPacketSamples)
        var packet = [UInt8](repeating: 0, count: 1275)
        var period = [UInt8](repeating: 0, count: device.periodFrames * f.bytesPerFrame)
        var bytes = 0, packets = 0, frames = 0
        pipeline.captureStarted(device)
        var time = Instant.zero
        // SIGINT, SIGTERM and SIGHUP end the conversion early but cleanly: the output
        // keeps what was written, with a correct header.
        let signals = SignalSourceHolder.shared
        var stoppedBy: Int32? = nil
        while true {
            if let s = signals?.drain().first {
                stoppedBy = s
                break
            }
            let n = try period.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(CLIFailure) -> Int in
                do throws(FileError) { return try reader.read(into: b) } catch { throw CLIFailure(.dataError, error.description) }
            }
            if n == 0 { break }
            period.withUnsafeBytes { raw in
                pipeline.captured(UnsafeRawBufferPointer(rebasing: raw[0..<n]), frames: n / f.bytesPerFrame, format: device, time: time)
            }
            time += .milliseconds(10)
            while pipeline.ring.availableToRead >= frameSamples {
                _ = pcm.withUnsafeMutableBufferPointer { pipeline.ring.pop(into: $0) }
                let encoded = pcm.withUnsafeBufferPointer { p in packet.withUnsafeMutableBytes { media.encode(p, into: $0) } }
                guard let length = encoded else { throw CLIFailure(.software, "the Opus encoder refused a frame") }
                bytes += length
                packets += 1
                let decodedCount = packet.withUnsafeBytes { b in
                    decoded.withUnsafeMutableBufferPointer { media.decode(UnsafeRawBufferPointer(rebasing: b[0..<length]), into: $0) }
                }
                guard let m = decodedCount else { throw CLIFailure(.software, "the Opus decoder refused a packet") }
                frames += m
                // A write that fails half-way (a full disk) is an I/O error (74), not
                // a configuration one: the header is still patched with what got there.
                do throws(FileError) {
                    try decoded.withBuffer { (d: UnsafeBufferPointer<Int16>) throws(FileError) in
                        try writer.write(UnsafeBufferPointer(rebasing: d[0..<m]))
                    }
                } catch {
                    // The write's error is the one reported; patching the header is
                    // best effort on a disk that just refused.
                    try? writer.close()
                    throw CLIFailure(.ioError, "\(error); '\(output)' holds the first \(tenths(writer.seconds)) s")
                }
            }
        }
        pipeline.captureStopped(device)
        do throws(FileError) { try writer.close() } catch { throw CLIFailure(.ioError, error.description) }
        if let s = stoppedBy { Log.info("stopped (\(ProcessSignals.name(s))): '\(output)' holds the first \(tenths(writer.seconds)) s") }
        let seconds = Double(frames) / Double(hooks.rate.hertz)
        let kbps = seconds > 0 ? Double(bytes * 8) / seconds / 1000 : 0
        // The meter reads −∞ dBFS for digital silence, and for input shorter than one
        // 10 ms frame it has measured nothing at all: say so instead of converting −∞.
        let peak = hooks.meter.peakDBFS
        let peakText = hooks.meter.frameCount == 0 ? "no whole 10 ms frame to measure"
            : peak.isFinite ? "last frame peak \(Int(saturating: peak.rounded())) dBFS" : "last frame digital silence (peak −∞ dBFS)"
        writeOut("audio: \(f.sampleFormat) \(f.sampleRate) Hz × \(f.channels) → \(hooks.rate.hertz) Hz mono, \(packets) Opus packets, \(Int(saturating: kbps.rounded())) kbit/s, \(frames) samples written; \(peakText)\(hookFigures(hooks))\n")
        return .ok
    }

    /// What the canceller found and the voice flag saw, for the summary line.
    static func hookFigures(_ hooks: AudioSetup) -> String {
        var extra = ""
        if let c = hooks.canceller {
            let d = c.estimatedDelayMilliseconds.map { "echo delay \(Int(saturating: $0.rounded())) ms" } ?? "no echo delay found"
            extra += "; aec: \(d), \(c.restartCount) filter restarts, \(c.selfResetCount) self-resets"
        }
        if let p = hooks.preprocessor, hooks.voiceFlag {
            extra += "; voice flag on in \(p.voiceFrameCount) of \(hooks.meter.frameCount) frames"
        }
        return extra
    }

    /// Devices (or a paced file) on the real-time threads for --seconds (0: until a
    /// signal stops it): one duplex pipeline, the capture's frames encoded and handed
    /// straight to the receive side's jitter buffer (a call with no network), played out
    /// as the speaker asks for them.
    ///
    /// The echo test (`--far-end`): the speaker plays a file instead of the loopback,
    /// pulled by the playback thread's requests exactly as the network's voice is, so the
    /// echo canceller meets the reference, the delays and the threads of a call; the
    /// packets then go nowhere. `--sent` records what would be sent, after Opus and back.
    static func live(_ config: Config, hooks: AudioSetup) throws(CLIFailure) -> ExitStatus {
        let seconds = config.seconds
        var request = PCMRequest()
        request.channels = hooks.channel.map { $0 + 1 } ?? 1
        request.paced = config.pace
        if config.input == nil && config.capture.bytesEqual("none") { throw CLIFailure(.usage, "audio: nothing to capture (capture is none): give --input FILE.wav or --capture PCM") }
        // Both files before any device opens or thread starts: a bad one costs nothing.
        var farEnd: FarEnd? = nil
        if let path = config.farEnd {
            farEnd = FarEnd(samples: try convertedWAV(path: path, rate: hooks.rate, channel: nil, option: "--far-end"),
                            frameSamples: hooks.rate.samplesPerFrame * hooks.frameMilliseconds / 10)
        }
        var sent: SentRecorder? = nil
        if let path = config.sent { sent = try SentRecorder(path: path, rate: hooks.rate) }
        let input: CaptureInput = config.input.map { .file($0, paced: true, loop: config.loopInput) } ?? .device(config.capture, request)
        _ = SignalSourceHolder.shared
        let loop = try wrap { () throws(SystemError) in try EventLoop() }
        // Its handlers hold the loop itself (a stop at --seconds): let go at the end.
        defer { loop.close() }
        var playRequest = PCMRequest()
        playRequest.acceptedRates = [hooks.rate.hertz, 48_000, 24_000, 16_000]
        playRequest.paced = config.pace
        let deviceFormat = DeviceFormat(sampleFormat: .s16LE, sampleRate: hooks.rate.hertz, channels: 1, periodFrames: hooks.rate.samplesPerFrame)
        let output: PlaybackOutput = config.output.map { .file($0, format: deviceFormat, paced: true) }
            ?? (config.playback.bytesEqual("none") ? .discard(deviceFormat) : .device(config.playback, playRequest))
        let duplex: DuplexAudio
        do throws(DuplexError) {
            var configuration = DuplexConfiguration(rate: hooks.rate, capture: input, channel: hooks.channel, playback: output)
            // A file has nothing to wait for: keep 200 ms of it queued (of the ring's
            // 320) rather than a call's 30, so a loop held up on a loaded machine does not
            // make the speaker underrun. A gap would move the far end against an echo
            // prepared for it (the echo test), and the reference follows what is played
            // whatever the queue holds.
            if farEnd != nil { configuration.playoutTarget = .milliseconds(200) }
            duplex = try DuplexAudio(configuration, captureChain: hooks.chain)
            hooks.liveReference?.source = duplex.reference
        } catch {
            switch error {
            case .capture(let e):
                if case .pipeline = e { throw CLIFailure(.usage, e.description) }
                throw CLIFailure(e.isMissing ? .unavailable : .dataError, e.description)
            case .playback(let e):
                throw CLIFailure(e.isMissing ? .unavailable : .config, e.description)
            }
        }
        if !RealTime.lockMemory() { Log.info("memory not locked (no CAP_IPC_LOCK or LimitMEMLOCK): running without mlockall") }
        let media = try Self.media(hooks)
        var packet = [UInt8](repeating: 0, count: 1275)
        var packets = 0
        var sequence: Int64 = 0
        var timestamp: UInt32 = 0
        // The speaker's audio: the far-end file, or the network's voice from the jitter
        // buffer; either way handed over when the playback thread asks for more.
        let downlink: (UnsafeMutableBufferPointer<Int16>) -> Int
        if let farEnd {
            downlink = { out in farEnd.play(into: out) }
        } else {
            downlink = { out in media.playout(now: loop.now, into: out) }
        }
        let loopback = farEnd == nil
        duplex.attach(to: loop, frameSamples: media.clock.samples, uplink: { frame, _ in
            guard let n = packet.withUnsafeMutableBytes({ media.encode(UnsafeBufferPointer(frame), into: $0) }) else { return }
            packets += 1
            if let sent { packet.withUnsafeBytes { sent.record(UnsafeRawBufferPointer(rebasing: $0[0..<n]), frameSamples: frame.count) } }
            guard loopback else { return }
            // Sent and received at once: the packet goes to the jitter buffer as the
            // network would hand it over, stamped as RTP would stamp it.
            media.received(sequence: sequence, timestamp: timestamp, payload: Array(packet[0..<n]), arrival: loop.now)
            sequence += 1
            timestamp &+= media.clock.rtpTicks
        }, downlink: downlink)
        do throws(DeviceError) { try duplex.start() } catch { throw CLIFailure(.unavailable, error.description) }
        if !duplex.realtime { Log.info("real-time scheduling not permitted (no CAP_SYS_NICE or LimitRTPRIO): audio threads run at normal priority") }
        if seconds > 0 { loop.schedule(after: .seconds(Int64(seconds))) { loop.stop() } }
        // SIGINT, SIGTERM and SIGHUP stop early and cleanly (threads joined, the output
        // file's header patched), as --seconds does.
        if let signals = SignalSourceHolder.shared {
            loop.watch(fd: signals.fd) { _ in
                if let s = signals.drain().first {
                    Log.info("stopping (\(ProcessSignals.name(s)))")
                    loop.stop()
                }
            }
        }
        try wrap { () throws(SystemError) in try loop.run() }
        var status = ExitStatus.ok
        do throws(DeviceError) { try duplex.finish() } catch {
            Log.error("--output \(error)")
            status = .ioError
        }
        // Read after finish(): the playback thread that wrote the file has been joined.
        if let failure = duplex.playback.fileFailure {
            Log.error("the output is incomplete: \(failure)")
            status = .ioError
        }
        var extra = hookFigures(hooks)
        if let farEnd { extra += "; far end: \(tenths(farEnd.playedSeconds(hooks.rate))) of \(tenths(farEnd.seconds(hooks.rate))) s played" }
        if let sent {
            do throws(FileError) { try sent.close() } catch {
                Log.error("--sent \(error)")
                status = .ioError
            }
            if let failure = sent.failure {
                Log.error("--sent is incomplete: \(failure)")
                status = .ioError
            }
            extra += "; sent: \(tenths(sent.writer.seconds)) s written"
        }
        let playback = duplex.playback
        let c = duplex.capture?.counters, p = playback.counters
        let captureFormat = duplex.capture.map { $0.format.description } ?? "none"
        if hooks.canceller != nil {
            // What moves the reference against the microphone, for a canceller that let
            // the echo back: the threads' timelines jumping, the placement stepping.
            extra += "; reference: timeline jumps capture \(c?.timelineJumps.load(ordering: .relaxed) ?? 0) playback \(p.timelineJumps.load(ordering: .relaxed))"
            extra += ", \(duplex.reference.placementMoves.load(ordering: .relaxed)) placement moves"
        }
        writeOut("audio: capture \(captureFormat), \(c?.periods.load(ordering: .relaxed) ?? 0) periods, \(c?.xruns.load(ordering: .relaxed) ?? 0) xruns; playback \(playback.format), \(p.xruns.load(ordering: .relaxed)) xruns, \(duplex.playbackPipeline.underruns.xruns.load(ordering: .relaxed)) underruns; \(packets) Opus packets\(extra)\n")
        return status
    }
}

/// Blocks SIGINT/SIGTERM/SIGHUP before audio threads start, so they never take a
/// signal; the command reads them from the signalfd and stops cleanly (SIGHUP is a
/// stop, not a reload).
enum SignalSourceHolder {
    nonisolated(unsafe) static let shared: SignalSource? = {
        do throws(SystemError) { return try SignalSource([SIGINT, SIGTERM, SIGHUP]) } catch {
            Log.warning("signals are not caught (\(error)): a signal stops this command without finishing its output")
            return nil
        }
    }()
}
