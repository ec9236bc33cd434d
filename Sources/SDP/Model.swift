import Wire

// The session description model: the parts of RFC 8866 and its WebRTC extensions that
// Linnet reads or writes, typed; everything else kept verbatim.

/// A line we do not model, kept as `<type>=<value>` (RFC 8866 §5): `b=`, `i=`, `r=` …
public struct SDPLine: Equatable, Sendable {
    /// The one-letter type, e.g. `b`.
    public var type: Unicode.Scalar
    public var value: String

    public init(type: Unicode.Scalar, value: String) {
        self.type = type
        self.value = value
    }
}

/// An attribute we do not model: `a=<name>` or `a=<name>:<value>` (RFC 8866 §5.13).
public struct SDPAttribute: Equatable, Sendable {
    public var name: String
    /// nil for a property attribute (no colon).
    public var value: String?

    public init(name: String, value: String? = nil) {
        self.name = name
        self.value = value
    }
}

/// `o=<username> <sess-id> <sess-version> <nettype> <addrtype> <unicast-address>`
/// (RFC 8866 §5.2). Kept as text: peers send session ids larger than 64 bits and
/// nothing here acts on them.
public struct Origin: Equatable, Sendable {
    public var username: String
    public var sessionID: String
    public var sessionVersion: String
    public var networkType: String
    public var addressType: String
    public var address: String

    public init(username: String = "-", sessionID: String, sessionVersion: String,
                networkType: String = "IN", addressType: String = "IP4", address: String = "127.0.0.1") {
        self.username = username
        self.sessionID = sessionID
        self.sessionVersion = sessionVersion
        self.networkType = networkType
        self.addressType = addressType
        self.address = address
    }
}

/// `c=<nettype> <addrtype> <connection-address>` (RFC 8866 §5.7). WebRTC peers put
/// `IN IP4 0.0.0.0` here and the real addresses in candidates (RFC 8829 §5.2.1), so it
/// is informational.
public struct Connection: Equatable, Sendable {
    public var networkType: String
    public var addressType: String
    public var address: String

    public init(networkType: String = "IN", addressType: String = "IP4", address: String = "0.0.0.0") {
        self.networkType = networkType
        self.addressType = addressType
        self.address = address
    }

    /// `IN IP4 0.0.0.0`: what JSEP writes when addresses travel in candidates.
    public static let unspecified = Connection()
}

/// `a=group:<semantics> <mid> …` (RFC 5888 §5); BUNDLE is RFC 8843.
public struct MediaGroup: Equatable, Sendable {
    public var semantics: String
    public var mids: [String]

    public init(semantics: String, mids: [String]) {
        self.semantics = semantics
        self.mids = mids
    }

    public var isBundle: Bool { asciiEqualIgnoringCase(semantics, "BUNDLE") }
}

/// `a=fingerprint:<hash-func> <hex bytes>` (RFC 8122 §5): the hash of the peer's DTLS
/// certificate. The algorithm is kept lowercase (`sha-256`).
public struct Fingerprint: Equatable, Sendable, CustomStringConvertible {
    public var algorithm: String
    public var bytes: [UInt8]

    public init(algorithm: String, bytes: [UInt8]) {
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// The digest length RFC 8122 §5 implies for an algorithm from the IANA "Hash
    /// Function Textual Names" registry, nil for one we do not know.
    public static func digestLength(of algorithm: String) -> Int? {
        switch algorithm {
        case "md2", "md5": return 16
        case "sha-1": return 20
        case "sha-224": return 28
        case "sha-256": return 32
        case "sha-384": return 48
        case "sha-512": return 64
        default: return nil
        }
    }

    /// `sha-256 AB:CD:…`, the attribute value.
    public var description: String { algorithm + " " + Hex.fingerprint(bytes) }

    /// The hash name byte for byte (an ASCII token, RFC 8122 §5, kept lowercase), not
    /// with the derived `==`'s Unicode string comparison.
    public static func == (a: Fingerprint, b: Fingerprint) -> Bool {
        a.algorithm.bytesEqual(b.algorithm) && a.bytes == b.bytes
    }
}

/// `a=setup` (RFC 4145 §4, RFC 8842 §5): who starts the DTLS handshake.
public enum SetupRole: String, Equatable, Sendable, CaseIterable {
    /// Offers only: the answerer chooses.
    case actpass
    /// The endpoint is the DTLS client.
    case active
    /// The endpoint is the DTLS server.
    case passive
    /// No connection now (RFC 4145); not usable for DTLS-SRTP.
    case holdconn
}

/// Which side of the DTLS handshake Linnet takes.
public enum DTLSRole: Equatable, Sendable {
    /// We send the ClientHello (`a=setup:active` on our side).
    case client
    /// We wait for the ClientHello (`a=setup:passive` on our side).
    case server
}

/// The media direction attributes (RFC 8866 §6.7).
public enum MediaDirection: String, Equatable, Sendable, CaseIterable {
    case sendrecv, sendonly, recvonly, inactive

