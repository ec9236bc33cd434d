import Wire

/// Candidate types (RFC 8445 §5.1.1) with their recommended type preferences (§5.1.2.2).
public enum CandidateType: String, Hashable, Sendable, CaseIterable {
    case host
    case serverReflexive = "srflx"
    case peerReflexive = "prflx"
    case relay

    /// RFC 8445 §5.1.2.2: 126 host, 110 peer-reflexive, 100 server-reflexive, 0 relayed.
    public var typePreference: UInt32 {
        switch self {
        case .host: return 126
        case .peerReflexive: return 110
        case .serverReflexive: return 100
        case .relay: return 0
        }
    }
}

/// The transport of a candidate line. Linnet pairs UDP, and with ICE-TCP its active TCP
/// candidates with the peer's passive ones (RFC 6544); other tokens (RFC 8839 §5.1
/// allows extensions) are kept but never paired.
public enum CandidateTransport: Hashable, Sendable, CustomStringConvertible {
    case udp
    case tcp
    case other(String)

    init(token: Substring) {
        // ASCII case folding: the transport is an ASCII token (RFC 8839 §5.1); the
        // stdlib's lowercased() would link its Unicode case tables.
        switch String(decoding: token.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self) {
        case "udp": self = .udp
        case "tcp": self = .tcp
        default: self = .other(String(token))
        }
    }

    /// Tokens compare as bytes (RFC 8839 §5.1 defines them as octets), so the derived
    /// `==` with its Unicode string comparison is not used.
    public static func == (a: CandidateTransport, b: CandidateTransport) -> Bool {
        switch (a, b) {
        case (.udp, .udp), (.tcp, .tcp): return true
        case (.other(let x), .other(let y)): return x.bytesEqual(y)
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .udp: return "udp"
        case .tcp: return "tcp"
        case .other(let s): return s
        }
    }
}

/// A connection address: an IP literal, or a host name (browsers hide host addresses
/// behind random `….local` mDNS names, draft-ietf-mmusic-mdns-ice-candidates).
public enum CandidateAddress: Hashable, Sendable, CustomStringConvertible {
    case ip(IPAddress)
    case hostname(String)

    init?(text: Substring) {
        if let ip = IPAddress(String(text)) {
            self = .ip(ip)
            return
        }
        // RFC 8839 §5.1: FQDN. Letters, digits, '-', '.', at most 255 bytes.
        guard !text.isEmpty, text.utf8.count <= 255, !text.containsByte(UInt8(ascii: ":")) else { return nil }
        for c in text.utf8 {
            let ok = (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_")
            guard ok else { return nil }
        }
        self = .hostname(String(text))
    }

    public var ip: IPAddress? {
        if case .ip(let a) = self { return a }
        return nil
    }

    /// Host names compare as bytes (RFC 8839 §5.1 connection-address), not with the
    /// derived `==`'s Unicode string comparison.
    public static func == (a: CandidateAddress, b: CandidateAddress) -> Bool {
        switch (a, b) {
        case (.ip(let x), .ip(let y)): return x == y
        case (.hostname(let x), .hostname(let y)): return x.bytesEqual(y)
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .ip(let a): return a.description
        case .hostname(let h): return h
        }
    }
}

/// One `name value` pair after the fixed fields (RFC 8839 §5.1 cand-extension), such as
/// `generation 0`, `ufrag EsAw`, `network-id 1`, `tcptype active`.
public struct CandidateExtension: Hashable, Sendable {
    public var name: String
    public var value: String
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Byte for byte (RFC 8839 §5.1: extension names and values are octet strings).
    public static func == (a: CandidateExtension, b: CandidateExtension) -> Bool {
        a.name.bytesEqual(b.name) && a.value.bytesEqual(b.value)
    }
}

/// An ICE candidate as `a=candidate` carries it (RFC 8839 §5.1):
///
/// ```
/// candidate-attribute = "candidate" ":" foundation SP component-id SP transport SP
///                       priority SP connection-address SP port SP cand-type
///                       [SP rel-addr] [SP rel-port] *(SP cand-extension)
/// ```
///
/// Parsing is tolerant where deployed peers differ (PROTOCOLS.md "Parser tolerance"):
/// an optional `a=` and `candidate:` prefix, any case in the transport, extension pairs
/// kept in order, TCP candidates and `.local` names accepted but marked unusable, runs
/// of white space and a trailing CR ignored.
public struct Candidate: Hashable, Sendable, CustomStringConvertible {
    /// 1–32 ice-chars; equal for candidates of the same type, base, server and transport.
    public var foundation: String
    /// 1 for RTP (and everything, with rtcp-mux); 2 for RTCP without mux.
    public var component: UInt16
    public var transport: CandidateTransport
    public var priority: UInt32
    public var address: CandidateAddress
    public var port: UInt16
    public var type: CandidateType
    public var relatedAddress: CandidateAddress?
    public var relatedPort: UInt16?
    public var extensions: [CandidateExtension]

