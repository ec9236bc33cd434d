/// The three ways an offer reaches a provider (ARCHITECTURE.md "Sessions"), both sides of
/// the wire, pure: request builders and response parsers for the client (`linnet run`),
/// request parsers and response builders for the server (`linnet answer`), sharing one
/// spelling of every path, header and JSON field.
///
/// - Backend (the app's own backend): `POST {base}/voice/{chat}` JSON `{"sdp"}` →
///   `{"id","sdp"}`; `POST {base}/voice/{chat}/{id}/close` → `{"seconds"}`.
/// - WHIP (RFC 9725): `POST` `application/sdp` → `201` + `Location` (+ `ETag`, `Link`
///   ice-servers, §4.6); `DELETE` the resource to end; `PATCH`
///   `application/trickle-ice-sdpfrag` with `If-Match` for an ICE restart (§4.3.2).
/// - OpenAI Realtime: the device's token buys an ephemeral key (`POST {token-url}` →
///   `{"value"}` or `{"client_secret":{"value"}}`), then `POST {calls}` `application/sdp`
///   → `201` + `Location`; `POST {Location}/hangup` to end.
///
/// Nothing here reads a clock or does I/O: `Retry-After` dates are judged against the
/// `now` passed in (Unix seconds).
import JSON
import Wire

/// How the offer reaches the provider.
public enum Route: Equatable, Sendable {
    /// RFC 9725: POST the offer, DELETE the Location to end, PATCH for ICE restart.
    case whip(HTTPURL)
    /// The app backend: POST {base}/voice/{chat} {"sdp"} → {"id","sdp"}; …/close.
    case backend(base: HTTPURL, chat: String)
    /// OpenAI Realtime with an ephemeral key from the backend (`tokenURL`).
    case openai(calls: HTTPURL, tokenURL: HTTPURL)

    public var name: String {
        switch self {
        case .whip: return "WHIP"
        case .backend: return "backend"
        case .openai: return "OpenAI Realtime"
        }
    }

    /// What the provider is called in messages ("WHIP endpoint answered 500 …").
    public var providerWords: String {
        switch self {
        case .whip: return "WHIP endpoint"
        case .backend: return "backend"
        case .openai: return "OpenAI Realtime"
        }
    }

    /// The URL whose origin the device's token was configured for.
    public var credentialURL: HTTPURL {
        switch self {
        case .whip(let url): return url
        case .backend(let base, _): return base
        case .openai(_, let tokenURL): return tokenURL
        }
    }

    /// The URL the answer comes from (whose host the provider's ICE servers are judged
    /// against, `LearnedServers`).
    public var answerURL: HTTPURL {
        switch self {
        case .whip(let url): return url
        case .backend(let base, _): return base
        case .openai(let calls, _): return calls
        }
    }

    /// Whether ICE can be restarted in place on this route (WHIP with an ETag).
    public var restartsICE: Bool { if case .whip = self { return true } else { return false } }
}

/// The media types the routes carry.
public enum RouteMediaType {
    public static let sdp = "application/sdp"
    public static let json = "application/json"
    public static let fragment = "application/trickle-ice-sdpfrag"
}

/// Path pieces shared by both sides.
public enum RoutePath {
    public static let voice = "voice"
    public static let close = "close"
    public static let hangup = "hangup"
    public static let whip = "whip"

    /// `{base}/voice/{chat}`.
    public static func backendOffer(_ base: HTTPURL, chat: String) -> HTTPURL {
        var url = base
        url.target = join(base.target, voice + "/" + percentEncodedSegment(chat))
        return url
    }

    /// `{base}/voice/{chat}/{id}/close`.
    public static func backendClose(_ base: HTTPURL, chat: String, id: String) -> HTTPURL {
        var url = base
        url.target = join(base.target, voice + "/" + percentEncodedSegment(chat) + "/" + percentEncodedSegment(id) + "/" + close)
        return url
    }

    /// `{resource}/hangup`.
    public static func hangup(_ resource: HTTPURL) -> HTTPURL {
        var url = resource
        url.target = join(resource.target, hangup)
        return url
    }

    /// `base`'s path (query dropped, trailing slashes folded) + "/" + `tail`.
    public static func join(_ base: String, _ tail: String) -> String {
        var b = Substring(base)
        if let q = b.firstIndex(ofByte: UInt8(ascii: "?")) { b = b.bytes(from: b.startIndex, to: q) }
        while b.endsWithBytes("/") { b = Substring(b.utf8.dropLast()) }
        return String(b) + "/" + tail
    }
}

