import Wire

/// What went wrong in an HTTP exchange, as a user should read it in a log.
public enum HTTPError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The peer's bytes are not HTTP/1.x (a bad status line, header or chunk size).
    case malformed(String)
    /// The header block exceeded the limit (a misbehaving or hostile server).
    case headersTooLarge(limit: Int)
    /// The body exceeded the limit.
    case bodyTooLarge(limit: Int)
    /// The connection closed before the message was complete.
    case truncated
    /// A transfer coding other than chunked.
    case unsupportedTransferEncoding(String)
    /// A URL Linnet cannot use.
    case badURL(String)

    public var description: String {
        switch self {
        case .malformed(let why): return "HTTP: malformed response: \(why)"
        case .headersTooLarge(let limit): return "HTTP: response headers larger than \(limit) bytes"
        case .bodyTooLarge(let limit): return "HTTP: response body larger than \(limit) bytes"
        case .truncated: return "HTTP: connection closed before the response was complete"
        case .unsupportedTransferEncoding(let te): return "HTTP: unsupported transfer encoding '\(te)'"
        case .badURL(let url): return "not a usable http(s) URL: '\(url)'"
        }
    }
}

/// Header fields in order, looked up case-insensitively (RFC 9110 §5.1).
public struct HTTPHeaders: Sendable, Equatable {
    public var fields: [(name: String, value: String)] = []

    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    public static func == (a: HTTPHeaders, b: HTTPHeaders) -> Bool {
        a.fields.count == b.fields.count && zip(a.fields, b.fields).allSatisfy { $0.name.bytesEqual($1.name) && $0.value.bytesEqual($1.value) }
    }

    /// The first value of `name`.
    public subscript(name: String) -> String? {
        fields.first { asciiEqualIgnoringCase($0.name, name) }?.value
    }

    /// Every value of `name` (e.g. several `Link` fields).
    public func values(_ name: String) -> [String] {
        fields.filter { asciiEqualIgnoringCase($0.name, name) }.map { $0.value }
    }

    public mutating func add(_ name: String, _ value: String) {
        fields.append((name: name, value: value))
    }

    /// Removes every field called `name`.
    public mutating func remove(_ name: String) {
        fields.removeAll { asciiEqualIgnoringCase($0.name, name) }
    }
}

/// An absolute http or https URL split into what a request needs.
public struct HTTPURL: Sendable, Equatable, CustomStringConvertible {
    public var secure: Bool
    public var host: String
    public var port: UInt16
    /// Path and query, starting with `/`.
    public var target: String

    public init(secure: Bool, host: String, port: UInt16, target: String) {
        self.secure = secure
        self.host = host
        self.port = port
        self.target = target
    }

    /// Parses `http://host[:port]/path?query` or `https://…`; IPv6 hosts in brackets.
    /// User info and fragments are refused or dropped (credentials go in headers).
    public init(_ text: String) throws(HTTPError) {
        guard HTTPURL.usable(text) else { throw .badURL(text) }
        let lower = lowercasedASCII(text)
        let rest: Substring
        if lower.startsWithBytes("http://") {
            secure = false
            rest = Substring(text.utf8.dropFirst(7))
        } else if lower.startsWithBytes("https://") {
            secure = true
            rest = Substring(text.utf8.dropFirst(8))
        } else {
            throw .badURL(text)
        }
        // RFC 3986 §3: the delimiters are ASCII octets, found and cut as bytes.
        let slash = rest.firstIndex(ofByte: UInt8(ascii: "/")) ?? rest.endIndex
        var authority = rest.bytes(from: rest.startIndex, to: slash)
        var path = String(rest.bytes(from: slash, to: rest.endIndex))
        if let hash = path.firstIndex(ofByte: UInt8(ascii: "#")) { path = String(path.bytes(from: path.startIndex, to: hash)) }
        if path.isEmpty { path = "/" }
        if path.startsWithBytes("?") { path = "/" + path }
        guard !authority.isEmpty, !authority.containsByte(UInt8(ascii: "@")) else { throw .badURL(text) }
        var portNumber: UInt16 = secure ? 443 : 80
        if authority.startsWithBytes("[") {
            guard let close = authority.firstIndex(ofByte: UInt8(ascii: "]")) else { throw .badURL(text) }
            let after = authority.bytes(from: authority.utf8.index(after: close), to: authority.endIndex)
            if after.startsWithBytes(":") {
                guard let p = UInt16(Substring(after.utf8.dropFirst())), p > 0 else { throw .badURL(text) }
                portNumber = p
            } else if !after.isEmpty {
                throw .badURL(text)
            }
            authority = authority.bytes(from: authority.utf8.index(after: authority.startIndex), to: close)
        } else if let colon = authority.lastIndex(ofByte: UInt8(ascii: ":")) {
            guard let p = UInt16(authority.bytes(from: authority.utf8.index(after: colon), to: authority.endIndex)), p > 0 else { throw .badURL(text) }
            portNumber = p
            authority = authority.bytes(from: authority.startIndex, to: colon)
        }
        guard !authority.isEmpty, !authority.containsByte(UInt8(ascii: " ")) else { throw .badURL(text) }
        host = String(authority)
        port = portNumber
        target = path
    }

