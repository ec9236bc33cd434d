/// One session with the provider through its route, pure: sockets asked for, candidates
/// gathered (bounded), the ephemeral key fetched (OpenAI), the offer posted (redirects
/// followed by Signaling's rules), the answer applied, the events channel opened and
/// fed, a WHIP ICE restart, and the provider-side close before the peer's own. It never
/// calls its `AgentCore`: what happened comes back as `reports`, which the core applies
/// in order after each call and from which it decides (through the Supervisor) what
/// follows. What it needs of the run (settings, credentials, the DTLS identity, the
/// random source) it gets when made, and the time with every call.
import Wire
import JSON
import Signaling
import Peer
import ICE
import DTLS
import SDP
import SCTP

final class SessionMachine {
    /// What an HTTP exchange was for.
    enum Purpose: Equatable {
        case ephemeralKey
        case offer(redirectsLeft: Int)
        case restart
        case close
    }

    enum Phase {
        /// Waiting for the runtime's sockets.
        case binding
        /// Gathering host and server-reflexive candidates, until complete or the deadline.
        case gathering(until: Instant)
        /// An exchange with the provider before the answer: the ephemeral key (no
        /// offer yet), then the offer posted (the request in flight, for redirects and
        /// for saying which URL failed).
        case signaling(offer: HTTPRequest?)
        /// The answer is applied: ICE and DTLS.
        case connecting
        /// The provider-side close is out (or there is none): the peer closes after.
        case closing
        case closed
    }

    let id: Int
    let settings: AgentSettings
    let deviceCredential: BearerCredential?
    let identity: Identity
    let crypto: CryptoRandom
    let peerSeed: UInt64
    /// The time of the call being handled (every entry point takes it).
    private(set) var now: Instant
    /// What happened during the last call, for the core to apply (`AgentCore.apply`).
    var reports: [SessionReport] = []
    var phase = Phase.binding
    var peer: Peer?
    var media: CallMedia?
    /// The bearer for provider requests: the device's token, or on OpenAI the ephemeral
    /// key bound to the calls URL's origin.
    var bearer: BearerCredential?
    var answer: RouteAnswer?
    var warnedForeignResource = false
    var eventsChannel: UInt16?
    var eventsChannelOpen = false
    var queued: [String] = []
    var wasConnected = false
    var offerSentAt: Instant?
    var firstAudioAt: Instant?
    /// TURN allocations asked for this session, made, and failed (with why).
    var relaysExpected = 0
    var relaysAllocated = 0
    var relayFailures: [String] = []
    var peerDeadline = Instant.distantFuture
    /// When the ephemeral key expires (Unix seconds), when the token URL said.
    /// When the ephemeral key expires, on the monotonic clock (nil: unknown; the
    /// hangup is then tried with it, and a refusal costs nothing).
    var keyExpiresAt: Instant?
    /// The provider's clock: its HTTP `Date` (Unix seconds) minus the monotonic clock's
    /// seconds when the answer came (nil: it sent none). `session.expires_at` is the
    /// provider's time; the device's own clock may be an hour off (an RTC kept in local
    /// time, no NTP yet), so it is never used to place it.
    var providerClockOffset: Int64?
    var closing: Bool {
        switch phase {
        case .closing, .closed: return true
        default: return false
        }
    }
    var isClosed: Bool {
        if case .closed = phase { return true }
        return false
    }

    init(id: Int, settings: AgentSettings, deviceCredential: BearerCredential?, identity: Identity, crypto: CryptoRandom,
         peerSeed: UInt64, now: Instant) {
        self.id = id
        self.settings = settings
        self.deviceCredential = deviceCredential
        self.identity = identity
        self.crypto = crypto
        self.peerSeed = peerSeed
        self.now = now
        if case .openai = settings.route { bearer = nil } else { bearer = deviceCredential }
    }

    var route: Route { settings.route }

