/// Media: the codec side of a call, pure. Uplink PCM frames are encoded to Opus;
/// received Opus packets go through the jitter buffer and the decoder (with in-band FEC
/// and concealment) back to PCM; the frame clock says how long a frame is and how far
/// RTP time moves per frame.
///
/// Design decisions:
/// - No I/O and no clock: time comes in as `now` (ARCHITECTURE.md "Modules"). The same
///   code runs a call, `linnet audio` and the tests' simulated devices and networks.
/// - `frame-ms` is honoured end to end: the encoder takes frames of that length, RTP
///   time moves 48 × frame-ms ticks a frame (RFC 7587 §4.1: the RTP clock is 48 kHz
///   whatever rate Opus runs at), and the uplink clock counts frames of that length.
///   The receive side does not assume the far end uses the same length: the jitter
///   buffer learns it from the timestamps and the decoder from the packets.
/// - Playout is pulled: whoever owns the speaker asks for the next frame when its
///   device has room (Devices' duplex pipeline, on the device clock). A device whose
///   clock runs faster or slower than the far end's is then seen as the jitter buffer
///   filling or draining, and the buffer's drift control drops or inserts a frame when
///   the audio is quiet (RTP/JitterBuffer.swift); `MediaPath` tells it when that is.
/// - Callers own buffers (STYLE.md 9): encode writes into the caller's packet buffer
///   (the RTP packet itself, so the payload is never copied), decode into the caller's
///   PCM buffer.
import Wire
import Codec
import RTP

/// Why a media path could not be set up.
public enum MediaError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A frame length Opus cannot take (10, 20, 40 or 60 ms here).
    case unsupportedFrameLength(milliseconds: Int)
    /// A pipeline rate the encoder is not run at (16000, 24000 or 48000 Hz).
    case unsupportedSampleRate(Int)
    /// libopus refused (creation, a setting).
    case codec(CodecError)

    public var description: String {
        switch self {
        case .unsupportedFrameLength(let ms): return "frame length \(ms) ms: Opus frames here are 10, 20, 40 or 60 ms"
        case .unsupportedSampleRate(let hz): return "sample rate \(hz) Hz: 16000, 24000 or 48000"
        case .codec(let e): return "the Opus codec: \(e)"
        }
    }
}

/// The frame clock of a call: how long one frame is, how many samples it holds at the
/// pipeline rate, and how many RTP ticks it moves the timestamp.
public struct FrameClock: Sendable, Equatable {
    /// Opus frame lengths this path uses (RFC 6716 §2.1.4 also has 2.5 and 5 ms, which
    /// a voice agent has no use for: their overhead is 4–8 times a 20 ms frame's).
    public static let supportedMilliseconds = [10, 20, 40, 60]
    /// The RTP clock of Opus (RFC 7587 §4.1).
    public static let rtpClockRate = 48_000

    public let milliseconds: Int
    public let sampleRate: Int

    /// 20 ms at 48 kHz, the default.
    public static let standard = FrameClock(unchecked: 20, 48_000)

    init(unchecked milliseconds: Int, _ sampleRate: Int) {
        self.milliseconds = milliseconds
        self.sampleRate = sampleRate
    }

    public init(milliseconds: Int = 20, sampleRate: Int = 48_000) throws(MediaError) {
        guard FrameClock.supportedMilliseconds.contains(milliseconds) else { throw .unsupportedFrameLength(milliseconds: milliseconds) }
        guard sampleRate == 16_000 || sampleRate == 24_000 || sampleRate == 48_000 else { throw .unsupportedSampleRate(sampleRate) }
        self.milliseconds = milliseconds
        self.sampleRate = sampleRate
    }

    /// Samples (mono) in one frame at the pipeline rate.
    public var samples: Int { sampleRate * milliseconds / 1000 }
    /// RTP ticks one frame moves the timestamp: 48 × frame-ms.
    public var rtpTicks: UInt32 { UInt32(FrameClock.rtpClockRate / 1000 * milliseconds) }
    public var duration: Duration { .milliseconds(Int64(milliseconds)) }
    /// Samples in the longest Opus packet (120 ms, RFC 6716 §3.2.1) at the pipeline
    /// rate: a decode buffer of this size takes whatever frame length the far end sends.
    public var maxPacketSamples: Int { sampleRate * 120 / 1000 }
}

/// The codec settings of a call (config keys `rate`, `frame-ms`, `bitrate`,
/// `complexity`, `fec`, `dtx`).
public struct MediaSettings: Sendable, Equatable {
    public var rate = 48_000
    public var frameMilliseconds = 20
    public var bitrate: Int32 = 32_000
    public var complexity: Int32 = 10
    public var fec = true
    public var dtx = false

    public init(rate: Int = 48_000, frameMilliseconds: Int = 20, bitrate: Int32 = 32_000, complexity: Int32 = 10,
                fec: Bool = true, dtx: Bool = false) {
        self.rate = rate
        self.frameMilliseconds = frameMilliseconds
        self.bitrate = bitrate
        self.complexity = complexity
        self.fec = fec
        self.dtx = dtx
    }
}

/// Counters for stats lines.
public struct MediaStats: Equatable, Sendable {
    public var framesSent = 0
    public var framesDecoded = 0
    public var concealed = 0
    public var fecRecovered = 0
    public var decodeErrors = 0
    /// Uplink frames the encoder refused (skipped: RTP time moves on).
    public var encodeErrors = 0
    /// Frames the jitter buffer dropped or inserted, in quiet audio, to follow the
    /// difference between the far end's clock and the playback device's.
    public var driftDropped = 0
    public var driftInserted = 0
    /// Pulls that found the jitter buffer empty (network stall, or a device draining it).
    public var starved = 0

    public init() {}
}
