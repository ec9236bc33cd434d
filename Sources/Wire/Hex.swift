/// Hexadecimal text for bytes: lowercase runs for logs and test vectors, and the
/// colon-separated uppercase form SDP fingerprints use (RFC 8122 §5).
public enum Hex {
    @usableFromInline static let digits: [UInt8] = Array("0123456789abcdef".utf8)
    @usableFromInline static let upperDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// `"00ff10"` for `[0x00, 0xff, 0x10]`.
    public static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func encode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { encode($0) }
    }

    /// `"00:FF:10"`: the SDP `a=fingerprint` form.
    public static func fingerprint(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3)
        for (i, b) in bytes.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ":")) }
            out.append(upperDigits[Int(b >> 4)])
            out.append(upperDigits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Bytes from hex text; white space and colons between byte pairs are ignored.
    /// Returns nil for an odd digit count or a character that is not a hex digit.
    public static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var high: UInt8? = nil
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c &- UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c &- UInt8(ascii: "a") &+ 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c &- UInt8(ascii: "A") &+ 10
            case UInt8(ascii: " "), UInt8(ascii: ":"), UInt8(ascii: "\n"), UInt8(ascii: "\t"):
                if high != nil { return nil }
                continue
            default: return nil
            }
            if let h = high {
                out.append(h << 4 | v)
                high = nil
            } else {
                high = v
            }
        }
        return high == nil ? out : nil
    }
}

/// The text in a NUL-terminated C character buffer (`CChar` is signed on x86_64 and
/// unsigned on arm64, hence generic); invalid UTF-8 is repaired.
public func stringFromCBuffer<T: BinaryInteger>(_ buffer: [T]) -> String {
    var bytes: [UInt8] = []
    for c in buffer {
        if c == 0 { break }
        bytes.append(UInt8(truncatingIfNeeded: c))
    }
    return String(decoding: bytes, as: UTF8.self)
}
