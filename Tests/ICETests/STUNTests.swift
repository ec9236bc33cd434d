import Testing
@testable import ICE
import Wire

// RFC 5769 §2: the three short-term-credential vectors, byte for byte from the RFC.
let rfc5769Password = "VOkJxbRl1RmTxUk/WvJxBt"

let rfc5769Request: [UInt8] = Hex.decode("""
    00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
    80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
    00 24 00 04 6e 00 01 ff
    80 29 00 08 93 2f f9 b1 51 26 3b 36
    00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20
    00 08 00 14 9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
    80 28 00 04 e5 7a 3b cf
    """)!

let rfc5769IPv4Response: [UInt8] = Hex.decode("""
    01 01 00 3c 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
    80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
    00 20 00 08 00 01 a1 47 e1 12 a6 43
    00 08 00 14 2b 91 f5 99 fd 9e 90 c3 8c 74 89 f9 2a f9 ba 53 f0 6b e7 d7
    80 28 00 04 c0 7d 4c 96
    """)!

let rfc5769IPv6Response: [UInt8] = Hex.decode("""
    01 01 00 48 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
    80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
    00 20 00 14 00 02 a1 47 01 13 a9 fa a5 d3 f1 79 bc 25 f4 b5 be d2 b9 d9
    00 08 00 14 a3 82 95 4e 4b e6 7b f1 17 84 c9 7c 82 92 c2 75 bf e3 ed 41
    80 28 00 04 c8 fb 0b 4c
    """)!

let rfc5769ID = TransactionID(0xb7e7_a701, 0xbc34_d686, 0xfa87_dfae)
let rfc5769Key = STUNMessage.shortTermKey(password: rfc5769Password)

/// Serializes with spaces as padding, as the RFC 5769 vectors are padded.
func serialize5769(_ m: STUNMessage) throws -> [UInt8] {
    var buffer = [UInt8](repeating: 0xEE, count: 200)
    let n = try buffer.withMutableBytes { (raw) throws(ICEError) -> Int in
        var w = ByteWriter(raw)
        return try m.serialize(into: &w, integrityKey: rfc5769Key, fingerprint: true, padding: 0x20)
    }
    return Array(buffer[0..<n])
}

@Suite struct RFC5769 {
    @Test func sampleRequestParses() throws {
        let m = try STUNMessage.parse(rfc5769Request)
        #expect(m.type == .bindingRequest)
        #expect(m.transactionID == rfc5769ID)
        #expect(m.software == "STUN test client")
        #expect(m.priority == 0x6e00_01ff)
        #expect(m.iceControlled == 0x932f_f9b1_5126_3b36)
        #expect(m.iceControlling == nil)
        #expect(m.username == "evtj:h6vY")
        #expect(m.fingerprint?.value == 0xe57a_3bcf)
        #expect(m.integrityOffset == 20 + 20 + 8 + 12 + 16)
        try m.verifyIntegrity(of: rfc5769Request, key: rfc5769Key)
    }

    @Test func sampleRequestSerializes() throws {
        let m = STUNMessage(type: .bindingRequest, transactionID: rfc5769ID, attributes: [
            .software(Software("STUN test client")),
            .priority(Priority(0x6e00_01ff)),
            .iceControlled(ICEControlled(tieBreaker: 0x932f_f9b1_5126_3b36)),
            .username(Username("evtj:h6vY")),
        ])
        #expect(try serialize5769(m) == rfc5769Request)
    }

    @Test func ipv4ResponseBothWays() throws {
        let m = try STUNMessage.parse(rfc5769IPv4Response)
        #expect(m.type == .bindingSuccess)
        #expect(m.software == "test vector")
        #expect(m.mappedAddress == SocketAddress("192.0.2.1:32853"))
        try m.verifyIntegrity(of: rfc5769IPv4Response, key: rfc5769Key)
        let built = STUNMessage(type: .bindingSuccess, transactionID: rfc5769ID, attributes: [
            .software(Software("test vector")),
            .xorMappedAddress(XORMappedAddress(SocketAddress("192.0.2.1:32853")!)),
        ])
        #expect(try serialize5769(built) == rfc5769IPv4Response)
        #expect(try serialize5769(m) == rfc5769IPv4Response)
    }