    func report(_ r: SessionReport) { reports.append(r) }
    func emit(_ o: AgentOutput) { report(.output(o)) }
    func log(_ level: AgentLogLevel, _ text: String) { emit(.log(level, text)) }
    func record(_ type: String, _ fields: [(String, JSONValue)]) { emit(.record(type, fields)) }

    /// The earliest instant this session needs `handleTimeout`.
    var deadline: Instant {
        var t = peerDeadline
        if case .gathering(let until) = phase { t = min(t, until) }
        return t
    }

    /// Milliseconds from posting the offer to the first audio packet received.
    var connectMilliseconds: Int64? {
        guard let a = offerSentAt, let b = firstAudioAt else { return nil }
        return (b - a).milliseconds
    }

    /// A server's text for the log and the events, with our secrets taken out (an error
    /// page may echo the request's headers back).
    func redacted(_ text: String) -> String {
        var t = text
        if let c = deviceCredential { t = c.redact(t) }
        if let bearer { t = bearer.redact(t) }
        return t
    }

    // MARK: - Setting up

    /// The runtime's sockets are bound (`relays` allocations under way), and `media` is
    /// what the core made for this session (nil: the codec could not be set up).
    func bound(_ addresses: [SocketAddress], relays: Int = 0, media: CallMedia?, now: Instant) {
        self.now = now
        guard case .binding = phase else { return }
        guard !addresses.isEmpty else {
            return fail(.transient("no usable network address to gather candidates on (is the network up?)"), .unavailable)
        }
        if settings.relayOnly && relays == 0 {
            return fail(.configuration("ice-transport-policy relay needs a turn: or turns: ice-server"), .config)
        }
        guard let media else {
            return fail(.transient("the Opus codec could not be set up"), .software)
        }
        self.media = media
        var configuration = settings.peer
        // Relay-only: the sockets still carry TURN over UDP, but offer no candidates of
        // their own (nor server-reflexive ones).
        configuration.hostAddresses = settings.relayOnly ? [] : addresses
        if settings.relayOnly { configuration.ice.stunServer = nil }
        configuration.ice.expectedRelays = relays
        relaysExpected = relays
        do throws(PeerError) {
            peer = try Peer(role: .offerer, configuration: configuration, identity: identity, crypto: crypto, seed: peerSeed)
        } catch {
            return fail(.transient(error.description), .unavailable)
        }
        phase = .gathering(until: now + (relays > 0 ? settings.relayGatherTimeout : settings.gatherTimeout))
        peer?.start(now: now)
        drainPeer()
        if let peer, peer.gatheringComplete { gathered() }
    }

    func relayAllocated(relayed: SocketAddress, mapped: SocketAddress?, server: IPAddress, via: String, now: Instant) {
        self.now = now
        guard let peer else { return }
        relaysAllocated += 1
        log(.info, "session \(id): relay \(relayed) on \(via)")
        peer.addRelayCandidate(relayed: relayed, mapped: mapped, server: server, now: now)
        drainPeer()
        if case .gathering = phase, peer.gatheringComplete { gathered() }
    }

    /// Before the offer: gathering goes on without this relay, unless it was the last
    /// hope of a relay-only session. After: a lost relay matters only if media used it,
    /// and consent notices that (then a restart or a new session allocates again).
    func relayFailed(server: String, reason: String, configuration: Bool, now: Instant) {
        self.now = now
        guard let peer else { return }
        relayFailures.append("\(server): \(reason)")
        if case .gathering = phase {
            log(.warning, "session \(id): TURN \(server): \(reason)")
            // Relay-only with no relay left: no offer (it would carry no candidate).
            if settings.relayOnly && relayFailures.count >= relaysExpected && relaysAllocated == 0 {
                let why = "ice-transport-policy relay, and no relay could be allocated (" + relayFailures.joined(separator: "; ") + ")"
                return configuration ? fail(.configuration(why), .config) : fail(.transient(why), .unavailable)
            }
            peer.relayGatheringFailed(now: now)
            drainPeer()
            if case .gathering = phase, peer.gatheringComplete { gathered() }
        } else {
            log(.warning, "session \(id): TURN \(server): \(reason) (the relay is gone; consent decides whether the call needs it)")
        }
    }

