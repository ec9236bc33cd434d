import Wire

/// STUN attribute type codes used here (RFC 8489 §18.3, RFC 8445 §16.1).
/// Types below 0x8000 are comprehension-required, the rest comprehension-optional.
public enum STUNAttributeType {
    public static let mappedAddress: UInt16 = 0x0001
    public static let username: UInt16 = 0x0006
    public static let messageIntegrity: UInt16 = 0x0008
    public static let errorCode: UInt16 = 0x0009
    public static let unknownAttributes: UInt16 = 0x000A
    public static let xorMappedAddress: UInt16 = 0x0020
    public static let priority: UInt16 = 0x0024
    public static let useCandidate: UInt16 = 0x0025
    public static let software: UInt16 = 0x8022
    public static let fingerprint: UInt16 = 0x8028
    public static let iceControlled: UInt16 = 0x8029
    public static let iceControlling: UInt16 = 0x802A

    /// RFC 8489 §14: 0x0000–0x7FFF must be understood or the request is refused (420).
    @inlinable public static func isComprehensionRequired(_ type: UInt16) -> Bool { type < 0x8000 }
}

/// One attribute's value codec. The TLV header and the padding to a multiple of four
/// (RFC 8489 §14) are written by `STUNMessage`; a value type reads and writes only its
/// value. The transaction ID is passed for XOR-MAPPED-ADDRESS, which needs it for IPv6.
public protocol STUNAttributeValue {
    static var type: UInt16 { get }
    /// Parses the value bytes (header and padding already removed).
    static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Self
    /// Writes the value bytes (no header, no padding).
    func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError)
}

// MARK: - Addresses

/// The address encoding MAPPED-ADDRESS and XOR-MAPPED-ADDRESS share (RFC 8489 §14.1):
///
/// ```
/// |0 0 0 0 0 0 0 0|    Family     |           Port                |
/// |                 Address (32 bits or 128 bits)                 |
/// ```
/// Family 0x01 is IPv4, 0x02 IPv6. With `xor`, the port is XORed with the top 16 bits
/// of the magic cookie and the address with the cookie (IPv4) or the cookie followed by
/// the transaction ID (IPv6) (RFC 8489 §14.2).
enum AddressCodec {
    static func parse(_ value: ByteReader, type: UInt16, xor: TransactionID?) throws(ICEError) -> SocketAddress {
        var r = value
        return try wire(.badAttribute(type: type)) { () throws(WireError) -> SocketAddress in
            _ = try r.readUInt8()  // reserved; RFC 8489 §14.1 says ignore on receipt
            let family = try r.readUInt8()
            var port = try r.readUInt16()
            if xor != nil { port ^= UInt16(truncatingIfNeeded: stunMagicCookie >> 16) }
            switch family {
            case 0x01:
                guard r.remaining == 4 else { throw .invalidValue }
                var a = try r.readUInt32()
                if xor != nil { a ^= stunMagicCookie }
                return SocketAddress(ip: .v4(a), port: port)
            case 0x02:
                guard r.remaining == 16 else { throw .invalidValue }
                var h = try r.readUInt64()
                var l = try r.readUInt64()
                if let id = xor {
                    h ^= UInt64(stunMagicCookie) << 32 | UInt64(id.w0)
                    l ^= UInt64(id.w1) << 32 | UInt64(id.w2)
                }
                return SocketAddress(ip: .v6(high: h, low: l), port: port)
            default:
                throw .invalidValue
            }
        }
    }

    static func serialize(_ address: SocketAddress, into w: inout ByteWriter, xor: TransactionID?) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt8(0)
            var port = address.port
            if xor != nil { port ^= UInt16(truncatingIfNeeded: stunMagicCookie >> 16) }
            switch address.ip {
            case .v4(var a):
                try w.writeUInt8(0x01)
                try w.writeUInt16(port)
                if xor != nil { a ^= stunMagicCookie }
                try w.writeUInt32(a)
            case .v6(var h, var l):
                try w.writeUInt8(0x02)
                try w.writeUInt16(port)
                if let id = xor {
                    h ^= UInt64(stunMagicCookie) << 32 | UInt64(id.w0)
                    l ^= UInt64(id.w1) << 32 | UInt64(id.w2)
                }
                try w.writeUInt64(h)
                try w.writeUInt64(l)
            }
        }
    }
}

