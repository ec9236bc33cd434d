// The loop-side media path of a call: 20 ms frames of 48 kHz mono PCM are encoded and
// sent; received Opus goes through the jitter buffer and the decoder (with FEC and
// concealment) to a sink. Sources and sinks are files here and the audio threads' rings
// when devices are used.
import Wire
import Platform
import Codec
import RTP
import Peer
import Audio
import Devices
import Agent

/// Where uplink PCM comes from: 20 ms of 48 kHz mono per call, or nil when nothing is
/// available yet (the frame is then skipped: RTP time moves on).
protocol FrameSource: AnyObject {
    func nextFrame(into frame: inout [Int16]) -> Bool
}

/// Where decoded downlink PCM goes (20 ms of 48 kHz mono per call).
protocol FrameSink: AnyObject {
    func play(_ frame: [Int16])
}

/// A WAV file as the microphone, converted to 48 kHz mono once at start (files are
/// small; the real-time path is the devices'). Loops or pads with silence at the end.
final class WAVFrameSource: FrameSource {
    let samples: [Int16]
    var position = 0
    let loop: Bool

    init(path: String, loop: Bool) throws(CLIFailure) {
        let reader: WAVReader
        do throws(FileError) { reader = try WAVReader(path: path) } catch { throw CLIFailure(.dataError, "--input \(error)") }
        var raw = [UInt8](repeating: 0, count: reader.remainingBytes)
        let n: Int
        do throws(FileError) {
            n = try raw.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(FileError) in try reader.read(into: b) }
        } catch {
            throw CLIFailure(.dataError, "--input \(error)")
        }
        do throws(AudioError) {
            samples = try convertToPipeline(Array(raw[0..<n]), format: reader.format)
        } catch {
            throw CLIFailure(.dataError, "--input '\(path)': \(error)")
        }
        self.loop = loop
    }

    func nextFrame(into frame: inout [Int16]) -> Bool {
        for i in 0..<frame.count {
            if position >= samples.count {
                if loop && !samples.isEmpty { position = 0 } else { frame[i] = 0; continue }
            }
            frame[i] = samples[position]
            position += 1
        }
        return true
    }
}

/// Writes downlink audio to a 16-bit mono WAV file at the pipeline rate.
///
/// A write that fails (a full disk, `EFBIG` past `LimitFSIZE=`) loses the rest of the
/// recording, not the call: it is reported once, with the path and the reason, the
/// call goes on, and `incomplete` makes the command end with 74 (EX_IOERR) so a script
/// knows the file is short.
final class WAVFrameSink: FrameSink {
    let writer: WAVWriter
    /// Why the recording is incomplete (the first write error, or the header patch at
    /// close failing); nil while it is whole.
    private(set) var incomplete: String?

    init(path: String, rate: Int = 48_000) throws(CLIFailure) {
        do throws(FileError) { writer = try WAVWriter(path: path, sampleRate: rate, channels: 1) } catch {
            throw CLIFailure(.config, "--output \(error)")
        }
    }

    func play(_ frame: [Int16]) {
        guard incomplete == nil else { return }
        do throws(FileError) { try writer.write(frame) } catch {
            let reason = reasonText(error)
            incomplete = "\(reason) after \(tenths(writer.seconds)) s"
            Log.error("--output '\(writer.path)': \(reason); the recording stops at \(tenths(writer.seconds)) s, the call goes on")
        }
    }

    func close() {
        do throws(FileError) { try writer.close() } catch {
            if incomplete == nil { incomplete = "its header could not be written (\(reasonText(error)))" }
        }
    }

    /// After `close`: logs why the recording is incomplete and returns 74, or `status`
    /// when it is whole (a failure status already set wins).
    func finalStatus(_ status: ExitStatus) -> ExitStatus {
        guard let incomplete else { return status }
        Log.error("the recording '\(writer.path)' is incomplete: \(incomplete)")
        return status == .ok ? .ioError : status
    }

    private func reasonText(_ e: FileError) -> String {
        if case .system(_, let s) = e { return SystemError.message(s.code) }
        return e.description
    }
}

/// `1.5` (one decimal, no floating-point printing: Embedded Swift has none).
func tenths(_ seconds: Double) -> String {
    let t = Int(saturating: (seconds * 10).rounded())
    return "\(t / 10).\(t % 10)"
}

/// Counters for stats lines.
struct MediaStats {
    var framesSent = 0
    var framesDecoded = 0
    var concealed = 0
    var fecRecovered = 0
    var decodeErrors = 0
}

/// The codec settings of a call (config keys `rate`, `bitrate`, `complexity`, `fec`,
/// `dtx`). RTP time is 48 kHz whatever the rate (RFC 7587 §4.1).
struct MediaSettings {
    var rate = 48_000
    var bitrate: Int32 = 32_000
    var complexity: Int32 = 5
    var fec = true
    var dtx = false
}