    func gathered() {
        guard case .gathering = phase else { return }
        // Relay-only and the gathering time is up with no relay: an offer without a
        // candidate would only fail later, and vaguer.
        if settings.relayOnly && relaysAllocated == 0 {
            let why = relayFailures.isEmpty ? "no TURN server answered in time" : relayFailures.joined(separator: "; ")
            return fail(.transient("ice-transport-policy relay, and no relay could be allocated (\(why))"), .unavailable)
        }
        phase = .signaling(offer: nil)
        if case .openai(_, let tokenURL) = route {
            log(.info, "session \(id): ephemeral key ← \(tokenURL)")
            report(.request(.ephemeralKey, RouteClient.ephemeralKeyRequest(tokenURL, credential: deviceCredential),
                            timeout: settings.offerTimeout))
        } else {
            sendOffer()
        }
    }

    func sendOffer() {
        guard let peer else { return }
        let offer: String
        do throws(PeerError) { offer = try peer.createOffer() } catch {
            return fail(.transient("cannot build the offer: \(error)"), .software)
        }
        let request = RouteClient.offerRequest(route, offer: offer, bearer: bearer)
        log(.info, "session \(id): offer → \(request.url)")
        offerSentAt = now
        post(request, redirectsLeft: RouteClient.maxRedirects)
    }

    func post(_ request: HTTPRequest, redirectsLeft: Int) {
        phase = .signaling(offer: request)
        report(.request(.offer(redirectsLeft: redirectsLeft), request, timeout: settings.offerTimeout))
    }

    // MARK: - HTTP results

    func httpFailed(_ purpose: Purpose, _ failure: HTTPTransportFailure, now: Instant) {
        self.now = now
        let status: ExitStatus
        switch failure.kind {
        case .configuration: status = .config
        case .badData: status = .dataError
        case .noAnswer: status = .unavailable
        }
        switch purpose {
        case .ephemeralKey:
            guard !closing else { return }
            let url = route.credentialURL
            fail(failure.kind == .configuration ? .configuration("the token URL \(url): \(failure)")
                 : .transient("the token URL \(url) did not answer: \(failure)"), status)
        case .offer:
            guard !closing else { return }
            var url = route.credentialURL.description
            if case .signaling(let offer?) = phase { url = offer.url.description }
            fail(failure.kind == .configuration ? .configuration("the offer to \(url): \(failure)")
                 : .transient("the offer to \(url) was not answered: \(failure)"), status)
        case .restart:
            log(.info, "session \(id): ICE restart failed: \(failure)")
            report(.restartDone(ok: false))
        case .close:
            log(.warning, "session \(id): provider close failed: \(failure)")
            finishClose()
        }
    }