    /// The `Host` header value (port only when not the default).
    public var hostHeader: String {
        let h = host.containsByte(UInt8(ascii: ":")) ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? h : "\(h):\(port)"
    }

    public var description: String { (secure ? "https://" : "http://") + hostHeader + target }

    /// RFC 3986 §2 has no space or control character in a URI; the target and host are
    /// written verbatim into the request line and the Host header, so one there (a lone
    /// CR, a space in a `Location`) would garble or split the next request (found by
    /// fuzz_http_response). Percent-encoded forms are fine.
    static func usable(_ text: String) -> Bool {
        !text.utf8.contains { $0 <= 0x20 || $0 == 0x7F }
    }

    /// Resolves a `Location` value (absolute, or a path relative to this URL's origin).
    public func resolving(_ location: String) throws(HTTPError) -> HTTPURL {
        guard HTTPURL.usable(location) else { throw .badURL(location) }
        let lower = lowercasedASCII(location)
        if lower.startsWithBytes("http://") || lower.startsWithBytes("https://") { return try HTTPURL(location) }
        if location.startsWithBytes("//") { return try HTTPURL((secure ? "https:" : "http:") + location) }
        var copy = self
        if location.startsWithBytes("/") {
            copy.target = location
        } else {
            // Relative to the current path's directory (RFC 3986 §5.2.3, without dot segments).
            let base = target.split(byte: UInt8(ascii: "?"), maxSplits: 1, omittingEmptySubsequences: false)[0]
            let dir = base.lastIndex(ofByte: UInt8(ascii: "/")).map { base.bytes(from: base.startIndex, to: base.utf8.index(after: $0)) } ?? "/"
            copy.target = String(dir) + location
        }
        return copy
    }
}

/// An HTTP/1.1 request ready to serialize.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: HTTPURL
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(method: String, url: HTTPURL, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// The request's bytes: request line, Host, the given headers, Content-Length when
    /// there is a body (or the method expects one), then the body.
    public func serialize() -> [UInt8] {
        var head = "\(method) \(url.target) HTTP/1.1\r\nHost: \(url.hostHeader)\r\n"
        for field in headers.fields { head += "\(field.name): \(field.value)\r\n" }
        // Methods are case-sensitive (RFC 9110 §9.1): compared byte for byte.
        if !body.isEmpty || method.bytesEqual("POST") || method.bytesEqual("PUT") || method.bytesEqual("PATCH") {
            head += "Content-Length: \(body.count)\r\n"
        }
        head += "\r\n"
        return Array(head.utf8) + body
    }
}

/// A complete HTTP response.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var reason: String
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, reason: String = "", headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }

    /// A short printable excerpt of the body for error messages (control characters
    /// replaced, at most `limit` characters).
    public func bodyExcerpt(_ limit: Int = 200) -> String {
        var out: [UInt8] = []
        for b in body.prefix(limit) { out.append(b < 32 || b == 127 ? UInt8(ascii: " ") : b) }
        return String(decoding: out, as: UTF8.self) + (body.count > limit ? "…" : "")
    }
}

