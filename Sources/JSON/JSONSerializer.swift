/// Compact JSON output (RFC 8259): no white space, members in their stored order.
///
/// Strings: `"` and `\` escaped, control characters as `\b \f \n \r \t` or `\u00XX`,
/// everything else (including `/`, DEL and non-ASCII) written as raw UTF-8, which a
/// Swift `String` always is. Numbers: the exact integer when there is one, else the
/// shortest digits that round-trip (`Double.description`); NaN and infinities, which
/// JSON cannot express, become `null`; `-0` stays `-0`.
enum JSONSerializer {
    static let hexDigits: StaticString = "0123456789abcdef"

    static func append(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: appendASCII("null", to: &out)
        case .bool(let b): appendASCII(b ? "true" : "false", to: &out)
        case .number(let n): appendNumber(n, to: &out)
        case .string(let s): appendString(s, to: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                append(v, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (i, m) in o.members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                appendString(m.key, to: &out)
                out.append(UInt8(ascii: ":"))
                append(m.value, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func appendASCII(_ s: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): appendASCII("\\\"", to: &out)
            case UInt8(ascii: "\\"): appendASCII("\\\\", to: &out)
            case 0x08: appendASCII("\\b", to: &out)
            case 0x0C: appendASCII("\\f", to: &out)
            case 0x0A: appendASCII("\\n", to: &out)
            case 0x0D: appendASCII("\\r", to: &out)
            case 0x09: appendASCII("\\t", to: &out)
            case 0x00..<0x20:
                appendASCII("\\u00", to: &out)
                out.append(hexDigits.utf8Start[Int(b >> 4)])
                out.append(hexDigits.utf8Start[Int(b & 0xF)])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    static func appendNumber(_ n: JSONNumber, to out: inout [UInt8]) {
        if let i = n.int64 {
            if i == 0 && n.double.sign == .minus {
                appendASCII("-0", to: &out)
            } else {
                appendInteger(i, to: &out)
            }
            return
        }
        guard n.double.isFinite else {
            appendASCII("null", to: &out)
            return
        }
        // Swift prints the shortest round-trip digits: "0.1", "1e+300", "5e-324",
        // "1.2345678901234567e-05"; all are valid JSON number syntax.
        out.append(contentsOf: n.double.description.utf8)
    }

    static func appendInteger(_ v: Int64, to out: inout [UInt8]) {
        var magnitude = v.magnitude
        if v < 0 { out.append(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0) // 20 digits max, in a fixed buffer
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(ascii: "0") &+ UInt8(magnitude % 10)
                magnitude /= 10
                count &+= 1
            } while magnitude > 0
            for k in stride(from: count &- 1, through: 0, by: -1) { out.append(buffer[k]) }
        }
    }
}

extension JSONValue {
    /// Compact JSON bytes (UTF-8).
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        JSONSerializer.append(self, to: &out)
        return out
    }

    /// Appends compact JSON to `out` (reuse one buffer for a stream of events).
    public func serialize(into out: inout [UInt8]) {
        JSONSerializer.append(self, to: &out)
    }

    /// Compact JSON text.
    public func serializedString() -> String {
        String(decoding: serialized(), as: UTF8.self)
    }
}
