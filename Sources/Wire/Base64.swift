/// Base64 with the standard alphabet and `=` padding (RFC 4648 §4), as RFC 7469 pins
/// use. (The CMbedTLS shim does not expose mbedtls' base64.h, and this is a few lines.)
public enum Base64 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let n = min(3, bytes.count - i)
            let b0 = UInt32(bytes[i])
            let b1 = n > 1 ? UInt32(bytes[i + 1]) : 0
            let b2 = n > 2 ? UInt32(bytes[i + 2]) : 0
            let v = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(v >> 18 & 63)])
            out.append(alphabet[Int(v >> 12 & 63)])
            out.append(n > 1 ? alphabet[Int(v >> 6 & 63)] : 61)
            out.append(n > 2 ? alphabet[Int(v & 63)] : 61)
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// nil unless `text` is canonical padded base64 (length a multiple of 4, padding
    /// only at the end, unused bits zero).
    public static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        var i = 0
        while i < input.count {
            var v: UInt32 = 0
            var pad = 0
            for j in 0..<4 {
                let c = input[i + j]
                let d: UInt32
                switch c {
                case 65...90: d = UInt32(c - 65)
                case 97...122: d = UInt32(c - 97 + 26)
                case 48...57: d = UInt32(c - 48 + 52)
                case 43: d = 62
                case 47: d = 63
                case 61:
                    // '=' only in the last group's last two places.
                    guard i + 4 == input.count, j >= 2 else { return nil }
                    d = 0
                    pad += 1
                default: return nil
                }
                if pad > 0 && c != 61 { return nil }
                v = v << 6 | d
            }
            out.append(UInt8(v >> 16 & 0xFF))
            if pad < 2 { out.append(UInt8(v >> 8 & 0xFF)) } else if v >> 8 & 0xFF != 0 { return nil }
            if pad < 1 { out.append(UInt8(v & 0xFF)) } else if v & 0xFF != 0 { return nil }
            i += 4
        }
        return out
    }
}
