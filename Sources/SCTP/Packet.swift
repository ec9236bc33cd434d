import Wire

/// Any chunk of a packet.
public enum Chunk: Equatable, Sendable {
    case data(DataChunk)
    case initiation(InitChunk)
    case initAck(InitAckChunk)
    case sack(SackChunk)
    case heartbeat(HeartbeatChunk)
    case heartbeatAck(HeartbeatAckChunk)
    case abort(AbortChunk)
    case shutdown(ShutdownChunk)
    case shutdownAck(ShutdownAckChunk)
    case error(ErrorChunk)
    case cookieEcho(CookieEchoChunk)
    case cookieAck(CookieAckChunk)
    case shutdownComplete(ShutdownCompleteChunk)
    case forwardTSN(ForwardTSNChunk)
    case reconfig(ReconfigChunk)
    case unknown(UnknownChunk)

    /// Bytes on the wire, header and padding included.
    public var encodedLength: Int {
        switch self {
        case .data(let c): return padded4(4 &+ c.valueLength)
        case .initiation(let c): return padded4(4 &+ c.valueLength)
        case .initAck(let c): return padded4(4 &+ c.valueLength)
        case .sack(let c): return padded4(4 &+ c.valueLength)
        case .heartbeat(let c): return padded4(4 &+ c.valueLength)
        case .heartbeatAck(let c): return padded4(4 &+ c.valueLength)
        case .abort(let c): return padded4(4 &+ c.valueLength)
        case .shutdown(let c): return padded4(4 &+ c.valueLength)
        case .shutdownAck(let c): return padded4(4 &+ c.valueLength)
        case .error(let c): return padded4(4 &+ c.valueLength)
        case .cookieEcho(let c): return padded4(4 &+ c.valueLength)
        case .cookieAck(let c): return padded4(4 &+ c.valueLength)
        case .shutdownComplete(let c): return padded4(4 &+ c.valueLength)
        case .forwardTSN(let c): return padded4(4 &+ c.valueLength)
        case .reconfig(let c): return padded4(4 &+ c.valueLength)
        case .unknown(let c): return padded4(4 &+ c.value.count)
        }
    }

    /// Writes header, value and padding.
    public func write(to w: inout ByteWriter) throws(WireError) {
        switch self {
        case .data(let c): try Self.write(c, to: &w)
        case .initiation(let c): try Self.write(c, to: &w)
        case .initAck(let c): try Self.write(c, to: &w)
        case .sack(let c): try Self.write(c, to: &w)
        case .heartbeat(let c): try Self.write(c, to: &w)
        case .heartbeatAck(let c): try Self.write(c, to: &w)
        case .abort(let c): try Self.write(c, to: &w)
        case .shutdown(let c): try Self.write(c, to: &w)
        case .shutdownAck(let c): try Self.write(c, to: &w)
        case .error(let c): try Self.write(c, to: &w)
        case .cookieEcho(let c): try Self.write(c, to: &w)
        case .cookieAck(let c): try Self.write(c, to: &w)
        case .shutdownComplete(let c): try Self.write(c, to: &w)
        case .forwardTSN(let c): try Self.write(c, to: &w)
        case .reconfig(let c): try Self.write(c, to: &w)
        case .unknown(let c):
            try w.writeUInt8(c.type)
            try w.writeUInt8(c.flags)
            try w.writeUInt16(UInt16(truncatingIfNeeded: 4 &+ c.value.count))
            try c.value.withBytes { (b) throws(WireError) in try w.writeBytes(b) }
            try w.writeZeros(padded4(c.value.count) &- c.value.count)
        }
    }

    static func write<C: ChunkBody>(_ c: C, to w: inout ByteWriter) throws(WireError) {
        let length = 4 &+ c.valueLength
        guard length <= 0xffff else { throw .invalidValue }
        try w.writeUInt8(C.type)
        try w.writeUInt8(c.flags)
        try w.writeUInt16(UInt16(length))
        let start = w.count
        try c.writeValue(to: &w)
        // A wrong valueLength would corrupt every following chunk: check it.
        guard w.count &- start == c.valueLength else { throw .invalidValue }
        try w.writeZeros(padded4(length) &- length)
    }

    static func parse<C: ChunkBody>(_: C.Type, flags: UInt8, value: UnsafeRawBufferPointer) throws(SCTPError) -> C {
        var r = ByteReader(value)
        return try C.parse(flags: flags, value: &r)
    }

    /// Parses one chunk from its type, flags and value.
    static func parse(type: UInt8, flags: UInt8, value v: UnsafeRawBufferPointer) throws(SCTPError) -> Chunk {
        switch type {
        case DataChunk.type: return .data(try parse(DataChunk.self, flags: flags, value: v))
        case InitChunk.type: return .initiation(try parse(InitChunk.self, flags: flags, value: v))
        case InitAckChunk.type: return .initAck(try parse(InitAckChunk.self, flags: flags, value: v))
        case SackChunk.type: return .sack(try parse(SackChunk.self, flags: flags, value: v))
        case HeartbeatChunk.type: return .heartbeat(try parse(HeartbeatChunk.self, flags: flags, value: v))
        case HeartbeatAckChunk.type: return .heartbeatAck(try parse(HeartbeatAckChunk.self, flags: flags, value: v))
        case AbortChunk.type: return .abort(try parse(AbortChunk.self, flags: flags, value: v))
        case ShutdownChunk.type: return .shutdown(try parse(ShutdownChunk.self, flags: flags, value: v))
        case ShutdownAckChunk.type: return .shutdownAck(try parse(ShutdownAckChunk.self, flags: flags, value: v))
        case ErrorChunk.type: return .error(try parse(ErrorChunk.self, flags: flags, value: v))
        case CookieEchoChunk.type: return .cookieEcho(try parse(CookieEchoChunk.self, flags: flags, value: v))
        case CookieAckChunk.type: return .cookieAck(try parse(CookieAckChunk.self, flags: flags, value: v))
        case ShutdownCompleteChunk.type: return .shutdownComplete(try parse(ShutdownCompleteChunk.self, flags: flags, value: v))
        case ForwardTSNChunk.type: return .forwardTSN(try parse(ForwardTSNChunk.self, flags: flags, value: v))
        case ReconfigChunk.type: return .reconfig(try parse(ReconfigChunk.self, flags: flags, value: v))
        default: return .unknown(UnknownChunk(type: type, flags: flags, value: [UInt8](v)))
        }
    }
}

