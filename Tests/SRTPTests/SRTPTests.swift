import Testing
import CMbedTLS
import Wire
@testable import SRTP

/// An independent SRTP reference built in the test from mbedtls' AES and HMAC-SHA1,
/// following RFC 3711 directly: the key derivation of §4.3.1, AES counter mode of
/// §4.1.1 and the HMAC-SHA1-80 tag of §4.2.1. Checked first against the RFC's own
/// appendix B vectors, then used to check libsrtp's output byte for byte.
enum Reference {
    static func aesBlock(key: [UInt8], _ input: [UInt8]) -> [UInt8] {
        var ctx = mbedtls_aes_context()
        mbedtls_aes_init(&ctx)
        defer { mbedtls_aes_free(&ctx) }
        _ = mbedtls_aes_setkey_enc(&ctx, key, 128)
        var out = [UInt8](repeating: 0, count: 16)
        _ = mbedtls_aes_crypt_ecb(&ctx, MBEDTLS_AES_ENCRYPT, input, &out)
        return out
    }

    /// AES-CM keystream (§4.1.1): block i is AES(key, IV + i), IV 128 bits.
    static func keystream(key: [UInt8], iv: [UInt8], count: Int) -> [UInt8] {
        var out: [UInt8] = []
        var counter = iv
        while out.count < count {
            out += aesBlock(key: key, counter)
            var i = 15
            while i >= 0 { counter[i] &+= 1; if counter[i] != 0 { break }; i -= 1 }
        }
        return Array(out[0..<count])
    }

    /// §4.3.1 with key_derivation_rate 0: x = label << 48 XOR master salt, the IV is
    /// x * 2^16, and the key is the AES-CM keystream under the master key.
    static func derive(masterKey: [UInt8], masterSalt: [UInt8], label: UInt8, count: Int) -> [UInt8] {
        var iv = masterSalt + [0, 0]
        iv[7] ^= label
        return keystream(key: masterKey, iv: iv, count: count)
    }

    static func hmacSHA1(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        _ = mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA1), key, key.count, message, message.count, &out)
        return out
    }

    /// SRTP-protects a plain RTP packet (12-byte header, no CSRC or extension) sent with
    /// rollover counter `roc` (§3.3).
    static func protect(_ packet: [UInt8], masterKey: [UInt8], masterSalt: [UInt8], roc: UInt32) -> [UInt8] {
        let sessionKey = derive(masterKey: masterKey, masterSalt: masterSalt, label: 0, count: 16)
        let authKey = derive(masterKey: masterKey, masterSalt: masterSalt, label: 1, count: 20)
        let sessionSalt = derive(masterKey: masterKey, masterSalt: masterSalt, label: 2, count: 14)
        let seq = UInt64(packet[2]) << 8 | UInt64(packet[3])
        let index = UInt64(roc) << 16 | seq
        // IV = (salt * 2^16) XOR (SSRC * 2^64) XOR (index * 2^16)  (§4.1.1)
        var iv = sessionSalt + [0, 0]
        for i in 0..<4 { iv[4 + i] ^= packet[8 + i] }
        for i in 0..<6 { iv[8 + i] ^= UInt8(truncatingIfNeeded: index >> UInt64(40 - 8 * i)) }
        let payload = Array(packet[12...])
        let stream = keystream(key: sessionKey, iv: iv, count: payload.count)
        let encrypted = Array(packet[0..<12]) + zip(payload, stream).map { $0 ^ $1 }
        let rocBytes = [UInt8(truncatingIfNeeded: roc >> 24), UInt8(truncatingIfNeeded: roc >> 16),
                        UInt8(truncatingIfNeeded: roc >> 8), UInt8(truncatingIfNeeded: roc)]
        let tag = hmacSHA1(key: authKey, encrypted + rocBytes)
        return encrypted + tag[0..<10]
    }
}