    func httpResponse(_ purpose: Purpose, _ r: HTTPResponse, wallClock: Int64, now: Instant) {
        self.now = now
        switch purpose {
        case .ephemeralKey:
            guard !closing else { return }
            guard case .openai(let calls, let tokenURL) = route else { return }
            switch RouteClient.ephemeralKeyDetails(r, tokenURL: tokenURL, now: wallClock, redact: redacted) {
            case .success(let (key, expires)):
                bearer = BearerCredential(token: key, for: calls)
                // Its lifetime in the answering server's own clock (its Date), counted
                // from now on ours.
                if let expires, let date = r.headers["Date"].flatMap({ HTTPDate.parse($0) }) {
                    keyExpiresAt = now + .seconds(max(0, expires - date))
                }
                sendOffer()
            case .failure(let f):
                fail(f)
            }
        case .offer(let left):
            guard case .signaling(let request?) = phase else { return }
            if let date = r.headers["Date"].flatMap({ HTTPDate.parse($0) }) {
                providerClockOffset = date - now.nanoseconds / 1_000_000_000
            }
            switch RouteClient.offerOutcome(route, r, url: request.url, now: wallClock, redact: redacted) {
            case .redirect(let next):
                guard left > 0 else {
                    return fail(.badAnswer("the offer to \(request.url) was redirected too many times (a redirect loop?)"))
                }
                if bearer != nil && bearer?.authorization(for: next) == nil {
                    log(.warning, "session \(id): redirected to \(next), another origin than the one configured: the token is not sent there")
                } else {
                    log(.info, "session \(id): redirected to \(next)")
                }
                post(RouteClient.redirected(request, to: next, bearer: bearer), redirectsLeft: left - 1)
            case .failure(.unauthorized(let m)) where isOpenAI && bearer != nil:
                // The key came from the token URL a moment ago, so the device's token
                // is fine: the ephemeral key was refused (expired, another project's).
                // The next session fetches a new one, soon.
                fail(.transient(m + " — the ephemeral key was refused; a new key is fetched for the next attempt"), .unavailable)
            case .failure(let f):
                fail(f)
            case .answer(let a):
                answered(a)
            }
        case .restart:
            guard !closing, let peer else { return }
            switch RouteClient.restartOutcome(r, redact: redacted) {
            case .success(let (fragment, etag)):
                do throws(PeerError) {
                    try peer.applyRemoteRestart(fragment, now: now)
                    drainPeer()
                    if let etag { answer?.etag = etag }
                    report(.restartDone(ok: true))
                } catch {
                    log(.warning, "session \(id): the ICE restart answer is unusable: \(error)")
                    report(.restartDone(ok: false))
                }
            case .failure(let f):
                log(.info, "session \(id): \(f)")
                answer?.etag = nil
                report(.restartDone(ok: false))
            }
        case .close:
            log(.info, "session \(id): provider close \(r.status) \(RouteClient.redactedExcerpt(r, 80, redacted))")
            finishClose()
        }
    }

    func answered(_ a: RouteAnswer) {
        guard let peer else { return }
        answer = a
        if let p = PendingClose.of(route, answer: a, hangupURL: settings.hangupURL) { emit(.pendingClose(session: id, p)) }
        for w in a.warnings { log(.warning, "session \(id): \(w)") }
        if let resource = a.resource, bearer != nil, bearer?.authorization(for: resource) == nil, !warnedForeignResource {
            warnedForeignResource = true
            log(.warning, "session \(id): the session resource \(resource) is on another origin than the one configured: DELETE and PATCH go there without the token")
        }
        do throws(PeerError) {
            try peer.setRemoteAnswer(a.sdp, now: now)
        } catch {
            return fail(.badAnswer("the provider's answer is unusable: \(error)"))
        }
        phase = .connecting
        drainPeer()
        log(.info, "session \(id): answer applied; connecting")
        if !a.iceServers.isEmpty { report(.learn(a.iceServers)) }
        if let direction = peer.negotiatedSession?.audioDirection, direction != .sendrecv {
            // RFC 3264 §6.1: what the answer allows is what happens; the user should know.
            let what: String
            switch direction {
            case .inactive: what = "no audio either way: the microphone is not sent and nothing is played"
            case .recvonly: what = "the microphone is not sent (the provider only speaks)"
            case .sendonly: what = "nothing of the provider's voice will be played (it only listens)"
            case .sendrecv: what = ""
            }
            log(.warning, "session \(id): the answer leaves us \(direction.rawValue) (our side of the audio): \(what)")
        }
        if peer.dataChannelRejected { channelRejected() }
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
        let label = settings.eventsChannel
        log(.warning, "session \(id): the provider rejected the data channel (m=application 0): no events channel '\(label)', so \(lost); audio goes on")
        record("channel", [("event", "rejected"), ("label", .string(label))])
    }