/// RFC 3986 §2.3 unreserved characters.
public func isUnreserved(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
        || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~")
}

/// One path segment, percent-encoded (RFC 3986 §2.1): everything but unreserved
/// characters, so "/", "?", "%", CR and LF cannot change the request's shape.
public func percentEncodedSegment(_ s: String) -> String {
    let hex = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for c in s.utf8 {
        if isUnreserved(c) {
            out.append(c)
        } else {
            out += [UInt8(ascii: "%"), hex[Int(c >> 4)], hex[Int(c & 15)]]
        }
    }
    return String(decoding: out, as: UTF8.self)
}

/// An ICE server a WHIP endpoint offered: `Link: <turn:…>; rel="ice-server";
/// username="…"; credential="…"` (RFC 9725 §4.6, RFC 8288 link syntax).
public struct ICEServerLink: Equatable, Sendable {
    public var url: String
    public var username: String?
    public var credential: String?

    public init(url: String, username: String? = nil, credential: String? = nil) {
        self.url = url
        self.username = username
        self.credential = credential
    }

    /// Every `rel="ice-server"` link in one `Link` field value (links separated by
    /// commas outside `<…>` and quotes; parameters by semicolons; quoted values may hold
    /// `,` `;` and `\"`). Malformed links are skipped, never trapped on.
    public static func parse(_ header: String) -> [ICEServerLink] {
        var out: [ICEServerLink] = []
        for link in splitOutsideQuotes(Array(header.utf8), UInt8(ascii: ","), respectAngles: true) {
            let parts = splitOutsideQuotes(link, UInt8(ascii: ";"), respectAngles: true)
            guard let first = parts.first else { continue }
            let target = trim(first)
            guard target.count >= 2, target.first == UInt8(ascii: "<"), target.last == UInt8(ascii: ">") else { continue }
            var rel = false
            var server = ICEServerLink(url: String(decoding: target.dropFirst().dropLast(), as: UTF8.self))
            for p in parts.dropFirst() {
                let param = trim(p)
                guard let eq = param.firstIndex(of: UInt8(ascii: "=")) else { continue }
                let name = lowercasedASCII(String(decoding: trim(Array(param[..<eq])), as: UTF8.self))
                let value = unquote(trim(Array(param[(eq + 1)...])))
                switch name {
                case "rel":
                    // rel may list several types (RFC 8288 §3.3), compared ASCII
                    // case-insensitively (§2.1.1).
                    rel = value.split(byte: UInt8(ascii: " ")).contains { asciiEqualIgnoringCase($0, "ice-server") }
                case "username": server.username = value
                case "credential": server.credential = value
                default: break
                }
            }
            guard rel, !server.url.isEmpty, !server.url.utf8.contains(where: { $0 < 0x21 || $0 == 0x7F }) else { continue }
            out.append(server)
        }
        return out
    }

    static func trim(_ b: [UInt8]) -> [UInt8] {
        var s = b[...]
        while let c = s.first, c == 0x20 || c == 0x09 { s = s.dropFirst() }
        while let c = s.last, c == 0x20 || c == 0x09 { s = s.dropLast() }
        return Array(s)
    }

