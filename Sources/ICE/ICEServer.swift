import Wire

/// How a TURN client reaches its server (RFC 8656 §3.1): UDP, TCP, or TLS over TCP.
/// The relayed transport towards peers is always UDP (REQUESTED-TRANSPORT 17).
public enum TURNTransport: String, Hashable, Sendable, CustomStringConvertible {
    case udp, tcp, tls

    public var description: String { rawValue }
    /// TCP and TLS: no retransmissions, stream framing (RFC 8656 §12.5).
    public var isStream: Bool { self != .udp }
}

/// A `stun:`, `stuns:`, `turn:` or `turns:` URL (RFC 7064 §3.1, RFC 7065 §3.1):
///
/// ```
/// stunURI = ("stun" / "stuns") ":" host [ ":" port ]
/// turnURI = ("turn" / "turns") ":" host [ ":" port ] [ "?transport=" ("udp" / "tcp") ]
/// ```
/// Default ports: 3478, and 5349 for the TLS schemes. A host is a name, an IPv4
/// literal, or an IPv6 literal in brackets. `turns:` with `?transport=udp` would be DTLS
/// (RFC 7350), which Linnet does not speak: refused, as are `user@host` forms.
public struct ICEServerURL: Hashable, Sendable, CustomStringConvertible {
    public enum Scheme: String, Hashable, Sendable, CaseIterable {
        case stun, stuns, turn, turns
    }

    public var scheme: Scheme
    public var host: String
    public var port: UInt16
    /// For `turn:`/`turns:`: how the client reaches the server. `stuns:` is TLS too.
    public var transport: TURNTransport

    public init(scheme: Scheme, host: String, port: UInt16? = nil, transport: TURNTransport? = nil) {
        self.scheme = scheme
        self.host = host
        let tls = scheme == .turns || scheme == .stuns
        self.port = port ?? (tls ? 5349 : 3478)
        self.transport = transport ?? (tls ? .tls : .udp)
    }

    public var isTURN: Bool { scheme == .turn || scheme == .turns }

    /// The host byte for byte (an ASCII name or IP literal, RFC 3986 §3.2.2), not with
    /// the derived `==`'s Unicode string comparison.
    public static func == (a: ICEServerURL, b: ICEServerURL) -> Bool {
        a.scheme == b.scheme && a.host.bytesEqual(b.host) && a.port == b.port && a.transport == b.transport
    }

    /// The host as an IP literal, if it is one.
    public var ip: IPAddress? { IPAddress(host) }