    func fail(_ f: RouteFailure) {
        switch f {
        case .unauthorized(let m): fail(.unauthorized(m), .config)
        case .retryAfter(let d, let m): fail(.retryAfter(d, m), .unavailable)
        case .badAnswer(let m): fail(.transient(m), .dataError)
        case .unavailable(let m): fail(.transient(m), .unavailable)
        case .quota(let m): fail(.quota(m), .unavailable)
        case .rejected(let m): fail(.rejected(m), .dataError)
        case .region(let m): fail(.configuration(m), .config)
        }
    }

    var isOpenAI: Bool {
        if case .openai = route { return true }
        return false
    }

    func fail(_ failure: SessionFailure, _ status: ExitStatus) {
        guard !closing else { return }
        report(.failed(failure, status))
    }

    // MARK: - The peer

    func datagram(_ bytes: UnsafeMutableRawBufferPointer, from: SocketAddress, local: SocketAddress, now: Instant) {
        self.now = now
        guard let peer, !isClosed else { return }
        peer.handleInput(bytes, from: from, local: local, now: now)
        drainPeer()
    }

    func handleTimeout(now: Instant) {
        self.now = now
        if case .gathering(let until) = phase, now >= until { gathered() }
        if let peer, now >= peerDeadline {
            peer.handleTimeout(now: now)
            drainPeer()
        }
    }

    /// One uplink frame: encoded straight into the RTP packet the peer builds.
    func sendAudio(_ frame: UnsafeBufferPointer<Int16>, media: CallMedia, now: Instant) {
        self.now = now
        guard let peer else { return }
        peer.sendAudio(samples: media.frameTicks, now: now) { room in media.encode(frame, into: room) }
        drainPeer()
    }

    func drainPeer() {
        guard let peer else { return }
        loop: while true {
            switch peer.pollOutput() {
            case .transmit(let bytes, let from, let to):
                emit(.transmit(session: id, bytes: bytes, from: from, to: to))
            case .event(let e):
                event(e)
            case .timeout(let t):
                peerDeadline = t
                break loop
            }
        }
        if case .gathering = phase, peer.gatheringComplete { gathered() }
    }

    func event(_ e: PeerEvent) {
        switch e {
        case .audio(let a):
            if firstAudioAt == nil { firstAudioAt = now }
            media?.received(a)
            return
        case .closed where closing && !isClosed:
            return finishPeer()
        default: break
        }
        guard !closing else { return }
        switch e {
        case .iceStateChanged(let s):
            log(.debug, "session \(id): ICE \(s)")
            if s == .disconnected && wasConnected { report(.disconnected) }
            if s == .connected && wasConnected { report(.connected) }
        case .selectedPairChanged(let p):
            log(.info, "session \(id): path \(p)")
        case .connected:
            wasConnected = true
            log(.info, "session \(id): DTLS-SRTP up")
            report(.connected)
        case .dataChannel(let d):
            dataChannel(d)
        case .failed(let error):
            report(.failed(.transient("the call failed: \(error)"), .unavailable))
        case .closed:
            report(.ended("the provider closed the call"))
        case .gatheringComplete, .audio:
            break
        }
    }

    func dataChannel(_ e: DataChannelEvent) {
        guard let peer else { return }
        switch e {
        case .connected:
            // The offerer opens the events channel (providers expect the client to).
            do throws(PeerError) {
                eventsChannel = try peer.openChannel(label: settings.eventsChannel, now: now)
            } catch {
                log(.warning, "session \(id): cannot open the '\(settings.eventsChannel)' channel: \(error)")
            }
        case .opened(let channel, let label, _):
            log(.info, "session \(id): data channel '\(label)' open")
            if channel == eventsChannel {
                eventsChannelOpen = true
                flushQueue()
            }
            report(.channelOpened(channel: channel, label: label))
        case .message(let channel, let data, let isText):
            let label = peer.label(of: channel) ?? String(channel)
            if isText {
                report(.message(label: label, text: String(decoding: data, as: UTF8.self), binary: nil))
            } else {
                report(.message(label: label, text: nil, binary: data))
            }
        case .closed(let channel):
            if channel == eventsChannel {
                eventsChannel = nil
                eventsChannelOpen = false
            }
            record("channel", [("event", "closed"), ("id", .number(JSONNumber(Int(channel))))])
        case .sendBufferLow:
            flushQueue()
        case .associationClosed(let reason):
            // The data channels are gone with it (the events channel among them).
            eventsChannel = nil
            eventsChannelOpen = false
            log(reason == .shutdown ? .info : .warning, "session \(id): data channels closed: \(reason)")
            record("channel", [("event", "association_closed"), ("reason", .string(reason.description))])
        }
    }

