/// The agent as a sans-IO core: the Supervisor, one `SessionMachine` per provider
/// session (route exchange, peer connection, events channel, provider-side close), the
/// conversation on the session that carries the audio, stats, the status snapshot and
/// the exit decision. It owns no socket, no file and no clock.
///
/// ## Drive contract
///
/// Call `start(now:)` once, then one `handle…` per input as it happens; after each call
/// (and after `handleTimeout(now:)` at the deadline it asked for), drain `pollOutput()`
/// until it returns `.timeout(t)`. The I/O runtime (linnet's `Runtime`) is the only
/// caller: it binds sockets when told (`.bind`), sends what it is told (`.transmit`,
/// `.http`), writes records and the status file, and feeds back datagrams, HTTP results
/// and audio. Tests drive the same core with a manual clock and an in-memory network.
///
/// Decisions that live here (and are tested here, not by spawning the binary):
/// HTTP status → failure class → exit status; "disconnected" only after a session was
/// connected; giving up after `max-attempts`; the WHIP PATCH restart; the provider-side
/// close before the peer's; `--seconds` counted from the first connection; what the
/// status file says; which session's conversation hears the events channel.
import Wire
import JSON
import Signaling
import Peer
import ICE
import DTLS
import SDP
import SCTP
import Settings

/// Exit statuses (sysexits.h), one rule for every command (README "exit statuses").
public enum ExitStatus: Int32, Sendable {
    case ok = 0
    case usage = 64
    case dataError = 65
    case unavailable = 69
    case software = 70
    /// An output failed while running (EX_IOERR): e.g. `--output` hit a full disk, so
    /// the recording is incomplete. The call itself went on.
    case ioError = 74
    case config = 78
}

/// Severity of a line the core wants logged (the runtime owns the log): the program's
/// one log level (Wire's, which Platform's Log filters by), not a copy of it.
public typealias AgentLogLevel = LogLevel

/// One HTTP exchange the runtime runs for the core.
public typealias RequestID = Int

/// Why an HTTP exchange got no usable response, as the runtime's client saw it.
public struct HTTPTransportFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Nothing came back: DNS, refused, reset, timeout, TLS other than certificates.
        case noAnswer
        /// Bytes came back that are not acceptable HTTP (garbage, too large).
        case badData
        /// Only a person can fix it: a certificate that does not verify, no trust store.
        case configuration
    }
    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// Media for one call (encode the uplink, decode and play out the downlink): the
/// runtime makes one per session (`AgentCore.makeMedia`). Class-bound so the core can
/// hold any implementation (Embedded Swift has existentials of class protocols only).
public protocol CallMedia: AnyObject {
    /// The RTP duration of one uplink frame: 48 kHz ticks (48 × frame-ms, RFC 7587 §4.1).
    var frameTicks: UInt32 { get }
    /// Encodes one uplink frame into `packet`, the room after the RTP header of the
    /// datagram being built (Opus writes straight into it: one copy on the send path,
    /// Peer.sendAudio(samples:now:encode:)); the payload length, or nil when nothing is
    /// to be sent (the frame's RTP time still passes).
    func encode(_ frame: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableRawBufferPointer) -> Int?
    /// A received Opus packet, for the jitter buffer.
    func received(_ audio: ReceivedAudio)
    /// Figures for the stats line.
    var counters: MediaCounters { get }
}

/// Packets and frames over all the sessions of a run.
public struct CallTotals: Sendable, Equatable {
    public var sent = 0
    public var received = 0
    public var decoded = 0
    public var concealed = 0
}

public struct MediaCounters: Sendable, Equatable {
    public var framesDecoded = 0
    public var concealed = 0
    public var fecRecovered = 0
    public var bytesSent = 0
    /// The jitter buffer's target delay: the largest recent lateness plus one frame,
    /// within its configured bounds (what each talkspurt starts at).
    public var jitterTargetMicroseconds = 0
    public init() {}
}

/// The audio side's figures, which the runtime keeps up to date (`AgentCore.audio`).
public struct AudioCounters: Sendable, Equatable {
    public var captureXruns = 0
    public var playbackXruns = 0
    public var captureStalls = 0
    public var captureStaleFrames = 0
    /// The audio threads' timeline jumps (DuplexAudio.timelineJumps).
    public var timelineJumps = 0
    /// Microphone level (RMS dBFS), when a meter runs.
    public var micDBFS: Double?
    public init() {}
}

