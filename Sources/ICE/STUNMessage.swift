import Wire

/// A STUN attribute this module understands, in the form `STUNMessage` keeps in wire
/// order. MESSAGE-INTEGRITY and FINGERPRINT are not here: they are computed when
/// serializing and recorded separately when parsing.
public enum STUNAttribute: Hashable, Sendable {
    case mappedAddress(MappedAddress)
    case xorMappedAddress(XORMappedAddress)
    case username(Username)
    case errorCode(ErrorCode)
    case unknownAttributes(UnknownAttributes)
    case priority(Priority)
    case useCandidate
    case iceControlled(ICEControlled)
    case iceControlling(ICEControlling)
    case software(Software)
    // TURN (RFC 8656 §18) and long-term credentials (RFC 8489 §14.9–14.10).
    case channelNumber(ChannelNumber)
    case lifetime(Lifetime)
    case xorPeerAddress(XORPeerAddress)
    case data(DataAttribute)
    case xorRelayedAddress(XORRelayedAddress)
    case requestedAddressFamily(RequestedAddressFamily)
    case requestedTransport(RequestedTransport)
    case dontFragment
    case realm(Realm)
    case nonce(Nonce)
    case alternateServer(AlternateServer)
}

/// A STUN message (RFC 8489 §5, §14): header plus attributes.
///
/// `parse` checks the framing (cookie, lengths, 4-byte padding), decodes known attributes,
/// skips unknown comprehension-optional ones, lists unknown comprehension-required ones in
/// `unknownRequired` (the receiver of a request answers 420 with them, RFC 8489 §6.3.1),
/// ignores everything after MESSAGE-INTEGRITY except FINGERPRINT (§14.5), and verifies
/// FINGERPRINT when present (§14.7). MESSAGE-INTEGRITY needs the key, so it is checked
/// afterwards with `verifyIntegrity(of:key:)`.
public struct STUNMessage: Hashable, Sendable {
    public var type: STUNMessageType
    public var transactionID: TransactionID
    /// Attributes in wire order, without MESSAGE-INTEGRITY and FINGERPRINT.
    public var attributes: [STUNAttribute]

    /// MESSAGE-INTEGRITY as received (parse only).
    public private(set) var integrity: MessageIntegrity?
    /// Offset of the MESSAGE-INTEGRITY attribute header in the parsed bytes.
    public private(set) var integrityOffset: Int?
    /// FINGERPRINT as received (parse only; already verified).
    public private(set) var fingerprint: Fingerprint?
    /// Unknown comprehension-required attribute types, in order of appearance.
    public private(set) var unknownRequired: [UInt16] = []

    public init(type: STUNMessageType, transactionID: TransactionID, attributes: [STUNAttribute] = []) {
        self.type = type
        self.transactionID = transactionID
        self.attributes = attributes
    }

    // MARK: Parse