    /// What an answerer writes for an offer with this direction (RFC 3264 §6.1),
    /// assuming it is willing to send and receive.
    public var reversed: MediaDirection {
        switch self {
        case .sendrecv: return .sendrecv
        case .sendonly: return .recvonly
        case .recvonly: return .sendonly
        case .inactive: return .inactive
        }
    }

    public var sends: Bool { self == .sendrecv || self == .sendonly }
    public var receives: Bool { self == .sendrecv || self == .recvonly }
}

/// The `<media>` of an m-line (RFC 8866 §5.14).
public enum MediaKind: Equatable, Sendable, CustomStringConvertible {
    case audio, video, application
    case other(String)

    public init(_ text: String) {
        switch text {
        case "audio": self = .audio
        case "video": self = .video
        case "application": self = .application
        default: self = .other(text)
        }
    }

    public var description: String {
        switch self {
        case .audio: return "audio"
        case .video: return "video"
        case .application: return "application"
        case .other(let s): return s
        }
    }

    /// A `<media>` token byte for byte (RFC 8866 §5.14, §9 `token`), not with the
    /// derived `==`'s Unicode string comparison.
    public static func == (a: MediaKind, b: MediaKind) -> Bool {
        switch (a, b) {
        case (.audio, .audio), (.video, .video), (.application, .application): return true
        case (.other(let x), .other(let y)): return x.bytesEqual(y)
        default: return false
        }
    }
}

/// `a=rtpmap:<payload type> <encoding name>/<clock rate>[/<channels>]` (RFC 8866 §6.6).
public struct RTPMap: Equatable, Sendable, CustomStringConvertible {
    public var payloadType: UInt8
    public var encoding: String
    public var clockRate: UInt32
    public var channels: UInt8?

    public init(payloadType: UInt8, encoding: String, clockRate: UInt32, channels: UInt8? = nil) {
        self.payloadType = payloadType
        self.encoding = encoding
        self.clockRate = clockRate
        self.channels = channels
    }

    /// Opus is always `opus/48000/2` on the wire whatever the coded bandwidth
    /// (RFC 7587 §7); the name is case-insensitive (RFC 4855 §3).
    public var isOpus: Bool {
        asciiEqualIgnoringCase(encoding, "opus") && clockRate == 48000 && (channels == nil || channels == 2)
    }

    /// `111 opus/48000/2`, the attribute value.
    public var description: String {
        var s = String(payloadType) + " " + encoding + "/" + String(clockRate)
        if let channels { s += "/" + String(channels) }
        return s
    }
}

/// `a=fmtp:<format> <parameters>` (RFC 8866 §6.15), parameters kept as written.
public struct FormatParameters: Equatable, Sendable {
    public var format: String
    public var parameters: String

    public init(format: String, parameters: String) {
        self.format = format
        self.parameters = parameters
    }

    /// The value of `name` in a `key=value;key=value` list (RFC 7587 §7 style), nil
    /// when absent. Keys compare case-insensitively.
    public func parameter(_ name: String) -> String? {
        for item in splitBytes(Array(parameters.utf8), on: UInt8(ascii: ";")) {
            let trimmed = trimSpaces(item[...])
            guard let eq = trimmed.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = string(trimSpaces(trimmed[trimmed.startIndex..<eq]))
            if asciiEqualIgnoringCase(key, name) {
                return string(trimSpaces(trimmed[(eq + 1)...]))
            }
        }
        return nil
    }
}

/// `a=rtcp-fb:<format or *> <feedback>` (RFC 4585 §4.2), the feedback kept as written.
public struct RTCPFeedback: Equatable, Sendable {
    public var format: String
    public var feedback: String