/// What the core is configured with (from `Config` and the command).
public struct AgentSettings: Sendable {
    public var route: Route
    /// The device's bearer token; it goes only to the route's configured origin.
    public var token: String?
    public var policy: SupervisorPolicy
    /// `max-attempts` (0: forever).
    public var maxAttempts: Int
    /// End cleanly this long after the first connection (nil: run until stopped).
    public var runFor: Duration?
    /// The data channel the provider's events ride on (`oai-events`).
    public var eventsChannel: String
    /// Lines sent on every new session's events channel (`send` key).
    public var sendOnOpen: [String]
    /// A stats record this often (nil: only at the end).
    public var statsInterval: Duration?
    /// Push-to-talk (the button talks) or voice detection (the button mutes).
    public var pushToTalk: Bool
    /// Voice mode: when the microphone is held shut (silence sent) so the assistant
    /// never hears itself as the user (`Config.micHold`). Chosen over
    /// `interrupt_response: false`, which would still let the provider transcribe the
    /// echo as a user turn and answer it once the response ends.
    public var micHold = MicHold.never
    /// Barge-in by Linnet's own voice flag (`barge-in-ms`): in voice mode, unless the
    /// microphone is held for the whole reply, the flag held this long without a break
    /// while the assistant speaks cuts the response at once (`localVoice`), a network
    /// round trip before the provider's VAD would. nil: off (push-to-talk, half duplex,
    /// no flag: the runtime leaves it nil).
    public var localBargeIn: Duration? = nil
    public var turnDetectionName: String
    /// The events-channel conversation (OpenAI Realtime), when the route speaks it.
    public var realtime: RealtimeSettings
    /// The peer connection's settings (ICE: STUN server, consent probe…); the host
    /// addresses come from `.socketsBound`.
    public var peer: PeerConfiguration
    /// How long gathering may take before the offer goes out with what it has.
    public var gatherTimeout: Duration = .seconds(2)
    /// The same when TURN allocations are being made: two round trips to the server
    /// (the 401 challenge, then the allocation), after a TCP and TLS handshake for
    /// `turns:`, on a network slow enough to need a relay.
    public var relayGatherTimeout: Duration = .seconds(5)
    /// `ice-transport-policy relay`: only relayed candidates are offered and paired
    /// (host candidates stay out, as in the browser's `iceTransportPolicy`).
    public var relayOnly = false
    /// Deadlines of the route's HTTP exchanges.
    public var offerTimeout: Duration = .seconds(10)
    public var closeTimeout: Duration = .seconds(3)
    public var restartTimeout: Duration = .seconds(5)
    /// OpenAI: the backend's route that hangs up a call (`hangup-url`, POST
    /// `{"call_id"}` with the device's token); nil: the ephemeral key's hangup.
    public var hangupURL: HTTPURL?
    /// A fault of the device that persists (a configured button that cannot be used):
    /// the status file's `problem` while no other is to be shown.
    public var deviceProblem: String? = nil
    /// How far in a TURN server the provider names may be (`learned-ice-servers`).
    public var learnedServerReach = LearnedServerReach.auto
    /// The configured TURN servers: their credentials are never given to another.
    public var configuredRelays: [TURNServer] = []
    /// Earlier transcript turns given to each new session (`carry-turns`; 0: none) …
    public var carryTurns = 20
    /// … at most this many bytes of their text in all.
    public var carryBytes = 8 * 1024

    public init(route: Route, token: String?, policy: SupervisorPolicy, maxAttempts: Int, runFor: Duration?, eventsChannel: String,
                sendOnOpen: [String], statsInterval: Duration?, pushToTalk: Bool, turnDetectionName: String,
                realtime: RealtimeSettings, peer: PeerConfiguration) {
        self.route = route
        self.token = token
        self.policy = policy
        self.maxAttempts = maxAttempts
        self.runFor = runFor
        self.eventsChannel = eventsChannel
        self.sendOnOpen = sendOnOpen
        self.statsInterval = statsInterval
        self.pushToTalk = pushToTalk
        self.turnDetectionName = turnDetectionName
        self.realtime = realtime
        self.peer = peer
    }
}

/// What the status file says (a kiosk UI reads it).
public struct AgentStatus: Sendable, Equatable {
    public var state: SessionState
    public var sinceSeconds: Double
    public var muted: Bool
    public var turnDetection: String
    public var reconnects: Int
    public var session: Int?
    public var rttMilliseconds: Double?
    public var lastUser: String?
    public var lastAssistant: String?
    /// Why nothing works until a person acts (`insufficient_quota`), while it lasts.
    public var problem: String? = nil

    /// The file's bytes: one JSON object and a newline.
    public var json: [UInt8] {
        var o = JSONObject()
        o["state"] = .string(state.rawValue)
        o["since_s"] = .number(JSONNumber(sinceSeconds))
        o["muted"] = .bool(muted)
        o["turn_detection"] = .string(turnDetection)
        o["reconnects"] = .number(JSONNumber(reconnects))
        if let session { o["session"] = .number(JSONNumber(session)) }
        if let rttMilliseconds { o["rtt_ms"] = .number(JSONNumber(rttMilliseconds)) }
        if let lastUser { o["last_user"] = .string(lastUser) }
        if let lastAssistant { o["last_assistant"] = .string(lastAssistant) }
        if let problem { o["problem"] = .string(problem) }
        var bytes = JSONValue.object(o).serialized()
        bytes.append(10)
        return bytes
    }
}

/// What the core asks of the runtime.
public enum AgentOutput {
    /// Bind this session's UDP sockets (one per gathering address); answer with
    /// `socketsBound` or `socketsUnavailable`.
    case bind(session: Int)
    /// The session is gone: close its sockets.
    case unbind(session: Int)
    case transmit(session: Int, bytes: [UInt8], from: SocketAddress, to: SocketAddress)
    /// Run this exchange; answer with `httpResponse` or `httpFailed` (never both).
    case http(RequestID, HTTPRequest, timeout: Duration)
    /// Abandon an exchange: its answer must not be delivered.
    case cancelHTTP(RequestID)
    /// The microphone's mute gate (push-to-talk, the mute button, and silence until
    /// the provider's session is configured).
    case mute(Bool)
    /// Empty the playback of this session at once (barge-in): the jitter buffer and
    /// whatever the audio output still holds.
    case flushPlayback(session: Int)
    /// Audio now goes to (and comes from) this session.
    case switchAudio(session: Int)
    /// Keep this on disk while the session lives (a process killed mid-call cannot
    /// close it; the next start does): `nil` forgets it (the session is closed).
    case pendingClose(session: Int, PendingClose?)
    /// A TURN server the provider's answer named, judged usable (`LearnedServers`):
    /// sessions from the next one on allocate on it too. Not this one: its offer was
    /// complete before the answer came, and no provider here takes trickled candidates.
    case addRelay(TURNServer, SocketAddress)
    /// The same, named by host: resolve it and answer with `relayResolved`.
    case resolveRelay(TURNServer)
    /// An ICE restart began on a session with relayed candidates: refresh its TURN
    /// allocations now (RFC 8656 §7.2).
    case refreshRelays(session: Int)
    /// A line for the `--events` file.
    case record(String, [(String, JSONValue)])
    case log(AgentLogLevel, String)
    /// systemd's `STATUS=`.
    case notify(String)
    /// Rewrite the status file.
    case status(AgentStatus)
    /// Every session is closed: exit with this.
    case exit(ExitStatus)
    /// Call `handleTimeout` at this instant.
    case timeout(Instant)
}

