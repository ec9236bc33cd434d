/// ICE: the STUN codec (RFC 8489), ICE candidates (RFC 8839 §5.1), a full ICE agent
/// (RFC 8445) and consent freshness (RFC 7675), sans-IO: datagrams and time in,
/// datagrams, events and deadlines out.
///
/// Design decisions:
/// - One type per STUN wire structure (`STUNHeader`, `XORMappedAddress`, `ErrorCode`, …),
///   each with `parse` from a bounds-checked `ByteReader` and `serialize` into a
///   caller-owned `ByteWriter`. A `STUNMessage` keeps its attributes in wire order, so a
///   parsed message serializes back byte for byte (RFC 5769 vectors included).
/// - MESSAGE-INTEGRITY and FINGERPRINT are not ordinary attributes: serialization computes
///   them over what was written (with the length field adjusted, RFC 8489 §14.5, §14.7);
///   parsing records where they sit so `verifyIntegrity` can check them against a key.
///   FINGERPRINT is verified during parsing because it needs no key.
/// - The agent owns no socket and reads no clock (STYLE.md 1): `ICEAgent.handleInput`,
///   `handleTimeout`, `pollOutput`. Randomness (tie-breaker, consent jitter) comes from a
///   generic `RandomNumberGenerator` so tests replay exactly; ICE passwords come from the
///   caller, which has a CSPRNG.
/// - One component (RTP and RTCP multiplexed, RFC 8843 BUNDLE): the agent runs a single
///   checklist with component 1. TCP candidates and mDNS names are parsed and kept but
///   never paired.
/// - STUN parsing allocates (attribute list, strings): checks run a few times a second,
///   never on the audio path.
import Wire

/// Everything the ICE module refuses, from bytes on the wire to API misuse.
public enum ICEError: Error, Equatable, Sendable {
    /// Fewer than the 20 bytes of a STUN header (RFC 8489 §5).
    case truncatedHeader
    /// The two most significant bits of the message are not zero: not STUN (RFC 8489 §5).
    case notSTUN
    /// The magic cookie is not 0x2112A442 (RFC 8489 §5).
    case badMagicCookie
    /// The header's message length is not a multiple of 4 or disagrees with the datagram.
    case lengthMismatch(declared: Int, available: Int)
    /// An attribute's length runs past the end of the message.
    case attributeOverrun(type: UInt16)
    /// An attribute's value does not have the form its RFC gives (length, family, range).
    case badAttribute(type: UInt16)
    /// An attribute follows FINGERPRINT, which must be last (RFC 8489 §14.7).
    case attributeAfterFingerprint
    /// The FINGERPRINT value does not match the CRC-32 of the message (RFC 8489 §14.7).
    case fingerprintMismatch
    /// The message has no MESSAGE-INTEGRITY attribute where one is required.
    case integrityMissing
    /// MESSAGE-INTEGRITY does not match the HMAC-SHA1 under the given key (RFC 8489 §14.5).
    case integrityMismatch
    /// The destination buffer is too small for the message being serialized.
    case bufferTooSmall
    /// A value cannot be encoded (e.g. a too-long USERNAME or an error code out of range).
    case unencodable
    /// mbedtls failed (negative error code); only for the HMAC.
    case crypto(code: Int32)
    /// An `a=candidate` value does not follow RFC 8839 §5.1; `field` names the first bad part.
    case invalidCandidate(field: String)
    /// A ChannelData message names a channel outside 0x4000–0x4FFF (RFC 8656 §12).
    case badChannel(UInt16)
    /// An `ice-server` URL does not follow RFC 7064/7065; `reason` says what is wrong.
    case invalidServerURL(String)
}

extension ICEError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .truncatedHeader: return "stun: shorter than a header"
        case .notSTUN: return "stun: leading bits are not zero"
        case .badMagicCookie: return "stun: bad magic cookie"
        case .lengthMismatch(let d, let a): return "stun: length \(d) but \(a) bytes follow the header"
        case .attributeOverrun(let t): return "stun: attribute 0x\(String(t, radix: 16)) runs past the end"
        case .badAttribute(let t): return "stun: malformed attribute 0x\(String(t, radix: 16))"
        case .attributeAfterFingerprint: return "stun: attribute after FINGERPRINT"
        case .fingerprintMismatch: return "stun: FINGERPRINT mismatch"
        case .integrityMissing: return "stun: MESSAGE-INTEGRITY missing"
        case .integrityMismatch: return "stun: MESSAGE-INTEGRITY mismatch"
        case .bufferTooSmall: return "stun: output buffer too small"
        case .unencodable: return "stun: value cannot be encoded"
        case .crypto(let c): return "stun: mbedtls error \(c)"
        case .invalidCandidate(let f): return "candidate: invalid \(f)"
        case .badChannel(let c): return "turn: channel 0x\(String(c, radix: 16)) is outside 0x4000-0x4fff"
        case .invalidServerURL(let r): return r
        }
    }
}
