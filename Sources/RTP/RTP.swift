/// RTP: RTP and RTCP packets (RFC 3550), header extensions (RFC 8285), reduced-size
/// RTCP (RFC 5506), the Opus payload's timing rules (RFC 7587), receive statistics
/// (RFC 3550 appendix A), the sender's counters and a jitter buffer.
///
/// Design decisions:
/// - Parsers read caller-owned bytes and return offsets and values, never pointers that
///   could outlive the buffer; serializers write into caller buffers and return a count.
/// - Everything is sans-IO: arrival and send times come in as Wire `Instant`s, random
///   SSRCs and initial sequence numbers from a caller-supplied generator.
/// - Timestamps run at 48 kHz for Opus whatever the capture rate (RFC 7587 §4.1) and
///   advance by every frame's samples, sent or not (mute, DTX), so the receiver's clock
///   never jumps backwards and its jitter estimate stays meaningful.
/// - One error enum (`RTPError`); malformed input is an error value, never a trap.
import Wire

/// What was wrong with a packet or a request to build one.
public enum RTPError: Error, Equatable, Sendable {
    /// The packet ended before a field it declares (fixed header, CSRC list, extension
    /// header or block, RTCP body, report block, SDES item).
    case truncated
    /// The version field is not 2 (RFC 3550 §5.1, §6.4.1).
    case badVersion(UInt8)
    /// The padding count is zero or larger than the packet minus its headers (§5.1).
    case badPadding
    /// A header extension element runs past its block (RFC 8285 §4.2, §4.3).
    case badExtension
    /// An RTCP length field that points past the end of the datagram or below the
    /// minimum for its packet type (RFC 3550 appendix A.2).
    case badLength
    /// The destination buffer is too small for the packet being written.
    case noSpace
    /// A value the format cannot carry: more than 15 CSRCs, 31 report blocks or
    /// 255-byte SDES text, an extension id out of range, an empty extension element.
    case invalidValue
}

extension RTPError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .truncated: return "truncated packet"
        case .badVersion(let v): return "bad RTP version " + String(v)
        case .badPadding: return "bad padding"
        case .badExtension: return "bad header extension"
        case .badLength: return "bad RTCP length"
        case .noSpace: return "buffer too small"
        case .invalidValue: return "value out of range"
        }
    }
}

extension RTPError {
    /// Maps Wire's errors: a short read is a truncated packet, a short write no space.
    init(_ e: WireError) {
        switch e {
        case .truncated: self = .truncated
        case .noSpace: self = .noSpace
        case .invalidValue: self = .invalidValue
        }
    }
}

/// Runs a Wire read or write, turning its error into an `RTPError`.
@inline(__always)
func wire<T>(_ body: () throws(WireError) -> T) throws(RTPError) -> T {
    do throws(WireError) {
        return try body()
    } catch {
        throw RTPError(error)
    }
}