public final class AgentCore {
    public let settings: AgentSettings
    public private(set) var supervisor: Supervisor
    var attemptLimit: AttemptLimit
    public let deviceCredential: BearerCredential?
    /// Makes the media of a new session (by id); nil when it cannot (the codec refused).
    /// The runtime sets it: it keeps each session's media for playout.
    public var makeMedia: (Int) -> CallMedia? = { _ in nil }
    let identity: Identity
    let crypto: CryptoRandom
    var seed: SeededRandom

    var sessions: [Int: SessionMachine] = [:]
    public private(set) var activeID: Int?
    var requests: [RequestID: (session: Int, purpose: SessionMachine.Purpose)] = [:]
    var nextRequest: RequestID = 1
    var outputs = OutputQueue<AgentOutput>()
    public private(set) var now = Instant.zero
    var supervisorDeadline = Instant.distantFuture

    /// TURN servers the provider named, and what was made of them.
    var learned: LearnedServers
    // The conversation on the session that carries the audio.
    var conversation: RealtimeConversation
    public private(set) var lastUserText: String?
    public private(set) var lastAssistantText: String?
    public private(set) var assistantSpeaking = false
    /// When the assistant last started speaking (nil: silent).
    var speakingSince: Instant?

    public private(set) var muted: Bool
    /// What the mute gate was last told (`.mute`): `muted`, kept open for a release's
    /// tail, and closed while the session is not configured yet.
    public private(set) var micClosed: Bool
    var talking = false
    /// This stretch of local voice already cut the assistant (`localVoice`).
    var localVoiceCut = false
    /// The final transcript lines so far (most recent last, bounded), carried into the
    /// next session.
    public private(set) var history: [CarriedTurn] = []
    public private(set) var stopping = false
    var stopped = false
    var exitStatus = ExitStatus.ok
    var lastFailureStatus = ExitStatus.unavailable
    public private(set) var firstConnectedAt: Instant?
    var endAt: Instant?
    var nextStats: Instant?
    var stateSince = Instant.zero
    public private(set) var reconnects = 0
    /// What the status file names as the reason nothing works (`insufficient_quota`).
    public private(set) var problem: String?
    public private(set) var lastConnectMilliseconds: Int64?
    var lastStats: (at: Instant, bytes: Int)?
    /// Kept up to date by the runtime; read for stats lines.
    public var audio = AudioCounters()
    /// What every session carried, summed as each closes (the demo's summary).
    public private(set) var totals = CallTotals()

    /// - Parameter seed: the supervisor's jitter and each peer's generators.
    public init(settings: AgentSettings, identity: Identity, crypto: CryptoRandom, seed: UInt64) {
        self.settings = settings
        self.identity = identity
        self.crypto = crypto
        self.seed = SeededRandom(seed: seed)
        supervisor = Supervisor(policy: settings.policy, seed: seed)
        attemptLimit = AttemptLimit(maximumAttempts: settings.maxAttempts, waitPerRetry: settings.policy.maximumBackoff)
        deviceCredential = settings.token.map { BearerCredential(token: $0, for: settings.route.credentialURL) }
        // Push-to-talk starts muted: nothing is sent until the button goes down.
        muted = settings.pushToTalk
        micClosed = true
        conversation = RealtimeConversation(settings: settings.realtime)
        learned = LearnedServers(reach: settings.learnedServerReach, routeHost: settings.route.answerURL.host)
        conversation = newConversation()
    }

    /// The direct OpenAI route speaks the Realtime protocol itself: audio and `send`
    /// lines wait for `session.updated` (a backend or WHIP server configures its own
    /// sessions and may never send one).
    var speaksRealtime: Bool {
        if case .openai = settings.route { return true }
        return false
    }

    /// A new provider session's conversation: the held lines, and the last turns.
    func newConversation() -> RealtimeConversation {
        RealtimeConversation(settings: settings.realtime, lines: speaksRealtime ? settings.sendOnOpen : [],
                             carried: speaksRealtime ? CarriedTurn.recent(history, count: settings.carryTurns, maxBytes: settings.carryBytes) : [])
    }

    // MARK: - Inputs

    public func start(now: Instant) {
        self.now = now
        stateSince = now
        micClosed = wantMicClosed
        emit(.mute(micClosed))
        if let summary = attemptLimit.summary { log(.info, summary) }
        if let interval = settings.statsInterval { nextStats = now + interval }
        supervisor.start(now: now)
        driveSupervisor()
    }

    /// The session's UDP sockets are bound; `relays` TURN allocations are being made
    /// for it (each ends in `relayAllocated` or `relayFailed`).
    public func socketsBound(session id: Int, addresses: [SocketAddress], relays: Int = 0, now: Instant) {
        self.now = now
        sessions[id]?.bound(addresses, relays: relays)
        driveSupervisor()
    }

    /// A TURN allocation for the session exists: its relayed address is a local
    /// candidate; what is sent from it goes through the allocation.
    public func relayAllocated(session id: Int, relayed: SocketAddress, mapped: SocketAddress?, server: IPAddress, via: String, now: Instant) {
        self.now = now
        sessions[id]?.relayAllocated(relayed: relayed, mapped: mapped, server: server, via: via)
        driveSupervisor()
    }