    static func unquote(_ b: [UInt8]) -> String {
        guard b.count >= 2, b.first == UInt8(ascii: "\""), b.last == UInt8(ascii: "\"") else { return String(decoding: b, as: UTF8.self) }
        var out: [UInt8] = []
        var escaped = false
        for c in b.dropFirst().dropLast() {
            if escaped { out.append(c); escaped = false; continue }
            if c == UInt8(ascii: "\\") { escaped = true; continue }
            out.append(c)
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func splitOutsideQuotes(_ b: [UInt8], _ separator: UInt8, respectAngles: Bool) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var current: [UInt8] = []
        var quoted = false, angle = false, escaped = false
        for c in b {
            if escaped { current.append(c); escaped = false; continue }
            if quoted && c == UInt8(ascii: "\\") { escaped = true; current.append(c); continue }
            if c == UInt8(ascii: "\"") && !angle { quoted.toggle() }
            if respectAngles && !quoted {
                if c == UInt8(ascii: "<") { angle = true }
                if c == UInt8(ascii: ">") { angle = false }
            }
            if c == separator && !quoted && !angle {
                out.append(current)
                current = []
            } else {
                current.append(c)
            }
        }
        out.append(current)
        return out
    }
}

// MARK: - Client side

/// Why a route exchange failed, classified for the supervisor and the exit status.
public enum RouteFailure: Error, Equatable, Sendable, CustomStringConvertible {
    /// 401/403: the token is wrong or expired.
    case unauthorized(String)
    /// The server asked for a pause (`Retry-After`, RFC 9110 §10.2.3).
    case retryAfter(Wire.Duration, String)
    /// An answer came and is not usable data (not the SDP or JSON expected, a refused
    /// redirect, an id that cannot go into a path).
    case badAnswer(String)
    /// No answer, or a refusal (5xx and other statuses).
    case unavailable(String)
    /// 429 `insufficient_quota`: the account is out of credit. Not a rate limit: no
    /// retry helps until someone pays, so it backs off long.
    case quota(String)
    /// A 4xx with a JSON error body (OpenAI's `{"error": {"code", "message"}}`, e.g.
    /// 400 `invalid_offer`), or one whose `x-should-retry` is `false`: the request itself
    /// is wrong, so the same request will fail again. Backs off long; ends a
    /// `max-attempts` run with the data-error status.
    case rejected(String)
    /// 403 `unsupported_country_region_territory`: the provider does not serve the
    /// place the device is in. Only a person (another region, a proxy) can fix it.
    case region(String)

    public var description: String {
        switch self {
        case .unauthorized(let m), .badAnswer(let m), .unavailable(let m), .quota(let m), .rejected(let m), .region(let m): return m
        case .retryAfter(_, let m): return m
        }
    }
}

/// OpenAI's error body: `{"error": {"message": …, "type": …, "param": …, "code": …}}`.
public struct ProviderErrorBody: Equatable, Sendable {
    public var code: String?
    public var type: String?
    public var message: String?

    /// Nil unless the body is JSON with an `error` object.
    public init?(_ body: [UInt8]) {
        guard !body.isEmpty, body.count <= 64 * 1024, let json = try? JSONValue.parse(body), let error = json["error"],
              case .object = error else { return nil }
        code = error["code"]?.string
        type = error["type"]?.string
        message = error["message"]?.string
    }
}

/// What the provider said to the offer.
public struct RouteAnswer: Equatable, Sendable {
    /// The SDP answer.
    public var sdp: String
    /// WHIP/OpenAI: the session's resource (Location), where DELETE, PATCH, hangup go.
    public var resource: HTTPURL?
    /// WHIP: present when the endpoint takes ICE restarts (RFC 9725 §4.3.1).
    public var etag: String?
    /// WHIP: ICE servers from `Link` headers (RFC 9725 §4.6).
    public var iceServers: [ICEServerLink]
    /// Backend: the voice id for the close route; nil when there is none or it is unusable.
    public var voiceID: String?
    /// Things worth a warning that do not stop the call (an unusable Location or id).
    public var warnings: [String]
}

/// The outcome of one offer exchange.
public enum OfferOutcome: Equatable, Sendable {
    case answer(RouteAnswer)
    /// 307/308 (RFC 9725 §4.5): post the same offer there.
    case redirect(HTTPURL)
    case failure(RouteFailure)
}

public enum RouteClient {
    /// At most this many redirects are followed for one offer.
    public static let maxRedirects = 3

    /// `POST {token-url}` `{}` with the device's token: the ephemeral key for OpenAI.
    public static func ephemeralKeyRequest(_ tokenURL: HTTPURL, credential: BearerCredential?) -> HTTPRequest {
        var h = HTTPHeaders()
        h.add("User-Agent", userAgent)
        h.add("Content-Type", RouteMediaType.json)
        if let value = credential?.authorization(for: tokenURL) { h.add("Authorization", value) }
        return HTTPRequest(method: "POST", url: tokenURL, headers: h, body: Array("{}".utf8))
    }

    /// The key from the token URL's answer: GA `client_secrets` shape `{"value": …}` or the
    /// older `{"client_secret": {"value": …}}`; printable ASCII only (it goes into a header).
    public static func ephemeralKey(_ r: HTTPResponse, tokenURL: HTTPURL, now: Int64, redact: (String) -> String) -> Result<String, RouteFailure> {
        ephemeralKeyDetails(r, tokenURL: tokenURL, now: now, redact: redact).map { $0.key }
    }

