// One session with the provider through a route (ARCHITECTURE.md "Sessions"): offer
// out, answer in, the call's network side, the events channel, and the provider-side
// close. It reports what happens to the agent runner, which decides (through the
// Agent module's Supervisor) what to do about it; it never ends the process itself.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import Peer
import SDP
import ICE
import Agent
import SCTP

/// How the offer reaches the provider.
enum Route: Equatable {
    /// RFC 9725: POST the offer, DELETE the Location to end, PATCH for ICE restart.
    case whip(HTTPURL)
    /// The app backend: POST {base}/voice/{chat} {"sdp"} → {"id","sdp"}; …/close.
    case backend(base: HTTPURL, chat: String)
    /// OpenAI Realtime with an ephemeral key from the backend (`tokenURL`):
    /// POST {calls} application/sdp → 201 + Location; POST {Location}/hangup.
    case openai(calls: HTTPURL, tokenURL: HTTPURL)

    var name: String {
        switch self {
        case .whip: return "WHIP"
        case .backend: return "backend"
        case .openai: return "OpenAI Realtime"
        }
    }
}

/// What a session tells the runner.
enum SessionReport {
    case connected
    case disconnected
    /// With the exit status it would mean if the agent gave up on it (sysexits.h).
    case failed(SessionFailure, ExitStatus)
    case ended(String)
    case channelOpened(channel: UInt16, label: String)
    case message(label: String, text: String?, binary: [UInt8]?)
    case channelClosed(UInt16)
    /// The answer rejected the data channel we offered (`m=application 0`).
    case channelRejected(label: String)
}

/// Sends one HTTP request on the loop (HTTP or HTTPS); the runner supplies it.
typealias HTTPSend = (_ request: HTTPRequest, _ timeout: Duration, _ completion: @escaping (Result<HTTPResponse, HTTPClientError>) -> Void) -> Void

final class ProviderSession {
    let id: Int
    let loop: EventLoop
    let route: Route
    let token: String?
    let http: HTTPSend
    let call: Call
    let media: MediaPath
    let channelLabel: String
    var onReport: (SessionReport) -> Void = { _ in }

    /// WHIP/OpenAI resource (Location), backend voice id, WHIP ETag (ICE restart).
    var resource: HTTPURL?
    var voiceID: String?
    var etag: String?
    /// The device's token, bound to the origin the route was configured with (the WHIP
    /// endpoint, the backend, OpenAI's token URL): it is sent nowhere else.
    let deviceCredential: BearerCredential?
    /// The bearer for this session's provider requests: the device's token, or on
    /// OpenAI the ephemeral key, bound to the calls URL's origin.
    var bearer: BearerCredential?
    /// Said once per session: the resource is on another origin, so it gets no token.
    var warnedForeignResource = false
    var eventsChannel: UInt16?
    var queued: [String] = []
    var wasConnected = false
    var closing = false
    var offerSentAt: Instant?
    var firstAudioAt: Instant?
    /// ICE servers the WHIP endpoint offered in `Link` headers (RFC 9725 §4.6).
    var iceServers: [String] = []

    init(id: Int, loop: EventLoop, route: Route, token: String?, http: @escaping HTTPSend, call: Call, media: MediaPath,
         channelLabel: String) {
        self.id = id
        self.loop = loop
        self.route = route
        self.token = token
        self.http = http
        self.call = call
        self.media = media
        self.channelLabel = channelLabel
        let configured: HTTPURL
        switch route {
        case .whip(let url): configured = url
        case .backend(let base, _): configured = base
        case .openai(_, let tokenURL): configured = tokenURL
        }
        deviceCredential = token.map { BearerCredential(token: $0, for: configured) }
        if case .openai = route { bearer = nil } else { bearer = deviceCredential }
    }

    /// Headers for a request to `url`; `Authorization` only where the bearer belongs.
    func headers(_ contentType: String?, for url: HTTPURL) -> HTTPHeaders {
        var h = HTTPHeaders()
        if let contentType { h.add("Content-Type", contentType) }
        if let value = bearer?.authorization(for: url) { h.add("Authorization", value) }
        return h
    }

    /// A server's text for the log and the events, with our secrets taken out (an error
    /// page may echo the request's headers back).
    func redacted(_ text: String) -> String {
        var t = text
        if let deviceCredential { t = deviceCredential.redact(t) }
        if let bearer { t = bearer.redact(t) }
        return t
    }

