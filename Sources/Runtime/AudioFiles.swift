// `linnet audio`'s files: a WAV converted as the microphone's audio is, the speaker's
// reference and far end read from files, and what the uplink would send, decoded and
// written.
import Wire
import Platform
import Audio
import Codec
import Devices
import Settings
import Agent

/// A WAV file at the pipeline's rate, mono: through the same conversion as the
/// microphone's (a capture pipeline with no hooks: format, channel or average,
/// resampling), held whole. `option` names the flag in messages.
public func convertedWAV(path: String, rate: SampleRate, channel: Int?, option: String) throws(CLIFailure) -> [Int16] {
    let reader: WAVReader
    do throws(FileError) { reader = try WAVReader(path: path) } catch { throw CLIFailure(.dataError, "\(option): \(error.description)") }
    // The 256 MiB a capture file may hold (AudioThreads), for the same reason.
    guard reader.remainingBytes <= 256 << 20 else {
        throw CLIFailure(.dataError, "\(option): \(FileError.tooLarge(path: path, bytes: reader.remainingBytes).description)")
    }
    let f = reader.format
    let device = DeviceFormat(sampleFormat: f.sampleFormat, sampleRate: f.sampleRate, channels: f.channels, periodFrames: max(1, f.sampleRate / 100))
    let notify = try wrap { () throws(SystemError) in try EventFD() }
    let channel: Int? = if let channel, channel < f.channels { channel } else { nil }
    let pipeline: CapturePipeline
    do throws(AudioError) {
        pipeline = try CapturePipeline(device: device, rate: rate, channel: channel, chain: HookChain(), notify: notify, ringFrames: 8)
    } catch {
        throw CLIFailure(.dataError, "\(option) '\(path)': \(error)")
    }
    var samples: [Int16] = []
    samples.reserveCapacity(reader.remainingBytes / max(1, f.bytesPerFrame) * rate.hertz / max(1, f.sampleRate) + rate.samplesPerFrame)
    var period = [UInt8](repeating: 0, count: device.periodFrames * f.bytesPerFrame)
    var frame = [Int16](repeating: 0, count: rate.samplesPerFrame)
    pipeline.captureStarted(device)
    var time = Instant.zero
    while true {
        let n = try period.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(CLIFailure) -> Int in
            do throws(FileError) { return try reader.read(into: b) } catch { throw CLIFailure(.dataError, "\(option): \(error.description)") }
        }
        if n == 0 { break }
        period.withUnsafeBytes { raw in
            pipeline.captured(UnsafeRawBufferPointer(rebasing: raw[0..<n]), frames: n / f.bytesPerFrame, format: device, time: time)
        }
        time += .milliseconds(10)
        while pipeline.ring.availableToRead >= frame.count {
            _ = frame.withUnsafeMutableBufferPointer { pipeline.ring.pop(into: $0) }
            samples += frame
        }
    }
    pipeline.captureStopped(device)
    notify.drain()
    return samples
}

/// `linnet audio --reference`: the speaker's file, converted as the microphone is
/// (`convertedWAV`), handed to the echo canceller one 10 ms frame per capture frame.
/// Both files start together, so frame k of one is played while frame k of the other is
/// heard.
public final class FileReference: EchoReference, @unchecked Sendable {
    private let samples: [Int16]
    private var next = 0

    public init(path: String, config: Config) throws(CLIFailure) {
        guard let rate = SampleRate(rawValue: config.rate) else { throw CLIFailure(.config, "rate must be 16000, 24000 or 48000") }
        let channel: Int? = if case .index(let k) = config.captureChannel { k } else { nil }
        samples = try convertedWAV(path: path, rate: rate, channel: channel, option: "--reference")
    }

    public func read(into reference: UnsafeMutablePointer<Int16>, count: Int, for info: FrameInfo) -> Bool {
        let n = max(0, min(count, samples.count - next))
        samples.withUnsafeBufferPointer { p in
            if n > 0, let b = p.baseAddress { reference.update(from: b + next, count: n) }
        }
        if n < count { (reference + n).update(repeating: 0, count: count - n) }
        next += count
        return n > 0
    }
}

/// `linnet audio --far-end`: what the speaker plays instead of the loopback, the file
/// converted to the pipeline's rate (`convertedWAV`, channels averaged). The loop hands
/// it out one media frame per request of the playback thread, as it hands out the
/// network's voice, so the speaker's clock paces it; after its end, silence.
public final class FarEnd {
    private let samples: [Int16]
    private let frameSamples: Int
    private var next = 0

    public init(samples: [Int16], frameSamples: Int) {
        self.samples = samples
        self.frameSamples = max(1, frameSamples)
    }

    /// The next frame into `out`; 0 once the file has been played (the pipeline then
    /// plays silence).
    public func play(into out: UnsafeMutableBufferPointer<Int16>) -> Int {
        let n = min(frameSamples, out.count, samples.count - next)
        guard n > 0, let o = out.baseAddress else { return 0 }
        samples.withUnsafeBufferPointer { p in o.update(from: p.baseAddress! + next, count: n) }
        next += n
        return n
    }

    public func seconds(_ rate: SampleRate) -> Double { Double(samples.count) / Double(rate.hertz) }
    public func playedSeconds(_ rate: SampleRate) -> Double { Double(next) / Double(rate.hertz) }
}

/// `linnet audio --sent`: each packet the uplink would send, decoded by a decoder of its
/// own (the loopback's jitter buffer has one too) and written to a WAV file on the loop:
/// what the provider would hear, Opus' coding and lookahead included. A packet the
/// decoder refuses is written as a frame of silence, so the file keeps its timing; the
/// first write error stops the writing (reported at the end, exit 74, as --output).
public final class SentRecorder {
    public let writer: WAVWriter
    private let decoder: OpusDecoder
    private var pcm: [Int16]
    public private(set) var failure: FileError?

    public init(path: String, rate: SampleRate) throws(CLIFailure) {
        do throws(CodecError) { decoder = try OpusDecoder(sampleRate: Int32(rate.hertz), channels: 1) } catch {
            throw CLIFailure(.software, "--sent: \(error)")
        }
        do throws(FileError) { writer = try WAVWriter(path: path, sampleRate: rate.hertz, channels: 1) } catch {
            if case .write = error { throw CLIFailure(.ioError, "--sent \(error.description)") }
            throw CLIFailure(.config, "--sent \(error.description)")
        }
        // The longest Opus packet is 120 ms (RFC 6716 §3.2.1).
        pcm = [Int16](repeating: 0, count: rate.hertz * 12 / 100)
    }

    public func record(_ packet: UnsafeRawBufferPointer, frameSamples: Int) {
        guard failure == nil else { return }
        let decoder = self.decoder
        let n = pcm.withUnsafeMutableBufferPointer { out -> Int in
            // A packet that does not decode is recorded as a frame of silence: the file
            // keeps the call's timeline, which is what it is compared against.
            if let n = try? decoder.decode(packet, into: out) { return n }
            let silence = min(frameSamples, out.count)
            out.baseAddress?.update(repeating: 0, count: silence)
            return silence
        }
        do throws(FileError) {
            try pcm.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(FileError) in try writer.write(UnsafeBufferPointer(rebasing: p[0..<n])) }
        } catch {
            failure = error
        }
    }

    public func close() throws(FileError) { try writer.close() }
}
