/// SDP: the offer/answer model WebRTC uses (RFC 8866 syntax, the JSEP subset of
/// RFC 8829), a tolerant parser for what real peers send, a builder that writes our own
/// offers and answers, and the negotiation that turns an offer/answer pair into the
/// values the transport needs.
///
/// Design decisions:
/// - One typed model (`SessionDescription`, `MediaSection`) for both directions. Known
///   attributes get typed fields; everything else is kept verbatim in `otherAttributes`
///   / `otherLines` so nothing is lost and nothing unknown fails a parse.
/// - Parse where it matters, tolerate the rest (PROTOCOLS.md "Parser tolerance"): CRLF,
///   LF or bare CR line ends; transport attributes (ICE credentials, fingerprint, setup)
///   at session or media level, or only in the BUNDLE-tag section (RFC 8843 §7);
///   candidates only in the first m-line; port 9 and `c=IN IP4 0.0.0.0`. The syntax of
///   lines we act on (m=, rtpmap, fingerprint, setup, ssrc, sctp-port, max-message-size)
///   is checked and a bad one is an `SDPError` naming the line.
/// - Candidate values are kept as raw strings: the ICE module owns their grammar
///   (RFC 8839 §5.1), including trailing `ufrag …` extensions.
/// - Bounded input: a whole description and each line have a size limit, so hostile or
///   broken input (an HTML error page, binary garbage) fails early with a typed error
///   instead of growing memory.
/// - No Foundation, ASCII-only case handling on bytes (Embedded Swift).

/// Why a session description could not be parsed, built or used. Every case reads as a
/// sentence in a log (`description`).
public enum SDPError: Error, Equatable, Sendable {
    /// The input was empty or only white space.
    case empty
    /// The input does not start with `v=0`: probably not SDP at all (an HTML or JSON
    /// error body). `preview` is the start of the input with unprintable bytes replaced.
    case notSDP(preview: String)
    /// The input is larger than `limit` bytes (`SDPParser.maximumSize`).
    case tooLarge(size: Int, limit: Int)
    /// Line `line` (1-based) is longer than `limit` bytes.
    case lineTooLong(line: Int, length: Int, limit: Int)
    /// Line `line` (1-based) is malformed in a way that matters; `reason` says how.
    case invalidLine(line: Int, reason: String)
    /// The description has no audio m-line.
    case noAudio
    /// The answer rejected our audio section (port 0, RFC 3264 §6).
    case audioRejected
    /// The offer's audio section does not list Opus 48000/2 (RFC 7587 §7).
    case opusNotOffered(codecs: String)
    /// The answer's audio section does not accept Opus; `codecs` lists what it accepted.
    case opusNotAccepted(codecs: String)
    /// No `a=fingerprint` applies to the section (RFC 8122 §5): DTLS could not be verified.
    case noFingerprint(section: String)
    /// No `a=ice-ufrag` / `a=ice-pwd` applies to the section (RFC 8839 §5.4).
    case noICECredentials(section: String)
    /// The DTLS setup roles cannot be resolved (RFC 8842 §5): `reason` says why.
    case invalidSetup(reason: String)
    /// The remote offer has no `a=rtcp-mux` on audio; Linnet only does RTP/RTCP on one
    /// port (RFC 8035, RFC 8829 §5.1.3).
    case rtcpMuxRequired
    /// The answer's m-lines do not line up with the offer's (RFC 3264 §6).
    case mediaMismatch(reason: String)
    /// Two m-sections of one description carry the same `a=mid` (RFC 5888 §4: the
    /// identification tags are unique), so sections cannot be matched by mid.
    case duplicateMid(String)
    /// A value given to the builder would break the text (line breaks, spaces in a
    /// token, out of range): `field` names it.
    case invalidValue(field: String)
}

extension SDPError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .empty:
            return "SDP: the session description is empty"
        case .notSDP(let preview):
            return "SDP: the text is not a session description (it does not start with v=0; it starts with \"\(preview)\")"
        case .tooLarge(let size, let limit):
            return "SDP: the session description is \(size) bytes, more than the \(limit) allowed"
        case .lineTooLong(let line, let length, let limit):
            return "SDP: line \(line) is \(length) bytes long, more than the \(limit) allowed"
        case .invalidLine(let line, let reason):
            return "SDP: line \(line) is malformed: \(reason)"
        case .noAudio:
            return "SDP: the session description has no audio section (m=audio)"
        case .audioRejected:
            return "SDP: the answer rejected the audio section (port 0)"
        case .opusNotOffered(let codecs):
            return "SDP: the offer's audio section does not offer Opus 48000/2 (it offers: \(codecs))"
        case .opusNotAccepted(let codecs):
            return "SDP: the answer does not accept Opus for audio (it answered: \(codecs))"
        case .noFingerprint(let section):
            return "SDP: no DTLS fingerprint (a=fingerprint) applies to \(section)"
        case .noICECredentials(let section):
            return "SDP: no ICE credentials (a=ice-ufrag and a=ice-pwd) apply to \(section)"
        case .invalidSetup(let reason):
            return "SDP: the DTLS roles (a=setup) cannot be negotiated: \(reason)"
        case .rtcpMuxRequired:
            return "SDP: the offer's audio section has no a=rtcp-mux; RTP and RTCP on separate ports are not supported"
        case .mediaMismatch(let reason):
            return "SDP: the answer does not match the offer: \(reason)"
        case .duplicateMid(let mid):
            return "SDP: two m-sections have the same a=mid:\(mid)"
        case .invalidValue(let field):
            return "SDP: cannot write \(field): the value is empty, out of range or contains characters SDP does not allow"
        }
    }
}