    func start() {
        // These closures hold the session; `close` replaces them to break the cycle.
        call.onEvent = { e in self.event(e) }
        call.onAudio = { a in
            if self.firstAudioAt == nil { self.firstAudioAt = self.loop.now }
            self.media.received(a)
        }
        call.start()
        call.whenGathered(timeout: .seconds(2)) { self.begin() }
    }

    func begin() {
        guard !closing else { return }
        if case .openai(_, let tokenURL) = route {
            fetchEphemeralKey(tokenURL)
        } else {
            sendOffer()
        }
    }

    /// OpenAI: the device asks its backend for a short-lived key (the provider's real
    /// key never leaves the backend; PROTOCOLS.md). Accepts the GA `client_secrets`
    /// shape `{"value": …}` and the older `{"client_secret": {"value": …}}`.
    func fetchEphemeralKey(_ url: HTTPURL) {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        if let value = deviceCredential?.authorization(for: url) { h.add("Authorization", value) }
        let request = HTTPRequest(method: "POST", url: url, headers: h, body: Array("{}".utf8))
        Log.info("session \(id): ephemeral key ← \(url)")
        http(request, .seconds(10)) { result in
            guard !self.closing else { return }
            switch result {
            case .failure(let e):
                self.failRequest(e, e.isConfigurationProblem ? .configuration("the token URL \(url): \(e)") : .transient("the token URL \(url) did not answer: \(e)"))
            case .success(let r):
                guard (200..<300).contains(r.status) else {
                    return self.fail(self.classify(r, "the token URL \(url)"))
                }
                let json = try? JSONValue.parse(r.body)
                guard let key = json?["value"]?.string ?? json?["client_secret"]?["value"]?.string, !key.isEmpty,
                      !key.utf8.contains(where: { $0 < 0x21 || $0 > 0x7E }) else {
                    return self.fail(.transient("the token URL \(url) answered without a key (expected JSON {\"value\": …}): \(self.redacted(r.bodyExcerpt(80)))"), .dataError)
                }
                if case .openai(let calls, _) = self.route { self.bearer = BearerCredential(token: key, for: calls) }
                self.sendOffer()
            }
        }
    }

    func sendOffer() {
        let offer: String
        do throws(PeerError) { offer = try call.peer.createOffer() } catch {
            return fail(.transient("cannot build the offer: \(error)"), .software)
        }
        let request: HTTPRequest
        switch route {
        case .whip(let url):
            request = HTTPRequest(method: "POST", url: url, headers: headers("application/sdp", for: url), body: Array(offer.utf8))
        case .openai(let calls, _):
            request = HTTPRequest(method: "POST", url: calls, headers: headers("application/sdp", for: calls), body: Array(offer.utf8))
        case .backend(let base, let chat):
            var url = base
            url.target = joinPath(base.target, "voice/\(percentEncodedSegment(chat))")
            let body: JSONValue = ["sdp": .string(offer)]
            request = HTTPRequest(method: "POST", url: url, headers: headers("application/json", for: url), body: body.serialized())
        }
        Log.info("session \(id): offer → \(request.url)")
        offerSentAt = loop.now
        post(request, redirects: 3)
    }

    /// Posts the offer, following 307/308 redirects (RFC 9725 §4.5, RFC 9110 §15.4.8):
    /// at most `redirects` of them, never from https to http, never to another scheme,
    /// and without the token to another origin (see Signaling/Origin.swift).
    func post(_ request: HTTPRequest, redirects: Int) {
        http(request, .seconds(10)) { result in
            guard !self.closing else { return }
            switch result {
            case .failure(let error):
                self.failRequest(error, error.isConfigurationProblem ? .configuration("the offer to \(request.url): \(error)")
                          : .transient("the offer to \(request.url) was not answered: \(error)"))
            case .success(let response) where response.status == 307 || response.status == 308:
                guard redirects > 0 else {
                    return self.fail(.transient("the offer to \(request.url) was redirected too many times (a redirect loop?)"), .dataError)
                }
                guard let location = response.headers["Location"] else {
                    return self.fail(.transient("\(request.url) answered \(response.status) without a Location"), .dataError)
                }
                let next: HTTPURL
                do throws(RedirectRefusal) { next = try request.url.redirect(to: location) } catch {
                    return self.fail(.transient("the offer to \(request.url): \(error)"), .dataError)
                }
                var again = request
                again.url = next
                again.headers.remove("Authorization")
                if let value = self.bearer?.authorization(for: next) {
                    again.headers.add("Authorization", value)
                    Log.info("session \(self.id): redirected to \(next)")
                } else if self.bearer != nil {
                    Log.warning("session \(self.id): redirected to \(next), another origin than the one configured: the token is not sent there")
                }
                self.post(again, redirects: redirects - 1)
            case .success(let response):
                self.answered(response, url: request.url)
            }
        }
    }