    /// The key and when it expires (`expires_at`, Unix seconds; OpenAI's default is 10
    /// minutes after it was made), when the answer says.
    public static func ephemeralKeyDetails(_ r: HTTPResponse, tokenURL: HTTPURL, now: Int64,
                                           redact: (String) -> String) -> Result<(key: String, expiresAt: Int64?), RouteFailure> {
        guard (200..<300).contains(r.status) else { return .failure(classify(r, "the token URL \(tokenURL)", now: now, redact: redact)) }
        let json = try? JSONValue.parse(r.body)
        guard let key = json?["value"]?.string ?? json?["client_secret"]?["value"]?.string, !key.isEmpty,
              !key.utf8.contains(where: { $0 < 0x21 || $0 > 0x7E }) else {
            return .failure(.badAnswer("the token URL \(tokenURL) answered without a key (expected JSON {\"value\": …}): \(redactedExcerpt(r, 80, redact))"))
        }
        let expires = json?["expires_at"]?.int64 ?? json?["client_secret"]?["expires_at"]?.int64
        return .success((key, expires))
    }

    /// Ending an OpenAI call. OpenAI documents `/calls/{id}/hangup` with the
    /// real API key, which the device does not have, and the ephemeral key it has expires
    /// (10 minutes by default). So: through the backend's `hangup-url` where there is one
    /// (POST `{"call_id": …}` with the device's token); else with the ephemeral key while
    /// it is valid; past its `expires_at`, nothing (the peer connection's close ends it).
    public static func openAIHangup(answer: RouteAnswer?, key: BearerCredential?, keyExpired: Bool,
                                    hangupURL: HTTPURL?, device: BearerCredential?) -> HTTPRequest? {
        guard let resource = answer?.resource else { return nil }
        if let hangupURL {
            let id = resource.target.split(byte: UInt8(ascii: "/")).last.map(String.init) ?? ""
            guard !id.isEmpty else { return nil }
            let body: JSONValue = ["call_id": .string(id)]
            return HTTPRequest(method: "POST", url: hangupURL, headers: headers(RouteMediaType.json, device, hangupURL), body: body.serialized())
        }
        if keyExpired { return nil }
        let url = RoutePath.hangup(resource)
        return HTTPRequest(method: "POST", url: url, headers: headers(nil, key, url))
    }

    /// The offer request for `route`, with `Authorization` only where `bearer` belongs.
    public static func offerRequest(_ route: Route, offer: String, bearer: BearerCredential?) -> HTTPRequest {
        switch route {
        case .whip(let url):
            return HTTPRequest(method: "POST", url: url, headers: headers(RouteMediaType.sdp, bearer, url), body: Array(offer.utf8))
        case .openai(let calls, _):
            return HTTPRequest(method: "POST", url: calls, headers: headers(RouteMediaType.sdp, bearer, calls), body: Array(offer.utf8))
        case .backend(let base, let chat):
            let url = RoutePath.backendOffer(base, chat: chat)
            let body: JSONValue = ["sdp": .string(offer)]
            return HTTPRequest(method: "POST", url: url, headers: headers(RouteMediaType.json, bearer, url), body: body.serialized())
        }
    }

    /// The same offer request sent to a redirect's target: the token only if it belongs
    /// there (RFC 6454 origins, Signaling/Origin.swift).
    public static func redirected(_ request: HTTPRequest, to url: HTTPURL, bearer: BearerCredential?) -> HTTPRequest {
        var again = request
        again.url = url
        again.headers.remove("Authorization")
        if let value = bearer?.authorization(for: url) { again.headers.add("Authorization", value) }
        return again
    }