/// Limits that keep a broken or hostile peer from making us allocate without bound.
///
/// Signaling messages are small: an SDP answer is a few KB, a JSON session answer a few
/// more. The defaults leave an order of magnitude of headroom and still bound what one
/// response can make a 512 MB board allocate. Both limits are checked while bytes
/// arrive, not after: a server that streams forever is cut off at the limit.
public struct HTTPLimits: Sendable, Equatable {
    /// Status line + header fields (and, for chunked bodies, any one trailer line):
    /// 16 KiB, like common servers' defaults for request headers.
    public var maxHeaderBytes: Int
    /// The decoded body (Content-Length, chunked, or read until close): 1 MiB.
    public var maxBodyBytes: Int

    public init(maxHeaderBytes: Int = 16 * 1024, maxBodyBytes: Int = 1024 * 1024) {
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
    }
}

/// An incremental HTTP/1.1 message parser (sans-IO): feed it bytes as they arrive; it
/// returns the message when complete. Handles Content-Length, chunked transfer coding
/// (RFC 9112 §7.1, extensions and trailers ignored) and, for responses, bodies ended by
/// the connection closing (`finish()`).
///
/// Parses responses (`HTTPResponseParser`) and, for the built-in answerer, requests
/// (`HTTPRequestParser`).
struct HTTPMessageParser {
    enum Framing {
        case none
        case length(Int)
        case chunked
        case untilClose
    }

    var limits: HTTPLimits
    var buffer: [UInt8] = []
    var startLine: [String] = []
    var headers = HTTPHeaders()
    var headerDone = false
    var framing = Framing.none
    var body: [UInt8] = []
    var chunkRemaining: Int? = nil  // nil: expecting a size line
    var trailers = false
    var complete = false

    init(limits: HTTPLimits) { self.limits = limits }

    /// Splits off one CRLF- (or LF-) terminated line from the buffer, if there is one.
    mutating func takeLine() -> [UInt8]? {
        guard let lf = buffer.firstIndex(of: 10) else { return nil }
        var line = Array(buffer[0..<lf])
        if line.last == 13 { line.removeLast() }
        buffer.removeFirst(lf + 1)
        return line
    }

    /// Consumes bytes; returns true once the message is complete.
    mutating func feed(_ bytes: UnsafeRawBufferPointer, isResponse: Bool, noBody: (Int) -> Bool) throws(HTTPError) -> Bool {
        buffer.append(contentsOf: bytes)
        if !headerDone {
            while let line = takeLine() {
                if startLine.isEmpty {
                    if line.isEmpty { continue }  // tolerate blank lines before the start line
                    let text = String(decoding: line.prefix(80), as: UTF8.self)
                    // RFC 9112 §3, §4: start-line fields are octets separated by SP.
                    startLine = String(decoding: line, as: UTF8.self).split(byte: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
                    let valid = isResponse
                        ? startLine.count >= 2 && startLine[0].startsWithBytes("HTTP/1.") && startLine[1].utf8.count == 3
                            && (Int(startLine[1]).map { (100...599).contains($0) } ?? false)
                        : startLine.count == 3 && startLine[2].startsWithBytes("HTTP/1.")
                    guard valid else { throw .malformed("bad \(isResponse ? "status" : "request") line '\(text)'") }
                    continue
                }
                if line.isEmpty {
                    headerDone = true
                    break
                }
                guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0 else {
                    throw .malformed("header line without a colon")
                }
                let name = String(decoding: line[0..<colon], as: UTF8.self)
                guard !name.containsByte(UInt8(ascii: " ")) else { throw .malformed("space in a header name") }
                let value = trim(line[(colon + 1)...])
                headers.add(name, value)
            }
            if !headerDone {
                if buffer.count + headerBytes > limits.maxHeaderBytes { throw .headersTooLarge(limit: limits.maxHeaderBytes) }
                return false
            }
            try decideFraming(isResponse: isResponse, noBody: noBody)
        }
        try readBody()
        return complete
    }

    var headerBytes: Int { headers.fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 } }

