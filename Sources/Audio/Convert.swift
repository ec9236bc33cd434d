/// Sample formats ALSA devices deliver, as byte layouts.
public enum SampleFormat: Sendable, Equatable {
    /// Signed 16-bit little-endian.
    case s16LE
    /// Signed 24-bit in the low three bytes of a 32-bit little-endian word (ALSA S24_LE);
    /// the top byte is ignored and the value sign-extended from bit 23.
    case s24LE
    /// Signed 24-bit packed in 3 bytes, little-endian (ALSA S24_3LE).
    case s24_3LE
    /// Signed 32-bit little-endian.
    case s32LE

    public var bytesPerSample: Int {
        switch self {
        case .s16LE: return 2
        case .s24LE, .s32LE: return 4
        case .s24_3LE: return 3
        }
    }
}

/// Which channels of an interleaved device input reach the pipeline.
public enum ChannelMix: Sendable, Equatable {
    /// All channels, interleaved as they come.
    case all
    /// One channel (0-based) as mono, e.g. the one microphone of a 2-channel I2S HAT.
    case select(Int)
    /// The average of all channels as mono.
    case average
}

/// Converts device bytes to the pipeline's interleaved Int16, with channel selection or
/// downmix in the same pass. Every sample is first widened to a signed 32-bit value
/// scaled to full range (S16 << 16, S24 << 8, S32 as is), averaged in 64 bits if asked,
/// then reduced to 16 bits by rounding to nearest (+0x8000 >> 16) with saturation, so
/// conversion never wraps and the mean is taken at full precision.
public struct InputConverter: Sendable {
    public let format: SampleFormat
    public let channels: Int
    public let mix: ChannelMix

    public init(format: SampleFormat, channels: Int, mix: ChannelMix = .all) throws(AudioError) {
        guard channels >= 1 && channels <= AudioFormat.maxChannels else { throw .unsupportedChannelCount(channels) }
        if case .select(let k) = mix, k < 0 || k >= channels { throw .channelOutOfRange(channel: k, channels: channels) }
        self.format = format
        self.channels = channels
        self.mix = mix
    }

    public var bytesPerFrame: Int { format.bytesPerSample * channels }
    public var outputChannels: Int { mix == .all ? channels : 1 }

    /// Converts `bytes` (a whole number of frames) into `output`; returns samples written.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func convert(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<Int16>) throws(AudioError) -> Int {
        let bpf = format.bytesPerSample &* channels
        if bytes.count % bpf != 0 { throw .partialFrame(bytes: bytes.count, bytesPerFrame: bpf) }
        let frames = bytes.count / bpf
        let outCount = mix == .all ? frames &* channels : frames
        if output.count < outCount { throw .bufferTooSmall(needed: outCount, available: output.count) }
        guard let src = bytes.baseAddress else { return 0 }
        #if _endian(little)
        // S16_LE that stays interleaved (or mono) is already the output: widen then
        // reduce gives every sample back unchanged, so it is copied (a file or device at
        // the pipeline's format, the common case: ~20 instructions a sample saved).
        if format == .s16LE && (mix == .all || channels == 1), let dst = output.baseAddress {
            UnsafeMutableRawPointer(dst).copyMemory(from: src, byteCount: outCount &* 2)
            return outCount
        }
        #endif
        let bps = format.bytesPerSample
        switch mix {
        case .all:
            for i in 0..<(frames &* channels) {
                output[i] = reduce(Int64(widen(src + i &* bps)))
            }
        case .select(let k):
            for f in 0..<frames {
                output[f] = reduce(Int64(widen(src + (f &* bpf &+ k &* bps))))
            }
        case .average:
            let n = Int64(channels)
            for f in 0..<frames {
                var sum: Int64 = 0
                let frame = src + f &* bpf
                for c in 0..<channels { sum &+= Int64(widen(frame + c &* bps)) }
                output[f] = reduce(sum / n)
            }
        }
        return outCount
    }

    /// One sample as a full-range signed 32-bit value.
    @inline(__always)
    private func widen(_ p: UnsafeRawPointer) -> Int32 {
        switch format {
        case .s16LE:
            let v = UInt16(p.load(as: UInt8.self)) | UInt16(p.load(fromByteOffset: 1, as: UInt8.self)) &<< 8
            return Int32(Int16(bitPattern: v)) &<< 16
        case .s24LE, .s24_3LE:
            let v = UInt32(p.load(as: UInt8.self)) &<< 8
                | UInt32(p.load(fromByteOffset: 1, as: UInt8.self)) &<< 16
                | UInt32(p.load(fromByteOffset: 2, as: UInt8.self)) &<< 24
            return Int32(bitPattern: v) // bits 23…0 moved to 31…8: sign comes from bit 23
        case .s32LE:
            return Int32(littleEndian: p.loadUnaligned(as: Int32.self))
        }
    }

    /// Full-range 32-bit → Int16, rounding to nearest and saturating.
    @inline(__always)
    private func reduce(_ v: Int64) -> Int16 {
        let r = (v &+ 0x8000) &>> 16
        return Int16(truncatingIfNeeded: min(max(r, -32768), 32767))
    }
}