    @Test func ipv6ResponseBothWays() throws {
        let m = try STUNMessage.parse(rfc5769IPv6Response)
        #expect(m.type == .bindingSuccess)
        #expect(m.mappedAddress == SocketAddress("[2001:db8:1234:5678:11:2233:4455:6677]:32853"))
        try m.verifyIntegrity(of: rfc5769IPv6Response, key: rfc5769Key)
        let built = STUNMessage(type: .bindingSuccess, transactionID: rfc5769ID, attributes: [
            .software(Software("test vector")),
            .xorMappedAddress(XORMappedAddress(SocketAddress("[2001:db8:1234:5678:11:2233:4455:6677]:32853")!)),
        ])
        #expect(try serialize5769(built) == rfc5769IPv6Response)
    }

    @Test func wrongPasswordFailsIntegrity() throws {
        for vector in [rfc5769Request, rfc5769IPv4Response, rfc5769IPv6Response] {
            let m = try STUNMessage.parse(vector)
            #expect(throws: ICEError.integrityMismatch) {
                try m.verifyIntegrity(of: vector, key: STUNMessage.shortTermKey(password: "VOkJxbRl1RmTxUk/WvJxBu"))
            }
        }
    }
}

@Suite struct STUNMalformed {
    @Test func truncatedHeader() {
        #expect(throws: ICEError.truncatedHeader) { try STUNMessage.parse(Array(rfc5769Request[0..<19])) }
        #expect(throws: ICEError.truncatedHeader) { try STUNMessage.parse([]) }
    }

    @Test func everyTruncationIsAnErrorNotATrap() {
        for n in 0..<rfc5769Request.count {
            #expect(throws: ICEError.self) { try STUNMessage.parse(Array(rfc5769Request[0..<n])) }
        }
    }

    @Test func attributeLengthPastEnd() {
        var bytes = rfc5769Request
        // USERNAME (at offset 60) claims 0xff bytes.
        #expect(bytes[60] == 0x00 && bytes[61] == 0x06)
        bytes[62] = 0x00; bytes[63] = 0xff
        #expect(throws: ICEError.attributeOverrun(type: 0x0006)) { try STUNMessage.parse(bytes) }
    }