    /// A TURN allocation for the session could not be made, or was lost.
    /// `configuration`: only a person can fix it (wrong credentials).
    public func relayFailed(session id: Int, server: String, reason: String, configuration: Bool, now: Instant) {
        self.now = now
        sessions[id]?.relayFailed(server: server, reason: reason, configuration: configuration)
        driveSupervisor()
    }

    public func socketsUnavailable(session id: Int, reason: String, now: Instant) {
        self.now = now
        lastFailureStatus = .unavailable
        supervisor.failed(id, .transient(reason), now: now)
        driveSupervisor()
    }

    /// A datagram in the runtime's receive buffer, which the core borrows for the call
    /// and may overwrite: SRTP is decrypted in place there (Peer.handleInput), so an
    /// audio packet is copied once between the socket and the jitter buffer.
    public func handleDatagram(session id: Int, _ datagram: UnsafeMutableRawBufferPointer, from: SocketAddress, local: SocketAddress, now: Instant) {
        self.now = now
        guard let s = sessions[id] else { return }
        s.datagram(datagram, from: from, local: local)
        driveSupervisor()
    }

    public func httpResponse(_ request: RequestID, _ response: HTTPResponse, wallClock: Int64, now: Instant) {
        self.now = now
        guard let (session, purpose) = requests.removeValue(forKey: request), let s = sessions[session] else { return }
        s.httpResponse(purpose, response, wallClock: wallClock)
        driveSupervisor()
    }

    public func httpFailed(_ request: RequestID, _ failure: HTTPTransportFailure, now: Instant) {
        self.now = now
        guard let (session, purpose) = requests.removeValue(forKey: request), let s = sessions[session] else { return }
        s.httpFailed(purpose, failure)
        driveSupervisor()
    }

    /// The ICE servers a provider's answer named (WHIP `Link: rel="ice-server"`, RFC
    /// 9725 §4.6; a backend's `iceServers`): each judged by `LearnedServers`.
    func learn(_ links: [ICEServerLink]) {
        for link in links {
            switch learned.consider(link, configured: settings.configuredRelays) {
            case .use(let server, let address):
                log(.info, "the answer names TURN server \(server.url): used from the next session (this offer was already complete)")
                emit(.addRelay(server, address))
            case .resolve(let server):
                emit(.resolveRelay(server))
            case .refused(let why):
                log(.warning, why)
            case .ignored:
                break
            }
        }
    }

    /// A learned TURN server's name resolved (`.resolveRelay`): used at the first
    /// address the reach allows, or refused.
    public func relayResolved(_ server: TURNServer, addresses: [SocketAddress], now: Instant) {
        self.now = now
        let preferred = addresses.filter { $0.ip.isV4 } + addresses.filter { !$0.ip.isV4 }
        guard let first = preferred.first else { return }
        guard let a = preferred.first(where: { learned.allows($0.ip) }) else {
            log(.warning, learned.scopeRefusal(server.url, first.ip.scope))
            return
        }
        var s = server
        s.address = a.ip
        log(.info, "the answer names TURN server \(server.url) (\(a)): used from the next session (this offer was already complete)")
        emit(.addRelay(s, a))
    }

    public func relayUnresolved(_ server: TURNServer, reason: String, now: Instant) {
        self.now = now
        log(.warning, "the answer's ice-server \(server.url): \(reason); not using it")
    }

    /// One uplink frame (capture → hooks → mute gate), for the session carrying the audio.
    public func uplink(_ frame: UnsafeBufferPointer<Int16>, now: Instant) {
        self.now = now
        guard let s = activeSession, s.wasConnected, !s.closing, let media = s.media else { return }
        if halfDuplexHolds {
            // The gate ramps the device's audio down; what is sent is silence even for
            // frames captured before it closed.
            if silence.count != frame.count { silence = [Int16](repeating: 0, count: frame.count) }
            silence.withUnsafeBufferPointer { s.sendAudio($0, media: media) }
        } else {
            s.sendAudio(frame, media: media)
        }
        conversation.audioSent(milliseconds: Int(media.frameTicks / 48))
        drainConversation()
    }

    /// Linnet's voice flag (the speexdsp preprocessor behind the echo canceller) has
    /// been on for `heldFor` of audio without a break (zero: off); the runtime reports
    /// it with every uplink frame. Held for `localBargeIn` while the assistant speaks,
    /// it barges in once per stretch of voice: `response.cancel` (only while a response
    /// is in progress), `output_audio_buffer.clear` and `.flushPlayback` at once.
    ///
    /// Why a debounce: the flag is speexdsp's per-10 ms speech probability with a
    /// hysteresis, and it flips on for a frame or a few at a cough, a door, a cup set
    /// down, or a burst of residual echo while the canceller is still converging.
    /// Cutting the assistant off for those feels broken; the default, 100 ms (half a
    /// syllable to a syllable), is past most of them and puts the speaker silent
    /// 110–165 ms after the user's voice reaches the microphone in a room with no echo
    /// (200 ms would make it 155–205 ms, over the 150 ms aimed at; bench/duplex-wer.sh
    /// --variants barge100 prints them), far sooner than the provider's VAD, which
    /// hears the audio a network trip later. The setting is there because rooms differ
    /// (a clattering kitchen wants longer, 0 leaves barge-in to the provider's VAD).
    /// Never in push-to-talk (the button barges in), in half duplex (the microphone is
    /// shut while the assistant speaks), or with the microphone muted.
    public func localVoice(heldFor: Duration, now: Instant) {
        // While echo is measured uncancelled at the microphone the flag may be the
        // assistant's own voice (the microphone is held shut then anyway).
        guard let threshold = settings.localBargeIn, !settings.pushToTalk, settings.micHold != .whileAssistantSpeaks,
              !echoAudible else { return }
        self.now = now
        guard heldFor >= threshold else {
            // The stretch ended (or has not reached the threshold): the next may cut.
            localVoiceCut = false
            return
        }
        // Over the assistant for the whole debounce: a stretch that began before it
        // started speaking counts from its start.
        guard !localVoiceCut, assistantSpeaking, !micClosed, let since = speakingSince,
              now - since >= threshold else { return }
        localVoiceCut = true
        // The state is known from the events channel (OpenAI's events, or a backend
        // relaying them): a route that sends none never has the assistant speaking here.
        guard conversation.localSpeech(now: now) else { return }
        log(.info, "barge-in: local voice for \(heldFor.milliseconds) ms over the assistant")
        record("barge_in", [("source", "voice_flag"), ("held_ms", .number(JSONNumber(Int(heldFor.milliseconds))))])
        drainConversation()
    }