    public init(format: String, feedback: String) {
        self.format = format
        self.feedback = feedback
    }
}

/// `a=extmap:<id>[/<direction>] <uri> [<attributes>]` (RFC 8285 §8).
public struct ExtensionMap: Equatable, Sendable {
    public var id: UInt16
    public var direction: MediaDirection?
    public var uri: String
    public var attributes: String?

    public init(id: UInt16, direction: MediaDirection? = nil, uri: String, attributes: String? = nil) {
        self.id = id
        self.direction = direction
        self.uri = uri
        self.attributes = attributes
    }
}

/// `a=ssrc:<ssrc> <attribute>[:<value>]` (RFC 5576 §4.1), e.g. `cname:…` or `msid:…`.
public struct SSRCAttribute: Equatable, Sendable {
    public var ssrc: UInt32
    public var attribute: String
    public var value: String?

    public init(ssrc: UInt32, attribute: String, value: String? = nil) {
        self.ssrc = ssrc
        self.attribute = attribute
        self.value = value
    }
}

/// `a=msid:<stream id> [<track id>]` (RFC 8830 §2).
public struct MediaStreamID: Equatable, Sendable {
    public var stream: String
    public var track: String?

    public init(stream: String, track: String? = nil) {
        self.stream = stream
        self.track = track
    }
}

/// The legacy `a=sctpmap:<port> <protocol> [<streams>]` of
/// draft-ietf-mmusic-sctp-sdp-05, still sent with `DTLS/SCTP <port>` m-lines.
public struct SCTPMap: Equatable, Sendable {
    public var port: UInt16
    public var protocolName: String
    public var streams: UInt32?

    public init(port: UInt16, protocolName: String, streams: UInt32? = nil) {
        self.port = port
        self.protocolName = protocolName
        self.streams = streams
    }
}

/// One `m=` section and its attributes.
public struct MediaSection: Equatable, Sendable {
    public var kind: MediaKind
    /// 0 rejects the section (RFC 3264 §6); WebRTC otherwise writes 9 (RFC 8829 §5.2.1).
    public var port: UInt16
    /// The `/<number of ports>` suffix, when written.
    public var portCount: UInt16?
    /// `UDP/TLS/RTP/SAVPF`, `UDP/DTLS/SCTP`, `DTLS/SCTP`, … as written.
    public var proto: String
    /// Payload types for RTP, `webrtc-datachannel` (or the legacy SCTP port) for data.
    public var formats: [String]
    public var connection: Connection?
    public var mid: String?
    public var direction: MediaDirection?
    public var rtcpMux: Bool
    public var rtcpReducedSize: Bool
    public var rtpMaps: [RTPMap]
    public var formatParameters: [FormatParameters]
    public var rtcpFeedback: [RTCPFeedback]
    public var extensionMaps: [ExtensionMap]
    public var ssrcs: [SSRCAttribute]
    public var msids: [MediaStreamID]
    public var iceUfrag: String?
    public var icePwd: String?
    public var iceOptions: [String]
    public var fingerprints: [Fingerprint]
    public var setup: SetupRole?
    /// The values of `a=candidate:` lines, verbatim (`<foundation> <component> …`).
    public var candidates: [String]
    public var endOfCandidates: Bool
    public var sctpPort: UInt16?
    /// `a=max-message-size` (RFC 8841 §6); 0 means "no limit".
    public var maxMessageSize: UInt64?
    public var sctpMap: SCTPMap?
    /// Other lines of the section (`b=`, `i=`, …), in order.
    public var otherLines: [SDPLine]
    /// Attributes we do not model, in order.
    public var otherAttributes: [SDPAttribute]

    public init(kind: MediaKind, port: UInt16 = 9, proto: String, formats: [String]) {
        self.kind = kind
        self.port = port
        self.portCount = nil
        self.proto = proto
        self.formats = formats
        self.connection = nil
        self.mid = nil
        self.direction = nil
        self.rtcpMux = false
        self.rtcpReducedSize = false
        self.rtpMaps = []
        self.formatParameters = []
        self.rtcpFeedback = []
        self.extensionMaps = []
        self.ssrcs = []
        self.msids = []
        self.iceUfrag = nil
        self.icePwd = nil
        self.iceOptions = []
        self.fingerprints = []
        self.setup = nil
        self.candidates = []
        self.endOfCandidates = false
        self.sctpPort = nil
        self.maxMessageSize = nil
        self.sctpMap = nil
        self.otherLines = []
        self.otherAttributes = []
    }