    /// 401/403 → check the token; 429/503 with Retry-After → as asked; else transient.
    func classify(_ r: HTTPResponse, _ who: String) -> SessionFailure {
        let message = "\(who) answered \(r.status) \(redacted(r.reason)): \(redacted(r.bodyExcerpt(120)))"
        if r.status == 401 || r.status == 403 { return .unauthorized(message) }
        if let delay = r.retryAfter(now: RealtimeClock.unixSeconds()) { return .retryAfter(delay, message) }
        return .transient(message)
    }

    func answered(_ response: HTTPResponse, url: HTTPURL) {
        let answer: String
        switch route {
        case .whip, .openai:
            guard response.status == 201 || response.status == 200 else {
                return fail(classify(response, route.name == "WHIP" ? "WHIP endpoint" : route.name))
            }
            if let location = response.headers["Location"] {
                // The resource is where DELETE and PATCH go (RFC 9725 §4.2): an http(s)
                // URL, no downgrade; on another origin it gets no token.
                do throws(RedirectRefusal) { resource = try url.redirect(to: location) } catch {
                    Log.warning("session \(id): the answer's Location is unusable (\(error)); the session cannot be ended or restarted by the provider's resource")
                }
                if let resource, bearer != nil, bearer?.authorization(for: resource) == nil, !warnedForeignResource {
                    warnedForeignResource = true
                    Log.warning("session \(id): the session resource \(resource) is on another origin than the one configured: DELETE and PATCH go there without the token")
                }
            }
            etag = response.headers["ETag"]
            iceServers = response.headers.values("Link").flatMap(parseICEServers)
            answer = response.bodyText
        case .backend:
            guard (200..<300).contains(response.status) else {
                return fail(classify(response, "backend"))
            }
            guard let json = try? JSONValue.parse(response.body), let sdp = json["sdp"]?.string else {
                return fail(.transient("the backend's answer is not JSON with an \"sdp\" string: \(redacted(response.bodyExcerpt(120)))"), .dataError)
            }
            voiceID = backendVoiceID(json["id"])
            answer = sdp
        }
        do throws(PeerError) {
            try call.peer.setRemoteAnswer(answer, now: loop.now)
        } catch {
            return fail(.transient("the provider's answer is unusable: \(error)"), .dataError)
        }
        call.pump()
        Log.info("session \(id): answer applied; connecting")
        if let direction = call.peer.negotiatedSession?.audioDirection, direction != .sendrecv {
            // RFC 3264 §6.1: what the answer allows is what happens; the user should know.
            let what: String
            switch direction {
            case .inactive: what = "no audio either way: the microphone is not sent and nothing is played"
            case .recvonly: what = "the microphone is not sent (the provider only speaks)"
            case .sendonly: what = "nothing of the provider's voice will be played (it only listens)"
            case .sendrecv: what = ""
            }
            Log.warning("session \(id): the answer leaves us \(direction.rawValue) (our side of the audio): \(what)")
        }
        if call.peer.dataChannelRejected { channelRejected() }
    }

    /// The provider answered our `application` section with port 0 (RFC 3264 §6): the
    /// call goes on with audio only, so say once what that costs.
    func channelRejected() {
        let lost: String
        if case .openai = route {
            lost = "no transcripts and no push-to-talk turn commands (session.update, commit, response.create): only the provider's own voice detection works"
        } else {
            lost = "no transcripts or provider events, and nothing from 'send' is sent"
        }
        Log.warning("session \(id): the provider rejected the data channel (m=application 0): no events channel '\(channelLabel)', so \(lost); audio goes on")
        onReport(.channelRejected(label: channelLabel))
    }

    /// A request that got no usable HTTP answer: the status by the rule in CLI.swift
    /// (`HTTPClientError.exitStatus`: 65 for bytes that are not HTTP, 69 for none).
    func failRequest(_ error: HTTPClientError, _ failure: SessionFailure) {
        fail(failure, error.exitStatus)
    }

    func fail(_ failure: SessionFailure, _ status: ExitStatus? = nil) {
        guard !closing else { return }
        var s = status ?? .unavailable
        switch failure {
        case .unauthorized, .configuration: s = .config
        default: break
        }
        onReport(.failed(failure, s))
    }