/// MAPPED-ADDRESS (RFC 8489 §14.1): the reflexive transport address in the clear, as
/// RFC 3489 servers send it.
public struct MappedAddress: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.mappedAddress
    public var address: SocketAddress
    public init(_ address: SocketAddress) { self.address = address }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> MappedAddress {
        MappedAddress(try AddressCodec.parse(value, type: type, xor: nil))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try AddressCodec.serialize(address, into: &w, xor: nil)
    }
}

/// XOR-MAPPED-ADDRESS (RFC 8489 §14.2): the reflexive transport address, obfuscated so
/// that middleboxes rewriting addresses in payloads leave it alone.
public struct XORMappedAddress: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.xorMappedAddress
    public var address: SocketAddress
    public init(_ address: SocketAddress) { self.address = address }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> XORMappedAddress {
        XORMappedAddress(try AddressCodec.parse(value, type: type, xor: transactionID))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try AddressCodec.serialize(address, into: &w, xor: transactionID)
    }
}

// MARK: - Text

/// UTF-8 text attributes with a byte limit; invalid UTF-8 is refused rather than repaired
/// so that a USERNAME compares exactly.
enum TextCodec {
    static func parse(_ value: ByteReader, type: UInt16, maxBytes: Int) throws(ICEError) -> String {
        guard value.bytes.count <= maxBytes else { throw .badAttribute(type: type) }
        guard let s = String(validating: value.bytes, as: UTF8.self) else { throw .badAttribute(type: type) }
        return s
    }

    static func serialize(_ text: String, into w: inout ByteWriter, maxBytes: Int) throws(ICEError) {
        guard text.utf8.count <= maxBytes else { throw .unencodable }
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeString(text) }
    }
}

/// USERNAME (RFC 8489 §14.3): at most 513 bytes. ICE puts `remoteUfrag:localUfrag`
/// there (RFC 8445 §7.2.2).
public struct Username: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.username
    public static let maxBytes = 513
    public var value: String
    public init(_ value: String) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Username {
        Username(try TextCodec.parse(value, type: type, maxBytes: maxBytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try TextCodec.serialize(value, into: &w, maxBytes: Username.maxBytes)
    }
}

/// SOFTWARE (RFC 8489 §14.14): fewer than 128 characters, hence at most 763 bytes.
public struct Software: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.software
    public static let maxBytes = 763
    public var value: String
    public init(_ value: String) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Software {
        Software(try TextCodec.parse(value, type: type, maxBytes: maxBytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try TextCodec.serialize(value, into: &w, maxBytes: Software.maxBytes)
    }
}

// MARK: - Errors

/// ERROR-CODE (RFC 8489 §14.8):
///
/// ```
/// |           Reserved, should be 0         |Class|     Number    |
/// |      Reason Phrase (variable)                                ..
/// ```
/// The code is `class * 100 + number`, 300…699; the reason is UTF-8, at most 763 bytes.
public struct ErrorCode: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.errorCode
    public var code: Int
    public var reason: String

    public static let badRequest = 400
    public static let unauthenticated = 401
    public static let unknownAttribute = 420
    /// RFC 8445 §7.3.1.1.
    public static let roleConflict = 487

    public init(code: Int, reason: String) {
        self.code = code
        self.reason = reason
    }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> ErrorCode {
        var r = value
        let (cls, number) = try wire(.badAttribute(type: type)) { () throws(WireError) -> (UInt8, UInt8) in
            _ = try r.readUInt16()
            let cls = try r.readUInt8() & 0x07
            let number = try r.readUInt8()
            return (cls, number)
        }
        guard (3...6).contains(cls), number < 100 else { throw .badAttribute(type: type) }
        let reason = try TextCodec.parse(ByteReader(UnsafeRawBufferPointer(rebasing: r.bytes[r.offset...])),
                                         type: type, maxBytes: 763)
        return ErrorCode(code: Int(cls) * 100 + Int(number), reason: reason)
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        guard (300...699).contains(code) else { throw .unencodable }
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt16(0)
            try w.writeUInt8(UInt8(code / 100))
            try w.writeUInt8(UInt8(code % 100))
        }
        try TextCodec.serialize(reason, into: &w, maxBytes: 763)
    }
}