    /// Uplink time that passed with nothing to send (stale frames dropped after a stall,
    /// audio never captured): RTP time moves on by it.
    public func skipUplink(samples: UInt32, now: Instant) {
        self.now = now
        guard let s = activeSession, s.wasConnected, !s.closing else { return }
        s.peer?.skipAudio(samples: samples)
    }

    /// The button, key or signal: talk (push-to-talk) or the mute switch (voice mode).
    public func talk(_ down: Bool, now: Instant) {
        self.now = now
        talking = down
        if settings.pushToTalk {
            record("ptt", [("talking", .bool(down))])
            // The conversation first: a release's tail keeps the microphone open.
            if down { conversation.press(now: now) } else { conversation.release(now: now) }
            setMuted(!down)
            drainConversation()
        } else if down {
            // An open microphone: the button mutes (a privacy switch).
            mute(!muted, now: now)
        }
        writeStatus()
        updateBusy()
        driveSupervisor()
    }

    /// The terminal key and SIGUSR1: talk / stop talking (push-to-talk), mute / unmute.
    public func toggle(now: Instant) {
        talk(settings.pushToTalk ? !talking : true, now: now)
    }

    public func mute(_ on: Bool, now: Instant) {
        self.now = now
        setMuted(on)
        log(.info, on ? "microphone muted" : "microphone open")
        record("mute", [("muted", .bool(on))])
        writeStatus()
    }

    /// The long press: end this conversation, start a fresh one (a new provider session).
    public func newConversation(now: Instant) {
        self.now = now
        log(.info, "long press: starting a new conversation")
        record("ptt", [("long_press", .bool(true))])
        if let id = activeID {
            supervisor.ended(id, now: now)
            driveSupervisor()
        }
    }

    /// Closes every session (provider-side close first); `.exit` follows once they are.
    public func stop(_ status: ExitStatus = .ok, reason: String? = nil, now: Instant) {
        self.now = now
        guard !stopping else { return }
        stopping = true
        exitStatus = status
        // The last figures of the call, whatever the stats interval.
        if activeSession != nil { writeStats() }
        if let reason { log(status == .ok ? .info : .error, reason) }
        supervisor.close(now: now)
        driveSupervisor()
        finishIfIdle()
    }

    public func handleTimeout(now: Instant) {
        self.now = now
        if let end = endAt, now >= end, !stopping {
            endAt = nil
            stop(.ok, reason: "ending after \((settings.runFor ?? .zero).milliseconds / 1000) s (--seconds)", now: now)
        }
        if let t = nextStats, now >= t, let interval = settings.statsInterval {
            nextStats = t + interval
            if nextStats! <= now { nextStats = now + interval }
            writeStats()
        }
        for s in Array(sessions.values) { s.handleTimeout() }
        if let t = conversation.nextDeadline, now >= t {
            conversation.handleTimeout(now: now)
            drainConversation()
        }
        supervisor.handleTimeout(now: now)
        driveSupervisor()
    }

    public func pollOutput() -> AgentOutput {
        if let o = outputs.popFirst() { return o }
        return .timeout(deadline)
    }

    var deadline: Instant {
        var t = supervisorDeadline
        for s in sessions.values { t = min(t, s.deadline) }
        if let e = endAt { t = min(t, e) }
        if let n = nextStats { t = min(t, n) }
        if let c = conversation.nextDeadline { t = min(t, c) }
        return t
    }

    // MARK: - Queries

    public var state: SessionState { supervisor.state }
    var activeSession: SessionMachine? { activeID.flatMap { sessions[$0] } }
    /// The session carrying the audio's peer (stats, tests).
    public var activePeer: Peer? { activeSession?.peer }
    public func peer(of session: Int) -> Peer? { sessions[session]?.peer }
    public var sessionIDs: [Int] { sessions.keys.sorted() }

    public var statusSnapshot: AgentStatus {
        AgentStatus(state: supervisor.state, sinceSeconds: Double((now - stateSince).milliseconds) / 1000, muted: muted,
                    turnDetection: settings.turnDetectionName, reconnects: reconnects, session: activeID,
                    rttMilliseconds: activeSession?.peer?.stats.roundTripTime.map { Double($0.microseconds) / 1000 },
                    lastUser: lastUserText, lastAssistant: lastAssistantText, problem: problem ?? settings.deviceProblem)
    }

