/// Where credentials may go, and which redirects may be followed.
///
/// A device's bearer token is worth as much as the device: it buys provider sessions on
/// the owner's account. It goes only to the origin it was configured for (RFC 6454
/// §4: scheme, host, port — the rule browsers apply to `Authorization` on a
/// cross-origin redirect, and curl too): a 307 to another host, or a WHIP `Location`
/// on another host, gets the request without it. A redirect from https to http is never
/// followed (the offer, and on the same origin the token, would cross the network in
/// the clear), and a `Location` with a scheme other than http(s) is refused rather than
/// read as a relative path.
import Wire

/// An origin (RFC 6454 §4): scheme, host in ASCII lower case, port.
public struct HTTPOrigin: Sendable, Equatable, CustomStringConvertible {
    public let secure: Bool
    public let host: String
    public let port: UInt16

    /// Same scheme, host and port (RFC 6454 §5): the host is already ASCII lower case,
    /// so it compares byte for byte.
    public static func == (a: HTTPOrigin, b: HTTPOrigin) -> Bool {
        a.secure == b.secure && a.port == b.port && a.host.bytesEqual(b.host)
    }

    public var description: String {
        (secure ? "https://" : "http://") + (host.containsByte(UInt8(ascii: ":")) ? "[\(host)]" : host) + ":" + String(port)
    }
}

/// Why a redirect is not followed.
public enum RedirectRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// `Location` names another scheme (`ftp:`, `javascript:`, `file:` …).
    case notHTTP(String)
    /// https → http: the rest would travel in the clear.
    case downgrade(to: String)
    /// Not a URL Linnet can use (spaces, control bytes, a bad port…).
    case badLocation(String)

    public var description: String {
        switch self {
        case .notHTTP(let l): return "a redirect to '\(l)', which is not an http(s) URL: refused"
        case .downgrade(let l): return "a redirect from https to plain http (\(l)): refused"
        case .badLocation(let l): return "a redirect to an unusable URL '\(l)': refused"
        }
    }
}

extension HTTPURL {
    public var origin: HTTPOrigin { HTTPOrigin(secure: secure, host: lowercasedASCII(host), port: port) }

    /// The URL a redirect's `Location` leads to (RFC 9110 §10.2.2: absolute, or
    /// relative to this URL), or why it is not followed.
    public func redirect(to location: String) throws(RedirectRefusal) -> HTTPURL {
        // `scheme(of:)` lower-cases it (schemes are case-insensitive, RFC 3986 §3.1).
        if let scheme = HTTPURL.scheme(of: location), !scheme.bytesEqual("http"), !scheme.bytesEqual("https") {
            throw .notHTTP(location)
        }
        let next: HTTPURL
        do throws(HTTPError) { next = try resolving(location) } catch { throw .badLocation(location) }
        if secure && !next.secure { throw .downgrade(to: next.description) }
        return next
    }

    /// The scheme of a URI reference, if it has one (RFC 3986 §3.1: ALPHA *( ALPHA /
    /// DIGIT / "+" / "-" / "." ) before the first ":", with no "/", "?" or "#" before it).
    static func scheme(of reference: String) -> String? {
        var scheme: [UInt8] = []
        for c in reference.utf8 {
            if c == UInt8(ascii: ":") { return scheme.isEmpty ? nil : lowercasedASCII(String(decoding: scheme, as: UTF8.self)) }
            let alpha = (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            let other = (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
            guard alpha || (!scheme.isEmpty && other) else { return nil }
            scheme.append(c)
        }
        return nil
    }
}

/// A bearer token (RFC 6750) bound to the origin it was configured for.
public struct BearerCredential: Sendable, Equatable {
    public let token: String
    public let origin: HTTPOrigin

    public init(token: String, for url: HTTPURL) {
        self.token = token
        origin = url.origin
    }

    /// The `Authorization` value for a request to `url`, or nil when `url` is on another
    /// origin: the token is not sent there.
    public func authorization(for url: HTTPURL) -> String? {
        url.origin == origin ? "Bearer " + token : nil
    }

    /// `text` (a server's body, a header) with every occurrence of the token replaced,
    /// for the log and the events file: a server that echoes request headers back in an
    /// error page must not get the token written to disk.
    public func redact(_ text: String) -> String { redacting(token, in: text) }
}

/// `text` with every occurrence of `secret` (when at least 8 bytes long: shorter ones
/// would blank ordinary words) replaced by "[redacted]".
public func redacting(_ secret: String, in text: String) -> String {
    let s = Array(secret.utf8), t = Array(text.utf8)
    guard s.count >= 8, t.count >= s.count else { return text }
    var out: [UInt8] = []
    out.reserveCapacity(t.count)
    var i = 0
    var changed = false
    while i < t.count {
        if i + s.count <= t.count, t[i] == s[0], Array(t[i..<(i + s.count)]) == s {
            out += Array("[redacted]".utf8)
            i += s.count
            changed = true
        } else {
            out.append(t[i])
            i += 1
        }
    }
    return changed ? String(decoding: out, as: UTF8.self) : text
}
