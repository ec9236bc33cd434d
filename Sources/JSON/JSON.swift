/// JSON: RFC 8259 values, parsed and serialized, for signaling bodies and data-channel
/// events (OpenAI Realtime `oai-events`, the backend's `{"sdp": …}` bodies).
///
/// Design decisions:
/// - One value type, `JSONValue`, with objects kept as an ordered list of members: the
///   order a peer sent is preserved and what we send is in the order we wrote it.
/// - Numbers keep both views (`JSONNumber`): an exact `Int64` when the literal's value
///   is an integer in range, and the correctly rounded `Double`. Decimal → binary
///   conversion is our own (Clinger's fast path, else exact big-integer arithmetic),
///   because `Double(String)` needs the C library's `strtod`, which Embedded Swift's
///   standard library does not link. Printing uses `Double.description` (shortest
///   round-trip digits), which Embedded Swift does provide.
/// - The parser is iterative (an explicit container stack), so nesting depth costs heap,
///   not machine stack, and the depth limit (default 64) is checked before anything is
///   pushed: `[[[[…` with 100 000 brackets fails at bracket 65.
/// - Hostile-input limits (`JSONLimits`): total size, depth, string length; breaking
///   one is a `JSONError`, never a trap. Values deeper than the parser allows can only
///   come from code, and the serializer recurses over them: keep built values shallow.
///   Freeing and comparing a value also recurse (Swift's enum deinit and `==`), which
///   is why `maxDepth` is a small number: raise it to hundreds, not to millions.
/// - Duplicate member names (RFC 8259 §4 leaves them undefined): the last value wins and
///   keeps the position of the first occurrence. Names compare by code points (bytes),
///   not by Unicode canonical equivalence.
/// - Implementation-defined cases (RFC 8259 §9 lets a parser set limits), as decided:
///   a leading UTF-8 byte-order mark is skipped (§8.1 allows ignoring it); numbers whose
///   magnitude overflows `Double` are rejected (`numberOutOfRange`), tiny ones round to
///   (signed) zero; integers beyond `Int64` are kept as `Double` only; lone surrogate
///   escapes and invalid UTF-8 are rejected; any document that is not UTF-8 is rejected.
import Wire

/// Why a document was refused. Every case carries the byte offset where the problem was
/// found (`position`).
public enum JSONError: Error, Equatable, Sendable {
    /// The input ended inside a value (an unclosed string, array, object or literal).
    case unexpectedEnd(at: Int)
    /// A byte that cannot start or continue the construct being read.
    case unexpectedByte(UInt8, at: Int)
    /// A malformed number: leading zero, missing digits, lone `-`, `+` sign, `.5`, `1.`.
    case invalidNumber(at: Int)
    /// A number whose magnitude is too large for a `Double` (e.g. `1e400`).
    case numberOutOfRange(at: Int)
    /// A backslash escape other than the eight of RFC 8259 §7, or a bad `\u` hex digit.
    case invalidEscape(at: Int)
    /// A `\u` escape of a UTF-16 surrogate not forming a high+low pair.
    case loneSurrogate(at: Int)
    /// An unescaped control character (U+0000…U+001F) inside a string.
    case controlCharacterInString(at: Int)
    /// Bytes that are not well-formed UTF-8 (overlong, surrogate, > U+10FFFF, truncated).
    case invalidUTF8(at: Int)
    /// Nesting deeper than `JSONLimits.maxDepth`.
    case tooDeep(at: Int)
    /// The document is longer than `JSONLimits.maxBytes` (position = the limit).
    case documentTooLarge(at: Int)
    /// A string longer than `JSONLimits.maxStringBytes` bytes of UTF-8.
    case stringTooLong(at: Int)
    /// Something other than white space after the top-level value.
    case trailingData(at: Int)

    /// Byte offset in the input where the problem was found.
    public var position: Int {
        switch self {
        case .unexpectedEnd(let p), .unexpectedByte(_, let p), .invalidNumber(let p),
             .numberOutOfRange(let p), .invalidEscape(let p), .loneSurrogate(let p),
             .controlCharacterInString(let p), .invalidUTF8(let p), .tooDeep(let p),
             .documentTooLarge(let p), .stringTooLong(let p), .trailingData(let p):
            return p
        }
    }
}

extension JSONError: CustomStringConvertible {
    public var description: String {
        let what: String
        switch self {
        case .unexpectedEnd: what = "unexpected end of input"
        case .unexpectedByte(let b, _): what = "unexpected byte 0x" + String(b, radix: 16)
        case .invalidNumber: what = "invalid number"
        case .numberOutOfRange: what = "number out of range"
        case .invalidEscape: what = "invalid escape"
        case .loneSurrogate: what = "lone UTF-16 surrogate escape"
        case .controlCharacterInString: what = "control character in string"
        case .invalidUTF8: what = "invalid UTF-8"
        case .tooDeep: what = "nesting too deep"
        case .documentTooLarge: what = "document too large"
        case .stringTooLong: what = "string too long"
        case .trailingData: what = "data after the JSON value"
        }
        return what + " at byte " + String(position)
    }
}
