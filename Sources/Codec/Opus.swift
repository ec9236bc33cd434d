/// Codec: Opus encode and decode (RFC 6716) into caller-owned buffers.
///
/// Design decisions:
/// - Each coder is created once (libopus allocates its state then) and reused for the
///   whole call; encode and decode themselves do not allocate.
/// - The RTP clock is 48 kHz whatever the pipeline rate (RFC 7587 §4.1): the encoder
///   is told the pipeline rate and libopus resamples internally.
/// - Variadic `opus_*_ctl` requests go through the typed shims in `COpus`.
import COpus

/// What libopus refused, with its error code (`OPUS_BAD_ARG`, `OPUS_INVALID_PACKET`…).
public enum CodecError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The coder could not be created with these parameters.
    case create(code: Int32)
    /// Encoding failed (bad frame size, buffer too small…).
    case encode(code: Int32)
    /// Decoding failed (a corrupt packet, output buffer too small…).
    case decode(code: Int32)
    /// A setting outside what Opus allows.
    case setting(name: String, code: Int32)

    public var description: String {
        switch self {
        case .create(let c): return "opus: cannot create coder: \(CodecError.text(c))"
        case .encode(let c): return "opus: encode failed: \(CodecError.text(c))"
        case .decode(let c): return "opus: decode failed: \(CodecError.text(c))"
        case .setting(let n, let c): return "opus: \(n) refused: \(CodecError.text(c))"
        }
    }

    static func text(_ code: Int32) -> String {
        guard let p = opus_strerror(code) else { return "error \(code)" }
        return String(cString: p)
    }
}

/// The libopus version string, e.g. `libopus 1.3.1`.
public var opusVersion: String { String(cString: opus_get_version_string()) }

/// An Opus encoder for interleaved Int16 PCM.
public final class OpusEncoder {
    private let state: OpaquePointer
    public let sampleRate: Int32
    public let channels: Int32

    /// `sampleRate` is one of 8000, 12000, 16000, 24000, 48000; `channels` 1 or 2.
    public init(sampleRate: Int32, channels: Int32) throws(CodecError) {
        var error: Int32 = 0
        guard let s = opus_encoder_create(sampleRate, channels, OPUS_APPLICATION_VOIP, &error), error == OPUS_OK else {
            throw .create(code: error)
        }
        state = s
        self.sampleRate = sampleRate
        self.channels = channels
        _ = copus_set_signal_voice(state)
    }

    deinit { opus_encoder_destroy(state) }

    public func setBitrate(_ bitsPerSecond: Int32) throws(CodecError) {
        let r = copus_set_bitrate(state, bitsPerSecond)
        guard r == OPUS_OK else { throw .setting(name: "bitrate", code: r) }
    }

    public func setComplexity(_ complexity: Int32) throws(CodecError) {
        let r = copus_set_complexity(state, complexity)
        guard r == OPUS_OK else { throw .setting(name: "complexity", code: r) }
    }

    /// In-band FEC (RFC 6716 §2.1.7) with the loss rate the encoder should plan for.
    public func setFEC(_ enabled: Bool, expectedLossPercent: Int32 = 10) throws(CodecError) {
        var r = copus_set_inband_fec(state, enabled ? 1 : 0)
        guard r == OPUS_OK else { throw .setting(name: "fec", code: r) }
        r = copus_set_packet_loss_perc(state, enabled ? expectedLossPercent : 0)
        guard r == OPUS_OK else { throw .setting(name: "packet loss", code: r) }
    }

    public func setDTX(_ enabled: Bool) throws(CodecError) {
        let r = copus_set_dtx(state, enabled ? 1 : 0)
        guard r == OPUS_OK else { throw .setting(name: "dtx", code: r) }
    }

    /// Encodes one frame (`pcm.count / channels` samples per channel: 2.5–60 ms) into
    /// `packet`; returns the packet length in bytes.
    public func encode(_ pcm: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableRawBufferPointer) throws(CodecError) -> Int {
        let frameSize = Int32(pcm.count) / channels
        guard let input = pcm.baseAddress, let output = packet.baseAddress, frameSize > 0 else {
            throw .encode(code: OPUS_BAD_ARG)
        }
        let n = opus_encode(state, input, frameSize,
                            output.assumingMemoryBound(to: UInt8.self), opus_int32(packet.count))
        guard n >= 0 else { throw .encode(code: n) }
        return Int(n)
    }
}

/// An Opus decoder producing interleaved Int16 PCM.
public final class OpusDecoder {
    private let state: OpaquePointer
    public let sampleRate: Int32
    public let channels: Int32

    public init(sampleRate: Int32, channels: Int32) throws(CodecError) {
        var error: Int32 = 0
        guard let s = opus_decoder_create(sampleRate, channels, &error), error == OPUS_OK else {
            throw .create(code: error)
        }
        state = s
        self.sampleRate = sampleRate
        self.channels = channels
    }

    deinit { opus_decoder_destroy(state) }

    /// Decodes `packet` into `pcm`; returns samples per channel written.
    ///
    /// - `packet == nil`: packet-loss concealment for `pcm.count / channels` samples.
    /// - `fec == true`: recover the *previous* (lost) frame from this packet's in-band
    ///   FEC data; `pcm` must then hold exactly the lost frame's length.
    public func decode(_ packet: UnsafeRawBufferPointer?, into pcm: UnsafeMutableBufferPointer<Int16>, fec: Bool = false) throws(CodecError) -> Int {
        let frameSize = Int32(pcm.count) / channels
        guard let output = pcm.baseAddress, frameSize > 0 else { throw .decode(code: OPUS_BAD_ARG) }
        let data = packet?.baseAddress?.assumingMemoryBound(to: UInt8.self)
        let n = opus_decode(state, data, opus_int32(packet?.count ?? 0), output, frameSize, fec ? 1 : 0)
        guard n >= 0 else { throw .decode(code: n) }
        return Int(n)
    }
}

/// Samples per channel at 48 kHz an Opus packet holds (RFC 6716 §3.1: from its TOC
/// byte and frame count), or nil for a malformed packet.
public func opusPacketSamples(_ packet: UnsafeRawBufferPointer) -> Int? {
    guard let base = packet.baseAddress, packet.count > 0 else { return nil }
    let n = opus_packet_get_nb_samples(base.assumingMemoryBound(to: UInt8.self), opus_int32(packet.count), 48_000)
    return n > 0 ? Int(n) : nil
}