    /// What the answer to an offer posted at `url` means.
    public static func offerOutcome(_ route: Route, _ r: HTTPResponse, url: HTTPURL, now: Int64,
                                    redact: (String) -> String) -> OfferOutcome {
        if r.status == 307 || r.status == 308 {
            guard let location = r.headers["Location"] else {
                return .failure(.badAnswer("\(url) answered \(r.status) without a Location"))
            }
            do throws(RedirectRefusal) { return .redirect(try url.redirect(to: location)) } catch {
                return .failure(.badAnswer("the offer to \(url): \(error)"))
            }
        }
        var answer = RouteAnswer(sdp: "", resource: nil, etag: nil, iceServers: [], voiceID: nil, warnings: [])
        switch route {
        case .whip, .openai:
            guard r.status == 201 || r.status == 200 else { return .failure(classify(r, route.providerWords, now: now, redact: redact)) }
            if let location = r.headers["Location"] {
                // The resource is where DELETE and PATCH go (RFC 9725 §4.2): an http(s)
                // URL, no downgrade; on another origin it gets no token.
                do throws(RedirectRefusal) { answer.resource = try url.redirect(to: location) } catch {
                    answer.warnings.append("the answer's Location is unusable (\(error)); the session cannot be ended or restarted through it")
                }
            }
            answer.etag = r.headers["ETag"]
            answer.iceServers = r.headers.values("Link").flatMap(ICEServerLink.parse)
            answer.sdp = r.bodyText
        case .backend:
            guard (200..<300).contains(r.status) else { return .failure(classify(r, route.providerWords, now: now, redact: redact)) }
            guard let json = try? JSONValue.parse(r.body), let sdp = json["sdp"]?.string else {
                return .failure(.badAnswer("the backend's answer is not JSON with an \"sdp\" string: \(redactedExcerpt(r, 120, redact))"))
            }
            switch voiceID(json["id"]) {
            case .absent: break
            case .id(let id): answer.voiceID = id
            case .refused(let why): answer.warnings.append(why)
            }
            answer.sdp = sdp
            answer.iceServers = iceServers(json["iceServers"])
        }
        return .answer(answer)
    }

    /// `iceServers` in the browser's RTCIceServer shape (`[{urls, username, credential}]`,
    /// `urls` a string or a list), as a backend hands them to a web client. Entries that
    /// are not that shape are skipped; at most 8 servers are taken.
    public static func iceServers(_ value: JSONValue?) -> [ICEServerLink] {
        guard let list = value?.array else { return [] }
        var out: [ICEServerLink] = []
        for entry in list {
            guard entry.object != nil else { continue }
            var urls: [String] = []
            if let u = entry["urls"]?.string { urls = [u] } else if let a = entry["urls"]?.array { urls = a.compactMap { $0.string } }
            for u in urls where !u.isEmpty && u.utf8.count <= 512 && !u.utf8.contains(where: { $0 < 0x21 || $0 == 0x7F }) {
                guard out.count < 8 else { return out }
                out.append(ICEServerLink(url: u, username: entry["username"]?.string, credential: entry["credential"]?.string))
            }
        }
        return out
    }

    /// The backend's voice id, which goes into the close route's path: a string (or a
    /// whole number, written in decimal) of 1–128 characters from RFC 3986's unreserved
    /// set, and not "." or "..". Anything else (CRLF that would start a header, `../`
    /// that would walk the path, an object) is refused with the reason: the session then
    /// ends without a close request. No id at all is no close request and no warning.
    public enum VoiceID: Equatable, Sendable {
        case absent
        case id(String)
        case refused(String)
    }

    public static func voiceID(_ value: JSONValue?) -> VoiceID {
        guard let value, value != .null else { return .absent }
        let text: String
        if let s = value.string {
            text = s
        } else if let n = value.int64, n >= 0 {
            text = String(n)
        } else {
            return .refused("the backend's voice id is not a string or a whole number: no close request will be sent")
        }
        let ok = !text.isEmpty && text.utf8.count <= 128 && !text.bytesEqual(".") && !text.bytesEqual("..") && text.utf8.allSatisfy { isUnreserved($0) }
        guard ok else {
            return .refused("the backend's voice id is unusable in a URL path (only A-Z a-z 0-9 - . _ ~, at most 128): no close request will be sent")
        }
        return .id(text)
    }

