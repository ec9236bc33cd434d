// Protocol text compared as bytes.
//
// Why: `String`'s `==`, `<`, hashing and `Character` matching follow Unicode canonical
// equivalence (an "é" written as one scalar equals "e" and a combining accent). To
// decide it the standard library links its normalisation code and data tables, about
// 40 KB of the arm64 release binary. The text Linnet compares is defined as
// octets by the protocols it comes from: SDP tokens and attribute names (RFC 8866
// §5, §9), HTTP methods, header names and tokens (RFC 9110 §5.1, §5.6.2), ICE
// ufrags and candidate fields (RFC 8839 §5.1), JSON member names and values (RFC 8259
// §8.3: implementations that compare code units agree on equal strings), config keys
// and values. Byte equality is the comparison those texts call for, and it needs
// no tables.
//
// So every module compares text with these helpers, and `switch` over text matches
// through the `~=` overloads below, which the type checker prefers to the standard
// library's generic `~=` (a concrete overload ranks above a generic one).
// `scripts/unicode-users.py` lists any function of the release binary that still
// reaches the normalisation tables.

/// `switch text { case "a": … }` matches byte for byte (see the top of this file).
@inlinable
public func ~= (pattern: String, value: String) -> Bool {
    pattern.utf8.elementsEqual(value.utf8)
}

/// `switch slice { case "a": … }` matches byte for byte.
@inlinable
public func ~= (pattern: Substring, value: Substring) -> Bool {
    pattern.utf8.elementsEqual(value.utf8)
}

/// `switch character { case "a": … }` matches byte for byte.
@inlinable
public func ~= (pattern: Character, value: Character) -> Bool {
    pattern.utf8.elementsEqual(value.utf8)
}

extension StringProtocol {
    /// Equal byte for byte (UTF-8), with no Unicode normalisation.
    @inlinable
    public func bytesEqual<Other: StringProtocol>(_ other: Other) -> Bool {
        utf8.elementsEqual(other.utf8)
    }

    /// Begins with `prefix`, byte for byte.
    @inlinable
    public func startsWithBytes<Other: StringProtocol>(_ prefix: Other) -> Bool {
        utf8.starts(with: prefix.utf8)
    }

    /// Ends with `suffix`, byte for byte.
    @inlinable
    public func endsWithBytes<Other: StringProtocol>(_ suffix: Other) -> Bool {
        let mine = utf8.count, theirs = suffix.utf8.count
        return mine >= theirs && utf8.dropFirst(mine - theirs).elementsEqual(suffix.utf8)
    }

    /// Orders before `other` by UTF-8 bytes (which is also Unicode scalar order).
    @inlinable
    public func bytesPrecede<Other: StringProtocol>(_ other: Other) -> Bool {
        utf8.lexicographicallyPrecedes(other.utf8)
    }

    /// Holds the ASCII byte `byte`.
    @inlinable
    public func containsByte(_ byte: UInt8) -> Bool {
        utf8.contains(byte)
    }

    /// Holds `needle` as a run of bytes.
    public func containsBytes<Other: StringProtocol>(_ needle: Other) -> Bool {
        let n = Array(needle.utf8)
        guard !n.isEmpty else { return true }
        var i = utf8.startIndex
        while i != utf8.endIndex {
            if utf8[i...].starts(with: n) { return true }
            i = utf8.index(after: i)
        }
        return false
    }

    /// Where the first ASCII byte `byte` is, as an index of the text.
    @inlinable
    public func firstIndex(ofByte byte: UInt8) -> Index? {
        utf8.firstIndex(of: byte)
    }

    /// Where the last ASCII byte `byte` is, as an index of the text.
    @inlinable
    public func lastIndex(ofByte byte: UInt8) -> Index? {
        Substring(self).utf8.lastIndex(of: byte)
    }

    /// The text between two indices found by the byte searches above. They sit on ASCII
    /// bytes, so they start and end whole scalars; slicing the UTF-8 view keeps the
    /// standard library from rounding them to grapheme boundaries.
    @inlinable
    public func bytes(from start: Index, to end: Index) -> Substring {
        Substring(Substring(self).utf8[start..<end])
    }