    /// Parses one whole datagram.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(ICEError) -> STUNMessage {
        var r = ByteReader(bytes)
        let header = try STUNHeader.parse(&r)
        let declared = Int(header.length)
        guard declared % 4 == 0, declared == r.remaining else {
            throw .lengthMismatch(declared: declared, available: r.remaining)
        }
        var m = STUNMessage(type: header.type, transactionID: header.transactionID)
        let id = header.transactionID
        while !r.isAtEnd {
            let attributeStart = r.offset
            let (type, length) = try wire(.attributeOverrun(type: 0)) { () throws(WireError) -> (UInt16, Int) in
                (try r.readUInt16(), Int(try r.readUInt16()))
            }
            let padded = (length + 3) & ~3
            guard padded <= r.remaining else { throw .attributeOverrun(type: type) }
            let value = try wire(.attributeOverrun(type: type)) { () throws(WireError) in try r.subReader(length) }
            try wire(.attributeOverrun(type: type)) { () throws(WireError) in try r.skip(padded - length) }

            if m.fingerprint != nil { throw .attributeAfterFingerprint }
            if type == STUNAttributeType.fingerprint {
                let fp = try Fingerprint.parse(value, transactionID: id)
                let expected = Fingerprint.compute(UnsafeRawBufferPointer(rebasing: bytes[0..<attributeStart]))
                guard fp.value == expected else { throw .fingerprintMismatch }
                m.fingerprint = fp
                continue
            }
            // RFC 8489 §14.5: attributes after MESSAGE-INTEGRITY (other than FINGERPRINT
            // and MESSAGE-INTEGRITY-SHA256) are ignored.
            if m.integrity != nil { continue }
            switch type {
            case STUNAttributeType.messageIntegrity:
                m.integrity = try MessageIntegrity.parse(value, transactionID: id)
                m.integrityOffset = attributeStart
            case MappedAddress.type: m.attributes.append(.mappedAddress(try .parse(value, transactionID: id)))
            case XORMappedAddress.type: m.attributes.append(.xorMappedAddress(try .parse(value, transactionID: id)))
            case Username.type: m.attributes.append(.username(try .parse(value, transactionID: id)))
            case ErrorCode.type: m.attributes.append(.errorCode(try .parse(value, transactionID: id)))
            case UnknownAttributes.type: m.attributes.append(.unknownAttributes(try .parse(value, transactionID: id)))
            case Priority.type: m.attributes.append(.priority(try .parse(value, transactionID: id)))
            case UseCandidate.type:
                _ = try UseCandidate.parse(value, transactionID: id)
                m.attributes.append(.useCandidate)
            case ICEControlled.type: m.attributes.append(.iceControlled(try .parse(value, transactionID: id)))
            case ICEControlling.type: m.attributes.append(.iceControlling(try .parse(value, transactionID: id)))
            case Software.type: m.attributes.append(.software(try .parse(value, transactionID: id)))
            case ChannelNumber.type: m.attributes.append(.channelNumber(try .parse(value, transactionID: id)))
            case Lifetime.type: m.attributes.append(.lifetime(try .parse(value, transactionID: id)))
            case XORPeerAddress.type: m.attributes.append(.xorPeerAddress(try .parse(value, transactionID: id)))
            case DataAttribute.type: m.attributes.append(.data(try .parse(value, transactionID: id)))
            case XORRelayedAddress.type: m.attributes.append(.xorRelayedAddress(try .parse(value, transactionID: id)))
            case RequestedAddressFamily.type: m.attributes.append(.requestedAddressFamily(try .parse(value, transactionID: id)))
            case RequestedTransport.type: m.attributes.append(.requestedTransport(try .parse(value, transactionID: id)))
            case DontFragment.type:
                _ = try DontFragment.parse(value, transactionID: id)
                m.attributes.append(.dontFragment)
            case Realm.type: m.attributes.append(.realm(try .parse(value, transactionID: id)))
            case Nonce.type: m.attributes.append(.nonce(try .parse(value, transactionID: id)))
            case AlternateServer.type: m.attributes.append(.alternateServer(try .parse(value, transactionID: id)))
            default:
                if STUNAttributeType.isComprehensionRequired(type) { m.unknownRequired.append(type) }
            }
        }
        return m
    }

    public static func parse(_ bytes: [UInt8]) throws(ICEError) -> STUNMessage {
        try bytes.withBytes { (raw) throws(ICEError) in try parse(raw) }
    }

    /// Checks MESSAGE-INTEGRITY of the bytes this message was parsed from: HMAC-SHA1 keyed
    /// with `key` over the header (length rewritten to end just after MESSAGE-INTEGRITY,
    /// RFC 8489 §14.5) and the attributes before it.
    public func verifyIntegrity(of bytes: UnsafeRawBufferPointer, key: [UInt8]) throws(ICEError) {
        guard let integrity, let offset = integrityOffset else { throw .integrityMissing }
        guard offset >= STUNHeader.size, offset <= bytes.count else { throw .integrityMissing }
        var header = Array(UnsafeRawBufferPointer(rebasing: bytes[0..<STUNHeader.size]))
        let adjusted = offset + 4 + MessageIntegrity.size - STUNHeader.size
        header[2] = UInt8(truncatingIfNeeded: adjusted >> 8)
        header[3] = UInt8(truncatingIfNeeded: adjusted)
        let body = UnsafeRawBufferPointer(rebasing: bytes[STUNHeader.size..<offset])
        let expected = try HMACSHA1.compute(key: key, header: header, body: body)
        guard HMACSHA1.equal(expected, integrity.hmac) else { throw .integrityMismatch }
    }

    public func verifyIntegrity(of bytes: [UInt8], key: [UInt8]) throws(ICEError) {
        try bytes.withBytes { (raw) throws(ICEError) in try verifyIntegrity(of: raw, key: key) }
    }

    /// The short-term credential key (RFC 8489 §9.1.1): the password's UTF-8 bytes after
    /// OpaqueString processing, which leaves ICE passwords (ice-char only) unchanged.
    public static func shortTermKey(password: String) -> [UInt8] { Array(password.utf8) }

    // MARK: Serialize

    /// Writes the message at the writer's position: header, attributes, then
    /// MESSAGE-INTEGRITY when `integrityKey` is given and FINGERPRINT when asked.
    /// `padding` is the byte used to pad attribute values to 4 bytes (RFC 8489 §14 allows
    /// any; RFC 5769's vectors use spaces). Returns the number of bytes written.
    @discardableResult
    public func serialize(into w: inout ByteWriter, integrityKey: [UInt8]? = nil, fingerprint: Bool = false,
                          padding: UInt8 = 0) throws(ICEError) -> Int {
        let base = w.count
        try STUNHeader(type: type, length: 0, transactionID: transactionID).serialize(into: &w)
        for a in attributes {
            switch a {
            case .mappedAddress(let v): try write(v, into: &w, padding: padding)
            case .xorMappedAddress(let v): try write(v, into: &w, padding: padding)
            case .username(let v): try write(v, into: &w, padding: padding)
            case .errorCode(let v): try write(v, into: &w, padding: padding)
            case .unknownAttributes(let v): try write(v, into: &w, padding: padding)
            case .priority(let v): try write(v, into: &w, padding: padding)
            case .useCandidate: try write(UseCandidate(), into: &w, padding: padding)
            case .iceControlled(let v): try write(v, into: &w, padding: padding)
            case .iceControlling(let v): try write(v, into: &w, padding: padding)
            case .software(let v): try write(v, into: &w, padding: padding)
            case .channelNumber(let v): try write(v, into: &w, padding: padding)
            case .lifetime(let v): try write(v, into: &w, padding: padding)
            case .xorPeerAddress(let v): try write(v, into: &w, padding: padding)
            case .data(let v): try write(v, into: &w, padding: padding)
            case .xorRelayedAddress(let v): try write(v, into: &w, padding: padding)
            case .requestedAddressFamily(let v): try write(v, into: &w, padding: padding)
            case .requestedTransport(let v): try write(v, into: &w, padding: padding)
            case .dontFragment: try write(DontFragment(), into: &w, padding: padding)
            case .realm(let v): try write(v, into: &w, padding: padding)
            case .nonce(let v): try write(v, into: &w, padding: padding)
            case .alternateServer(let v): try write(v, into: &w, padding: padding)
            }
        }
        if let key = integrityKey {
            try setLength(w.count - base - STUNHeader.size + 4 + MessageIntegrity.size, at: base, in: &w)
            let hmac = try HMACSHA1.compute(key: key, UnsafeRawBufferPointer(rebasing: w.written[base...]))
            try write(MessageIntegrity(hmac: hmac), into: &w, padding: padding)
        }
        if fingerprint {
            try setLength(w.count - base - STUNHeader.size + 8, at: base, in: &w)
            let crc = Fingerprint.compute(UnsafeRawBufferPointer(rebasing: w.written[base...]))
            try write(Fingerprint(crc), into: &w, padding: padding)
        }
        try setLength(w.count - base - STUNHeader.size, at: base, in: &w)
        return w.count - base
    }

    /// The serialized message in a fresh array (for the agent, where messages are few).
    public func serialized(integrityKey: [UInt8]? = nil, fingerprint: Bool = false) throws(ICEError) -> [UInt8] {
        // Room for the header, MESSAGE-INTEGRITY, FINGERPRINT and every attribute; a
        // Send indication's DATA (RFC 8656 §11) may carry a whole 1200-byte packet.
        var size = 128
        for a in attributes {
            switch a {
            case .data(let d): size += d.bytes.count + 8
            case .username(let u): size += u.value.utf8.count + 8
            case .realm(let r): size += r.value.utf8.count + 8
            case .nonce(let n): size += n.value.utf8.count + 8
            case .software(let s): size += s.value.utf8.count + 8
            case .errorCode(let e): size += e.reason.utf8.count + 12
            case .unknownAttributes(let u): size += u.types.count * 2 + 8
            default: size += 28
            }
        }
        var buffer = [UInt8](repeating: 0, count: size)
        let n = try buffer.withMutableBytes { (raw) throws(ICEError) -> Int in
            var w = ByteWriter(raw)
            return try serialize(into: &w, integrityKey: integrityKey, fingerprint: fingerprint)
        }
        buffer.removeLast(buffer.count - n)
        return buffer
    }

    private func setLength(_ length: Int, at base: Int, in w: inout ByteWriter) throws(ICEError) {
        guard length <= 0xFFFF else { throw .unencodable }
        try wire(.bufferTooSmall) { () throws(WireError) in try w.patchUInt16(UInt16(length), at: base + 2) }
    }

    private func write<A: STUNAttributeValue>(_ a: A, into w: inout ByteWriter, padding: UInt8) throws(ICEError) {
        let start = w.count
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.writeUInt16(A.type)
            try w.writeUInt16(0)
        }
        try a.serializeValue(into: &w, transactionID: transactionID)
        let length = w.count - start - 4
        guard length <= 0xFFFF else { throw .unencodable }
        try wire(.bufferTooSmall) { () throws(WireError) in
            try w.patchUInt16(UInt16(length), at: start + 2)
            while (w.count - start) % 4 != 0 { try w.writeUInt8(padding) }
        }
    }

    // MARK: Accessors

    public var username: String? {
        for a in attributes { if case .username(let v) = a { return v.value } }
        return nil
    }
    public var priority: UInt32? {
        for a in attributes { if case .priority(let v) = a { return v.value } }
        return nil
    }
    public var useCandidate: Bool {
        for a in attributes { if case .useCandidate = a { return true } }
        return false
    }
    public var iceControlling: UInt64? {
        for a in attributes { if case .iceControlling(let v) = a { return v.tieBreaker } }
        return nil
    }
    public var iceControlled: UInt64? {
        for a in attributes { if case .iceControlled(let v) = a { return v.tieBreaker } }
        return nil
    }
    /// XOR-MAPPED-ADDRESS, or MAPPED-ADDRESS from an RFC 3489 server.
    public var mappedAddress: SocketAddress? {
        for a in attributes { if case .xorMappedAddress(let v) = a { return v.address } }
        for a in attributes { if case .mappedAddress(let v) = a { return v.address } }
        return nil
    }
    public var errorCode: ErrorCode? {
        for a in attributes { if case .errorCode(let v) = a { return v } }
        return nil
    }
    public var software: String? {
        for a in attributes { if case .software(let v) = a { return v.value } }
        return nil
    }
}