    /// The request that ends a session on the provider's side, if the route has one for
    /// what the answer gave: DELETE the WHIP resource, POST `{resource}/hangup`, POST the
    /// backend's close route.
    public static func closeRequest(_ route: Route, answer: RouteAnswer?, bearer: BearerCredential?) -> HTTPRequest? {
        switch route {
        case .whip:
            guard let resource = answer?.resource else { return nil }
            return HTTPRequest(method: "DELETE", url: resource, headers: headers(nil, bearer, resource))
        case .openai:
            guard let resource = answer?.resource else { return nil }
            let url = RoutePath.hangup(resource)
            return HTTPRequest(method: "POST", url: url, headers: headers(nil, bearer, url))
        case .backend(let base, let chat):
            guard let id = answer?.voiceID else { return nil }
            let url = RoutePath.backendClose(base, chat: chat, id: id)
            return HTTPRequest(method: "POST", url: url, headers: headers(RouteMediaType.json, bearer, url), body: Array("{}".utf8))
        }
    }

    /// WHIP ICE restart (RFC 9725 §4.3.2): the RFC 8840 fragment with our new
    /// credentials, `If-Match: "*"`.
    public static func restartRequest(resource: HTTPURL, fragment: String, bearer: BearerCredential?) -> HTTPRequest {
        var h = headers(RouteMediaType.fragment, bearer, resource)
        h.add("If-Match", "\"*\"")
        return HTTPRequest(method: "PATCH", url: resource, headers: h, body: Array(fragment.utf8))
    }

    /// The answer to a restart: the peer's fragment and the new ETag, or why not.
    public static func restartOutcome(_ r: HTTPResponse, redact: (String) -> String) -> Result<(fragment: String, etag: String?), RouteFailure> {
        guard r.status == 200 else { return .failure(.unavailable("ICE restart refused (\(r.status) \(redact(r.reason)))")) }
        return .success((r.bodyText, r.headers["ETag"]))
    }

    /// What a refusal means:
    /// - 401 → the token; 403 → the token, unless the body says the region is not
    ///   served (`unsupported_country_region_territory`).
    /// - 429 `insufficient_quota` → `.quota` (no credit, not a rate limit).
    /// - A wait asked for (`retry-after-ms`, `Retry-After`, fractional or a date) →
    ///   `.retryAfter`.
    /// - `x-should-retry: false`, or a 4xx with a JSON error body (400 `invalid_offer`,
    ///   422 …) → `.rejected`; `x-should-retry: true` → `.unavailable` (an ordinary retry).
    /// - Other statuses (5xx, a 429 rate limit without a wait) → `.unavailable`.
    /// The message shows the provider's own `error.message` where it gave one.
    public static func classify(_ r: HTTPResponse, _ who: String, now: Int64, redact: (String) -> String) -> RouteFailure {
        let body = ProviderErrorBody(r.body)
        let said: String
        if let m = body?.message, !m.isEmpty {
            said = redact(m.utf8.count > 300 ? String(decoding: Array(m.utf8.prefix(300)), as: UTF8.self) + "…" : m)
                + (body?.code.map { " [\($0)]" } ?? "")
        } else {
            said = redactedExcerpt(r, 120, redact)
        }
        let message = "\(who) answered \(r.status) \(redact(r.reason)): \(said)"
        let code = body?.code ?? body?.type
        // Error codes are protocol tokens: compared byte for byte.
        if r.status == 403, code?.bytesEqual("unsupported_country_region_territory") == true {
            return .region("\(message) — the provider does not serve this country or region; the token is not the problem")
        }
        if r.status == 401 || r.status == 403 { return .unauthorized(message) }
        if r.status == 429, code?.bytesEqual("insufficient_quota") == true || body?.type?.bytesEqual("insufficient_quota") == true {
            return .quota("\(message) — the account is out of quota (check its plan and billing); this is not a rate limit")
        }
        if let delay = r.retryAfter(now: now) { return .retryAfter(delay, message) }
        if let retry = r.shouldRetry { return retry ? .unavailable(message) : .rejected(message) }
        if (400..<500).contains(r.status), r.status != 408, r.status != 409, r.status != 429, body != nil { return .rejected(message) }
        return .unavailable(message)
    }

    /// The start of a response's body for a message, with secrets taken out *before* it
    /// is cut: cut first, a token echoed near the limit would survive as a prefix the
    /// redaction no longer recognises.
    public static func redactedExcerpt(_ r: HTTPResponse, _ limit: Int, _ redact: (String) -> String) -> String {
        let head = HTTPResponse(status: r.status, body: Array(redact(String(decoding: r.body.prefix(16 * 1024), as: UTF8.self)).utf8))
        return head.bodyExcerpt(limit) + (r.body.count > 16 * 1024 && head.body.count <= limit ? "…" : "")
    }