/// UNKNOWN-ATTRIBUTES (RFC 8489 §14.9): the comprehension-required types a 420 response
/// refuses, 16 bits each.
public struct UnknownAttributes: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.unknownAttributes
    public var types: [UInt16]
    public init(_ types: [UInt16]) { self.types = types }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> UnknownAttributes {
        var r = value
        guard r.remaining % 2 == 0 else { throw .badAttribute(type: type) }
        var out: [UInt16] = []
        while !r.isAtEnd {
            out.append(try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt16() })
        }
        return UnknownAttributes(out)
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            for t in types { try w.writeUInt16(t) }
        }
    }
}

// MARK: - ICE (RFC 8445 §16.1)

/// PRIORITY (RFC 8445 §16.1): the priority a peer-reflexive candidate learned from this
/// check would get, 32 bits.
public struct Priority: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.priority
    public var value: UInt32
    public init(_ value: UInt32) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Priority {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        return Priority(try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt32() })
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeUInt32(value) }
    }
}

/// USE-CANDIDATE (RFC 8445 §16.1): no value; the controlling agent nominates the pair.
public struct UseCandidate: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.useCandidate
    public init() {}

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> UseCandidate {
        guard value.bytes.count == 0 else { throw .badAttribute(type: type) }
        return UseCandidate()
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {}
}

/// The 64-bit tie-breaker both role attributes carry.
enum TieBreakerCodec {
    static func parse(_ value: ByteReader, type: UInt16) throws(ICEError) -> UInt64 {
        var r = value
        guard r.remaining == 8 else { throw .badAttribute(type: type) }
        return try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt64() }
    }
}

/// ICE-CONTROLLED (RFC 8445 §16.1): the sender believes it is controlled; 64-bit tie-breaker.
public struct ICEControlled: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.iceControlled
    public var tieBreaker: UInt64
    public init(tieBreaker: UInt64) { self.tieBreaker = tieBreaker }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> ICEControlled {
        ICEControlled(tieBreaker: try TieBreakerCodec.parse(value, type: type))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeUInt64(tieBreaker) }
    }
}

/// ICE-CONTROLLING (RFC 8445 §16.1): the sender believes it is controlling; 64-bit tie-breaker.
public struct ICEControlling: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.iceControlling
    public var tieBreaker: UInt64
    public init(tieBreaker: UInt64) { self.tieBreaker = tieBreaker }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> ICEControlling {
        ICEControlling(tieBreaker: try TieBreakerCodec.parse(value, type: type))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeUInt64(tieBreaker) }
    }
}

// MARK: - Integrity and fingerprint

/// MESSAGE-INTEGRITY (RFC 8489 §14.5): the 20-byte HMAC-SHA1 of the message up to this
/// attribute, computed with the header length set as if this attribute ended the message.
public struct MessageIntegrity: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.messageIntegrity
    public static let size = 20
    public var hmac: [UInt8]
    public init(hmac: [UInt8]) { self.hmac = hmac }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> MessageIntegrity {
        guard value.bytes.count == size else { throw .badAttribute(type: type) }
        return MessageIntegrity(hmac: Array(value.bytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        guard hmac.count == MessageIntegrity.size else { throw .unencodable }
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeBytes(hmac) }
    }
}

/// FINGERPRINT (RFC 8489 §14.7): CRC-32 of the message up to this attribute, XORed with
/// 0x5354554e ("STUN"); it is always the last attribute.
public struct Fingerprint: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.fingerprint
    public static let xorValue: UInt32 = 0x5354_554E
    public var value: UInt32
    public init(_ value: UInt32) { self.value = value }

    /// The FINGERPRINT value for the message bytes that precede the attribute (with the
    /// header length already covering the attribute).
    public static func compute(_ messagePrefix: UnsafeRawBufferPointer) -> UInt32 {
        CRC32.checksum(messagePrefix) ^ xorValue
    }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Fingerprint {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        return Fingerprint(try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt32() })
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeUInt32(value) }
    }
}