@Suite struct SRTPTests {
    /// RFC 3711 appendix B.2: AES-CM keystream for the given session key and salt.
    @Test func referenceMatchesRFC3711AppendixB2() {
        let key = Hex.decode("2B7E151628AED2A6ABF7158809CF4F3C")!
        let iv = Hex.decode("F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000")!
        let stream = Reference.keystream(key: key, iv: iv, count: 48)
        #expect(Hex.encode(stream) == "e03ead0935c95e80e166b16dd92b4eb4d23513162b02d0f72a43a2fe4a5f97ab"
                                     + "41e95b3bb0a2e8dd477901e4fca894c0")
    }

    /// RFC 3711 appendix B.3: key derivation from the sample master key and salt.
    @Test func referenceMatchesRFC3711AppendixB3() {
        let masterKey = Hex.decode("E1F97A0D3E018BE0D64FA32C06DE4139")!
        let masterSalt = Hex.decode("0EC675AD498AFEEBB6960B3AABE6")!
        #expect(Hex.encode(Reference.derive(masterKey: masterKey, masterSalt: masterSalt, label: 0, count: 16))
                == "c61e7a93744f39ee10734afe3ff7a087")
        #expect(Hex.encode(Reference.derive(masterKey: masterKey, masterSalt: masterSalt, label: 2, count: 14))
                == "30cbbc08863d8c85d49db34a9ae1")
        #expect(Hex.encode(Reference.derive(masterKey: masterKey, masterSalt: masterSalt, label: 1, count: 20))
                == "cebe321f6ff7716b6fd4ab49af256a156d38baa4")
    }

    /// libsrtp's protected packets equal the reference's, byte for byte, across a
    /// sequence-number wrap (where the rollover counter moves to 1).
    @Test func libsrtpMatchesTheReference() throws {
        let masterKey = Hex.decode("E1F97A0D3E018BE0D64FA32C06DE4139")!
        let masterSalt = Hex.decode("0EC675AD498AFEEBB6960B3AABE6")!
        let sender = try SRTPContext(direction: .outbound, masterKey: masterKey, masterSalt: masterSalt)
        var rng = SeededRandom(seed: 3711)
        var seq: UInt16 = 65_530
        var roc: UInt32 = 0
        for n in 0..<12 {
            var packet: [UInt8] = [0x80, 0x6F, UInt8(seq >> 8), UInt8(seq & 0xFF), 0, 0, UInt8(n), 0, 0xCA, 0xFE, 0xBA, 0xBE]
            packet += (0..<(20 + n * 7)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var buffer = packet + [UInt8](repeating: 0, count: SRTPContext.rtpOverhead)
            let length = try buffer.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in try sender.protectRTP(b, length: packet.count) }
            let expected = Reference.protect(packet, masterKey: masterKey, masterSalt: masterSalt, roc: roc)
            #expect(Array(buffer[0..<length]) == expected, "packet \(n), seq \(seq)")
            seq &+= 1
            if seq == 0 { roc += 1 }
        }
    }

    @Test func roundTripTamperAndReplay() throws {
        let key = [UInt8](repeating: 7, count: 16), salt = [UInt8](repeating: 9, count: 14)
        let tx = try SRTPContext(direction: .outbound, masterKey: key, masterSalt: salt)
        let rx = try SRTPContext(direction: .inbound, masterKey: key, masterSalt: salt)
        let packet: [UInt8] = [0x80, 111, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4] + Array(repeating: 0x55, count: 40)
        var wire = packet + [UInt8](repeating: 0, count: 10)
        let n = try wire.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in try tx.protectRTP(b, length: packet.count) }
        wire = Array(wire[0..<n])

        for position in [0, 5, 12, 30, n - 1] {  // header, payload and tag bits all covered
            var forged = wire
            forged[position] ^= 0x80
            #expect(throws: SRTPError.self) {
                try forged.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in _ = try rx.unprotectRTP(b, length: b.count) }
            }
        }
        var good = wire
        let m = try good.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in try rx.unprotectRTP(b, length: b.count) }
        #expect(Array(good[0..<m]) == packet)
        var again = wire
        #expect(throws: SRTPError.replay) {
            try again.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in _ = try rx.unprotectRTP(b, length: b.count) }
        }
        var short: [UInt8] = [0x80, 111, 0]
        #expect(throws: SRTPError.self) {
            try short.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in _ = try rx.unprotectRTP(b, length: b.count) }
        }
    }

    @Test func rtcpRoundTrip() throws {
        let key = [UInt8](repeating: 1, count: 16), salt = [UInt8](repeating: 2, count: 14)
        let tx = try SRTPContext(direction: .outbound, masterKey: key, masterSalt: salt)
        let rx = try SRTPContext(direction: .inbound, masterKey: key, masterSalt: salt)
        // An RTCP receiver report with no report blocks (RFC 3550 §6.4.2).
        let rr: [UInt8] = [0x80, 201, 0, 1, 0xDE, 0xAD, 0xBE, 0xEF]
        var wire = rr + [UInt8](repeating: 0, count: SRTPContext.rtcpOverhead)
        let n = try wire.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in try tx.protectRTCP(b, length: rr.count) }
        #expect(n == rr.count + 14)
        var back = Array(wire[0..<n])
        let m = try back.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in try rx.unprotectRTCP(b, length: b.count) }
        #expect(Array(back[0..<m]) == rr)
    }

    @Test func badKeysAndSmallBuffers() throws {
        #expect(throws: SRTPError.badKeyLength) { try SRTPContext(direction: .outbound, masterKey: [1], masterSalt: [2]) }
        let tx = try SRTPContext(direction: .outbound, masterKey: [UInt8](repeating: 0, count: 16), masterSalt: [UInt8](repeating: 0, count: 14))
        var tight = [UInt8](repeating: 0, count: 20)
        tight[0] = 0x80
        #expect(throws: SRTPError.noSpace) {
            try tight.withMutableBytes { (b: UnsafeMutableRawBufferPointer) throws(SRTPError) in _ = try tx.protectRTP(b, length: 20) }
        }
    }
}