    /// `User-Agent` on every route request (OpenAI asks clients to identify themselves).
    public static let userAgent = "linnet/" + LinnetVersion.string

    /// Whether `pin-sha256` applies to `url` on `route`: the device's own servers (the
    /// token URL, the backend, the WHIP endpoint) only, never the OpenAI calls host,
    /// whose certificate chain OpenAI rotates (a pin there would break every device at
    /// the next rotation).
    public static func pinsApply(to url: HTTPURL, route: Route) -> Bool {
        switch route {
        case .whip(let endpoint): return url.host.bytesEqual(endpoint.host)
        case .backend(let base, _): return url.host.bytesEqual(base.host)
        case .openai(_, let tokenURL): return url.host.bytesEqual(tokenURL.host)
        }
    }

    public static func headers(_ contentType: String?, _ bearer: BearerCredential?, _ url: HTTPURL) -> HTTPHeaders {
        var h = HTTPHeaders()
        h.add("User-Agent", userAgent)
        if let contentType { h.add("Content-Type", contentType) }
        if let value = bearer?.authorization(for: url) { h.add("Authorization", value) }
        return h
    }
}

// MARK: - Server side

/// A request a provider (`linnet answer`) receives, once parsed.
public enum RouteServerRequest: Equatable, Sendable {
    /// A WHIP offer: POST `application/sdp` to any path that is not a session resource.
    case whipOffer(sdp: String)
    /// DELETE `/whip/{id}`.
    case whipDelete(id: String)
    /// PATCH `/whip/{id}` with a fragment.
    case whipRestart(id: String, fragment: String)
    /// POST `/voice/{chat}` `{"sdp"}`.
    case backendOffer(chat: String, sdp: String)
    /// POST `/voice/{chat}/{id}/close`.
    case backendClose(chat: String, id: String)
}

public enum RouteServer {
    public enum Parsed: Equatable, Sendable {
        case request(RouteServerRequest)
        /// The response that refuses it (400, 405, 415).
        case refuse(HTTPResponse)
    }

    /// What the request asks for, or the response that refuses it.
    public static func parse(method: String, target: String, headers: HTTPHeaders, body: [UInt8]) -> Parsed {
        let path = target.split(byte: UInt8(ascii: "?"), maxSplits: 1, omittingEmptySubsequences: false)[0]
        let parts = path.split(byte: UInt8(ascii: "/")).map(String.init)
        // Media types are case-insensitive (RFC 9110 §8.3.1): ASCII-lowercased, then bytes.
        func contentType(_ type: String) -> Bool { headers["Content-Type"].map { lowercasedASCII($0).startsWithBytes(type) } ?? false }
        // Matched from the end, so a backend mounted under a prefix (`/api/voice/…`) works.
        let n = parts.count
        let isOffer = n >= 2 && parts[n - 2].bytesEqual(RoutePath.voice)
        let isClose = n >= 4 && parts[n - 4].bytesEqual(RoutePath.voice) && parts[n - 1].bytesEqual(RoutePath.close)
        let isResource = n >= 2 && parts[n - 2].bytesEqual(RoutePath.whip)
        switch method {
        case "POST" where isClose:
            return .request(.backendClose(chat: parts[n - 3], id: parts[n - 2]))
        case "POST" where isOffer:
            guard let json = try? JSONValue.parse(body), let sdp = json["sdp"]?.string else {
                return .refuse(text(400, "expected a JSON body {\"sdp\": \"…\"}"))
            }
            return .request(.backendOffer(chat: parts[n - 1], sdp: sdp))
        case "POST":
            guard contentType(RouteMediaType.sdp) else { return .refuse(text(415, "WHIP offers are application/sdp")) }
            return .request(.whipOffer(sdp: String(decoding: body, as: UTF8.self)))
        case "PATCH" where isResource:
            guard contentType(RouteMediaType.fragment) else { return .refuse(text(415, "ICE restarts are application/trickle-ice-sdpfrag")) }
            return .request(.whipRestart(id: parts[n - 1], fragment: String(decoding: body, as: UTF8.self)))
        case "DELETE" where isResource:
            return .request(.whipDelete(id: parts[n - 1]))
        default:
            return .refuse(text(405, "not a WHIP or voice route"))
        }
    }