    func trim(_ bytes: ArraySlice<UInt8>) -> String {
        var s = bytes.startIndex, e = bytes.endIndex
        while s < e && (bytes[s] == 32 || bytes[s] == 9) { s += 1 }
        while e > s && (bytes[e - 1] == 32 || bytes[e - 1] == 9) { e -= 1 }
        return String(decoding: bytes[s..<e], as: UTF8.self)
    }

    mutating func decideFraming(isResponse: Bool, noBody: (Int) -> Bool) throws(HTTPError) {
        if headerBytes > limits.maxHeaderBytes { throw .headersTooLarge(limit: limits.maxHeaderBytes) }
        let status = isResponse ? Int(startLine[1]) ?? -1 : 0
        if isResponse && noBody(status) {
            framing = .none
        } else if let te = headers["Transfer-Encoding"] {
            // RFC 9112 §6.1: chunked must be the final coding; we accept no others. Coding
            // names are case-insensitive (RFC 9112 §7): ASCII-lowercased, then bytes.
            guard lowercasedASCII(te).trimmingSpaces.bytesEqual("chunked") else { throw .unsupportedTransferEncoding(te) }
            framing = .chunked
        } else if let cl = headers["Content-Length"] {
            guard let n = Int(cl.trimmingSpaces), n >= 0 else { throw .malformed("bad Content-Length '\(cl)'") }
            // RFC 9112 §6.3 item 5: differing Content-Length fields are unrecoverable.
            for other in headers.values("Content-Length") where Int(other.trimmingSpaces) != n {
                throw .malformed("conflicting Content-Length fields")
            }
            if n > limits.maxBodyBytes { throw .bodyTooLarge(limit: limits.maxBodyBytes) }
            framing = .length(n)
        } else {
            framing = isResponse ? .untilClose : .none
        }
    }

    mutating func readBody() throws(HTTPError) {
        switch framing {
        case .none:
            complete = true
        case .length(let n):
            let take = min(n - body.count, buffer.count)
            body.append(contentsOf: buffer[0..<take])
            buffer.removeFirst(take)
            complete = body.count == n
        case .untilClose:
            body.append(contentsOf: buffer)
            buffer.removeAll()
            if body.count > limits.maxBodyBytes { throw .bodyTooLarge(limit: limits.maxBodyBytes) }
        case .chunked:
            while !complete {
                if trailers {
                    // Trailer fields are read and dropped; one longer than the header
                    // limit is refused rather than buffered without bound.
                    guard let line = takeLine() else {
                        if buffer.count > limits.maxHeaderBytes { throw .headersTooLarge(limit: limits.maxHeaderBytes) }
                        return
                    }
                    if line.isEmpty { complete = true }
                    continue
                }
                if let remaining = chunkRemaining {
                    if remaining == 0 {
                        // The CRLF after a chunk's data.
                        guard let line = takeLine() else {
                            // Two bytes without a line feed cannot be the CRLF: the chunk
                            // ran past its size (and must not be buffered without bound).
                            if buffer.count >= 2 { throw .malformed("chunk data longer than its size") }
                            return
                        }
                        guard line.isEmpty else { throw .malformed("chunk data longer than its size") }
                        chunkRemaining = nil
                        continue
                    }
                    let take = min(remaining, buffer.count)
                    if take == 0 { return }
                    body.append(contentsOf: buffer[0..<take])
                    buffer.removeFirst(take)
                    chunkRemaining = remaining - take
                    if body.count > limits.maxBodyBytes { throw .bodyTooLarge(limit: limits.maxBodyBytes) }
                    continue
                }
                guard let line = takeLine() else {
                    if buffer.count > 1024 { throw .malformed("chunk size line too long") }
                    return
                }
                // Not omitting empty pieces: an empty size line must give one empty field
                // (refused below), not an empty array (a trap found by fuzz_http_request).
                let sizeText = String(decoding: line, as: UTF8.self)
                    .split(byte: UInt8(ascii: ";"), maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingSpaces
                guard let size = Int(sizeText, radix: 16), size >= 0, sizeText.utf8.count <= 8 else {
                    throw .malformed("bad chunk size '\(sizeText)'")
                }
                if size == 0 {
                    trailers = true
                } else {
                    if body.count + size > limits.maxBodyBytes { throw .bodyTooLarge(limit: limits.maxBodyBytes) }
                    chunkRemaining = size
                }
            }
        }
    }
}

extension StringProtocol {
    /// Without leading and trailing OWS: SP and HTAB octets (RFC 9110 §5.6.3).
    var trimmingSpaces: String {
        var s = Substring(self).utf8[...]
        while let b = s.first, b == 32 || b == 9 { s = s.dropFirst() }
        while let b = s.last, b == 32 || b == 9 { s = s.dropLast() }
        return String(Substring(s))
    }
}

/// Parses one HTTP/1.1 response from the bytes of a connection.
public struct HTTPResponseParser {
    var core: HTTPMessageParser
    /// The request was HEAD: no body follows whatever the headers say.
    let headRequest: Bool

