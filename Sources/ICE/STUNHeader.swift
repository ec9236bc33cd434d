import Wire

/// The magic cookie every RFC 5389/8489 message carries in bytes 4–7 (RFC 8489 §5).
public let stunMagicCookie: UInt32 = 0x2112_A442

/// RFC 7983 §7 demultiplexing on the first byte of a datagram: 0–3 is STUN
/// (20–63 DTLS, 128–191 RTP/RTCP, 64–79 TURN channel data).
@inlinable
public func isSTUN(firstByte: UInt8) -> Bool { firstByte <= 3 }

/// The two class bits of a STUN message type (RFC 8489 §5: C1 and C0).
public enum STUNClass: UInt8, Sendable {
    case request = 0b00
    case indication = 0b01
    case successResponse = 0b10
    case errorResponse = 0b11
}

/// The 12-bit method plus the class, interleaved into the 14-bit message type:
///
/// ```
///  0                 1
///  2  3  4 5 6 7 8 9 0 1 2 3 4 5
/// +--+--+-+-+-+-+-+-+-+-+-+-+-+-+
/// |M |M |M|M|M|C|M|M|M|C|M|M|M|M|
/// |11|10|9|8|7|1|6|5|4|0|3|2|1|0|
/// +--+--+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
/// (RFC 8489 §5, figure 3.)
public struct STUNMessageType: Hashable, Sendable {
    /// The method, 0…0xFFF; Binding is 0x001.
    public var method: UInt16
    public var messageClass: STUNClass

    public static let bindingMethod: UInt16 = 0x001
    public static let bindingRequest = STUNMessageType(method: bindingMethod, messageClass: .request)
    public static let bindingSuccess = STUNMessageType(method: bindingMethod, messageClass: .successResponse)
    public static let bindingError = STUNMessageType(method: bindingMethod, messageClass: .errorResponse)
    public static let bindingIndication = STUNMessageType(method: bindingMethod, messageClass: .indication)

    public init(method: UInt16, messageClass: STUNClass) {
        self.method = method & 0x0FFF
        self.messageClass = messageClass
    }

    /// From the 16-bit field; nil when the top two bits are set (not STUN).
    public init?(rawValue: UInt16) {
        guard rawValue & 0xC000 == 0 else { return nil }
        let m = (rawValue & 0x000F) | ((rawValue & 0x00E0) >> 1) | ((rawValue & 0x3E00) >> 2)
        let c = UInt8(truncatingIfNeeded: ((rawValue >> 4) & 0x1) | ((rawValue >> 7) & 0x2))
        self.init(method: m, messageClass: STUNClass(rawValue: c)!)
    }

    public var rawValue: UInt16 {
        let c = UInt16(messageClass.rawValue)
        return (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2)
            | ((c & 0x1) << 4) | ((c & 0x2) << 7)
    }
}

/// The 96-bit transaction ID (RFC 8489 §5), as three big-endian words.
public struct TransactionID: Hashable, Sendable, CustomStringConvertible {
    public var w0: UInt32, w1: UInt32, w2: UInt32

    public init(_ w0: UInt32, _ w1: UInt32, _ w2: UInt32) {
        self.w0 = w0; self.w1 = w1; self.w2 = w2
    }

    /// A fresh ID. RFC 8489 §5 wants it "uniformly and randomly chosen"; the agent's
    /// generator is seeded by the IO layer (tests seed it deterministically).
    public static func random<R: RandomNumberGenerator>(using rng: inout R) -> TransactionID {
        let a = rng.next()
        let b = rng.next()
        return TransactionID(UInt32(truncatingIfNeeded: a >> 32), UInt32(truncatingIfNeeded: a),
                             UInt32(truncatingIfNeeded: b))
    }

    /// The 12 bytes in wire order.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(12)
        for w in [w0, w1, w2] {
            for s in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: w >> UInt32(s))) }
        }
        return out
    }

    public static func parse(_ r: inout ByteReader) throws(WireError) -> TransactionID {
        let a = try r.readUInt32()
        let b = try r.readUInt32()
        let c = try r.readUInt32()
        return TransactionID(a, b, c)
    }

    public func serialize(into w: inout ByteWriter) throws(WireError) {
        try w.writeUInt32(w0)
        try w.writeUInt32(w1)
        try w.writeUInt32(w2)
    }

    public var description: String { Hex.encode(bytes) }
}

/// The 20-byte STUN header (RFC 8489 §5):
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |0 0|     STUN Message Type     |         Message Length        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         Magic Cookie                          |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                     Transaction ID (96 bits)                  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
/// The length counts the attribute bytes after the header, always a multiple of 4.
public struct STUNHeader: Hashable, Sendable {
    public static let size = 20

    public var type: STUNMessageType
    public var length: UInt16
    public var transactionID: TransactionID

    public init(type: STUNMessageType, length: UInt16, transactionID: TransactionID) {
        self.type = type
        self.length = length
        self.transactionID = transactionID
    }

    public static func parse(_ r: inout ByteReader) throws(ICEError) -> STUNHeader {
        guard r.remaining >= size else { throw .truncatedHeader }
        let rawType = try wire(.truncatedHeader) { () throws(WireError) in try r.readUInt16() }
        guard let type = STUNMessageType(rawValue: rawType) else { throw .notSTUN }
        let length = try wire(.truncatedHeader) { () throws(WireError) in try r.readUInt16() }
        let cookie = try wire(.truncatedHeader) { () throws(WireError) in try r.readUInt32() }
        guard cookie == stunMagicCookie else { throw .badMagicCookie }
        let id = try wire(.truncatedHeader) { () throws(WireError) in try TransactionID.parse(&r) }
        return STUNHeader(type: type, length: length, transactionID: id)
    }

    public func serialize(into w: inout ByteWriter) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt16(type.rawValue)
            try w.writeUInt16(length)
            try w.writeUInt32(stunMagicCookie)
            try transactionID.serialize(into: &w)
        }
    }
}

/// Runs a `ByteReader`/`ByteWriter` step and reports its failure as `error`: the wire
/// layer's "truncated" means different things in different places (a short header, an
/// overrunning attribute, a full output buffer).
@inline(__always)
func wire<T>(_ failure: ICEError, _ body: () throws(WireError) -> T) throws(ICEError) -> T {
    do throws(WireError) {
        return try body()
    } catch {
        throw failure
    }
}