    func event(_ e: PeerEvent) {
        guard !closing else { return }
        switch e {
        case .iceStateChanged(let s):
            Log.debug("session \(id): ICE \(s)")
            if s == .disconnected && wasConnected { onReport(.disconnected) }
            if s == .connected && wasConnected { onReport(.connected) }
        case .selectedPairChanged(let p): Log.info("session \(id): path \(p)")
        case .connected:
            wasConnected = true
            Log.info("session \(id): DTLS-SRTP up")
            onReport(.connected)
        case .dataChannel(let d):
            dataChannel(d)
        case .failed(let error):
            onReport(.failed(.transient("the call failed: \(error)"), .unavailable))
        case .closed:
            onReport(.ended("the provider closed the call"))
        default: break
        }
    }

    func dataChannel(_ e: DataChannelEvent) {
        switch e {
        case .connected:
            // The offerer opens the events channel (providers expect the client to).
            do throws(PeerError) {
                eventsChannel = try call.peer.openChannel(label: channelLabel, now: loop.now)
                call.pump()
            } catch {
                Log.warning("session \(id): cannot open the '\(channelLabel)' channel: \(error)")
            }
        case .opened(let channel, let label, _):
            Log.info("session \(id): data channel '\(label)' open")
            onReport(.channelOpened(channel: channel, label: label))
            if channel == eventsChannel { flushQueue() }
        case .message(let channel, let data, let isText):
            let label = call.peer.label(of: channel) ?? String(channel)
            if isText {
                onReport(.message(label: label, text: String(decoding: data, as: UTF8.self), binary: nil))
            } else {
                onReport(.message(label: label, text: nil, binary: data))
            }
        case .closed(let channel):
            if channel == eventsChannel { eventsChannel = nil }
            onReport(.channelClosed(channel))
        case .sendBufferLow:
            flushQueue()
        case .associationClosed:
            break
        }
    }

    /// Queues a text message for the events channel (sent now if it is open).
    func sendEvent(_ text: String) {
        queued.append(text)
        flushQueue()
    }

    func flushQueue() {
        guard let channel = eventsChannel else { return }
        while !queued.isEmpty {
            do throws(PeerError) {
                try call.peer.send(channel: channel, text: queued[0], now: loop.now)
                queued.removeFirst()
            } catch {
                // A full send buffer: wait for `.sendBufferLow`. Anything else is logged
                // and the message dropped.
                if case .dataChannel(.sendBufferFull) = error { break }
                Log.warning("session \(id): could not send on '\(channelLabel)': \(error)")
                queued.removeFirst()
            }
        }
        call.pump()
    }

    /// Whether the route can restart ICE on this session (WHIP with an ETag).
    var canRestartICE: Bool {
        if case .whip = route, etag != nil, resource != nil { return true }
        return false
    }

    /// ICE restart through WHIP (RFC 9725 §4.3.2): new credentials in an RFC 8840
    /// fragment `PATCH`ed to the session's resource; the answer's fragment is applied.
    /// DTLS, SRTP and the data channels carry on. `done(false)`: it cannot be done (no
    /// ETag, the server refused it, or its answer is unusable).
    func restartICE(_ done: @escaping (Bool) -> Void) {
        guard canRestartICE, let resource, !closing else { return done(false) }
        do throws(PeerError) { _ = try call.peer.restartICE(now: loop.now) } catch {
            Log.warning("session \(id): cannot restart ICE: \(error)")
            return done(false)
        }
        call.pump()
        var h = headers("application/trickle-ice-sdpfrag", for: resource)
        h.add("If-Match", "\"*\"")
        let request = HTTPRequest(method: "PATCH", url: resource, headers: h, body: Array(call.peer.iceRestartFragment().utf8))
        Log.info("session \(id): ICE restart → \(resource)")
        http(request, .seconds(5)) { result in
            guard !self.closing else { return }
            switch result {
            case .success(let r) where r.status == 200:
                do throws(PeerError) {
                    try self.call.peer.applyRemoteRestart(r.bodyText, now: self.loop.now)
                    self.call.pump()
                    if let tag = r.headers["ETag"] { self.etag = tag }
                    done(true)
                } catch {
                    Log.warning("session \(self.id): the ICE restart answer is unusable: \(error)")
                    done(false)
                }
            case .success(let r):
                Log.info("session \(self.id): ICE restart refused (\(r.status) \(self.redacted(r.reason)))")
                self.etag = nil
                done(false)
            case .failure(let e):
                Log.info("session \(self.id): ICE restart failed: \(e)")
                done(false)
            }
        }
    }