    public init(limits: HTTPLimits = HTTPLimits(), headRequest: Bool = false) {
        core = HTTPMessageParser(limits: limits)
        self.headRequest = headRequest
    }

    /// Feeds received bytes; returns the (final) response once it is complete.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) -> HTTPResponse? {
        let head = headRequest
        var input = bytes
        while true {
            let done = try core.feed(input, isResponse: true) { status in
                head || (100..<200).contains(status) || status == 204 || status == 304
            }
            guard done else { return nil }
            let status = Int(core.startLine[1]) ?? 0
            // RFC 9110 §15.2: a client must accept 1xx interim responses (100 Continue,
            // 103 Early Hints) before the final one, and skip them. 101 would switch
            // protocols, which Linnet never asks for: it is returned as final.
            guard (100..<200).contains(status) && status != 101 else { return response() }
            let rest = core.buffer
            core = HTTPMessageParser(limits: core.limits)
            core.buffer = rest
            input = UnsafeRawBufferPointer(start: nil, count: 0)
        }
    }

    public mutating func feed(_ bytes: [UInt8]) throws(HTTPError) -> HTTPResponse? {
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(HTTPError) in try feed(raw) }
    }

    /// The connection closed: the response if its end was the close, else an error.
    public mutating func finish() throws(HTTPError) -> HTTPResponse {
        if core.headerDone, case .untilClose = core.framing { return response() }
        if core.complete { return response() }
        throw .truncated
    }

    func response() -> HTTPResponse {
        HTTPResponse(status: Int(core.startLine[1]) ?? 0, reason: core.startLine.count > 2 ? core.startLine[2] : "",
                     headers: core.headers, body: core.body)
    }
}

/// A request as the built-in answerer receives it.
public struct HTTPServerRequest: Sendable {
    public var method: String
    public var target: String
    public var headers: HTTPHeaders
    public var body: [UInt8]
}

/// Parses one HTTP/1.1 request (the built-in answerer's side).
public struct HTTPRequestParser {
    var core: HTTPMessageParser

    public init(limits: HTTPLimits = HTTPLimits()) { core = HTTPMessageParser(limits: limits) }

    public mutating func feed(_ bytes: UnsafeRawBufferPointer) throws(HTTPError) -> HTTPServerRequest? {
        let done = try core.feed(bytes, isResponse: false) { _ in false }
        guard done else { return nil }
        return HTTPServerRequest(method: core.startLine[0], target: core.startLine[1], headers: core.headers, body: core.body)
    }

    public mutating func feed(_ bytes: [UInt8]) throws(HTTPError) -> HTTPServerRequest? {
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(HTTPError) in try feed(raw) }
    }
}

extension HTTPResponse {
    /// The response's bytes (the built-in answerer's side), with Content-Length.
    public func serialize() -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason.isEmpty ? HTTPResponse.reasonPhrase(status) : reason)\r\n"
        for field in headers.fields { head += "\(field.name): \(field.value)\r\n" }
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + body
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 413: return "Content Too Large"
        case 415: return "Unsupported Media Type"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status"
        }
    }
}