    public init(foundation: String, component: UInt16 = 1, transport: CandidateTransport = .udp,
                priority: UInt32, address: SocketAddress, type: CandidateType,
                related: SocketAddress? = nil, extensions: [CandidateExtension] = []) {
        self.foundation = foundation
        self.component = component
        self.transport = transport
        self.priority = priority
        self.address = .ip(address.ip)
        self.port = address.port
        self.type = type
        self.relatedAddress = related.map { .ip($0.ip) }
        self.relatedPort = related?.port
        self.extensions = extensions
    }

    /// The transport address, when the connection address is an IP literal.
    public var socketAddress: SocketAddress? {
        guard let ip = address.ip else { return nil }
        return SocketAddress(ip: ip, port: port)
    }

    /// Whether Linnet can pair this candidate: UDP to an IP literal. (mDNS names would
    /// need a resolver the pure module does not have; TCP candidates need RFC 6544.)
    public var isUsable: Bool { transport == .udp && address.ip != nil && port != 0 }

    /// Field by field, the text fields byte for byte (RFC 8839 §5.1 defines them as
    /// octets), instead of the derived `==`'s Unicode string comparison.
    public static func == (a: Candidate, b: Candidate) -> Bool {
        a.foundation.bytesEqual(b.foundation) && a.component == b.component && a.transport == b.transport
            && a.priority == b.priority && a.address == b.address && a.port == b.port && a.type == b.type
            && a.relatedAddress == b.relatedAddress && a.relatedPort == b.relatedPort && a.extensions == b.extensions
    }

    /// The value of the first extension called `name` (`ufrag`, `generation`, …), the
    /// name matched byte for byte (RFC 8839 §5.1).
    public func extensionValue(_ name: String) -> String? {
        for e in extensions where e.name.bytesEqual(name) { return e.value }
        return nil
    }

    /// A TCP candidate that accepts connections (RFC 6544 §4.5 `tcptype passive`) at a
    /// literal address: what Linnet's active TCP candidates connect to.
    public var isTCPPassive: Bool {
        transport == .tcp && address.ip != nil && port != 0 && (tcpType.map { lowercasedASCII($0).bytesEqual("passive") } ?? false)
    }

    /// `tcptype` of a TCP candidate (RFC 6544 §4.5): active, passive or so.
    public var tcpType: String? { extensionValue("tcptype") }

    // MARK: Parse

    /// Parses the attribute value, with or without `a=` and `candidate:`.
    public init(parsing text: String) throws(ICEError) {
        var body = Substring(text)
        // Prefixes and separators are matched as bytes (the line is octets, RFC 8866 §5);
        // a CR LF pair is two separators with nothing between them, as the Character
        // "\r\n" was one separator.
        if body.startsWithBytes("a=") { body = Substring(body.utf8.dropFirst(2)) }
        if body.startsWithBytes("candidate:") { body = Substring(body.utf8.dropFirst(10)) }
        let fields = body.utf8.split(whereSeparator: { $0 == 32 || $0 == 9 || $0 == 13 || $0 == 10 }).map { Substring($0) }
        guard fields.count >= 8 else { throw .invalidCandidate(field: "field count") }

        let foundation = fields[0]
        guard foundation.utf8.count <= 32, foundation.utf8.allSatisfy(Candidate.isIceChar) else {
            throw .invalidCandidate(field: "foundation")
        }
        guard asciiDigits(fields[1], atMost: 3), let component = UInt16(fields[1]),
              (1...256).contains(component) else {
            throw .invalidCandidate(field: "component-id")
        }
        guard Candidate.isToken(fields[2]) else { throw .invalidCandidate(field: "transport") }
        guard asciiDigits(fields[3], atMost: 10), let priority = UInt32(fields[3]) else {
            throw .invalidCandidate(field: "priority")
        }
        guard let address = CandidateAddress(text: fields[4]) else { throw .invalidCandidate(field: "connection-address") }
        guard let port = Candidate.port(fields[5]) else { throw .invalidCandidate(field: "port") }
        guard fields[6].bytesEqual("typ"), let type = CandidateType.allCases.first(where: { $0.rawValue.bytesEqual(fields[7]) }) else {
            throw .invalidCandidate(field: "cand-type")
        }

        var i = 8
        var relatedAddress: CandidateAddress? = nil
        var relatedPort: UInt16? = nil
        var extensions: [CandidateExtension] = []
        while i < fields.count {
            guard i + 1 < fields.count else { throw .invalidCandidate(field: "extension") }
            let name = fields[i], value = fields[i + 1]
            if name.bytesEqual("raddr") && relatedAddress == nil && extensions.isEmpty {
                guard let a = CandidateAddress(text: value) else { throw .invalidCandidate(field: "raddr") }
                relatedAddress = a
            } else if name.bytesEqual("rport") && relatedPort == nil && extensions.isEmpty {
                guard let p = Candidate.port(value) else { throw .invalidCandidate(field: "rport") }
                relatedPort = p
            } else {
                guard Candidate.isToken(name), value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                    throw .invalidCandidate(field: "extension")
                }
                extensions.append(CandidateExtension(name: String(name), value: String(value)))
            }
            i += 2
        }

