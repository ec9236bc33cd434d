// `linnet run`: one session with a provider through WHIP or the app backend, media from
// files (devices come with the audio engine wiring). The agent issue adds reconnects,
// rollover and the OpenAI route on top of this path.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import DTLS
import Codec
import Peer
import ICE
import SCTP

/// How the offer reaches the provider.
enum Route {
    case whip(HTTPURL)
    case backend(base: HTTPURL, chat: String)
}

/// One call set up through a route, with its media path; ends on `stop()`.
final class Session {
    let loop: EventLoop
    let route: Route
    let token: String?
    let call: Call
    let media: MediaPath
    let source: FrameSource?
    let sink: WAVFrameSink?
    var resource: HTTPURL?   // WHIP Location
    var voiceID: String?     // backend voice id
    var uplinkTimer: EventLoop.TimerID?
    var playoutTimer: EventLoop.TimerID?
    var onEnd: (ExitStatus, String?) -> Void = { _, _ in }
    var connectedAt: Instant?
    var offerSentAt: Instant?
    var firstAudioAt: Instant?
    var ended = false
    var onConnected: () -> Void = {}
    var events: EventLog?
    var channelLabel = "oai-events"
    var eventsChannel: UInt16?
    /// Text messages to send on the events channel once it is open (`--send FILE`).
    var queued: [String] = []

    init(loop: EventLoop, route: Route, token: String?, call: Call, media: MediaPath, source: FrameSource?, sink: WAVFrameSink?) {
        self.loop = loop
        self.route = route
        self.token = token
        self.call = call
        self.media = media
        self.source = source
        self.sink = sink
    }

    func headers(_ contentType: String?) -> HTTPHeaders {
        var h = HTTPHeaders()
        if let contentType { h.add("Content-Type", contentType) }
        if let token { h.add("Authorization", "Bearer " + token) }
        return h
    }

    func start() {
        call.onEvent = { e in self.event(e) }
        call.onAudio = { a in
            if self.firstAudioAt == nil { self.firstAudioAt = self.loop.now }
            self.media.received(a)
        }
        call.start()
        call.whenGathered(timeout: .seconds(2)) { self.sendOffer() }
    }

    func sendOffer() {
        let offer: String
        do throws(PeerError) { offer = try call.peer.createOffer() } catch {
            finish(.software, "cannot build the offer: \(error)")
            return
        }
        let request: HTTPRequest
        switch route {
        case .whip(let url):
            request = HTTPRequest(method: "POST", url: url, headers: headers("application/sdp"), body: Array(offer.utf8))
        case .backend(let base, let chat):
            var url = base
            url.target = joinPath(base.target, "voice/\(chat)")
            let body: JSONValue = ["sdp": .string(offer)]
            request = HTTPRequest(method: "POST", url: url, headers: headers("application/json"), body: body.serialized())
        }
        Log.info("offer → \(request.url)")
        offerSentAt = loop.now
        log("state", [("state", "connecting")])
        post(request, redirects: 3)
    }

    /// Posts the offer, following 307/308 redirects (RFC 9725 §4.5, RFC 9110 §15.4).
    func post(_ request: HTTPRequest, redirects: Int) {
        HTTPExchange.start(loop: loop, request: request) { result in
            switch result {
            case .failure(let error):
                self.finish(.unavailable, "the offer was not answered: \(error)")
            case .success(let response):
                if (response.status == 307 || response.status == 308), redirects > 0,
                   let location = response.headers["Location"], let next = try? request.url.resolving(location) {
                    var again = request
                    again.url = next
                    self.post(again, redirects: redirects - 1)
                    return
                }
                self.answered(response, url: request.url)
            }
        }
    }