    @Test func lengthDisagreesWithDatagram() {
        var bytes = rfc5769Request
        bytes[3] = 0x54
        #expect(throws: ICEError.lengthMismatch(declared: 0x54, available: 0x58)) { try STUNMessage.parse(bytes) }
        #expect(throws: ICEError.lengthMismatch(declared: 0x58, available: 0x59)) {
            try STUNMessage.parse(rfc5769Request + [0])
        }
    }

    @Test func badCookie() {
        var bytes = rfc5769Request
        bytes[5] ^= 0x01
        #expect(throws: ICEError.badMagicCookie) { try STUNMessage.parse(bytes) }
    }

    @Test func notSTUN() {
        var bytes = rfc5769Request
        bytes[0] = 0x80
        #expect(throws: ICEError.notSTUN) { try STUNMessage.parse(bytes) }
    }

    @Test func badFingerprint() {
        var bytes = rfc5769Request
        bytes[24] ^= 0x20  // "STUN" → "sTUN" in SOFTWARE
        #expect(throws: ICEError.fingerprintMismatch) { try STUNMessage.parse(bytes) }
        var last = rfc5769IPv4Response
        last[last.count - 1] ^= 1
        #expect(throws: ICEError.fingerprintMismatch) { try STUNMessage.parse(last) }
    }

    @Test func tamperedBodyFailsIntegrityEvenWithAValidFingerprint() throws {
        var bytes = rfc5769Request
        bytes[24] ^= 0x20
        // Recompute FINGERPRINT independently: CRC-32 of everything before it, XOR "STUN".
        let fpAt = bytes.count - 8
        let crc = CRC32.checksum(Array(bytes[0..<fpAt])) ^ 0x5354_554e
        for i in 0..<4 { bytes[fpAt + 4 + i] = UInt8(truncatingIfNeeded: crc >> UInt32(24 - 8 * i)) }
        let m = try STUNMessage.parse(bytes)
        #expect(m.software == "sTUN test client")
        #expect(throws: ICEError.integrityMismatch) { try m.verifyIntegrity(of: bytes, key: rfc5769Key) }
    }

    @Test func missingIntegrity() throws {
        let bytes = try STUNMessage(type: .bindingRequest, transactionID: rfc5769ID).serialized(fingerprint: true)
        let m = try STUNMessage.parse(bytes)
        #expect(throws: ICEError.integrityMissing) { try m.verifyIntegrity(of: bytes, key: rfc5769Key) }
    }

    @Test func attributeAfterFingerprint() throws {
        var bytes = rfc5769Request + [0x80, 0x22, 0x00, 0x00]
        bytes[3] = 0x5c
        // Keep FINGERPRINT itself valid for the new length, so only the order is wrong.
        let fpAt = rfc5769Request.count - 8
        let crc = CRC32.checksum(Array(bytes[0..<fpAt])) ^ 0x5354_554e
        for i in 0..<4 { bytes[fpAt + 4 + i] = UInt8(truncatingIfNeeded: crc >> UInt32(24 - 8 * i)) }
        #expect(throws: ICEError.attributeAfterFingerprint) { try STUNMessage.parse(bytes) }
    }

    @Test func badAttributeValues() throws {
        // XOR-MAPPED-ADDRESS with family 3, PRIORITY with 3 bytes, ERROR-CODE class 7.
        let cases: [([UInt8], UInt16)] = [
            ([0x00, 0x20, 0x00, 0x08, 0x00, 0x03, 0xa1, 0x47, 0xe1, 0x12, 0xa6, 0x43], 0x0020),
            ([0x00, 0x24, 0x00, 0x03, 0x01, 0x02, 0x03, 0x00], 0x0024),
            ([0x00, 0x09, 0x00, 0x04, 0x00, 0x00, 0x07, 0x01], 0x0009),
            ([0x00, 0x20, 0x00, 0x04, 0x00, 0x01, 0xa1, 0x47], 0x0020),
        ]
        for (attribute, type) in cases {
            var bytes: [UInt8] = [0x01, 0x01, 0x00, UInt8(attribute.count), 0x21, 0x12, 0xa4, 0x42] + rfc5769ID.bytes
            bytes += attribute
            #expect(throws: ICEError.badAttribute(type: type)) { try STUNMessage.parse(bytes) }
        }
    }

    @Test func seededGarbageNeverTraps() {
        var rng = SeededRandom(seed: 5769)
        var noiseParsed = 0
        for i in 0..<20_000 {
            if i % 2 == 0 {
                let bytes = (0..<Int(rng.next() % 120)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                if (try? STUNMessage.parse(bytes)) != nil { noiseParsed += 1 }
            } else {
                // A valid vector with one to three bytes flipped: it may still parse (a flip
                // can turn FINGERPRINT into an ignored unknown attribute), but then it is
                // never both fingerprinted and authentic.
                var bytes = rfc5769IPv6Response
                for _ in 0..<(1 + Int(rng.next() % 3)) {
                    bytes[Int(rng.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
                }
                guard bytes != rfc5769IPv6Response, let m = try? STUNMessage.parse(bytes) else { continue }
                let authentic = (try? m.verifyIntegrity(of: bytes, key: rfc5769Key)) != nil
                #expect(!(authentic && m.fingerprint != nil), "\(Hex.encode(bytes))")
            }
        }
        // Noise needs two zero bits, the cookie and a consistent length to parse at all.
        #expect(noiseParsed < 5)
    }
}

@Suite struct STUNAttributesTests {
    @Test func messageTypeEncoding() {
        // RFC 8489 §5/§6: Binding request 0x0001, indication 0x0011, success 0x0101, error 0x0111.
        #expect(STUNMessageType.bindingRequest.rawValue == 0x0001)
        #expect(STUNMessageType.bindingIndication.rawValue == 0x0011)
        #expect(STUNMessageType.bindingSuccess.rawValue == 0x0101)
        #expect(STUNMessageType.bindingError.rawValue == 0x0111)
        // Allocate (0x003, RFC 8656) error response is 0x0113; method 0xFFF request is 0x3EEF.
        #expect(STUNMessageType(method: 0x003, messageClass: .errorResponse).rawValue == 0x0113)
        #expect(STUNMessageType(method: 0xFFF, messageClass: .request).rawValue == 0x3EEF)
        for raw in UInt16(0)..<0x4000 {
            #expect(STUNMessageType(rawValue: raw)?.rawValue == raw)
        }
        #expect(STUNMessageType(rawValue: 0x4001) == nil)
    }

    @Test func classifierFollowsRFC7983() {
        for b in 0...255 {
            #expect(isSTUN(firstByte: UInt8(b)) == (b < 4), "byte \(b)")
        }
    }

    @Test func errorCodeKnownAnswer() throws {
        let m = STUNMessage(type: .bindingError, transactionID: rfc5769ID, attributes: [
            .errorCode(ErrorCode(code: 487, reason: "Role Conflict")),
            .unknownAttributes(UnknownAttributes([0x0031, 0x7fff, 0x0002])),
        ])
        let bytes = try m.serialized()
        // ERROR-CODE: type 0009, length 4+13, class 4, number 87, reason, 3 bytes padding.
        let expected: [UInt8] = [0x00, 0x09, 0x00, 0x11, 0x00, 0x00, 0x04, 0x57] + Array("Role Conflict".utf8) + [0, 0, 0]
        #expect(Array(bytes[20..<(20 + expected.count)]) == expected)
        // UNKNOWN-ATTRIBUTES: 6 bytes of value, 2 of padding.
        #expect(Array(bytes[(20 + expected.count)...]) == [0x00, 0x0a, 0x00, 0x06, 0x00, 0x31, 0x7f, 0xff, 0x00, 0x02, 0, 0])
        let back = try STUNMessage.parse(bytes)
        #expect(back == m)
        #expect(back.errorCode?.code == 487)
    }

    @Test func roundTripsAllAttributes() throws {
        let m = STUNMessage(type: .bindingRequest, transactionID: TransactionID(1, 2, 3), attributes: [
            .mappedAddress(MappedAddress(SocketAddress("10.0.0.1:9")!)),
            .xorMappedAddress(XORMappedAddress(SocketAddress("[fe80::1]:65535")!)),
            .username(Username("a/b:c+d")),
            .priority(Priority(0xFFFF_FFFF)),
            .useCandidate,
            .iceControlling(ICEControlling(tieBreaker: 0x0102_0304_0506_0708)),
            .software(Software("linnet")),
        ])
        let key = STUNMessage.shortTermKey(password: "pw")
        let bytes = try m.serialized(integrityKey: key, fingerprint: true)
        #expect(bytes.count % 4 == 0)
        let back = try STUNMessage.parse(bytes)
        #expect(back.attributes == m.attributes)
        try back.verifyIntegrity(of: bytes, key: key)
        #expect(back.fingerprint != nil)
        // Re-serializing the parsed message reproduces the bytes.
        #expect(try back.serialized(integrityKey: key, fingerprint: true) == bytes)
    }

    @Test func unknownAttributesSkippedOrListed() throws {
        // 0x8055 optional (skipped), 0x0055 required (listed), both with 3-byte values.
        let bytes: [UInt8] = [0x00, 0x01, 0x00, 0x18, 0x21, 0x12, 0xa4, 0x42] + rfc5769ID.bytes
            + [0x80, 0x55, 0x00, 0x03, 1, 2, 3, 0]
            + [0x00, 0x55, 0x00, 0x03, 1, 2, 3, 0]
            + [0x00, 0x24, 0x00, 0x04, 0, 0, 0, 7]
        let m = try STUNMessage.parse(bytes)
        #expect(m.attributes == [.priority(Priority(7))])
        #expect(m.unknownRequired == [0x0055])
    }

    @Test func attributesAfterIntegrityIgnored() throws {
        // RFC 8489 §14.5: a PRIORITY after MESSAGE-INTEGRITY is not trusted.
        var bytes = Array(rfc5769IPv4Response[0..<(rfc5769IPv4Response.count - 8)])
        bytes += [0x00, 0x24, 0x00, 0x04, 0, 0, 0, 7]
        bytes[3] = UInt8(bytes.count - 20)
        let m = try STUNMessage.parse(bytes)
        #expect(m.priority == nil)
        try m.verifyIntegrity(of: bytes, key: rfc5769Key)
    }

    @Test func smallBufferIsAnError() {
        let m = STUNMessage(type: .bindingRequest, transactionID: rfc5769ID, attributes: [.username(Username("evtj:h6vY"))])
        var buffer = [UInt8](repeating: 0, count: 30)
        #expect(throws: ICEError.bufferTooSmall) {
            try buffer.withMutableBytes { (raw) throws(ICEError) in
                var w = ByteWriter(raw)
                try m.serialize(into: &w)
            }
        }
    }
}