/// Encodes uplink frames and decodes downlink packets for one call.
final class MediaPath {
    let encoder: OpusEncoder
    let decoder: OpusDecoder
    let rate: Int
    /// Samples in 20 ms at `rate`.
    let frameSamples: Int
    var jitter = JitterBuffer()
    var uplink: [Int16]
    var downlink: [Int16]
    var packet = [UInt8](repeating: 0, count: 1275)
    var stats = MediaStats()
    var bytesSent = 0
    var receiving = false

    init(_ settings: MediaSettings = MediaSettings()) throws(CodecError) {
        rate = settings.rate
        frameSamples = settings.rate / 50
        uplink = [Int16](repeating: 0, count: frameSamples)
        downlink = [Int16](repeating: 0, count: frameSamples)
        encoder = try OpusEncoder(sampleRate: Int32(settings.rate), channels: 1)
        try encoder.setBitrate(settings.bitrate)
        try encoder.setComplexity(settings.complexity)
        // FEC costs bits only when the receiver reports loss (RFC 6716 §2.1.7); 10 % is
        // the loss it is tuned for until RTCP says otherwise.
        try encoder.setFEC(settings.fec, expectedLossPercent: settings.fec ? 10 : 0)
        try encoder.setDTX(settings.dtx)
        decoder = try OpusDecoder(sampleRate: Int32(settings.rate), channels: 1)
    }

    /// Encodes the next uplink frame from `source`; the packet to send, or nil.
    func encodeNext(from source: FrameSource) -> [UInt8]? {
        guard source.nextFrame(into: &uplink) else { return nil }
        return encode(uplink)
    }

    /// Encodes one 20 ms frame (`frameSamples` samples); the packet, or nil.
    func encode(_ frame: [Int16]) -> [UInt8]? {
        let encoder = self.encoder
        let n = try? frame.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(CodecError) in
            try packet.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) in try encoder.encode(p, into: out) }
        }
        guard let n else { return nil }
        stats.framesSent += 1
        bytesSent += n
        return Array(packet[0..<n])
    }

    /// Barge-in: drops what the jitter buffer holds, so the cut is heard at once.
    func flushPlayback() {
        jitter.discardBuffered()
    }

    func received(_ audio: ReceivedAudio) {
        receiving = true
        jitter.insert(sequence: audio.sequence, timestamp: audio.timestamp, payload: audio.payload, arrival: audio.arrival)
    }

    /// One 20 ms playout step: the frame to play (decoded, FEC-recovered or concealed),
    /// or nil before the first packet.
    func playout(now: Instant) -> [Int16]? {
        guard receiving else { return nil }
        let decoder = self.decoder
        func decode(_ payload: [UInt8]?, fec: Bool) -> Bool {
            let n = try? downlink.withMutableBuffer { (out: UnsafeMutableBufferPointer<Int16>) throws(CodecError) -> Int in
                if let payload {
                    return try payload.withBytes { (b: UnsafeRawBufferPointer) throws(CodecError) in try decoder.decode(b, into: out, fec: fec) }
                }
                return try decoder.decode(nil, into: out)
            }
            return n != nil
        }
        switch jitter.pop(now: now) {
        case .packet(let p):
            if decode(p.payload, fec: false) { stats.framesDecoded += 1 } else {
                stats.decodeErrors += 1
                _ = decode(nil, fec: false)
            }
        case .lost(let useFEC):
            if useFEC, let next = jitter.nextPayload, decode(next, fec: true) {
                stats.fecRecovered += 1
            } else {
                _ = decode(nil, fec: false)
                stats.concealed += 1
            }
        case .empty:
            _ = decode(nil, fec: false)
        }
        return downlink
    }
}

/// Converts raw WAV/device samples to the pipeline's 48 kHz mono Int16.
func convertToPipeline(_ raw: [UInt8], format: WAVFormat) throws(AudioError) -> [Int16] {
    let converter = try InputConverter(format: format.sampleFormat, channels: format.channels, mix: format.channels > 1 ? .average : .all)
    let frames = raw.count / format.bytesPerFrame
    var mono = [Int16](repeating: 0, count: frames)
    _ = try raw.withBytes { (b: UnsafeRawBufferPointer) throws(AudioError) in
        try mono.withMutableBuffer { (out: UnsafeMutableBufferPointer<Int16>) throws(AudioError) in try converter.convert(b, into: out) }
    }
    if format.sampleRate == 48_000 { return mono }
    // The resampler works in 10 ms steps, as the capture thread feeds it.
    let resampler = try Resampler(inputRate: format.sampleRate, outputRate: .hz48000, channels: 1)
    let step = format.sampleRate / 100
    var chunk = [Int16](repeating: 0, count: resampler.maxOutputSamples(forInputFrames: step))
    var result: [Int16] = []
    result.reserveCapacity(frames * 48_000 / format.sampleRate + 64)
    var start = 0
    while start < frames {
        let end = min(frames, start + step)
        let n = try Array(mono[start..<end]).withBuffer { (input: UnsafeBufferPointer<Int16>) throws(AudioError) in
            try chunk.withMutableBuffer { (o: UnsafeMutableBufferPointer<Int16>) throws(AudioError) in try resampler.process(input, into: o) }
        }
        result += chunk[0..<n]
        start = end
    }
    return result
}