    func answered(_ response: HTTPResponse, url: HTTPURL) {
        let answer: String
        switch route {
        case .whip:
            guard response.status == 201 else {
                return finish(response.status == 401 || response.status == 403 ? .config : .unavailable,
                              "WHIP endpoint answered \(response.status) \(response.reason): \(response.bodyExcerpt())"
                                + (response.status == 401 || response.status == 403 ? " (check the token)" : ""))
            }
            if let location = response.headers["Location"] { resource = try? url.resolving(location) }
            answer = response.bodyText
        case .backend:
            guard response.status == 200 || response.status == 201 else {
                return finish(response.status == 401 || response.status == 403 ? .config : .unavailable,
                              "backend answered \(response.status) \(response.reason): \(response.bodyExcerpt())"
                                + (response.status == 401 || response.status == 403 ? " (check the token)" : ""))
            }
            guard let json = try? JSONValue.parse(response.body), let sdp = json["sdp"]?.string else {
                return finish(.dataError, "backend's answer is not JSON with an \"sdp\" string: \(response.bodyExcerpt())")
            }
            voiceID = json["id"]?.string
            answer = sdp
        }
        do throws(PeerError) {
            try call.peer.setRemoteAnswer(answer, now: loop.now)
        } catch {
            return finish(.dataError, "the provider's answer is unusable: \(error)")
        }
        call.pump()
        Log.info("answer applied; connecting")
        // A call that has not connected within 20 s will not.
        loop.schedule(after: .seconds(20)) {
            if self.connectedAt == nil && !self.ended { self.finish(.unavailable, "no media connection within 20 s (ICE \(self.call.peer.iceState))") }
        }
    }

    func log(_ type: String, _ fields: [(String, JSONValue)]) {
        events?.write(type, fields, now: loop.now)
    }

    func event(_ e: PeerEvent) {
        switch e {
        case .iceStateChanged(let s):
            Log.info("ICE \(s)")
            log("ice", [("state", .string(s.description))])
        case .selectedPairChanged(let p): Log.info("path \(p)")
        case .connected:
            connectedAt = loop.now
            Log.info("connected: DTLS-SRTP up")
            log("state", [("state", "connected")])
            startMedia()
            onConnected()
        case .dataChannel(let d):
            dataChannel(d)
        case .failed(let error):
            log("state", [("state", "failed"), ("error", .string(error.description))])
            finish(.unavailable, "call failed: \(error)")
        case .closed:
            if !ended { finish(.ok, "the provider closed the call") }
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
                Log.warning("cannot open the '\(channelLabel)' channel: \(error)")
            }
        case .opened(let channel, let label, _):
            Log.info("data channel '\(label)' open")
            log("channel", [("event", "open"), ("label", .string(label)), ("id", .number(JSONNumber(Int(channel))))])
            if channel == eventsChannel { flushQueue() }
        case .message(let channel, let data, let isText):
            let label = call.peer.label(of: channel) ?? String(channel)
            if isText {
                log("message", [("label", .string(label)), ("text", .string(String(decoding: data, as: UTF8.self)))])
            } else {
                log("message", [("label", .string(label)), ("binary", .string(Base64.encode(data)))])
            }
        case .closed(let channel):
            Log.info("data channel \(channel) closed")
            log("channel", [("event", "closed"), ("id", .number(JSONNumber(Int(channel))))])
            if channel == eventsChannel { eventsChannel = nil }
        case .sendBufferLow:
            flushQueue()
        case .associationClosed:
            log("channel", [("event", "association-closed")])
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
                Log.warning("could not send on '\(channelLabel)': \(error)")
                queued.removeFirst()
            }
        }
        call.pump()
    }

    func startMedia() {
        let start = loop.now
        if let source { tickUplink(source, at: start) }
        tickPlayout(at: start + .milliseconds(20))
    }

    func tickUplink(_ source: FrameSource, at deadline: Instant) {
        uplinkTimer = loop.schedule(at: deadline) {
            if let packet = self.media.encodeNext(from: source) {
                self.call.sendAudio(packet, samples: 960)
            } else {
                self.call.peer.skipAudio(samples: 960)
            }
            self.tickUplink(source, at: deadline + .milliseconds(20))
        }
    }

    func tickPlayout(at deadline: Instant) {
        playoutTimer = loop.schedule(at: deadline) {
            if let frame = self.media.playout(now: self.loop.now) { self.sink?.play(frame) }
            self.tickPlayout(at: deadline + .milliseconds(20))
        }
    }

    /// Ends the session: provider-side close (DELETE / close route), then the peer.
    func stop(_ status: ExitStatus = .ok, _ message: String? = nil) {
        guard !ended else { return }
        ended = true
        if let t = uplinkTimer { loop.cancel(t) }
        if let t = playoutTimer { loop.cancel(t) }
        sink?.close()
        var closeRequest: HTTPRequest? = nil
        switch route {
        case .whip:
            if let resource { closeRequest = HTTPRequest(method: "DELETE", url: resource, headers: headers(nil)) }
        case .backend(let base, let chat):
            if let voiceID {
                var url = base
                url.target = joinPath(base.target, "voice/\(chat)/\(voiceID)/close")
                closeRequest = HTTPRequest(method: "POST", url: url, headers: headers("application/json"), body: Array("{}".utf8))
            }
        }
        // The provider-side close goes first (a DELETE for a session the peer already
        // saw end would be refused); the peer's own close (BYE, close_notify) follows.
        guard let closeRequest else {
            call.close()
            onEnd(status, message)
            return
        }
        // Best effort, bounded: a provider that does not answer the close must not keep
        // the device from ending (or reconnecting).
        HTTPExchange.start(loop: loop, request: closeRequest, timeout: .seconds(3)) { result in
            switch result {
            case .success(let r): Log.info("provider close: \(r.status) \(r.bodyExcerpt(80))")
            case .failure(let e): Log.warning("provider close failed: \(e)")
            }
            self.call.close()
            self.onEnd(status, message)
        }
    }

    /// Milliseconds from posting the offer to the first audio packet received.
    var connectMilliseconds: Int64? {
        guard let a = offerSentAt, let b = firstAudioAt else { return nil }
        return (b - a).milliseconds
    }

    func finish(_ status: ExitStatus, _ message: String) {
        if status == .ok { Log.info(message) } else { Log.error(message) }
        stop(status, message)
    }
}

