/// An IP address, version 4 or 6, as a value: what SDP candidates, STUN XOR-MAPPED-ADDRESS
/// and sockets exchange. Parsing and printing live here, without the C library, so the
/// pure protocol modules can use them.
public enum IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// Four bytes, first byte in the high bits.
    case v4(UInt32)
    /// Sixteen bytes as two big-endian halves.
    case v6(high: UInt64, low: UInt64)

    public static let loopbackV4 = IPAddress.v4(0x7F00_0001)
    public static let loopbackV6 = IPAddress.v6(high: 0, low: 1)
    public static let anyV4 = IPAddress.v4(0)
    public static let anyV6 = IPAddress.v6(high: 0, low: 0)

    public var isV4: Bool { if case .v4 = self { return true } else { return false } }

    public var isLoopback: Bool {
        switch self {
        case .v4(let a): return a >> 24 == 127
        case .v6(let h, let l): return h == 0 && l == 1
        }
    }

    /// fe80::/10, which needs a scope (interface) to be reachable.
    public var isLinkLocal: Bool {
        switch self {
        case .v4(let a): return a >> 16 == 0xA9FE
        case .v6(let h, _): return h >> 54 == 0x3FA
        }
    }

    /// How far the address reaches, from this host outward: what an address a remote
    /// party names may be trusted with. Ordered: a scope includes the ones before it.
    public enum Scope: Int, Comparable, Sendable, CustomStringConvertible {
        /// This host: 127.0.0.0/8, ::1, and the unspecified address (which connects to it).
        case host
        /// The link: 169.254.0.0/16, fe80::/10.
        case link
        /// A private network: 10/8, 172.16/12, 192.168/16 (RFC 1918), 100.64/10 (RFC 6598
        /// shared address space), fc00::/7 (RFC 4193), and the IPv4-mapped forms of these.
        case site
        /// Everything else.
        case global

        public static func < (a: Scope, b: Scope) -> Bool { a.rawValue < b.rawValue }

        public var description: String {
            switch self {
            case .host: return "this host"
            case .link: return "the local link"
            case .site: return "a private network"
            case .global: return "the internet"
            }
        }
    }

    public var scope: Scope {
        switch self {
        case .v4(let a):
            if a >> 24 == 127 || a == 0 { return .host }
            if a >> 16 == 0xA9FE { return .link }
            if a >> 24 == 10 || a >> 20 == 0xAC1 || a >> 16 == 0xC0A8 || a >> 22 == 0x191 { return .site }
            return .global
        case .v6(let h, let l):
            if h == 0 && (l == 1 || l == 0) { return .host }
            // ::ffff:a.b.c.d: the IPv4 address's scope.
            if h == 0 && l >> 32 == 0xFFFF { return IPAddress.v4(UInt32(truncatingIfNeeded: l)).scope }
            if h >> 54 == 0x3FA { return .link }
            if h >> 57 == 0x7E { return .site }
            return .global
        }
    }

    public var isUnspecified: Bool {
        switch self {
        case .v4(let a): return a == 0
        case .v6(let h, let l): return h == 0 && l == 0
        }
    }

    /// The address in network byte order (4 or 16 bytes).
    public var bytes: [UInt8] {
        switch self {
        case .v4(let a):
            return [UInt8(truncatingIfNeeded: a >> 24), UInt8(truncatingIfNeeded: a >> 16),
                    UInt8(truncatingIfNeeded: a >> 8), UInt8(truncatingIfNeeded: a)]
        case .v6(let h, let l):
            var out = [UInt8](repeating: 0, count: 16)
            for i in 0..<8 {
                out[i] = UInt8(truncatingIfNeeded: h >> UInt64(56 - 8 * i))
                out[8 + i] = UInt8(truncatingIfNeeded: l >> UInt64(56 - 8 * i))
            }
            return out
        }
    }

    /// From 4 or 16 bytes in network order; nil for any other length.
    public init?(bytes: UnsafeRawBufferPointer) {
        switch bytes.count {
        case 4:
            var a: UInt32 = 0
            for b in bytes { a = a << 8 | UInt32(b) }
            self = .v4(a)
        case 16:
            var h: UInt64 = 0, l: UInt64 = 0
            for i in 0..<8 { h = h << 8 | UInt64(bytes[i]) }
            for i in 8..<16 { l = l << 8 | UInt64(bytes[i]) }
            self = .v6(high: h, low: l)
        default:
            return nil
        }
    }

    public init?(bytes: [UInt8]) {
        guard let a = bytes.withUnsafeBytes({ IPAddress(bytes: $0) }) else { return nil }
        self = a
    }

    /// Parses dotted IPv4 (`192.0.2.1`) or IPv6 text (`2001:db8::1`, `::ffff:192.0.2.1`).
    /// A `%scope` suffix on IPv6 is accepted and dropped (see `SocketAddress` for scopes).
    /// Address text is ASCII: searched and split as bytes (Text.swift).
    public init?(_ text: String) {
        var t = Substring(text)
        if let percent = t.firstIndex(ofByte: UInt8(ascii: "%")) { t = t.bytes(from: t.startIndex, to: percent) }
        if t.containsByte(UInt8(ascii: ":")) {
            guard let a = IPAddress.parseV6(t) else { return nil }
            self = a
        } else {
            guard let a = IPAddress.parseV4(t) else { return nil }
            self = .v4(a)
        }
    }

    static func parseV4(_ t: Substring) -> UInt32? {
        var value: UInt32 = 0
        var parts = 0
        for part in t.split(byte: UInt8(ascii: "."), omittingEmptySubsequences: false) {
            guard !part.isEmpty, part.utf8.count <= 3, let n = UInt32(part), n <= 255 else { return nil }
            // Leading zeros are ambiguous (octal in inet_aton): refuse them.
            if part.utf8.count > 1 && part.utf8.first == UInt8(ascii: "0") { return nil }
            value = value << 8 | n
            parts += 1
        }
        return parts == 4 ? value : nil
    }

    static func parseV6(_ t: Substring) -> IPAddress? {
        // Split at the one "::" (if any); each side is a list of 16-bit groups, and the
        // last side may end in dotted IPv4 (RFC 4291 §2.2, forms 2 and 3).
        func groups(_ s: Substring, allowV4: Bool) -> [UInt16]? {
            if s.isEmpty { return [] }
            var out: [UInt16] = []
            let parts = s.split(byte: UInt8(ascii: ":"), omittingEmptySubsequences: false)
            for (i, part) in parts.enumerated() {
                if allowV4 && i == parts.count - 1 && part.containsByte(UInt8(ascii: ".")) {
                    guard let v4 = parseV4(part) else { return nil }
                    out.append(UInt16(truncatingIfNeeded: v4 >> 16))
                    out.append(UInt16(truncatingIfNeeded: v4))
                } else {
                    guard !part.isEmpty, part.utf8.count <= 4, let g = UInt16(part, radix: 16) else { return nil }
                    out.append(g)
                }
            }
            return out
        }
        var all: [UInt16]
        if let gap = doubleColon(t) {
            let head = t.bytes(from: t.startIndex, to: gap)
            let tail = t.bytes(from: t.utf8.index(gap, offsetBy: 2), to: t.endIndex)
            guard doubleColon(tail) == nil, let h = groups(head, allowV4: false),
                  let tl = groups(tail, allowV4: true), h.count + tl.count <= 7 else { return nil }
            all = h + [UInt16](repeating: 0, count: 8 - h.count - tl.count) + tl
        } else {
            guard let g = groups(t, allowV4: true) else { return nil }
            all = g
        }
        guard all.count == 8 else { return nil }
        var h: UInt64 = 0, l: UInt64 = 0
        for k in 0..<4 { h = h << 16 | UInt64(all[k]) }
        for k in 4..<8 { l = l << 16 | UInt64(all[k]) }
        return .v6(high: h, low: l)
    }

    static func doubleColon(_ s: Substring) -> Substring.Index? {
        let bytes = s.utf8, colon = UInt8(ascii: ":")
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let next = bytes.index(after: i)
            if bytes[i] == colon && next < bytes.endIndex && bytes[next] == colon { return i }
            i = next
        }
        return nil
    }

    /// Dotted IPv4, or IPv6 in the RFC 5952 canonical form (lowercase, longest run of
    /// two or more zero groups as `::`).
    public var description: String {
        switch self {
        case .v4(let a):
            return "\(a >> 24).\((a >> 16) & 0xFF).\((a >> 8) & 0xFF).\(a & 0xFF)"
        case .v6(let h, let l):
            var groups = [UInt16](repeating: 0, count: 8)
            for k in 0..<4 {
                groups[k] = UInt16(truncatingIfNeeded: h >> UInt64(48 - 16 * k))
                groups[4 + k] = UInt16(truncatingIfNeeded: l >> UInt64(48 - 16 * k))
            }
            var bestStart = -1, bestLength = 0, k = 0
            while k < 8 {
                if groups[k] == 0 {
                    var e = k
                    while e < 8 && groups[e] == 0 { e += 1 }
                    if e - k > bestLength { bestStart = k; bestLength = e - k }
                    k = e
                } else {
                    k += 1
                }
            }
            if bestLength < 2 { bestStart = -1 }
            var out = ""
            k = 0
            while k < 8 {
                if k == bestStart {
                    out += "::"
                    k += bestLength
                    continue
                }
                if !out.isEmpty && out.utf8.last != UInt8(ascii: ":") { out += ":" }
                out += String(groups[k], radix: 16)
                k += 1
            }
            return out
        }
    }
}

