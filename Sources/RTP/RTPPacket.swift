import Wire

/// The RTP fixed header (RFC 3550 §5.1):
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |V=2|P|X|  CC   |M|     PT      |       sequence number         |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                           timestamp                           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           synchronization source (SSRC) identifier            |
/// +=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+=+
/// |            contributing source (CSRC) identifiers             |
/// |                             ....                              |
/// ```
/// followed, when X is set, by a header extension (§5.3.1: 16-bit profile, 16-bit length
/// in 32-bit words, the words), then the payload, then padding when P is set (the last
/// octet counts the padding octets, itself included).
public struct RTPHeader: Equatable, Sendable {
    public var marker: Bool
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    /// Contributing sources (at most 15). Empty for Linnet's own audio; an empty array
    /// does not allocate.
    public var csrcs: [UInt32]

    public init(marker: Bool = false, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32,
                ssrc: UInt32, csrcs: [UInt32] = []) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
    }
}

/// A header extension block (RFC 3550 §5.3.1) kept raw: the profile ("defined by
/// profile" field) and the words after the 4-byte extension header, as offsets into
/// the packet. `elements(in:)` reads RFC 8285 elements from it.
public struct RTPHeaderExtension: Equatable, Sendable {
    /// 0xBEDE for RFC 8285 one-byte headers, 0x100x for two-byte headers.
    public var profile: UInt16
    /// Where the extension data lies in the packet (a multiple of 4 bytes long).
    public var range: Range<Int>

    public static let oneByteProfile: UInt16 = 0xBEDE

    /// RFC 8285 §4.3: 0x100 in the top 12 bits, 4 "appbits" below.
    public var isTwoByte: Bool { profile & 0xFFF0 == 0x1000 }
    public var isOneByte: Bool { profile == RTPHeaderExtension.oneByteProfile }
}

/// One RFC 8285 extension element: its local id and where its data lies in the packet.
public struct RTPExtensionElement: Equatable, Sendable {
    public var id: UInt8
    public var range: Range<Int>
}

/// A parsed RTP packet: header values plus offsets into the caller's buffer.
public struct RTPPacket: Equatable, Sendable {
    public var header: RTPHeader
    public var headerExtension: RTPHeaderExtension?
    /// Where the payload lies (after headers, before padding).
    public var payload: Range<Int>
    /// Padding octets at the end (0 when P is clear).
    public var paddingLength: Int

    public static let version: UInt8 = 2
    public static let fixedHeaderLength = 12

    /// Parses an RTP packet (RFC 3550 §5.1, A.1's validity checks on the header).
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(RTPError) -> RTPPacket {
        var r = ByteReader(bytes)
        let b0 = try wire { () throws(WireError) in try r.readUInt8() }
        guard b0 >> 6 == version else { throw .badVersion(b0 >> 6) }
        let hasPadding = b0 & 0x20 != 0
        let hasExtension = b0 & 0x10 != 0
        let csrcCount = Int(b0 & 0x0F)
        let b1 = try wire { () throws(WireError) in try r.readUInt8() }
        let seq = try wire { () throws(WireError) in try r.readUInt16() }
        let ts = try wire { () throws(WireError) in try r.readUInt32() }
        let ssrc = try wire { () throws(WireError) in try r.readUInt32() }
        var csrcs: [UInt32] = []
        if csrcCount > 0 {
            guard r.remaining >= 4 * csrcCount else { throw .truncated }
            csrcs.reserveCapacity(csrcCount)
            for _ in 0..<csrcCount { csrcs.append(try wire { () throws(WireError) in try r.readUInt32() }) }
        }
        var ext: RTPHeaderExtension? = nil
        if hasExtension {
            let profile = try wire { () throws(WireError) in try r.readUInt16() }
            let words = Int(try wire { () throws(WireError) in try r.readUInt16() })
            let start = r.offset
            guard r.remaining >= 4 * words else { throw .truncated }
            try wire { () throws(WireError) in try r.skip(4 * words) }
            ext = RTPHeaderExtension(profile: profile, range: start..<(start + 4 * words))
        }
        let headerEnd = r.offset
        var padding = 0
        if hasPadding {
            // §5.1: the last octet counts the padding, itself included.
            guard bytes.count > headerEnd else { throw .badPadding }
            padding = Int(bytes[bytes.count - 1])
            guard padding >= 1, padding <= bytes.count - headerEnd else { throw .badPadding }
        }
        let header = RTPHeader(marker: b1 & 0x80 != 0, payloadType: b1 & 0x7F, sequenceNumber: seq,
                               timestamp: ts, ssrc: ssrc, csrcs: csrcs)
        return RTPPacket(header: header, headerExtension: ext,
                         payload: headerEnd..<(bytes.count - padding), paddingLength: padding)
    }

    public static func parse(_ bytes: [UInt8]) throws(RTPError) -> RTPPacket {
        try bytes.withBytes { (raw) throws(RTPError) -> RTPPacket in try parse(raw) }
    }

