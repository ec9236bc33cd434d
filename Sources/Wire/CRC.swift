/// CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320) as STUN's FINGERPRINT uses it
/// (RFC 8489 §14.7, XORed with 0x5354554e there), and CRC-32c (Castagnoli, reflected
/// polynomial 0x82F63B78) as SCTP's checksum (RFC 9260 appendix A).
///
/// Table-driven, one byte a step; the tables are built once and shared.
public enum CRC32 {
    @usableFromInline
    static let table: [UInt32] = makeTable(polynomial: 0xEDB8_8320)

    /// The CRC-32 of `bytes`, continuing from `crc` (pass the previous result to chain).
    @inlinable
    public static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        update(table: table, crc: crc, bytes)
    }

    public static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}

public enum CRC32C {
    @usableFromInline
    static let table: [UInt32] = makeTable(polynomial: 0x82F6_3B78)

    /// The CRC-32c of `bytes`, continuing from `crc`.
    @inlinable
    public static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        update(table: table, crc: crc, bytes)
    }

    public static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}

@usableFromInline
func makeTable(polynomial: UInt32) -> [UInt32] {
    var table = [UInt32](repeating: 0, count: 256)
    for i in 0..<256 {
        var c = UInt32(i)
        for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ polynomial : c >> 1 }
        table[i] = c
    }
    return table
}

@usableFromInline
func update(table: [UInt32], crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
    var c = ~crc
    table.withUnsafeBufferPointer { t in
        for b in bytes {
            c = t[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8)
        }
    }
    return ~c
}