/// `host:port` or `[IPv6]:port` cut at its delimiters, as bytes (an IPv6 literal goes in
/// brackets, RFC 3986 §3.2.2); nil when the form is not one of these. The parts
/// themselves are not checked.
public func splitHostPort(_ text: Substring) -> (host: Substring, port: Substring)? {
    if text.startsWithBytes("[") {
        guard let close = text.firstIndex(ofByte: UInt8(ascii: "]")) else { return nil }
        let rest = text.bytes(from: text.utf8.index(after: close), to: text.endIndex)
        guard rest.startsWithBytes(":") else { return nil }
        return (text.bytes(from: text.utf8.index(after: text.startIndex), to: close), Substring(rest.utf8.dropFirst()))
    }
    guard let colon = text.lastIndex(ofByte: UInt8(ascii: ":")) else { return nil }
    let host = text.bytes(from: text.startIndex, to: colon)
    guard !host.containsByte(UInt8(ascii: ":")) else { return nil }
    return (host, text.bytes(from: text.utf8.index(after: colon), to: text.endIndex))
}

/// An IP address with a UDP or TCP port (and, for link-local IPv6, an interface index).
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    public var ip: IPAddress
    public var port: UInt16
    /// IPv6 scope (interface index) for link-local addresses; 0 otherwise.
    public var scopeID: UInt32

    public init(ip: IPAddress, port: UInt16, scopeID: UInt32 = 0) {
        self.ip = ip
        self.port = port
        self.scopeID = scopeID
    }

    /// Parses `192.0.2.1:3478`, `[2001:db8::1]:3478` or `[fe80::1%2]:5000`
    /// (a numeric scope only: names need the system). The delimiters are ASCII bytes.
    public init?(_ text: String) {
        guard let parts = splitHostPort(Substring(text)), let port = UInt16(parts.port) else { return nil }
        var host = parts.host
        var scope: UInt32 = 0
        if let percent = host.firstIndex(ofByte: UInt8(ascii: "%")) {
            guard let s = UInt32(host.bytes(from: host.utf8.index(after: percent), to: host.endIndex)) else { return nil }
            scope = s
            host = host.bytes(from: host.startIndex, to: percent)
        }
        guard let ip = IPAddress(String(host)) else { return nil }
        self.init(ip: ip, port: port, scopeID: scope)
    }

    public var description: String {
        switch ip {
        case .v4: return "\(ip):\(port)"
        case .v6: return scopeID == 0 ? "[\(ip)]:\(port)" : "[\(ip)%\(scopeID)]:\(port)"
        }
    }
}