    /// The RFC 8285 elements of the header extension, in order. One-byte form (§4.2):
    /// ID 0 is a padding byte, ID 15 stops the parse; each element has 1–16 bytes.
    /// Two-byte form (§4.3): ID byte and length byte (0–255); ID 0 is padding.
    /// Other profiles have no elements. Allocation: one small array.
    public func extensionElements(in bytes: UnsafeRawBufferPointer) throws(RTPError) -> [RTPExtensionElement] {
        guard let ext = headerExtension, ext.range.upperBound <= bytes.count else { return [] }
        var out: [RTPExtensionElement] = []
        var i = ext.range.lowerBound
        let end = ext.range.upperBound
        if ext.isOneByte {
            while i < end {
                let b = bytes[i]
                let id = b >> 4
                if id == 0 { i += 1; continue }        // padding
                if id == 15 { break }                  // reserved: stop processing
                let length = Int(b & 0x0F) + 1
                guard i + 1 + length <= end else { throw .badExtension }
                out.append(RTPExtensionElement(id: id, range: (i + 1)..<(i + 1 + length)))
                i += 1 + length
            }
        } else if ext.isTwoByte {
            while i < end {
                let id = bytes[i]
                if id == 0 { i += 1; continue }        // padding
                guard i + 2 <= end else { throw .badExtension }
                let length = Int(bytes[i + 1])
                guard i + 2 + length <= end else { throw .badExtension }
                out.append(RTPExtensionElement(id: id, range: (i + 2)..<(i + 2 + length)))
                i += 2 + length
            }
        }
        return out
    }

    public func extensionElements(in bytes: [UInt8]) throws(RTPError) -> [RTPExtensionElement] {
        try bytes.withBytes { (raw) throws(RTPError) -> [RTPExtensionElement] in try extensionElements(in: raw) }
    }
}

extension RTPHeader {
    /// Bytes the header takes with `extensionLength` bytes of extension data (a multiple
    /// of 4; 0 with no extension).
    public func length(extensionDataLength: Int? = nil) -> Int {
        RTPPacket.fixedHeaderLength + 4 * csrcs.count + (extensionDataLength.map { 4 + $0 } ?? 0)
    }

    /// Writes header, optional extension block, payload and `padding` octets (0, or
    /// 1…255: the P bit is set and the last octet holds the count, RFC 3550 §5.1).
    /// Returns the packet length.
    public func write(extension ext: (profile: UInt16, data: UnsafeRawBufferPointer)? = nil,
                      payload: UnsafeRawBufferPointer, padding: Int = 0,
                      into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        guard csrcs.count <= 15, payloadType < 128, padding >= 0, padding <= 255 else { throw .invalidValue }
        if let e = ext, e.data.count % 4 != 0 || e.data.count > 4 * 0xFFFF { throw .invalidValue }
        var w = ByteWriter(buffer)
        let b0 = RTPPacket.version << 6 | (padding > 0 ? 0x20 : 0) | (ext != nil ? 0x10 : 0) | UInt8(csrcs.count)
        try wire { () throws(WireError) in
            try w.writeUInt8(b0)
            try w.writeUInt8((marker ? 0x80 : 0) | payloadType)
            try w.writeUInt16(sequenceNumber)
            try w.writeUInt32(timestamp)
            try w.writeUInt32(ssrc)
            for c in csrcs { try w.writeUInt32(c) }
            if let e = ext {
                try w.writeUInt16(e.profile)
                try w.writeUInt16(UInt16(e.data.count / 4))
                try w.writeBytes(e.data)
            }
            try w.writeBytes(payload)
            if padding > 0 {
                try w.writeZeros(padding - 1)
                try w.writeUInt8(UInt8(padding))
            }
        }
        return w.count
    }
}

/// Builds RFC 8285 extension blocks (data padded with zero bytes to a 32-bit boundary).
public enum RTPExtensionBuilder {
    /// One-byte form: ids 1…14, 1…16 bytes each. Returns the block data (profile 0xBEDE).
    public static func oneByte(_ elements: [(id: UInt8, data: [UInt8])]) throws(RTPError) -> [UInt8] {
        var out: [UInt8] = []
        for e in elements {
            guard e.id >= 1, e.id <= 14, !e.data.isEmpty, e.data.count <= 16 else { throw .invalidValue }
            out.append(e.id << 4 | UInt8(e.data.count - 1))
            out.append(contentsOf: e.data)
        }
        while out.count % 4 != 0 { out.append(0) }
        return out
    }

    /// Two-byte form: ids 1…255, 0…255 bytes each (profile 0x1000).
    public static func twoByte(_ elements: [(id: UInt8, data: [UInt8])]) throws(RTPError) -> [UInt8] {
        var out: [UInt8] = []
        for e in elements {
            guard e.id >= 1, e.data.count <= 255 else { throw .invalidValue }
            out.append(e.id)
            out.append(UInt8(e.data.count))
            out.append(contentsOf: e.data)
        }
        while out.count % 4 != 0 { out.append(0) }
        return out
    }
}