    /// Splits at each ASCII byte `separator`, as `split(separator:)` does for a
    /// `Character`: empty pieces are dropped unless asked for, and at most `maxSplits`
    /// splits are made.
    public func split(byte separator: UInt8, maxSplits: Int = Int.max, omittingEmptySubsequences: Bool = true) -> [Substring] {
        let text = Substring(self)
        let bytes = text.utf8
        var pieces: [Substring] = []
        var start = bytes.startIndex
        var i = start
        while i != bytes.endIndex {
            if bytes[i] == separator && pieces.count < maxSplits {
                if !(omittingEmptySubsequences && start == i) { pieces.append(Substring(bytes[start..<i])) }
                start = bytes.index(after: i)
                i = start
            } else {
                i = bytes.index(after: i)
            }
        }
        if !(omittingEmptySubsequences && start == bytes.endIndex) { pieces.append(Substring(bytes[start..<bytes.endIndex])) }
        return pieces
    }
}

extension Sequence where Element: StringProtocol {
    /// Holds a text equal to `text` byte for byte.
    @inlinable
    public func containsBytes<Other: StringProtocol>(equalTo text: Other) -> Bool {
        contains { $0.bytesEqual(text) }
    }
}

/// ASCII lower case: A–Z folded, every other byte kept (no Unicode case tables). For
/// the case-insensitive protocol tokens: header names, schemes, SDP tokens, config words.
public func lowercasedASCII<S: StringProtocol>(_ s: S) -> String {
    String(decoding: s.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self)
}

/// Equal byte for byte after ASCII lower-casing: how HTTP field names (RFC 9110 §5.1),
/// URI schemes (RFC 3986 §3.1), link relation types (RFC 8288 §2.1.1) and SDP tokens
/// such as encoding names (RFC 8866 §5.14) compare.
public func asciiEqualIgnoringCase<A: StringProtocol, B: StringProtocol>(_ a: A, _ b: B) -> Bool {
    func fold(_ c: UInt8) -> UInt8 { c >= 65 && c <= 90 ? c + 32 : c }
    return a.utf8.elementsEqual(b.utf8) { fold($0) == fold($1) }
}

/// `a == b` for optional texts, byte for byte: both absent, or both present and equal.
@inlinable
public func bytesEqual(_ a: String?, _ b: String?) -> Bool {
    if let a, let b { return a.bytesEqual(b) }
    return a == nil && b == nil
}

/// Lists of texts equal element by element, byte for byte.
@inlinable
public func bytesEqual(_ a: [String], _ b: [String]) -> Bool {
    a.elementsEqual(b) { $0.bytesEqual($1) }
}

/// Text as a dictionary or set key, hashed and compared byte for byte (see the top of
/// this file): `[TextKey: V]` where `[String: V]` would link Unicode normalisation.
public struct TextKey: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let text: String

    public init(_ text: String) { self.text = text }
    public init<S: StringProtocol>(_ text: S) { self.text = String(text) }
    public init(stringLiteral value: String) { text = value }

    public static func == (a: TextKey, b: TextKey) -> Bool { a.text.bytesEqual(b.text) }

    public func hash(into hasher: inout Hasher) {
        // The byte count first, so "ab" + "c" and "a" + "bc" keys in a tuple differ.
        hasher.combine(text.utf8.count)
        for byte in text.utf8 { hasher.combine(byte) }
    }

    public var description: String { text }
}

/// A peer's text made safe for one log line: printable ASCII kept, every other byte
/// (controls, DEL, anything non-ASCII) shown as `?`, at most `maxBytes` bytes with `…`
/// where cut. For short protocol strings (a TURN realm, a server name) that a hostile
/// peer chooses.
public func printableForLog(_ text: String, maxBytes: Int = 64) -> String {
    var out: [UInt8] = []
    for b in text.utf8 {
        if out.count >= maxBytes { return String(decoding: out, as: UTF8.self) + "…" }
        out.append(b >= 0x20 && b < 0x7F ? b : UInt8(ascii: "?"))
    }
    return String(decoding: out, as: UTF8.self)
}