    /// Queues a text message for the events channel (sent now if it is open).
    func sendEvent(_ text: String, now: Instant) {
        self.now = now
        queued.append(text)
        flushQueue()
    }

    func flushQueue() {
        guard let peer, let channel = eventsChannel, eventsChannelOpen else { return }
        var sent = 0
        while sent < queued.count {
            do throws(PeerError) {
                try peer.send(channel: channel, text: queued[sent], now: now)
                sent += 1
            } catch {
                // A full send buffer: wait for `.sendBufferLow`. Anything else is logged
                // and the message dropped.
                if case .dataChannel(.sendBufferFull) = error { break }
                log(.warning, "session \(id): could not send on '\(settings.eventsChannel)': \(error)")
                sent += 1
            }
        }
        queued.removeFirst(sent)
        drainPeer()
    }

    // MARK: - ICE restart (RFC 9725 §4.3.2)

    /// Starts a WHIP ICE restart: new credentials in an RFC 8840 fragment `PATCH`ed to the
    /// resource; DTLS, SRTP and the data channels carry on. False when it cannot be done
    /// (no ETag, no resource, a route without restarts).
    func restartICE(now: Instant) -> Bool {
        self.now = now
        guard route.restartsICE, let resource = answer?.resource, answer?.etag != nil, let peer, !closing else { return false }
        do throws(PeerError) { _ = try peer.restartICE(now: now) } catch {
            log(.warning, "session \(id): cannot restart ICE: \(error)")
            return false
        }
        drainPeer()
        log(.info, "session \(id): ICE restart → \(resource)")
        // The relayed candidates stay (the allocations outlive a restart); a Refresh now
        // proves they still exist, or reports them lost (437) while the restart runs.
        if relaysAllocated > 0 { emit(.refreshRelays(session: id)) }
        report(.request(.restart, RouteClient.restartRequest(resource: resource, fragment: peer.iceRestartFragment(), bearer: bearer),
                        timeout: settings.restartTimeout))
        return true
    }

    // MARK: - Closing

    /// Ends the session: provider-side close first (a DELETE for a session the peer
    /// already saw end would be refused), then the peer's own (BYE, close_notify).
    /// Bounded: a provider that does not answer must not keep the device from
    /// reconnecting or ending.
    func close(now: Instant) {
        self.now = now
        guard !closing else { return }
        phase = .closing
        // Whatever is still out (key, offer, restart): the core knows which are.
        report(.cancelRequests)
        let request: HTTPRequest?
        if isOpenAI {
            let expired = keyExpiresAt.map { now >= $0 } ?? false
            request = RouteClient.openAIHangup(answer: answer, key: bearer, keyExpired: expired,
                                               hangupURL: settings.hangupURL, device: deviceCredential)
            if request == nil, expired, answer?.resource != nil {
                log(.info, "session \(id): the ephemeral key has expired, so no hangup request: closing the peer connection ends the call")
            }
        } else {
            request = RouteClient.closeRequest(route, answer: answer, bearer: bearer)
        }
        if let request {
            report(.request(.close, request, timeout: settings.closeTimeout))
        } else {
            finishClose()
        }
    }

    func finishClose() {
        guard case .closing = phase else { return }
        if let peer {
            peer.close(now: now)
            drainPeer()
        }
        finishPeer()
    }

    func finishPeer() {
        guard !isClosed else { return }
        phase = .closed
        peerDeadline = .distantFuture
        report(.finished)
    }
}