    public init(parsing text: String) throws(ICEError) {
        func bad(_ why: String) -> ICEError { .invalidServerURL("'\(text)' is not a stun:/turn:/turns: URL: \(why)") }
        // The URL's delimiters and scheme are ASCII (RFC 3986 §2.2, §3.1): searched and
        // matched as bytes (Wire/Text.swift), the scheme case-insensitively.
        guard let colon = text.firstIndex(ofByte: UInt8(ascii: ":")) else { throw bad("no scheme") }
        let schemeText = lowercasedASCII(String(text.bytes(from: text.startIndex, to: colon)))
        guard let scheme = Scheme.allCases.first(where: { $0.rawValue.bytesEqual(schemeText) }) else {
            throw bad("the scheme must be stun, stuns, turn or turns")
        }
        var rest = text.bytes(from: text.utf8.index(after: colon), to: text.endIndex)
        if rest.startsWithBytes("//") { rest = Substring(rest.utf8.dropFirst(2)) }
        var transport: TURNTransport? = nil
        if let q = rest.firstIndex(ofByte: UInt8(ascii: "?")) {
            let query = lowercasedASCII(String(rest.bytes(from: rest.utf8.index(after: q), to: rest.endIndex)))
            rest = rest.bytes(from: rest.startIndex, to: q)
            guard scheme == .turn || scheme == .turns else { throw bad("only turn: and turns: take ?transport=") }
            switch query {
            case "transport=udp":
                guard scheme == .turn else { throw bad("turns: over UDP would be DTLS (RFC 7350), which is not supported") }
                transport = .udp
            case "transport=tcp": transport = scheme == .turns ? .tls : .tcp
            default: throw bad("the query must be transport=udp or transport=tcp")
            }
        }
        guard !rest.containsByte(UInt8(ascii: "@")) else { throw bad("credentials go in ice-username and ice-credential, not in the URL") }
        guard !rest.containsByte(UInt8(ascii: "/")) else { throw bad("a path is not allowed") }
        let host: Substring
        var portText: Substring? = nil
        if rest.startsWithBytes("[") {
            guard let close = rest.firstIndex(ofByte: UInt8(ascii: "]")) else { throw bad("an unclosed [") }
            host = rest.bytes(from: rest.utf8.index(after: rest.startIndex), to: close)
            let after = rest.bytes(from: rest.utf8.index(after: close), to: rest.endIndex)
            if !after.isEmpty {
                guard after.startsWithBytes(":") else { throw bad("text after ]") }
                portText = Substring(after.utf8.dropFirst())
            }
            guard let ip = IPAddress(String(host)), !ip.isV4 else { throw bad("brackets hold an IPv6 address") }
        } else {
            if let c = rest.lastIndex(ofByte: UInt8(ascii: ":")) {
                host = rest.bytes(from: rest.startIndex, to: c)
                portText = rest.bytes(from: rest.utf8.index(after: c), to: rest.endIndex)
            } else {
                host = rest
            }
            guard !host.containsByte(UInt8(ascii: ":")) else { throw bad("an IPv6 address goes in brackets") }
        }
        guard !host.isEmpty, host.utf8.count <= 253,
              host.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x2E || $0 == 0x3A || $0 == 0x5F })
        else { throw bad("no valid host") }
        var port: UInt16? = nil
        if let portText {
            guard !portText.isEmpty, asciiDigits(portText, atMost: 5), let p = UInt16(portText), p > 0 else {
                throw bad("the port must be 1–65535")
            }
            port = p
        }
        self.init(scheme: scheme, host: String(host), port: port, transport: transport)
    }

    public var description: String {
        let h = host.containsByte(UInt8(ascii: ":")) ? "[\(host)]" : host
        var s = "\(scheme.rawValue):\(h):\(port)"
        if scheme == .turn && transport == .tcp { s += "?transport=tcp" }
        return s
    }
}

/// A TURN server as the ICE side uses it: where it is, how to reach it, and the
/// long-term credentials (RFC 8489 §9.2). `address` is the resolved IP address (the
/// runtime resolves host names); a UDP server needs one, a TCP or TLS server may be
/// left to the runtime to resolve when it connects.
public struct TURNServer: Hashable, Sendable, CustomStringConvertible {
    public var url: ICEServerURL
    public var username: String
    public var credential: String
    public var address: IPAddress?
    /// The realm the credentials were last accepted under (nil: not known yet). A
    /// challenge naming another realm is refused: the key derived from the password
    /// belongs to this server's realm (RFC 8489 §9.2), and a relay or a spoofed answer
    /// that names its own realm would get a key it can attack offline.
    public var realm: String? = nil

    public init(url: ICEServerURL, username: String, credential: String, address: IPAddress? = nil) {
        self.url = url
        self.username = username
        self.credential = credential
        self.address = address ?? url.ip
    }

    /// Why a username and password cannot be used with a TURN server, or nil. RFC 8489
    /// §14.3: USERNAME is fewer than 509 bytes of UTF-8 (Linnet's codec takes 513, the
    /// attribute's padded length); the password has no bound of its own, 763 bytes here
    /// (a line a person types). Control characters cannot come through OpaqueString
    /// (§9.2.2) and are typos in a file. Checked where credentials enter (the config, a
    /// provider's answer), so a username that could never be sent fails once, loudly,
    /// instead of every session waiting out its relay gathering.
    public static func credentialProblem(username: String, credential: String) -> String? {
        func control(_ s: String) -> Bool { s.utf8.contains { $0 < 0x20 || $0 == 0x7F } }
        if username.isEmpty { return "the username is empty" }
        if username.utf8.count > Username.maxBytes { return "the username is \(username.utf8.count) bytes (at most \(Username.maxBytes), RFC 8489 §14.3)" }
        if credential.utf8.count > 763 { return "the password is \(credential.utf8.count) bytes (at most 763)" }
        if control(username) || control(credential) { return "the username or password holds control characters" }
        return nil
    }

    public var transport: TURNTransport { url.transport }
    /// The server's UDP address, when known.
    public var socketAddress: SocketAddress? { address.map { SocketAddress(ip: $0, port: url.port) } }
    public var description: String { url.description }
}