    /// Ends the session: provider-side close first (a DELETE for a session the peer
    /// already saw end would be refused), then the peer's own (BYE, close_notify).
    /// Best effort and bounded: a provider that does not answer must not keep the
    /// device from reconnecting or ending. `done` runs once, on the loop.
    func close(_ done: @escaping () -> Void = {}) {
        guard !closing else { return done() }
        closing = true
        var closeRequest: HTTPRequest? = nil
        switch route {
        case .whip:
            if let resource { closeRequest = HTTPRequest(method: "DELETE", url: resource, headers: headers(nil, for: resource)) }
        case .openai:
            if let resource {
                var url = resource
                url.target = joinPath(resource.target, "hangup")
                closeRequest = HTTPRequest(method: "POST", url: url, headers: headers(nil, for: url))
            }
        case .backend(let base, let chat):
            if let voiceID {
                var url = base
                url.target = joinPath(base.target, "voice/\(percentEncodedSegment(chat))/\(percentEncodedSegment(voiceID))/close")
                closeRequest = HTTPRequest(method: "POST", url: url, headers: headers("application/json", for: url), body: Array("{}".utf8))
            }
        }
        guard let closeRequest else {
            finishClose()
            return done()
        }
        http(closeRequest, .seconds(3)) { [self] result in
            switch result {
            case .success(let r): Log.info("session \(id): provider close \(closeRequest.method) \(r.status) \(redacted(r.bodyExcerpt(80)))")
            case .failure(let e): Log.warning("session \(id): provider close failed: \(e)")
            }
            finishClose()
            done()
        }
    }

    func finishClose() {
        call.close()
        call.onEvent = { _ in }
        call.onAudio = { _ in }
        onReport = { _ in }
    }

    /// Milliseconds from posting the offer to the first audio packet received.
    var connectMilliseconds: Int64? {
        guard let a = offerSentAt, let b = firstAudioAt else { return nil }
        return (b - a).milliseconds
    }
}

/// The backend's voice id, which goes into the close route's path: a string (or a
/// whole number, written in decimal) of 1–128 characters from RFC 3986's unreserved set
/// (`A–Z a–z 0–9 - . _ ~`), and not "." or "..". Anything else (CRLF that would start a
/// header of our own, `../` that would walk the path, an object) is refused and logged:
/// the session then ends without a close request.
func backendVoiceID(_ value: JSONValue?) -> String? {
    guard let value else { return nil }
    let text: String
    if let s = value.string {
        text = s
    } else if let n = value.int64, n >= 0 {
        text = String(n)
    } else {
        Log.warning("the backend's voice id is not a string or a whole number: no close request will be sent")
        return nil
    }
    let ok = !text.isEmpty && text.utf8.count <= 128 && text != "." && text != ".."
        && text.utf8.allSatisfy { isUnreserved($0) }
    guard ok else {
        Log.warning("the backend's voice id is unusable in a URL path (only A-Z a-z 0-9 - . _ ~, at most 128): no close request will be sent")
        return nil
    }
    return text
}

/// RFC 3986 §2.3 unreserved characters.
func isUnreserved(_ c: UInt8) -> Bool {
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
        || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~")
}

/// One path segment, percent-encoded (RFC 3986 §2.1): everything but unreserved
/// characters, so "/", "?", "%" and control bytes cannot change the request's shape.
func percentEncodedSegment(_ s: String) -> String {
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

/// `Link: <stun:stun.example.net>; rel="ice-server"` (RFC 9725 §4.6) → the URIs.
func parseICEServers(_ header: String) -> [String] {
    var out: [String] = []
    for part in header.split(separator: ",") {
        let fields = part.split(separator: ";").map { String($0).trimmingSpaces }
        guard let first = fields.first, first.hasPrefix("<"), first.hasSuffix(">") else { continue }
        guard fields.dropFirst().contains(where: { $0.replacingQuotes == "rel=ice-server" }) else { continue }
        out.append(String(first.dropFirst().dropLast()))
    }
    return out
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }

    var replacingQuotes: String { String(filter { $0 != "\"" }) }
}

func joinPath(_ base: String, _ tail: String) -> String {
    var b = base.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
    while b.hasSuffix("/") { b = b.dropLast() }
    return String(b) + "/" + tail
}