    /// Port 0: the answerer (or offerer) rejected or disabled this section, unless it
    /// says `a=bundle-only` (RFC 8843 §6: an offerer's bundled section with port 0, as
    /// GStreamer's webrtcbin writes every section after the first).
    public var isRejected: Bool { port == 0 && !otherAttributes.contains { $0.name.bytesEqual("bundle-only") } }

    /// An RTP profile (`RTP/AVP`, `UDP/TLS/RTP/SAVPF`, …).
    public var isRTP: Bool { proto.containsBytes("RTP/") }

    /// SCTP over DTLS: `UDP/DTLS/SCTP`, `TCP/DTLS/SCTP` (RFC 8841) or legacy `DTLS/SCTP`.
    public var isSCTP: Bool { proto.endsWithBytes("DTLS/SCTP") }

    /// The rtpmap of a payload type, nil when the section has none for it.
    public func rtpMap(for payloadType: UInt8) -> RTPMap? {
        rtpMaps.first { $0.payloadType == payloadType }
    }

    /// The fmtp parameters of a payload type, nil when absent.
    public func formatParameters(for payloadType: UInt8) -> String? {
        let key = String(payloadType)
        return formatParameters.first { $0.format.bytesEqual(key) }?.parameters
    }

    /// The first payload type of the m-line that maps to Opus 48000/2, in the m-line's
    /// order of preference (RFC 3264 §5.1).
    public var opusPayloadType: UInt8? {
        for format in formats {
            guard let pt = parseUInt(Array(format.utf8)[...], max: 127) else { continue }
            if let map = rtpMap(for: UInt8(pt)), map.isOpus { return UInt8(pt) }
        }
        return nil
    }

    /// The codecs of the m-line for a log: `opus/48000/2, PCMU/8000`; static payload
    /// types without an rtpmap appear by the name RFC 3551 §6 gives them.
    public var codecSummary: String {
        var parts: [String] = []
        for format in formats {
            if let pt = parseUInt(Array(format.utf8)[...], max: 127), let map = rtpMap(for: UInt8(pt)) {
                var s = map.encoding + "/" + String(map.clockRate)
                if let c = map.channels { s += "/" + String(c) }
                parts.append(s)
            } else {
                switch format {
                case "0": parts.append("PCMU/8000")
                case "8": parts.append("PCMA/8000")
                case "9": parts.append("G722/8000")
                case "13": parts.append("CN/8000")
                default: parts.append("payload type " + format)
                }
            }
        }
        return parts.isEmpty ? "nothing" : joined(parts, ", ")
    }

    /// The SSRCs the section announces, in order of first appearance.
    public var announcedSSRCs: [UInt32] {
        var out: [UInt32] = []
        for s in ssrcs where !out.contains(s.ssrc) { out.append(s.ssrc) }
        return out
    }

    /// "audio section (mid 0)" for error messages.
    public func label(index: Int) -> String {
        if let mid { return kind.description + " section (mid " + mid + ")" }
        return kind.description + " section (m-line " + String(index + 1) + ")"
    }
}

/// A whole session description: session-level fields and the m-sections in order.
public struct SessionDescription: Equatable, Sendable {
    public var origin: Origin
    public var sessionName: String
    /// `t=` as written; WebRTC always uses `0 0` (RFC 8829 §5.2.1).
    public var timing: String
    public var connection: Connection?
    public var groups: [MediaGroup]
    /// `a=msid-semantic` value, e.g. `WMS *` (legacy, still sent by browsers).
    public var msidSemantic: String?
    /// `a=ice-lite` (RFC 8839 §5.3): the peer only answers checks.
    public var iceLite: Bool
    public var iceUfrag: String?
    public var icePwd: String?
    public var iceOptions: [String]
    public var fingerprints: [Fingerprint]
    public var setup: SetupRole?
    public var otherLines: [SDPLine]
    public var otherAttributes: [SDPAttribute]
    public var media: [MediaSection]

    public init(origin: Origin, sessionName: String = "-", timing: String = "0 0") {
        self.origin = origin
        self.sessionName = sessionName
        self.timing = timing
        self.connection = nil
        self.groups = []
        self.msidSemantic = nil
        self.iceLite = false
        self.iceUfrag = nil
        self.icePwd = nil
        self.iceOptions = []
        self.fingerprints = []
        self.setup = nil
        self.otherLines = []
        self.otherAttributes = []
        self.media = []
    }

