import Wire

/// TURN methods (RFC 8656 §17) and the long-term credential attributes of RFC 8489
/// §14.9–14.10 that TURN needs. Each attribute is one type with `parse`/`serialize`, as
/// the STUN ones in STUNAttributes.swift.
extension STUNMessageType {
    /// RFC 8656 §17: 0x003 Allocate, 0x004 Refresh, 0x006 Send, 0x007 Data,
    /// 0x008 CreatePermission, 0x009 ChannelBind.
    public static let allocateMethod: UInt16 = 0x003
    public static let refreshMethod: UInt16 = 0x004
    public static let sendMethod: UInt16 = 0x006
    public static let dataMethod: UInt16 = 0x007
    public static let createPermissionMethod: UInt16 = 0x008
    public static let channelBindMethod: UInt16 = 0x009

    public static let allocateRequest = STUNMessageType(method: allocateMethod, messageClass: .request)
    public static let refreshRequest = STUNMessageType(method: refreshMethod, messageClass: .request)
    public static let createPermissionRequest = STUNMessageType(method: createPermissionMethod, messageClass: .request)
    public static let channelBindRequest = STUNMessageType(method: channelBindMethod, messageClass: .request)
    public static let sendIndication = STUNMessageType(method: sendMethod, messageClass: .indication)
    public static let dataIndication = STUNMessageType(method: dataMethod, messageClass: .indication)
}

extension STUNAttributeType {
    // RFC 8656 §18.
    public static let channelNumber: UInt16 = 0x000C
    public static let lifetime: UInt16 = 0x000D
    public static let xorPeerAddress: UInt16 = 0x0012
    public static let data: UInt16 = 0x0013
    public static let xorRelayedAddress: UInt16 = 0x0016
    public static let requestedAddressFamily: UInt16 = 0x0017
    public static let requestedTransport: UInt16 = 0x0019
    public static let dontFragment: UInt16 = 0x001A
    // RFC 8489 §18.3.
    public static let realm: UInt16 = 0x0014
    public static let nonce: UInt16 = 0x0015
    public static let alternateServer: UInt16 = 0x8023
}

extension ErrorCode {
    /// RFC 8489 §14.8 and RFC 8656 §19.
    public static let tryAlternate = 300
    public static let forbidden = 403
    public static let allocationMismatch = 437
    public static let staleNonce = 438
    public static let addressFamilyNotSupported = 440
    public static let wrongCredentials = 441
    public static let unsupportedTransportProtocol = 442
    public static let peerAddressFamilyMismatch = 443
    public static let allocationQuotaReached = 486
    public static let serverError = 500
    public static let insufficientCapacity = 508
}

/// CHANNEL-NUMBER (RFC 8656 §18.1): a channel 0x4000–0x4FFF and 16 reserved bits.
///
/// ```
/// |        Channel Number         |         RFFU = 0              |
/// ```
public struct ChannelNumber: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.channelNumber
    /// RFC 8656 §12: the numbers a client may bind.
    public static let range: ClosedRange<UInt16> = 0x4000...0x4FFF
    public var value: UInt16
    public init(_ value: UInt16) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> ChannelNumber {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        return ChannelNumber(try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt16() })
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt16(value)
            try w.writeUInt16(0)
        }
    }
}

/// LIFETIME (RFC 8656 §18.2): seconds until the allocation expires; 0 in a Refresh
/// request deletes it (§7.2).
public struct Lifetime: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.lifetime
    public var seconds: UInt32
    public init(seconds: UInt32) { self.seconds = seconds }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Lifetime {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        return Lifetime(seconds: try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt32() })
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeUInt32(seconds) }
    }
}

/// XOR-PEER-ADDRESS (RFC 8656 §18.3): the peer's address as the relay sees it, encoded
/// like XOR-MAPPED-ADDRESS.
public struct XORPeerAddress: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.xorPeerAddress
    public var address: SocketAddress
    public init(_ address: SocketAddress) { self.address = address }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> XORPeerAddress {
        XORPeerAddress(try AddressCodec.parse(value, type: type, xor: transactionID))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try AddressCodec.serialize(address, into: &w, xor: transactionID)
    }
}

/// XOR-RELAYED-ADDRESS (RFC 8656 §18.5): the address the server allocated for us.
public struct XORRelayedAddress: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.xorRelayedAddress
    public var address: SocketAddress
    public init(_ address: SocketAddress) { self.address = address }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> XORRelayedAddress {
        XORRelayedAddress(try AddressCodec.parse(value, type: type, xor: transactionID))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try AddressCodec.serialize(address, into: &w, xor: transactionID)
    }
}

/// ALTERNATE-SERVER (RFC 8489 §14.15): with 300 Try Alternate; not XORed.
public struct AlternateServer: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.alternateServer
    public var address: SocketAddress
    public init(_ address: SocketAddress) { self.address = address }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> AlternateServer {
        AlternateServer(try AddressCodec.parse(value, type: type, xor: nil))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try AddressCodec.serialize(address, into: &w, xor: nil)
    }
}