    /// The stats line's fields (state, audio counters, the active call's figures).
    public func statsFields() -> [(String, JSONValue)] {
        var f: [(String, JSONValue)] = [("state", .string(supervisor.state.rawValue)), ("reconnects", .number(JSONNumber(reconnects)))]
        f.append(("capture_xruns", .number(JSONNumber(audio.captureXruns))))
        // Stops of the uplink past 200 ms (the process stopped, the loop held) and the
        // frames dropped as stale after them rather than sent late in a burst.
        f.append(("capture_stalls", .number(JSONNumber(audio.captureStalls))))
        f.append(("capture_stale_frames", .number(JSONNumber(audio.captureStaleFrames))))
        f.append(("playback_xruns", .number(JSONNumber(audio.playbackXruns))))
        // Each jump of an audio thread's timeline moves the echo reference (the echo
        // comes back while the canceller learns again): a figure for a board whose
        // driver reports its delay coarsely.
        f.append(("audio_timeline_jumps", .number(JSONNumber(audio.timelineJumps))))
        if let db = audio.micDBFS { f.append(("mic_dbfs", .number(JSONNumber((db * 10).rounded() / 10)))) }
        guard let s = activeSession, let p = s.peer else { return f }
        let stats = p.stats
        let media = s.media?.counters ?? MediaCounters()
        f.append(("session", .number(JSONNumber(s.id))))
        f.append(("packets_sent", .number(JSONNumber(stats.rtpSent))))
        f.append(("packets_received", .number(JSONNumber(stats.rtpReceived))))
        f.append(("packets_lost", .number(JSONNumber(Int(stats.packetsLost)))))
        f.append(("remote_loss_percent", .number(JSONNumber((Double(stats.remoteFractionLost) * 1000 / 256).rounded() / 10))))
        f.append(("jitter_ms", .number(JSONNumber((Double(stats.jitter) / 4.8).rounded() / 10))))
        f.append(("jitter_target_ms", .number(JSONNumber((Double(media.jitterTargetMicroseconds) / 100).rounded() / 10))))
        f.append(("concealed", .number(JSONNumber(media.concealed))))
        f.append(("fec_recovered", .number(JSONNumber(media.fecRecovered))))
        f.append(("srtp_dropped", .number(JSONNumber(stats.srtpDropped))))
        // What could not go: the socket refused it, or RTP/SRTP could not make the
        // packet (shown once there is any).
        if stats.sendFailed > 0 { f.append(("send_failed", .number(JSONNumber(stats.sendFailed)))) }
        if stats.rtpNotProtected > 0 { f.append(("rtp_not_protected", .number(JSONNumber(stats.rtpNotProtected)))) }
        // DTLS/SRTP from addresses ICE never validated, and STUN that failed its
        // integrity check: strangers, dropped without an answer.
        f.append(("stranger_dropped", .number(JSONNumber(stats.unvalidatedDropped + p.iceStats.unauthenticated))))
        if let rtt = stats.roundTripTime { f.append(("rtt_ms", .number(JSONNumber((Double(rtt.microseconds) / 100).rounded() / 10)))) }
        if let last = lastStats, now > last.at, media.bytesSent >= last.bytes {
            let kbps = Double(media.bytesSent - last.bytes) * 8 / (Double((now - last.at).microseconds) / 1_000_000) / 1000
            f.append(("bitrate_kbps", .number(JSONNumber((kbps * 10).rounded() / 10))))
        }
        lastStats = (now, media.bytesSent)
        if let ms = lastConnectMilliseconds { f.append(("connect_ms", .number(JSONNumber(Int(ms))))) }
        return f
    }

    // MARK: - The supervisor's decisions

    func driveSupervisor() {
        while true {
            switch supervisor.pollOutput() {
            case .action(let a): perform(a)
            case .timeout(let t):
                supervisorDeadline = t
                return
            }
        }
    }

    func perform(_ action: SupervisorAction) {
        switch action {
        case .startSession(let id, let reason):
            if reason != .initial { reconnects += 1 }
            let s = SessionMachine(id: id, core: self, peerSeed: seed.next())
            // On OpenAI the conversation sends them once the session is configured.
            if !speaksRealtime { s.queued = settings.sendOnOpen }
            sessions[id] = s
            record("session", [("id", .number(JSONNumber(id))), ("reason", .string(reason.rawValue))])
            emit(.bind(session: id))
        case .restartICE(let id):
            guard let s = sessions[id], s.restartICE() else { return supervisor.restartFailed(id, now: now) }
            record("ice_restart", [("session", .number(JSONNumber(id)))])
        case .switchAudio(let id):
            let previous = activeID
            activeID = id
            // A new provider session: its conversation starts afresh (with the turns
            // of the old one), and the microphone is silent until it is configured.
            conversation = newConversation()
            assistantSpeaking = false
            speakingSince = nil
            syncMic()
            emit(.switchAudio(session: id))
            if let s = sessions[id] {
                if let ms = s.connectMilliseconds ?? s.offerSentAt.map({ (now - $0).milliseconds }) { lastConnectMilliseconds = ms }
                record("audio", [("session", .number(JSONNumber(id))), ("from", previous.map { .number(JSONNumber($0)) } ?? .null)])
                if s.eventsChannelOpen {
                    conversation.channelOpened(now: now)
                    drainConversation()
                }
            }
        case .closeSession(let id):
            guard let s = sessions[id] else { return }
            if activeID == id { activeID = nil }
            if let p = s.peer {
                totals.sent += p.stats.rtpSent
                totals.received += p.stats.rtpReceived
            }
            if let m = s.media?.counters {
                totals.decoded += m.framesDecoded
                totals.concealed += m.concealed
            }
            s.close()
        case .stateChanged(let state, let reason):
            stateChanged(state, reason)
        case .retryScheduled(let delay, let attempt, let failure):
            record("retry", [("attempt", .number(JSONNumber(attempt))), ("delay_ms", .number(JSONNumber(Int(delay.milliseconds)))),
                             ("error", .string(failure.description))])
            if case .giveUp(let why) = attemptLimit.failed(attempt: attempt, delay: delay) {
                let status: ExitStatus
                if case .unauthorized = failure { status = .config } else { status = lastFailureStatus }
                stop(status, reason: "\(why): \(failure)", now: now)
            } else {
                log(.info, "attempt \(attempt) failed; the next in \(delay.milliseconds) ms")
            }
        }
    }