    /// The first `a=group:BUNDLE`, if any.
    public var bundleGroup: MediaGroup? { groups.first { $0.isBundle } }

    /// The index of the first audio section, nil without one.
    public var audioIndex: Int? { media.firstIndex { $0.kind == .audio } }

    /// The index of the first data-channel section (application over SCTP).
    public var dataChannelIndex: Int? { media.firstIndex { $0.kind == .application && $0.isSCTP } }

    /// The index of the section with this mid. Mids are tokens compared as bytes
    /// (RFC 5888 §4, RFC 8866 §9), as are the mids of groups and the candidates below.
    public func index(ofMid mid: String) -> Int? { media.firstIndex { $0.mid?.bytesEqual(mid) ?? false } }

    /// The BUNDLE-tag section of the group `index` belongs to (RFC 8843 §7.2: the first
    /// mid of the group in an answer), nil when the section is not bundled.
    public func bundleTagIndex(for index: Int) -> Int? {
        guard media.indices.contains(index), let mid = media[index].mid, !media[index].isRejected else { return nil }
        for group in groups where group.isBundle && group.mids.containsBytes(equalTo: mid) {
            for tag in group.mids {
                if let i = self.index(ofMid: tag), !media[i].isRejected { return i }
            }
        }
        return nil
    }

    /// The transport parameters that apply to section `index`, resolved the way
    /// PROTOCOLS.md "Parser tolerance" requires: the section's own attribute, else the
    /// BUNDLE-tag section's (RFC 8843 §7.3.1 lets an answer carry transport attributes
    /// only there), else the session-level one (RFC 8839 §5.4, RFC 8122 §5,
    /// RFC 4145 §4). Candidates are the BUNDLE-tag section's, or, when it has none,
    /// those of every bundled section.
    public func transport(for index: Int) -> TransportParameters {
        var t = TransportParameters()
        guard media.indices.contains(index) else { return t }
        let own = media[index]
        let tag = bundleTagIndex(for: index).map { media[$0] }
        t.iceUfrag = own.iceUfrag ?? tag?.iceUfrag ?? iceUfrag
        t.icePwd = own.icePwd ?? tag?.icePwd ?? icePwd
        if !own.fingerprints.isEmpty {
            t.fingerprints = own.fingerprints
        } else if let tag, !tag.fingerprints.isEmpty {
            t.fingerprints = tag.fingerprints
        } else {
            t.fingerprints = fingerprints
        }
        t.setup = own.setup ?? tag?.setup ?? setup
        if !own.iceOptions.isEmpty {
            t.iceOptions = own.iceOptions
        } else if let tag, !tag.iceOptions.isEmpty {
            t.iceOptions = tag.iceOptions
        } else {
            t.iceOptions = iceOptions
        }
        t.iceLite = iceLite
        // With BUNDLE the transport is the BUNDLE-tag section's (RFC 8843 §7.2-7.3),
        // so its candidates are the ones to check; an offerer's other sections may list
        // candidates of transports that BUNDLE discards. Peers that write candidates
        // only in a later section still work: then every bundled section's count,
        // duplicates removed.
        let tagIndex = bundleTagIndex(for: index) ?? index
        t.candidates = media[tagIndex].candidates
        t.endOfCandidates = media[tagIndex].endOfCandidates
        if t.candidates.isEmpty, let mid = own.mid, bundleTagIndex(for: index) != nil {
            for group in groups where group.isBundle && group.mids.containsBytes(equalTo: mid) {
                for m in group.mids {
                    guard let i = self.index(ofMid: m), !media[i].isRejected else { continue }
                    for c in media[i].candidates where !t.candidates.containsBytes(equalTo: c) { t.candidates.append(c) }
                    if media[i].endOfCandidates { t.endOfCandidates = true }
                }
            }
        }
        return t
    }
}

/// The ICE and DTLS parameters that apply to one transport after resolving session,
/// media and BUNDLE levels (`SessionDescription.transport(for:)`).
public struct TransportParameters: Equatable, Sendable {
    public var iceUfrag: String?
    public var icePwd: String?
    public var iceOptions: [String] = []
    public var iceLite: Bool = false
    public var fingerprints: [Fingerprint] = []
    public var setup: SetupRole?
    public var candidates: [String] = []
    public var endOfCandidates: Bool = false

    public init() {}
}
