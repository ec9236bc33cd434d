// A transcript, or any other text of the provider's, made safe for a line-based log:
// one escaped, capped line. The event descriptions (RealtimeEvents.swift) format with
// it, so it lives apart from the conversation that produces the text.

/// A transcript as one log line: `user: …` or `assistant: …`.
///
/// The text is the provider's (ultimately a speaker's), so it is made safe for a
/// line-based log: white space at the ends is trimmed; a backslash and control
/// characters (C0, DEL, C1, U+2028/U+2029 line and paragraph separators) are escaped
/// (`\n`, `\r`, `\t`, `\\`, else `\u{…}`), so one transcript is always one line and an
/// escaped sequence cannot be confused with a real one; the line is capped at
/// `maxBytes` of UTF-8, cut on a character boundary and ending in `…` when cut.
public struct TranscriptLine: Sendable, Equatable, CustomStringConvertible {
    public var role: RealtimeRole
    public var text: String

    /// A line's default cap: long enough for a paragraph, short enough for syslog.
    public static let defaultMaxBytes = 1000

    public init(role: RealtimeRole, text: String) {
        self.role = role
        self.text = text
    }

    public var description: String { formatted() }

    /// `role: text`, escaped and capped at `maxBytes` (at least 16) bytes of UTF-8.
    public func formatted(maxBytes: Int = TranscriptLine.defaultMaxBytes) -> String {
        escapedLine(prefix: role.rawValue + ": ", text: text, maxBytes: maxBytes)
    }
}

/// `prefix` + `text` made safe for a line-based log, as `TranscriptLine` describes:
/// ends trimmed, `\\` and control characters escaped, capped at `maxBytes` (at least
/// 16) bytes of UTF-8 with `…` where cut. Also used for provider error messages, which
/// are the peer's text too.
func escapedLine(prefix: String, text: String, maxBytes: Int) -> String {
    let limit = max(maxBytes, 16)
    let pieces = trimmedScalars(text).map(escapedScalar)
    var total = prefix.utf8.count
    for p in pieces { total += p.utf8.count }
    var out = prefix
    if total <= limit {
        for p in pieces { out += p }
        return out
    }
    // Cut between pieces, so an escape is never split, leaving room for "…" (3 bytes).
    var used = prefix.utf8.count
    for p in pieces {
        let n = p.utf8.count
        if used + n > limit - 3 { break }
        out += p
        used += n
    }
    return out + "…"
}

private func trimmedScalars(_ s: String) -> ArraySlice<Unicode.Scalar> {
    let all = Array(s.unicodeScalars)
    var lo = 0
    var hi = all.count
    while lo < hi, isLineSpace(all[lo]) { lo += 1 }
    while hi > lo, isLineSpace(all[hi - 1]) { hi -= 1 }
    return all[lo..<hi]
}

private func isLineSpace(_ c: Unicode.Scalar) -> Bool {
    c == " " || c == "\t" || c == "\n" || c == "\r" || c.value == 0xA0 || c.value == 0x3000
}

private func escapedScalar(_ c: Unicode.Scalar) -> String {
    switch c {
    case "\\": return "\\\\"
    case "\n": return "\\n"
    case "\r": return "\\r"
    case "\t": return "\\t"
    default:
        let v = c.value
        if v < 0x20 || (v >= 0x7F && v <= 0x9F) || v == 0x2028 || v == 0x2029 {
            return "\\u{" + String(v, radix: 16) + "}"
        }
        return String(c)
    }
}