/// DATA (RFC 8656 §18.4): the application data of a Send or Data indication.
public struct DataAttribute: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.data
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> DataAttribute {
        DataAttribute(Array(value.bytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in try w.writeBytes(bytes) }
    }
}

/// REQUESTED-TRANSPORT (RFC 8656 §18.7): the protocol between the relay and peers; 17
/// (UDP) is the only one RFC 8656 defines.
///
/// ```
/// |    Protocol   |                    RFFU                       |
/// ```
public struct RequestedTransport: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.requestedTransport
    public static let udp: UInt8 = 17
    public var protocolNumber: UInt8
    public init(_ protocolNumber: UInt8 = RequestedTransport.udp) { self.protocolNumber = protocolNumber }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> RequestedTransport {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        return RequestedTransport(try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt8() })
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt8(protocolNumber)
            try w.writeUInt8(0)
            try w.writeUInt16(0)
        }
    }
}

/// REQUESTED-ADDRESS-FAMILY (RFC 8656 §18.8): 0x01 IPv4, 0x02 IPv6 relayed address.
public struct RequestedAddressFamily: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.requestedAddressFamily
    public var family: UInt8
    public init(ipv6: Bool) { family = ipv6 ? 0x02 : 0x01 }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> RequestedAddressFamily {
        var r = value
        guard r.remaining == 4 else { throw .badAttribute(type: type) }
        let f = try wire(.badAttribute(type: type)) { () throws(WireError) in try r.readUInt8() }
        guard f == 1 || f == 2 else { throw .badAttribute(type: type) }
        return RequestedAddressFamily(ipv6: f == 2)
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt8(family)
            try w.writeUInt8(0)
            try w.writeUInt16(0)
        }
    }
}

/// DONT-FRAGMENT (RFC 8656 §18.9): no value.
public struct DontFragment: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.dontFragment
    public init() {}

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> DontFragment {
        guard value.bytes.count == 0 else { throw .badAttribute(type: type) }
        return DontFragment()
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {}
}

/// REALM (RFC 8489 §14.9): fewer than 128 characters (at most 763 bytes), quoted-string
/// content; present in 401/438 and in every authenticated request.
public struct Realm: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.realm
    public static let maxBytes = 763
    public var value: String
    public init(_ value: String) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Realm {
        Realm(try TextCodec.parse(value, type: type, maxBytes: maxBytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try TextCodec.serialize(value, into: &w, maxBytes: Realm.maxBytes)
    }
}

/// NONCE (RFC 8489 §14.10): fewer than 128 characters (at most 763 bytes), chosen by
/// the server, echoed back in requests until it answers 438 Stale Nonce.
public struct Nonce: STUNAttributeValue, Hashable, Sendable {
    public static let type = STUNAttributeType.nonce
    public static let maxBytes = 763
    public var value: String
    public init(_ value: String) { self.value = value }

    public static func parse(_ value: ByteReader, transactionID: TransactionID) throws(ICEError) -> Nonce {
        Nonce(try TextCodec.parse(value, type: type, maxBytes: maxBytes))
    }

    public func serializeValue(into w: inout ByteWriter, transactionID: TransactionID) throws(ICEError) {
        try TextCodec.serialize(value, into: &w, maxBytes: Nonce.maxBytes)
    }
}

extension STUNMessage {
    /// The long-term credential key (RFC 8489 §9.2.2): MD5(username ":" realm ":"
    /// password), the three as UTF-8 after OpaqueString processing (RFC 8265), which
    /// leaves ASCII credentials as they are; non-ASCII ones are used as given.
    public static func longTermKey(username: String, realm: String, password: String) -> [UInt8] {
        MD5.digest(Array((username + ":" + realm + ":" + password).utf8))
    }

    public var lifetime: UInt32? {
        for a in attributes { if case .lifetime(let v) = a { return v.seconds } }
        return nil
    }
    public var realm: String? {
        for a in attributes { if case .realm(let v) = a { return v.value } }
        return nil
    }
    public var nonce: String? {
        for a in attributes { if case .nonce(let v) = a { return v.value } }
        return nil
    }
    public var relayedAddress: SocketAddress? {
        for a in attributes { if case .xorRelayedAddress(let v) = a { return v.address } }
        return nil
    }
    public var peerAddress: SocketAddress? {
        for a in attributes { if case .xorPeerAddress(let v) = a { return v.address } }
        return nil
    }
    public var data: [UInt8]? {
        for a in attributes { if case .data(let v) = a { return v.bytes } }
        return nil
    }
    public var channelNumber: UInt16? {
        for a in attributes { if case .channelNumber(let v) = a { return v.value } }
        return nil
    }
    public var alternateServer: SocketAddress? {
        for a in attributes { if case .alternateServer(let v) = a { return v.address } }
        return nil
    }
}