    /// 201 with the answer, `Location: /whip/{id}` and an ETag (ICE restarts welcome).
    public static func whipCreated(id: String, answer: String, etag: String) -> HTTPResponse {
        HTTPResponse(status: 201, headers: HTTPHeaders([("Content-Type", RouteMediaType.sdp), ("Location", "/" + RoutePath.whip + "/" + id),
                                                        ("ETag", etag)]),
                     body: Array(answer.utf8))
    }

    /// 200 `{"id", "sdp"}`.
    public static func backendAnswered(id: String, answer: String) -> HTTPResponse {
        let body: JSONValue = ["id": .string(id), "sdp": .string(answer)]
        return HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", RouteMediaType.json)]), body: body.serialized())
    }

    /// 200 `{"seconds": n}`.
    public static func backendClosed(seconds: Int) -> HTTPResponse {
        let body: JSONValue = ["seconds": .number(JSONNumber(seconds))]
        return HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", RouteMediaType.json)]), body: body.serialized())
    }

    /// 200 with our fragment and the next ETag.
    public static func restarted(fragment: String, etag: String) -> HTTPResponse {
        HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", RouteMediaType.fragment), ("ETag", etag)]), body: Array(fragment.utf8))
    }

    public static func text(_ status: Int, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", "text/plain")]), body: Array((text + "\n").utf8))
    }
}

// MARK: - A session to close after a crash

/// How to end a provider session with the device's own credentials: kept on disk while
/// the session lives, because a process killed mid-call (SIGKILL, a watchdog abort, a
/// power cut) cannot close it, and the provider then keeps it (and may bill it) until
/// its own timeout. `run` sends it at its next start. Never holds a secret: the token
/// is the device's own, added when it is sent, and only for the configured origin (an
/// OpenAI ephemeral key is not kept: without `hangup-url` there is nothing to send).
public struct PendingClose: Sendable, Equatable {
    public var method: String
    public var url: HTTPURL
    public var body: [UInt8]
    public var contentType: String?

    public init(method: String, url: HTTPURL, body: [UInt8] = [], contentType: String? = nil) {
        self.method = method
        self.url = url
        self.body = body
        self.contentType = contentType
    }

    public static func == (a: PendingClose, b: PendingClose) -> Bool {
        a.method.bytesEqual(b.method) && a.url == b.url && a.body == b.body && bytesEqual(a.contentType, b.contentType)
    }

    /// The close of a session answered on `route`, or nil when the device alone cannot
    /// make it.
    public static func of(_ route: Route, answer: RouteAnswer, hangupURL: HTTPURL?) -> PendingClose? {
        switch route {
        case .whip:
            guard let resource = answer.resource else { return nil }
            return PendingClose(method: "DELETE", url: resource)
        case .backend(let base, let chat):
            guard let id = answer.voiceID else { return nil }
            return PendingClose(method: "POST", url: RoutePath.backendClose(base, chat: chat, id: id), body: Array("{}".utf8),
                                contentType: RouteMediaType.json)
        case .openai:
            guard let hangupURL, let resource = answer.resource,
                  let id = resource.target.split(byte: UInt8(ascii: "/")).last.map(String.init), !id.isEmpty else { return nil }
            let body: JSONValue = ["call_id": .string(id)]
            return PendingClose(method: "POST", url: hangupURL, body: body.serialized(), contentType: RouteMediaType.json)
        }
    }

    /// The request, with the device's token where `bearer` allows it (its origin only).
    public func request(bearer: BearerCredential?) -> HTTPRequest {
        HTTPRequest(method: method, url: url, headers: RouteClient.headers(contentType, bearer, url), body: body)
    }

    public var json: JSONValue {
        var o = JSONObject()
        o["method"] = .string(method)
        o["url"] = .string(url.description)
        if !body.isEmpty { o["body"] = .string(String(decoding: body, as: UTF8.self)) }
        if let contentType { o["content_type"] = .string(contentType) }
        return .object(o)
    }

    /// From `json`; nil for anything else (a file someone edited, a newer format).
    public init?(json: JSONValue) {
        guard let m = json["method"]?.string, m.bytesEqual("DELETE") || m.bytesEqual("POST"),
              let u = json["url"]?.string, let url = try? HTTPURL(u) else { return nil }
        method = m
        self.url = url
        body = json["body"]?.string.map { Array($0.utf8) } ?? []
        contentType = json["content_type"]?.string
    }
}