        self.foundation = String(foundation)
        self.component = component
        self.transport = CandidateTransport(token: fields[2])
        self.priority = priority
        self.address = address
        self.port = port
        self.type = type
        self.relatedAddress = relatedAddress
        self.relatedPort = relatedPort
        self.extensions = extensions
    }

    static func isIceChar(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            || c == UInt8(ascii: "+") || c == UInt8(ascii: "/")
    }

    /// RFC 8866 token characters.
    static func isToken(_ s: Substring) -> Bool {
        guard !s.isEmpty else { return false }
        for c in s.utf8 {
            let ok = (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || "!#$%&'*+-.^_`{|}~".utf8.contains(c)
            guard ok else { return false }
        }
        return true
    }

    static func port(_ s: Substring) -> UInt16? {
        guard asciiDigits(s, atMost: 5) else { return nil }
        return UInt16(s)
    }

    // MARK: Serialize

    /// The attribute value, `candidate:…` (prefix with `a=` for an SDP line).
    public var description: String {
        var s = "candidate:\(foundation) \(component) \(transport) \(priority) \(address) \(port) typ \(type.rawValue)"
        if let relatedAddress { s += " raddr \(relatedAddress)" }
        if let relatedPort { s += " rport \(relatedPort)" }
        for e in extensions { s += " \(e.name) \(e.value)" }
        return s
    }

    // MARK: Priorities and foundations

    /// RFC 8445 §5.1.2.1:
    /// `priority = 2^24 * type preference + 2^8 * local preference + (256 - component ID)`.
    public static func priority(type: CandidateType, localPreference: UInt16, component: UInt16 = 1) -> UInt32 {
        let c = UInt32(min(max(component, 1), 256))
        return type.typePreference << 24 | UInt32(localPreference) << 8 | (256 - c)
    }

    /// RFC 8445 §5.1.1.3: candidates share a foundation when they have the same type, the
    /// same base IP address, the same STUN/TURN server IP and the same transport. The
    /// foundation is the CRC-32 of those four in decimal: short, ice-chars only, stable
    /// across restarts of the agent.
    public static func foundation(type: CandidateType, base: IPAddress, server: IPAddress? = nil,
                                  transport: CandidateTransport = .udp) -> String {
        let key = "\(type.rawValue)|\(base)|\(server.map { $0.description } ?? "-")|\(transport)"
        return String(CRC32.checksum(Array(key.utf8)))
    }
}

/// RFC 8445 §6.1.2.3: with G the controlling agent's candidate priority and D the
/// controlled agent's, `pair priority = 2^32 * MIN(G,D) + 2 * MAX(G,D) + (G > D ? 1 : 0)`.
/// Candidate priorities stay below 2^31 (type preference ≤ 126), so the sum fits 64 bits;
/// wrapping arithmetic keeps hostile PRIORITY values from trapping.
public func candidatePairPriority(controlling g: UInt32, controlled d: UInt32) -> UInt64 {
    let lo = UInt64(min(g, d)), hi = UInt64(max(g, d))
    return (lo << 32) &+ (hi << 1) &+ (g > d ? 1 : 0)
}

/// At most `limit` bytes, every one an ASCII digit (an empty text passes: callers
/// parse it next, and the parse refuses it). Counted and tested as bytes: Character
/// counting links grapheme breaking (Wire/Text.swift).
func asciiDigits<S: StringProtocol>(_ s: S, atMost limit: Int) -> Bool {
    s.utf8.count <= limit && s.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
}
