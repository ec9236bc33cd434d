// Byte-level text helpers. SDP is ASCII apart from free text (RFC 8866 §5), so the
// parser works on UTF-8 bytes and compares case-insensitively in ASCII only; this
// keeps Unicode tables out of the Embedded build and makes every step bounds-checked.

@inline(__always)
func isSpace(_ b: UInt8) -> Bool { b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") }

@inline(__always)
func asciiLower(_ b: UInt8) -> UInt8 {
    (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) ? b | 0x20 : b
}

func string(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }

func trimSpaces(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    var s = bytes
    while let f = s.first, isSpace(f) { s = s.dropFirst() }
    while let l = s.last, isSpace(l) { s = s.dropLast() }
    return s
}

/// Splits on a separator byte; empty pieces are kept.
func splitBytes(_ bytes: [UInt8], on separator: UInt8) -> [ArraySlice<UInt8>] {
    var out: [ArraySlice<UInt8>] = []
    var start = bytes.startIndex
    for i in bytes.indices where bytes[i] == separator {
        out.append(bytes[start..<i])
        start = i + 1
    }
    out.append(bytes[start...])
    return out
}

/// Splits on runs of spaces or tabs; no empty pieces (tolerates doubled spaces).
func fields(_ bytes: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
    var out: [ArraySlice<UInt8>] = []
    var i = bytes.startIndex
    while i < bytes.endIndex {
        while i < bytes.endIndex, isSpace(bytes[i]) { i += 1 }
        let start = i
        while i < bytes.endIndex, !isSpace(bytes[i]) { i += 1 }
        if i > start { out.append(bytes[start..<i]) }
    }
    return out
}

/// The first field and the trimmed rest: `"111 opus/48000/2"` → (`111`, `opus/48000/2`).
func splitFirstField(_ bytes: ArraySlice<UInt8>) -> (ArraySlice<UInt8>, ArraySlice<UInt8>) {
    let t = trimSpaces(bytes)
    guard let sp = t.firstIndex(where: isSpace) else { return (t, t[t.endIndex...]) }
    return (t[t.startIndex..<sp], trimSpaces(t[sp...]))
}

/// A decimal number of at most `max`, nil for anything else (sign, empty, overflow).
func parseUInt(_ bytes: ArraySlice<UInt8>, max: UInt64) -> UInt64? {
    guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
    var v: UInt64 = 0
    for b in bytes {
        guard b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { return nil }
        let (m, o1) = v.multipliedReportingOverflow(by: 10)
        let (a, o2) = m.addingReportingOverflow(UInt64(b &- UInt8(ascii: "0")))
        if o1 || o2 { return nil }
        v = a
    }
    return v <= max ? v : nil
}

func asciiLowercased(_ s: ArraySlice<UInt8>) -> String {
    var out: [UInt8] = []
    out.reserveCapacity(s.count)
    for b in s { out.append(asciiLower(b)) }
    return String(decoding: out, as: UTF8.self)
}

func joined(_ parts: [String], _ separator: String) -> String {
    var out = ""
    for (i, p) in parts.enumerated() {
        if i > 0 { out += separator }
        out += p
    }
    return out
}

/// The start of untrusted input made safe to print: printable ASCII kept, everything
/// else (line breaks, control bytes, non-ASCII) shown as `.`.
func preview(_ bytes: ArraySlice<UInt8>, limit: Int = 40) -> String {
    var out: [UInt8] = []
    for b in bytes.prefix(limit) {
        out.append(b >= 0x20 && b < 0x7F ? b : UInt8(ascii: "."))
    }
    return String(decoding: out, as: UTF8.self)
}