func joinPath(_ base: String, _ tail: String) -> String {
    var b = base.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
    while b.hasSuffix("/") { b = b.dropLast() }
    return String(b) + "/" + tail
}

enum RunCommand {
    static let valued = ["whip", "backend", "chat", "token-file", "input", "output", "seconds", "stun", "interfaces", "log-level",
                         "capture", "playback", "events", "events-label", "send"]

    static func run(_ args: [String]) -> ExitStatus {
        let options: Options
        do throws(Options.Failure) { options = try Options(args, valued: valued, boolean: ["loop-input"]) } catch {
            Log.error("run: \(error.description)")
            return .usage
        }
        do throws(CLIFailure) {
            return try execute(options)
        } catch {
            Log.error(error.message)
            return error.status
        }
    }

    static func execute(_ options: Options) throws(CLIFailure) -> ExitStatus {
        if let level = options["log-level"] {
            guard let l = LogLevel(name: level) else { throw CLIFailure(.usage, "--log-level must be error, warn, info or debug") }
            Log.level = l
        }
        let route: Route
        let signalingHost: String
        func url(_ text: String) throws(CLIFailure) -> HTTPURL {
            do { return try HTTPURL(text) } catch { throw CLIFailure(.usage, error.description) }
        }
        if let whip = options["whip"] {
            guard options["backend"] == nil else { throw CLIFailure(.usage, "use either --whip or --backend, not both") }
            let u = try url(whip)
            route = .whip(u)
            signalingHost = u.host
        } else if let backend = options["backend"] {
            guard let chat = options["chat"], !chat.isEmpty else { throw CLIFailure(.usage, "--backend needs --chat ID") }
            let u = try url(backend)
            route = .backend(base: u, chat: chat)
            signalingHost = u.host
        } else {
            throw CLIFailure(.usage, "run needs a provider: --whip URL or --backend URL --chat ID")
        }
        let seconds = try wrap { () throws(Options.Failure) in try options.int("seconds", default: 0, range: 0...31_536_000) }
        var token: String? = nil
        let tokenPath = options["token-file"] ?? environment("CREDENTIALS_DIRECTORY").map { $0 + "/token" }
        if let tokenPath, options["token-file"] != nil || fileExists(tokenPath) {
            token = try readToken(tokenPath)
        }
        var stun: SocketAddress? = nil
        if let s = options["stun"] {
            guard let host = s.split(separator: ":").first, let port = s.split(separator: ":").last.flatMap({ UInt16($0) }),
                  let address = (try? Resolver.resolve(String(host), port: port))?.first(where: { $0.ip.isV4 }) else {
                throw CLIFailure(.usage, "--stun '\(s)': expected HOST:PORT that resolves")
            }
            stun = address
        }
        let source: FrameSource? = try options["input"].map { (path: String) throws(CLIFailure) -> FrameSource in
            try WAVFrameSource(path: path, loop: options.flags.contains("loop-input"))
        }
        if options["input"] == nil && options["capture"] != nil {
            throw CLIFailure(.usage, "--capture (ALSA devices) is not wired into run yet; use --input FILE.wav")
        }
        let sink: WAVFrameSink? = try options["output"].map { (path: String) throws(CLIFailure) -> WAVFrameSink in try WAVFrameSink(path: path) }

        let signals = try wrap { () throws(SystemError) in try SignalSource([SIGINT, SIGTERM]) }
        let loop = try wrap { () throws(SystemError) in try EventLoop() }
        let crypto = try wrap { () throws(DTLSError) in try CryptoRandom() }
        let identity = try wrap { () throws(DTLSError) in try Identity(random: crypto) }
        let hostIsLoopback = IPAddress(signalingHost)?.isLoopback ?? (signalingHost == "localhost")
        let names = options["interfaces"].map { $0.split(separator: ",").map(String.init) }
        let addresses = gatherAddresses(includeLoopback: hostIsLoopback || names != nil, only: names)
        let call = try wrap { () throws(CallError) in try Call(loop: loop, role: .offerer, addresses: addresses, stun: stun, identity: identity, crypto: crypto) }
        let media = try wrap { () throws(CodecError) in try MediaPath() }
        let session = Session(loop: loop, route: route, token: token, call: call, media: media, source: source, sink: sink)
        if let path = options["events"] { session.events = try EventLog(path: path, start: loop.now) }
        if let label = options["events-label"] {
            guard !label.isEmpty, label.utf8.count <= 1024 else { throw CLIFailure(.usage, "--events-label must be 1–1024 bytes") }
            session.channelLabel = label
        }
        if let path = options["send"] {
            guard let bytes = readFile(path, limit: 16 << 20) else { throw CLIFailure(.dataError, "--send '\(path)': cannot read it (or it is over 16 MiB)") }
            session.queued = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        }
        var exit = ExitStatus.ok
        session.onEnd = { status, _ in
            exit = status
            loop.stop()
        }
        loop.watch(fd: signals.fd) { _ in
            if !signals.drain().isEmpty {
                Log.info("stopping")
                session.stop()
            }
        }
        if seconds > 0 {
            session.onConnected = {
                loop.schedule(after: .seconds(Int64(seconds))) { session.stop() }
            }
        }
        session.start()
        try wrap { () throws(SystemError) in try loop.run() }
        let s = call.peer.stats
        Log.info("stats: sent \(s.rtpSent) packets, received \(s.rtpReceived), decoded \(media.stats.framesDecoded), concealed \(media.stats.concealed), fec \(media.stats.fecRecovered), srtp dropped \(s.srtpDropped)")
        var summary: [(String, JSONValue)] = [("rtp_sent", .number(JSONNumber(s.rtpSent))), ("rtp_received", .number(JSONNumber(s.rtpReceived))),
                                              ("concealed", .number(JSONNumber(media.stats.concealed))), ("srtp_dropped", .number(JSONNumber(s.srtpDropped)))]
        if let ms = session.connectMilliseconds { summary.append(("connect_ms", .number(JSONNumber(Int(ms))))) }
        if let rtt = s.roundTripTime { summary.append(("rtt_ms", .number(JSONNumber(Double(rtt.microseconds) / 1000)))) }
        session.log("stats", summary)
        return exit
    }

    static func readToken(_ path: String) throws(CLIFailure) -> String {
        guard let bytes = readFile(path, limit: 65_536) else {
            throw CLIFailure(.config, "cannot read the token file '\(path)'")
        }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.hasSuffix("\n") || text.hasSuffix("\r") || text.hasSuffix(" ") { text.removeLast() }
        guard !text.isEmpty, !text.contains("\n") else { throw CLIFailure(.config, "the token file '\(path)' must hold one line") }
        return text
    }
}

/// Runs `body`, turning its typed error into a CLIFailure (software error) with its text.
func wrap<T, E: Error & CustomStringConvertible>(_ body: () throws(E) -> T) throws(CLIFailure) -> T {
    do { return try body() } catch { throw CLIFailure(.software, error.description) }
}

func fileExists(_ path: String) -> Bool { access(path, F_OK) == 0 }

/// Reads a whole (small) file; nil if it cannot be read or exceeds `limit` bytes.
func readFile(_ path: String, limit: Int) -> [UInt8]? {
    let fd = csystem_open(path, O_RDONLY | O_CLOEXEC, 0)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 { return nil }
        if n == 0 { return out }
        out += buffer[0..<n]
        if out.count > limit { return nil }
    }
}