    func stateChanged(_ state: SessionState, _ reason: String?) {
        stateSince = now
        if state == .connected { problem = nil }
        let text = reason.map { "\(state.rawValue): \($0)" } ?? state.rawValue
        log(state == .failed ? .error : .info, "session \(text)")
        var fields: [(String, JSONValue)] = [("state", .string(state.rawValue))]
        if let reason { fields.append(("reason", .string(reason))) }
        record("state", fields)
        emit(.notify("session \(text)"))
        writeStatus()
        if state == .connected {
            attemptLimit.connected()
            if firstConnectedAt == nil {
                firstConnectedAt = now
                if let d = settings.runFor { endAt = now + d }
            }
        }
    }

    /// A session's peer has closed and its sockets are released.
    func sessionFinished(_ id: Int) {
        if sessions[id]?.answer != nil { emit(.pendingClose(session: id, nil)) }
        sessions[id] = nil
        emit(.unbind(session: id))
        finishIfIdle()
    }

    func finishIfIdle() {
        guard stopping, !stopped, sessions.isEmpty else { return }
        stopped = true
        nextStats = nil
        endAt = nil
        emit(.exit(exitStatus))
    }

    // MARK: - Reports from sessions

    func connected(_ s: SessionMachine) { supervisor.connected(s.id, now: now) }
    func disconnected(_ s: SessionMachine) { supervisor.disconnected(s.id, now: now) }
    func ended(_ s: SessionMachine, _ why: String) {
        log(.info, "session \(s.id): \(why)")
        supervisor.ended(s.id, now: now)
    }

    func failed(_ s: SessionMachine, _ failure: SessionFailure, _ status: ExitStatus) {
        var st = status
        switch failure {
        case .unauthorized, .configuration: st = .config
        default: break
        }
        lastFailureStatus = st
        if case .quota(let m) = failure {
            problem = "insufficient_quota"
            log(.error, "the provider's account is out of quota: nothing will work until it is topped up (\(m))")
        }
        supervisor.failed(s.id, failure, now: now)
    }

    func restartDone(_ s: SessionMachine, ok: Bool) {
        // On success the session reports `connected` once checks succeed; the
        // supervisor's restart timeout covers the case where they do not.
        if !ok { supervisor.restartFailed(s.id, now: now) }
    }

    func channelOpened(_ s: SessionMachine, channel: UInt16, label: String) {
        record("channel", [("event", "open"), ("label", .string(label)), ("id", .number(JSONNumber(Int(channel))))])
        // A channel's label is matched as its bytes (RFC 8832 §5.1: a UTF-8 string, as
        // the peer sent it).
        if s.id == activeID, label.bytesEqual(settings.eventsChannel) {
            conversation.channelOpened(now: now)
            drainConversation()
        }
    }

    func message(_ s: SessionMachine, label: String, text: String?, binary: [UInt8]?) {
        if let text {
            record("message", [("label", .string(label)), ("text", .string(text))])
            if s.id == activeID, label.bytesEqual(settings.eventsChannel) {
                conversation.received(text: text, now: now)
                drainConversation()
            }
        } else if let binary {
            record("message", [("label", .string(label)), ("binary", .string(Base64.encode(binary)))])
        }
    }

    // MARK: - The conversation

    func drainConversation() {
        while true {
            switch conversation.pollOutput() {
            case .none:
                syncMic()
                updateBusy()
                return
            case .send(let text): activeSession?.sendEvent(text)
            case .event(let e): conversationEvent(e)
            case .flushPlayback:
                if let id = activeID { emit(.flushPlayback(session: id)) }
            }
        }
    }

    func conversationEvent(_ e: RealtimeEvent) {
        switch e {
        case .transcript(let role, let text, let final, _):
            // Partial lines are many (one per token): only final ones are logged and
            // written; the status file shows the latest line.
            guard final else { return }
            finalTranscript(role, text, e)
        case .interrupted(let text, _, _):
            // Only what the user heard is kept and carried into the next session.
            finalTranscript(.assistant, text, e)
        case .truncated:
            log(.info, e.description)
        case .providerError(let code, _, _):
            // Cancelling a response that had just finished is a race nobody can avoid.
            // The code is a JSON string, compared as its bytes (RFC 8259 §8.3).
            log(bytesEqual(code, "response_cancel_not_active") ? .debug : .warning, e.description)
        case .sessionExpired:
            log(.info, e.description)
            // The provider's limit came before our rollover: replace the session now.
            if let id = activeID { supervisor.ended(id, now: now) }
        case .malformed, .settingIgnored, .sessionNotConfirmed, .commitUnconfirmed:
            log(.warning, e.description)
        case .tooShort:
            log(.info, e.description)
        case .speaking(let on):
            assistantSpeaking = on
            speakingSince = on ? now : nil
            syncMic()
            log(.debug, e.description)
        case .sessionReady, .userSpeech:
            log(.debug, e.description)
        case .expires(let at):
            log(.debug, e.description)
            sessionExpires(at: at)
        }
        let entry = e.eventLogEntry
        record(entry.type, entry.fields)
    }

    func finalTranscript(_ role: RealtimeRole, _ text: String, _ e: RealtimeEvent) {
        if role == .user { lastUserText = text } else { lastAssistantText = text }
        if history.count >= 64 { history.removeFirst() }
        history.append(CarriedTurn(role: role, text: text))
        log(.info, e.description)
        // The file is rewritten now: otherwise a kiosk UI would see the line only at
        // the next state change or stats tick (stats-seconds is 0 by default).
        writeStatus()
    }