/// An SCTP packet: the common header (RFC 9260 §3.1) and its chunks.
///
///     |     Source Port Number        |     Destination Port Number   |
///     |                      Verification Tag                         |
///     |                           Checksum                            |
///
/// The checksum is CRC-32c over the whole packet with the checksum field zeroed
/// (RFC 9260 §6.8, appendix A). Appendix A's reference code stores the CRC's least
/// significant byte first, i.e. the standard CRC-32c value in little-endian byte order —
/// the same placement as iSCSI (RFC 3720 §B.4). Tests check this against captured packets.
public struct SCTPPacket: Equatable, Sendable {
    public var sourcePort: UInt16
    public var destinationPort: UInt16
    public var verificationTag: UInt32
    public var chunks: [Chunk]

    public init(sourcePort: UInt16, destinationPort: UInt16, verificationTag: UInt32, chunks: [Chunk]) {
        self.sourcePort = sourcePort
        self.destinationPort = destinationPort
        self.verificationTag = verificationTag
        self.chunks = chunks
    }

    public static let headerLength = 12

    /// The checksum of a packet as it should stand in bytes 8…11 (computed with them zero).
    public static func checksum(_ packet: UnsafeRawBufferPointer) -> UInt32 {
        guard packet.count >= headerLength else { return 0 }
        var crc = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: packet[0..<8]))
        let zeros: UInt32 = 0
        crc = withUnsafeBytes(of: zeros) { CRC32C.checksum($0, continuing: crc) }
        return CRC32C.checksum(UnsafeRawBufferPointer(rebasing: packet[12...]), continuing: crc)
    }

    public var encodedLength: Int {
        var n = Self.headerLength
        for c in chunks { n &+= c.encodedLength }
        return n
    }

    /// The packet's bytes with a correct checksum.
    public func serialize() -> [UInt8] {
        var out = [UInt8](repeating: 0, count: encodedLength)
        let ok: Bool = out.withUnsafeMutableBytes { raw in
            var w = ByteWriter(raw)
            do throws(WireError) {
                try w.writeUInt16(sourcePort)
                try w.writeUInt16(destinationPort)
                try w.writeUInt32(verificationTag)
                try w.writeUInt32(0)
                for c in chunks { try c.write(to: &w) }
                let crc = Self.checksum(UnsafeRawBufferPointer(raw))
                try w.patchUInt32(crc.byteSwapped, at: 8)
                return true
            } catch {
                return false
            }
        }
        // Only a chunk longer than 65,535 bytes can fail; the association never builds one.
        return ok ? out : []
    }

    /// Parses and verifies a packet. Unknown chunks whose type says "stop processing"
    /// (RFC 9260 §3.2) end the list; they are kept so the caller can report them.
    public static func parse(_ bytes: UnsafeRawBufferPointer, verifyChecksum: Bool = true) throws(SCTPError) -> SCTPPacket {
        guard bytes.count >= headerLength else { throw .packetTooShort }
        var r = ByteReader(bytes)
        let (src, dst, tag, sum) = try wire { () throws(WireError) in
            (try r.readUInt16(), try r.readUInt16(), try r.readUInt32(), try r.readUInt32())
        }
        if verifyChecksum, sum != checksum(bytes).byteSwapped { throw .badChecksum }
        var packet = SCTPPacket(sourcePort: src, destinationPort: dst, verificationTag: tag, chunks: [])
        while r.remaining > 0 {
            // Fewer than 4 bytes left: trailing garbage that cannot be a chunk.
            guard r.remaining >= 4 else { throw .badLength }
            let (type, flags, length) = try wire { () throws(WireError) in
                (try r.readUInt8(), try r.readUInt8(), Int(try r.readUInt16()))
            }
            guard length >= 4, length &- 4 <= r.remaining else { throw .badLength }
            let value = try wire { () throws(WireError) in try r.readBytes(length &- 4) }
            // The padding of the last chunk may be missing; a receiver ignores padding.
            try wire { () throws(WireError) in try r.skip(min(padded4(length) &- length, r.remaining)) }
            let chunk = try Chunk.parse(type: type, flags: flags, value: value)
            packet.chunks.append(chunk)
            if case .unknown(let u) = chunk, u.stopsProcessing { break }
        }
        return packet
    }

    public static func parse(_ bytes: [UInt8], verifyChecksum: Bool = true) throws(SCTPError) -> SCTPPacket {
        try bytes.withBytes { (b) throws(SCTPError) in try parse(b, verifyChecksum: verifyChecksum) }
    }
}
