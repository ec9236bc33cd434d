import Wire

extension SampleFormat: CustomStringConvertible {
    /// ALSA's name for it, as `arecord -f` spells it.
    public var description: String {
        switch self {
        case .s16LE: return "S16_LE"
        case .s24LE: return "S24_LE"
        case .s24_3LE: return "S24_3LE"
        case .s32LE: return "S32_LE"
        }
    }
}

/// What a WAV file's header said.
public struct WAVFormat: Sendable, Equatable {
    public var sampleRate: Int
    public var channels: Int
    public var sampleFormat: SampleFormat
    /// Where the sample data starts in the file.
    public var dataOffset: Int
    /// Bytes of sample data the header declares (may exceed the file when truncated,
    /// or be 0/0xFFFFFFFF when a recorder was killed before it could patch it).
    public var dataLength: Int

    public var bytesPerFrame: Int { channels * sampleFormat.bytesPerSample }

    public init(sampleRate: Int, channels: Int, sampleFormat: SampleFormat, dataOffset: Int, dataLength: Int) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.sampleFormat = sampleFormat
        self.dataOffset = dataOffset
        self.dataLength = dataLength
    }
}

/// Why a WAV file cannot be used.
public enum WAVError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not a RIFF/WAVE file at all.
    case notWAV
    /// The header ends early or a chunk runs past the end.
    case truncated
    /// A format Linnet does not read (float, µ-law, 8-bit, ADPCM…), by its tag and bits.
    case unsupportedFormat(tag: UInt16, bitsPerSample: UInt16)
    /// A channel count or sample rate outside what Linnet handles.
    case unsupportedLayout(channels: Int, sampleRate: Int)
    /// No `fmt ` chunk before the `data` chunk.
    case missingFormat

    public var description: String {
        switch self {
        case .notWAV: return "not a WAV file (no RIFF/WAVE header)"
        case .truncated: return "WAV header is truncated"
        case .unsupportedFormat(let tag, let bits):
            return "unsupported WAV encoding (format tag \(tag), \(bits) bits); use 16-, 24- or 32-bit integer PCM"
        case .unsupportedLayout(let channels, let rate):
            return "unsupported WAV layout: \(channels) channels at \(rate) Hz (1–8 channels, 8–192 kHz)"
        case .missingFormat: return "WAV file has no fmt chunk before its data"
        }
    }
}

/// RIFF/WAVE headers (Microsoft's RIFF specification; WAVE_FORMAT_PCM = 1 and
/// WAVE_FORMAT_EXTENSIBLE = 0xFFFE with the PCM sub-format GUID).
public enum WAV {
    /// Parses the header at the start of `bytes` (give it at least the first few KiB of
    /// the file). Unknown chunks (LIST, fact, bext…) are skipped.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(WAVError) -> WAVFormat {
        var r = ByteReader(bytes)
        guard let riff = try? r.readUInt32(), riff == 0x5249_4646,  // "RIFF"
              (try? r.readUInt32LE()) != nil,
              let wave = try? r.readUInt32(), wave == 0x5741_5645 else { throw .notWAV }  // "WAVE"
        var format: (rate: Int, channels: Int, sample: SampleFormat)? = nil
        while true {
            let id = try truncating { () throws(WireError) in try r.readUInt32() }
            let size = Int(try truncating { () throws(WireError) in try r.readUInt32LE() })
            switch id {
            case 0x6461_7461:  // "data"
                guard let f = format else { throw .missingFormat }
                return WAVFormat(sampleRate: f.rate, channels: f.channels, sampleFormat: f.sample,
                                 dataOffset: r.offset, dataLength: size)
            case 0x666D_7420:  // "fmt "
                guard size >= 16 else { throw .truncated }
                var chunk = try truncating { () throws(WireError) in try r.subReader(size) }
                format = try parseFormat(&chunk, size: size)
                // Chunks are padded to even sizes; a pad missing at the very end makes the
                // next read fail as `.truncated`, which says it.
                if size & 1 == 1 { _ = try? r.skip(1) }
            default:
                try truncating { () throws(WireError) in try r.skip(size + (size & 1)) }
            }
        }
    }

    static func parseFormat(_ chunk: inout ByteReader, size: Int) throws(WAVError) -> (rate: Int, channels: Int, sample: SampleFormat) {
        var tag = try truncating { () throws(WireError) in try chunk.readUInt16LE() }
        let channels = Int(try truncating { () throws(WireError) in try chunk.readUInt16LE() })
        let rate = Int(try truncating { () throws(WireError) in try chunk.readUInt32LE() })
        try truncating { () throws(WireError) in try chunk.skip(4) }  // byte rate
        let blockAlign = Int(try truncating { () throws(WireError) in try chunk.readUInt16LE() })
        let bits = try truncating { () throws(WireError) in try chunk.readUInt16LE() }
        if tag == 0xFFFE, size >= 40 {
            // WAVE_FORMAT_EXTENSIBLE: cbSize, valid bits, channel mask, then the sub-format
            // GUID whose first two bytes are the real format tag.
            try truncating { () throws(WireError) in try chunk.skip(8) }
            tag = try truncating { () throws(WireError) in try chunk.readUInt16LE() }
        }
        guard tag == 1 else { throw .unsupportedFormat(tag: tag, bitsPerSample: bits) }
        let sample: SampleFormat
        switch bits {
        case 16: sample = .s16LE
        case 24: sample = blockAlign == channels * 4 ? .s24LE : .s24_3LE
        case 32: sample = .s32LE
        default: throw .unsupportedFormat(tag: tag, bitsPerSample: bits)
        }
        guard (1...8).contains(channels), (8_000...192_000).contains(rate) else {
            throw .unsupportedLayout(channels: channels, sampleRate: rate)
        }
        return (rate, channels, sample)
    }

    static func truncating<T>(_ body: () throws(WireError) -> T) throws(WAVError) -> T {
        do { return try body() } catch { throw .truncated }
    }

    /// A 44-byte canonical PCM header for `dataLength` bytes of samples.
    public static func header(sampleRate: Int, channels: Int, format: SampleFormat = .s16LE, dataLength: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 44)
        // Both 24-bit layouts say 24 bits; the block align (3 or 4 bytes a sample) tells
        // them apart, as `parseFormat` reads it. Writing 32 for S24_LE, as this once did,
        // labelled 24-bit samples as 32-bit ones, 48 dB too quiet (found by fuzz_wav).
        let bits = format == .s24_3LE || format == .s24LE ? 24 : format.bytesPerSample * 8
        let blockAlign = channels * format.bytesPerSample
        out.withUnsafeMutableBytes { raw in
            var w = ByteWriter(raw)
            // Sizes are clamped: a header for a stream longer than 4 GiB cannot be exact.
            // The fields below are 44 bytes written into 44: no write can run out of room.
            let riffSize = UInt32(clamping: 36 + dataLength)
            try? w.writeUInt32(0x5249_4646); try? w.writeUInt32LE(riffSize); try? w.writeUInt32(0x5741_5645)
            try? w.writeUInt32(0x666D_7420); try? w.writeUInt32LE(16)
            try? w.writeUInt16LE(1); try? w.writeUInt16LE(UInt16(channels))
            try? w.writeUInt32LE(UInt32(sampleRate)); try? w.writeUInt32LE(UInt32(sampleRate * blockAlign))
            try? w.writeUInt16LE(UInt16(blockAlign)); try? w.writeUInt16LE(UInt16(bits))
            try? w.writeUInt32(0x6461_7461); try? w.writeUInt32LE(UInt32(clamping: dataLength))
        }
        return out
    }
}