    /// `session.expires_at` (the provider's Unix seconds), placed on the monotonic clock
    /// through the provider's own clock (its HTTP `Date`, `providerClockOffset`): never
    /// the device's wall clock, which may be off by an hour. The supervisor keeps the
    /// earlier of it and the configured limit, and a floor under a session's life; a
    /// value in the past or absurdly far off says the provider's clock or data is wrong,
    /// and is set aside.
    func sessionExpires(at: Int64) {
        guard let id = activeID, let s = sessions[id] else { return }
        guard let offset = s.providerClockOffset else {
            log(.debug, "the provider's session end is set aside: it sent no Date to read its clock by (the configured limit holds)")
            return
        }
        let remaining = at &- (offset &+ now.nanoseconds / 1_000_000_000)
        guard remaining > 0, remaining < 86_400 * 7 else {
            log(.warning, "the provider says its session ends \(remaining) s from now by its own clock: set aside (the configured \(Int(settings.policy.maximumSessionAge.milliseconds / 1000)) s limit holds)")
            return
        }
        supervisor.sessionExpires(id, at: now + .seconds(remaining), now: now)
    }

    // MARK: - Outputs

    func emit(_ o: AgentOutput) { outputs.append(o) }
    func log(_ level: AgentLogLevel, _ text: String) { emit(.log(level, text)) }
    func record(_ type: String, _ fields: [(String, JSONValue)]) { emit(.record(type, fields)) }

    func setMuted(_ on: Bool) {
        muted = on
        syncMic()
    }

    /// Closed when muted (in push-to-talk: not talking, unless a release's tail runs),
    /// while the Realtime session is not configured, or while half duplex holds it
    /// shut because the assistant speaks.
    var wantMicClosed: Bool {
        let user = muted && !(settings.pushToTalk && conversation.isInTail)
        return user || (speaksRealtime && !conversation.isConfigured) || halfDuplexHolds
    }

    /// Tells the supervisor whether this is a quiet moment for a rollover's switch.
    func updateBusy() {
        let busy = talking || conversation.isBusy
        if busy != supervisor.busy { supervisor.setBusy(busy, now: now) }
    }

    func syncMic() {
        let closed = wantMicClosed
        guard closed != micClosed else { return }
        micClosed = closed
        emit(.mute(closed))
    }

    /// Voice mode holds the microphone shut now (`AgentSettings.micHold`): while the
    /// assistant speaks, or while the echo canceller measures its echo uncancelled at
    /// the microphone. The latter follows what the speaker actually plays (and the room
    /// after it), not the provider's events, so nothing is held past the echo's end and
    /// a sentence that starts as the reply ends goes through.
    var halfDuplexHolds: Bool {
        guard !settings.pushToTalk else { return false }
        switch settings.micHold {
        case .never: return false
        case .whileAssistantSpeaks: return assistantSpeaking
        case .whileEchoAudible: return echoAudible
        }
    }

    /// Whether the echo canceller measures echo at the microphone that it does not yet
    /// cancel (`EchoCanceller.echoAudible`).
    public private(set) var echoAudible = false
    /// Times the echo turned audible, for the stats line.
    public private(set) var echoHolds = 0

    /// The echo canceller's measure, reported by the runtime with every uplink frame
    /// (`erl`/`erle`: its figures, dB, for the log).
    public func echo(audible: Bool, erl: Double? = nil, erle: Double? = nil, now: Instant) {
        guard settings.micHold == .whileEchoAudible, audible != echoAudible else { return }
        self.now = now
        echoAudible = audible
        if audible { echoHolds += 1 }
        var fields: [(String, JSONValue)] = [("audible", .bool(audible))]
        if let erl { fields.append(("erl_db", .number(JSONNumber((erl * 10).rounded() / 10)))) }
        if let erle { fields.append(("erle_db", .number(JSONNumber((erle * 10).rounded() / 10)))) }
        // The first hold is worth a line; later ones (a moved speaker, the canceller
        // learning again) are in the events file and the stats.
        log(audible && echoHolds == 1 ? .info : .debug,
            audible ? "aec: echo reaches the microphone uncancelled: silence is sent while it does" : "aec: echo cancelled, the microphone is open")
        record("aec", fields)
        syncMic()
    }

    /// How much of the provider's audio the speaker has played out (ms of its stream, by
    /// the playback device's clock), where the stretch now playing began, and where the
    /// audible part of what was played ended (nil: not known): the runtime reports it
    /// before each uplink frame, so a cut knows what was heard.
    public func downlink(heard: Int, spurtStart: Int?, voiceEnd: Int? = nil) {
        conversation.downlink(heard: heard, spurtStart: spurtStart, voiceEnd: voiceEnd)
    }

    var silence: [Int16] = []

    func writeStatus() { emit(.status(statusSnapshot)) }

    func writeStats() {
        let f = statsFields()
        record("stats", f)
        var line = "stats:"
        for (k, v) in f { line += " \(k)=" + String(decoding: v.serialized(), as: UTF8.self) }
        log(.info, line)
        writeStatus()
    }

    func request(_ session: Int, _ purpose: SessionMachine.Purpose, _ r: HTTPRequest, timeout: Duration) -> RequestID {
        let id = nextRequest
        nextRequest += 1
        requests[id] = (session, purpose)
        emit(.http(id, r, timeout: timeout))
        return id
    }

    func cancel(_ request: RequestID) {
        guard requests.removeValue(forKey: request) != nil else { return }
        emit(.cancelHTTP(request))
    }
}
