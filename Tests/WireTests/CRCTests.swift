import Testing
import Wire

/// Check values from the published CRC catalogue (the "check" of "123456789") and from
/// the RFCs that use each CRC.
@Suite struct CRCTests {
    let check = Array("123456789".utf8)

    @Test func crc32CheckValue() {
        #expect(CRC32.checksum(check) == 0xCBF4_3926)
        #expect(CRC32.checksum([]) == 0)
    }

    @Test func crc32cCheckValue() {
        #expect(CRC32C.checksum(check) == 0xE306_9283)
    }

    /// RFC 3720 (iSCSI) appendix B.4 gives CRC-32c results for 32-byte patterns; the
    /// register there is shown byte-swapped on the wire, so compare the integer values.
    @Test func crc32cRFC3720Vectors() {
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum((0..<32).map { UInt8($0) }) == 0x46DD_794E)
        #expect(CRC32C.checksum((0..<32).map { UInt8(31 - $0) }) == 0x113F_DB5C)
    }

    /// The CRC of a whole buffer equals the CRC continued over its two halves.
    @Test func continuingMatchesOneShot() {
        var rng = SeededRandom(seed: 99)
        let data = (0..<1000).map { _ in UInt8.random(in: 0...255, using: &rng) }
        for split in [0, 1, 500, 999, 1000] {
            data.withUnsafeBytes { raw in
                let head = UnsafeRawBufferPointer(rebasing: raw[0..<split])
                let tail = UnsafeRawBufferPointer(rebasing: raw[split...])
                #expect(CRC32.checksum(tail, continuing: CRC32.checksum(head)) == CRC32.checksum(raw))
                #expect(CRC32C.checksum(tail, continuing: CRC32C.checksum(head)) == CRC32C.checksum(raw))
            }
        }
    }

    /// RFC 5769 §2.1: the sample STUN request's FINGERPRINT is CRC-32 of the message up to
    /// the attribute, XOR 0x5354554e; the vector shows 0xe57a3bcf.
    @Test func stunFingerprintFromRFC5769() {
        let hex = """
            00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
            80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
            00 24 00 04 6e 00 01 ff 80 29 00 08 93 2f f9 b1 51 26 3b 36
            00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20 00 08 00 14
            9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
            """
        let message = Hex.decode(hex)!
        #expect(CRC32.checksum(message) ^ 0x5354_554E == 0xE57A_3BCF)
    }
}
