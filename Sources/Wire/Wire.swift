/// Wire: the bytes-and-time vocabulary every Linnet protocol module shares.
///
/// Design decisions:
/// - Readers and writers work over caller-owned memory and never allocate, so the same
///   code serves parsers on the loop thread and packetisers next to the audio path.
/// - Every read is bounds-checked and fails with a typed `WireError`; bad input from the
///   network is an error value, never a trap.
/// - Time is a plain monotonic nanosecond count (`Instant`), passed in by the caller:
///   pure modules never read a clock (STYLE.md 1).

/// What went wrong while reading or writing bytes.
public enum WireError: Error, Equatable, Sendable {
    /// The input ended before a field: `needed` bytes were asked for, `available` remained.
    case truncated(needed: Int, available: Int)
    /// The destination buffer has no room for `needed` more bytes.
    case noSpace(needed: Int, available: Int)
    /// A field held a value its format does not allow.
    case invalidValue
}

extension WireError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .truncated(let needed, let available):
            return "truncated input: needed \(needed) bytes, \(available) left"
        case .noSpace(let needed, let available):
            return "buffer full: needed \(needed) bytes, \(available) free"
        case .invalidValue:
            return "invalid field value"
        }
    }
}
