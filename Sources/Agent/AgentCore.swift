// The agent core's class: its state, inputs, the supervisor's decisions and the
// session reports. Its types are in AgentTypes.swift, AgentSettings.swift and
// CallMedia.swift; the status file and the stats line in AgentStatus.swift and
// AgentStats.swift.

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
    public internal(set) var now = Instant.zero
    var supervisorDeadline = Instant.distantFuture

    /// TURN servers the provider named, and what was made of them.
    var learned: LearnedServers
    /// The model's tool calls: judged, running, answered.
    public private(set) var tools: ToolCalls
    /// Calls run, and calls refused or failed (the stats line and the status file).
    public private(set) var toolCallsRun = 0
    public private(set) var toolCallsFailed = 0
    // The conversation on the session that carries the audio.
    var conversation: RealtimeConversation
    public private(set) var lastUserText: String?
    public private(set) var lastAssistantText: String?
    /// The assistant's voice, as the events channel tells it.
    var assistant = AssistantVoice.silent
    public var assistantSpeaking: Bool { assistant != .silent }

    public private(set) var muted: Bool
    /// What the mute gate was last told (`.mute`): `muted`, kept open for a release's
    /// tail, and closed while the session is not configured yet.
    public private(set) var micClosed: Bool
    var talking = false
    /// This stretch of local voice already cut the assistant (`localVoice`).
    var localVoiceCut = false
    /// The wake word's turn (`AgentCore+Wake`).
    public internal(set) var wakeTurn = WakeTurn()
    /// Times the voice flag ducked the speaker (`localVoice`), cut or not.
    public private(set) var ducks = 0
    /// The final transcript lines so far (most recent last, bounded), carried into the
    /// next session.
    public private(set) var history: [CarriedTurn] = []
    /// Running, stopping (sessions closing) or stopped; the exit status is in the case.
    var life = RunLife.running
    public var stopping: Bool { life != .running }
    var lastFailureStatus = ExitStatus.unavailable
    public private(set) var firstConnectedAt: Instant?
    var endAt: Instant?
    var nextStats: Instant?
    var stateSince = Instant.zero
    public private(set) var reconnects = 0
    /// Sessions started, by reason (`StartReason`: initial, reconnect, rollover), and
    /// those that connected: the fleet metrics' counters.
    public private(set) var sessionStarts = (initial: 0, reconnect: 0, rollover: 0, resume: 0, demand: 0)
    public private(set) var connects = 0
    /// The user cut the assistant off: with their voice (the local barge-in) or by
    /// pressing the button while it spoke.
    public internal(set) var bargeIns = (voice: 0, button: 0)
    /// UDP payload bytes every session sent and received (STUN, DTLS, SRTP, TURN).
    public private(set) var networkBytes = (sent: 0, received: 0)
    /// What the provider said the run's responses cost (`response.done`'s `usage`).
    public private(set) var usage = ProviderUsage()
    /// The local calendar the day's usage is counted on (nil: not counted; the runtime
    /// sets it with `setCalendar` before `start`).
    public private(set) var calendar: LocalCalendar?
    /// The local day's usage, up to the last time it was counted (`todaySoFar` adds the
    /// connection running now).
    public private(set) var today: DailyUsage?
    var restoredUsage: DailyUsage?
    /// Connected time is being counted since then (the state is `connected`).
    var countingSince: Instant?
    /// Why no session may run until the next local day (a daily cap), while it lasts.
    public private(set) var capped: String?
    var capsDue = false
    /// Session on demand (OnDemand.swift): the audio from the press, the press still to
    /// be given to the new session's conversation, a release that waits for the backlog,
    /// when someone last spoke, and the press's wait for its first packet.
    var backlog = UplinkBacklog()
    var demandPress: Instant?
    /// A release that came while the backlog was kept or sent: when, so the commit
    /// follows the backlog and a press no session took can be dropped as stale.
    var backlogReleasedAt: Instant?
    var lastActivity = Instant.zero
    public internal(set) var pressToFirstPacket: Duration?
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
        tools = ToolCalls(settings.tools)
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
        if let c = calendar {
            let day = c.day(at: now)
            today = restoredUsage.flatMap { $0.day == day ? $0 : nil } ?? DailyUsage(day: day)
        }
        // A cap reached earlier today (before a restart) holds from the start.
        if let u = today, let why = settings.caps.reached(u) {
            pauseForCap(why, now: now)
        } else if settings.onDemand {
            supervisor.pause(AgentCore.waitingForPress, now: now)
        } else {
            supervisor.start(now: now)
        }
        driveSupervisor()
    }

    // MARK: - The day's usage and its caps

    /// The local calendar, and the usage an earlier run kept (used when it is of the
    /// day `start` falls on). Call before `start`; again when the zone's offset changes.
    public func setCalendar(_ c: LocalCalendar, restored: DailyUsage? = nil) {
        calendar = c
        if let restored { restoredUsage = restored }
    }

    /// Today's usage including the connection running now (what the status file, the
    /// metrics and the state file show).
    public var todaySoFar: DailyUsage? {
        guard var u = today else { return nil }
        if let s = countingSince, now > s, calendar?.day(at: now) == u.day { u.connectedMilliseconds += (now - s).milliseconds }
        return u
    }

    /// Adds the connected time since it was last counted; a new local day starts a new
    /// count (connected time before its midnight stays with the day before).
    func account(now: Instant) {
        guard let c = calendar, var u = today else { return }
        let day = c.day(at: now)
        if day != u.day {
            if let s = countingSince { countingSince = max(s, c.start(ofDay: day)) }
            u = DailyUsage(day: day)
        }
        if let s = countingSince, now > s {
            let ms = (now - s).milliseconds
            u.connectedMilliseconds += ms
            countingSince = s + .milliseconds(ms)
        }
        today = u
    }

    /// Pauses the sessions when a cap is reached; resumes them on the first day under
    /// the caps again.
    func judgeCaps(now: Instant) {
        capsDue = false
        guard !settings.caps.isEmpty, !stopping, let u = today else { return }
        let why = settings.caps.reached(u)
        if let why, capped == nil {
            pauseForCap(why, now: now)
            driveSupervisor()
        } else if why == nil, capped != nil {
            capped = nil
            log(.info, "a new day (\(DailyUsage.date(u.day))): sessions start again")
            record("cap", [("reached", .bool(false)), ("date", .string(DailyUsage.date(u.day)))])
            // On demand the new day waits for a press, as any other moment does.
            if !settings.onDemand { supervisor.resume(now: now) }
            driveSupervisor()
        }
    }

    func pauseForCap(_ why: String, now: Instant) {
        capped = why
        let until = today.map { DailyUsage.date($0.day + 1) } ?? "tomorrow"
        log(.warning, "\(why): no session until \(until) 00:00 local time")
        record("cap", [("reached", .bool(true)), ("reason", .string(why)), ("until", .string(until))])
        supervisor.pause(why, now: now)
    }

    /// When the caps next need judging: the next local day while capped, or the moment
    /// the connection running now reaches the minutes cap.
    var capDeadline: Instant? {
        guard !settings.caps.isEmpty, let c = calendar, let u = today else { return nil }
        if capsDue { return now }
        if capped != nil { return c.start(ofDay: u.day + 1) }
        guard let s = countingSince, let left = settings.caps.connectedTimeLeft(u) else { return nil }
        return min(s + left, c.start(ofDay: u.day + 1))
    }

    /// The session's UDP sockets are bound; `relays` TURN allocations are being made
    /// for it (each ends in `relayAllocated` or `relayFailed`).
    public func socketsBound(session id: Int, addresses: [SocketAddress], relays: Int = 0, now: Instant) {
        self.now = now
        if let s = sessions[id] {
            s.bound(addresses, relays: relays, media: makeMedia(id), now: now)
            apply(s)
        }
        driveSupervisor()
    }

    /// A TURN allocation for the session exists: its relayed address is a local
    /// candidate; what is sent from it goes through the allocation.
    public func relayAllocated(session id: Int, relayed: SocketAddress, mapped: SocketAddress?, server: IPAddress, via: String, now: Instant) {
        self.now = now
        if let s = sessions[id] {
            s.relayAllocated(relayed: relayed, mapped: mapped, server: server, via: via, now: now)
            apply(s)
        }
        driveSupervisor()
    }

    /// A TURN allocation for the session could not be made, or was lost.
    /// `configuration`: only a person can fix it (wrong credentials).
    public func relayFailed(session id: Int, server: String, reason: String, configuration: Bool, now: Instant) {
        self.now = now
        if let s = sessions[id] {
            s.relayFailed(server: server, reason: reason, configuration: configuration, now: now)
            apply(s)
        }
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
        networkBytes.received += datagram.count
        s.datagram(datagram, from: from, local: local, now: now)
        apply(s)
        driveSupervisor()
    }

    public func httpResponse(_ request: RequestID, _ response: HTTPResponse, wallClock: Int64, now: Instant) {
        self.now = now
        guard let (session, purpose) = requests.removeValue(forKey: request), let s = sessions[session] else { return }
        s.httpResponse(purpose, response, wallClock: wallClock, now: now)
        apply(s)
        driveSupervisor()
    }

    public func httpFailed(_ request: RequestID, _ failure: HTTPTransportFailure, now: Instant) {
        self.now = now
        guard let (session, purpose) = requests.removeValue(forKey: request), let s = sessions[session] else { return }
        s.httpFailed(purpose, failure, now: now)
        apply(s)
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
        if backlog.active {
            // On demand, from the press until the backlog is out: in order behind it.
            backlog.append(frame)
            sendBacklog(now: now)
            return
        }
        guard let s = activeSession, s.wasConnected, !s.closing, let media = s.media else { return }
        if halfDuplexHolds {
            // The gate ramps the device's audio down; what is sent is silence even for
            // frames captured before it closed.
            if silence.count != frame.count { silence = [Int16](repeating: 0, count: frame.count) }
            silence.withUnsafeBufferPointer { s.sendAudio($0, media: media, now: now) }
        } else {
            s.sendAudio(frame, media: media, now: now)
        }
        apply(s)
        conversation.audioSent(milliseconds: Int(media.frameTicks / 48))
        drainConversation()
    }

    /// Linnet's voice flag (the speexdsp preprocessor behind the echo canceller) has
    /// been on for `heldFor` of audio without a break (zero: off); the runtime reports
    /// it with every uplink frame. Held for `localBargeIn` while the assistant speaks,
    /// it barges in once per stretch of voice: `response.cancel` (only while a response
    /// is in progress), `output_audio_buffer.clear` and `.cutPlayback` at once.
    ///
    /// Why a debounce: the flag is speexdsp's per-10 ms speech probability with a
    /// hysteresis, and it flips on for a frame or a few at a cough, a door, a cup set
    /// down, or a burst of residual echo while the canceller is still converging.
    /// Cutting the assistant off for those feels broken; the default, 100 ms (half a
    /// syllable to a syllable), is past most of them. The provider's VAD hears the
    /// audio a network trip later, so it cuts later still. The setting is there because
    /// rooms differ (a clattering kitchen wants longer, 0 leaves barge-in to the
    /// provider's VAD).
    ///
    /// Why a duck before it: the debounce alone put the speaker silent 130–212 ms
    /// after the user's voice reached the microphone (the flag's own onset, 0–90 ms,
    /// plus 100 ms, plus the flush), over the 150 ms aimed at. So from `duckAfter` of
    /// flag the speaker is silenced without cutting anything (`CallMedia.duckPlayback`);
    /// the debounce decides whether the reply is cut or plays on.
    /// Never in push-to-talk (the button barges in), in half duplex (the microphone is
    /// shut while the assistant speaks), or with the microphone muted.
    public func localVoice(heldFor: Duration, now: Instant) {
        // While echo is measured uncancelled at the microphone the flag may be the
        // assistant's own voice (the microphone is held shut then anyway).
        guard let threshold = settings.localBargeIn, !settings.pushToTalk, settings.micHold != .whileAssistantSpeaks,
              !echoAudible else { duck(false); return }
        self.now = now
        // Over the assistant: a stretch that began before it started speaking counts
        // from its start.
        var over = false
        if !micClosed, case .speaking(let since) = assistant { over = now - since >= min(heldFor, threshold) }
        guard heldFor >= threshold else {
            // The stretch ended (or has not reached the threshold): the next may cut.
            localVoiceCut = false
            // Until then the speaker is ducked from the flag's first frames: silent
            // within a frame or two of the flag, not a debounce later (onset → silent
            // ≤ 150 ms, where the debounce alone is 100 ms). A cough costs the reply a
            // moment of silence, not the reply.
            duck(over && heldFor >= AgentCore.duckAfter)
            return
        }
        guard !localVoiceCut, over else { duck(false); return }
        localVoiceCut = true
        // The state is known from the events channel (OpenAI's events, or a backend
        // relaying them): a route that sends none never has the assistant speaking here.
        guard conversation.localSpeech(now: now) else { duck(false); return }
        log(.info, "barge-in: local voice for \(heldFor.milliseconds) ms over the assistant")
        record("barge_in", [("source", "voice_flag"), ("held_ms", .number(JSONNumber(Int(heldFor.milliseconds))))])
        bargeIns.voice += 1
        drainConversation()
        // The cut (.cutPlayback) ended the duck; a route whose cut did not reach the
        // media still plays on.
        duck(false)
    }

    /// How long the voice flag holds before the speaker is ducked (`localVoice`): its
    /// first frame. On the room grid (`KERNELS=aec_grid bench/audio.sh full`) every
    /// false onset held 20 ms as well (4.1 a minute either way), so waiting a frame
    /// more would only make the duck later.
    public static let duckAfter: Duration = .milliseconds(10)

    /// Ducks or restores the active session's playout; a new duck also drops what
    /// waits in the device (the runtime's flush), so the silence is heard at once.
    func duck(_ on: Bool) {
        guard let m = activeSession?.media, m.ducked != on else { return }
        m.duckPlayback(on)
        record("duck", [("on", .bool(on))])
        if on {
            ducks += 1
            if let id = activeID { emit(.duckPlayback(session: id)) }
        }
    }

    /// Uplink time that passed with nothing to send (stale frames dropped after a stall,
    /// audio never captured): RTP time moves on by it.
    public func skipUplink(samples: UInt32, now: Instant) {
        self.now = now
        guard let s = activeSession, s.wasConnected, !s.closing else { return }
        s.peer?.skipAudio(samples: samples)
    }

    /// The button, key or signal: talk (push-to-talk) or the mute switch (voice mode).
    /// - wake: the wake word's turn (`AgentCore+Wake`); the button's own presses end a
    ///   wake turn, which the button then owns.
    public func talk(_ down: Bool, now: Instant, wake: Bool = false) {
        self.now = now
        if !wake { wakeTurn.cancel() }
        talking = down
        if settings.pushToTalk {
            record("ptt", [("talking", .bool(down))])
            if down, assistantSpeaking { bargeIns.button += 1 }
            lastActivity = now
            if down, settings.onDemand, supervisor.state == .paused {
                startOnDemand(now: now)
            } else if down, speaksRealtime, !conversation.isConfigured, !backlog.active, supervisor.state != .paused {
                keepPressForSession(now: now)
            }
            // The conversation first: a release's tail keeps the microphone open. While
            // an on-demand press's backlog is being sent, the press reaches the new
            // conversation first and the release after the backlog (OnDemand.swift).
            if backlog.active {
                backlogReleasedAt = down ? nil : now
            } else if down {
                conversation.press(now: now)
            } else {
                conversation.release(now: now)
            }
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
        guard life == .running else { return }
        life = .stopping(status)
        // The last figures of the call, whatever the stats interval.
        if activeSession != nil { writeStats() }
        if let reason { log(status == .ok ? .info : .error, reason) }
        supervisor.close(now: now)
        driveSupervisor()
        finishIfIdle()
    }

    public func handleTimeout(now: Instant) {
        self.now = now
        account(now: now)
        judgeCaps(now: now)
        closeIfIdle(now: now)
        wakeTimeout(now: now)
        if let end = endAt, now >= end, !stopping {
            endAt = nil
            stop(.ok, reason: "ending after \((settings.runFor ?? .zero).milliseconds / 1000) s (--seconds)", now: now)
        }
        if let t = nextStats, now >= t, let interval = settings.statsInterval {
            nextStats = t + interval
            if nextStats! <= now { nextStats = now + interval }
            writeStats()
        }
        for s in Array(sessions.values) {
            s.handleTimeout(now: now)
            apply(s)
        }
        for late in tools.handleTimeout(now: now) {
            toolCallsFailed += 1
            emit(.cancelTool(late.id))
            log(.warning, "tool run \(late.id): " + late.output)
            record("tool_result", [("run", JSONValue(late.id)), ("ok", false), ("timed_out", true)])
            conversation.toolOutput(callID: late.callID, output: late.output, now: now)
            drainConversation()
        }
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
        if let d = tools.deadline { t = min(t, d) }
        if let d = capDeadline { t = min(t, d) }
        if let d = idleDeadline { t = min(t, d) }
        if let d = wakeTurn.deadline { t = min(t, d) }
        return t
    }

    // MARK: - Queries

    public var state: SessionState { supervisor.state }
    var activeSession: SessionMachine? { activeID.flatMap { sessions[$0] } }
    /// The session carrying the audio's peer (stats, tests).
    public var activePeer: Peer? { activeSession?.peer }
    /// The media the speaker plays: the active session's, owned by that session (the
    /// runtime keeps no reference of its own, so none outlives its session).
    public var playing: CallMedia? { activeSession?.media }
    public func peer(of session: Int) -> Peer? { sessions[session]?.peer }
    public var sessionIDs: [Int] { sessions.keys.sorted() }

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
            switch reason {
            case .initial: sessionStarts.initial += 1
            case .reconnect: sessionStarts.reconnect += 1
            case .rollover: sessionStarts.rollover += 1
            case .resume: sessionStarts.resume += 1
            case .demand: sessionStarts.demand += 1
            }
            let s = SessionMachine(id: id, settings: settings, deviceCredential: deviceCredential, identity: identity, crypto: crypto,
                                   peerSeed: seed.next(), now: now)
            // On OpenAI the conversation sends them once the session is configured.
            if !speaksRealtime { s.queued = settings.sendOnOpen }
            sessions[id] = s
            record("session", [("id", .number(JSONNumber(id))), ("reason", .string(reason.rawValue))])
            emit(.journal(.info, "session \(id): starting (\(reason.rawValue))",
                          [("MESSAGE_ID", JournalMessage.sessionStarted), ("LINNET_SESSION", String(id)), ("LINNET_REASON", reason.rawValue)]))
            emit(.bind(session: id))
        case .restartICE(let id):
            guard let s = sessions[id] else { return supervisor.restartFailed(id, now: now) }
            let started = s.restartICE(now: now)
            apply(s)
            guard started else { return supervisor.restartFailed(id, now: now) }
            record("ice_restart", [("session", .number(JSONNumber(id)))])
        case .switchAudio(let id):
            let previous = activeID
            activeID = id
            // A new provider session: its conversation starts afresh (with the turns
            // of the old one), and the microphone is silent until it is configured.
            conversation = newConversation()
            assistant = .silent
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
            s.close(now: now)
            apply(s)
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
        // Connected time counts toward the day's minutes.
        if state == .connected {
            if countingSince == nil { account(now: now); countingSince = now }
        } else if countingSince != nil {
            account(now: now)
            countingSince = nil
        }
        if state == .connected { problem = nil }
        let text = reason.map { "\(state.rawValue): \($0)" } ?? state.rawValue
        var journal = [("MESSAGE_ID", JournalMessage.stateChanged), ("LINNET_STATE", state.rawValue)]
        if let id = activeID ?? supervisor.pendingSession { journal.append(("LINNET_SESSION", String(id))) }
        if let reason { journal.append(("LINNET_REASON", reason)) }
        emit(.journal(state == .failed ? .error : .info, "session \(text)", journal))
        var fields: [(String, JSONValue)] = [("state", .string(state.rawValue))]
        if let reason { fields.append(("reason", .string(reason))) }
        record("state", fields)
        emit(.notify("session \(text)"))
        writeStatus()
        if state == .connected {
            connects += 1
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
        guard case .stopping(let exitStatus) = life, sessions.isEmpty else { return }
        life = .stopped(exitStatus)
        nextStats = nil
        endAt = nil
        emit(.exit(exitStatus))
    }

    // MARK: - Reports from sessions

    /// Applies what `s` reported during the call that just returned, in order. Applying
    /// one may call into a session again (a message the conversation answers on the
    /// events channel): its reports are applied there, before the rest of this batch,
    /// which keeps the order of datagrams as the peer made them.
    func apply(_ s: SessionMachine) {
        while !s.reports.isEmpty {
            let batch = s.reports
            s.reports = []
            for r in batch { apply(r, from: s) }
        }
    }

    func apply(_ r: SessionReport, from s: SessionMachine) {
        switch r {
        case .output(let o):
            if case .transmit(_, let bytes, _, _) = o { networkBytes.sent += bytes.count }
            emit(o)
        case .request(let purpose, let request, let timeout): _ = self.request(s.id, purpose, request, timeout: timeout)
        case .cancelRequests:
            for id in requests.keys.sorted() where requests[id]?.session == s.id { cancel(id) }
        case .connected: supervisor.connected(s.id, now: now)
        case .disconnected: supervisor.disconnected(s.id, now: now)
        case .ended(let why):
            log(.info, "session \(s.id): \(why)")
            supervisor.ended(s.id, now: now)
        case .failed(let failure, let status): failed(s, failure, status)
        case .restartDone(let ok): restartDone(s, ok: ok)
        case .channelOpened(let channel, let label): channelOpened(s, channel: channel, label: label)
        case .message(let label, let text, let binary): message(s, label: label, text: text, binary: binary)
        case .learn(let links): learn(links)
        case .finished: sessionFinished(s.id)
        }
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
            case .send(let text):
                if let s = activeSession {
                    s.sendEvent(text, now: now)
                    apply(s)
                }
            case .event(let e): conversationEvent(e)
            case .cutPlayback:
                // The jitter buffer here, the device's ring and buffer by the runtime.
                activeSession?.media?.cutPlayback(now: now)
                if let id = activeID { emit(.flushPlayback(session: id)) }
            case .releasePlayback:
                activeSession?.media?.releasePlayback()
            }
        }
    }

    /// The runtime finished tool run `id` (never called for a run it was told to cancel).
    public func toolFinished(_ id: Int, _ result: ToolResult, now: Instant) {
        self.now = now
        guard let answer = tools.finished(id, result) else { return }
        if answer.ok { toolCallsRun += 1 } else { toolCallsFailed += 1 }
        switch result {
        case .output(let text, let truncated):
            log(.info, "tool run \(id): done, \(text.utf8.count) bytes" + (truncated ? " (cut)" : ""))
        case .failed(let why):
            log(.warning, "tool run \(id): " + why)
        }
        record("tool_result", [("run", JSONValue(id)), ("ok", .bool(answer.ok)), ("output", .string(utf8Prefix(answer.output, maxBytes: 2048)))])
        conversation.toolOutput(callID: answer.callID, output: answer.output, now: now)
        drainConversation()
    }

    /// The model called a tool: judged here; run by the runtime, or answered at once.
    func toolCalled(callID: String, name: String, arguments: String) {
        switch tools.call(callID: callID, name: name, arguments: arguments, now: now) {
        case .run(let run):
            log(.info, "tool \(run.spec.name) called (run \(run.id)): \(utf8Prefix(run.arguments.serializedString(), maxBytes: 200))")
            record("tool_run", [("run", JSONValue(run.id)), ("name", .string(run.spec.name)), ("arguments", run.arguments)])
            emit(.runTool(run))
        case .refuse(let output):
            toolCallsFailed += 1
            log(.warning, "tool call refused: " + utf8Prefix(output, maxBytes: 300))
            record("tool_result", [("call", .string(callID)), ("ok", false), ("output", .string(output))])
            conversation.toolOutput(callID: callID, output: output, now: now)
        }
    }

    func conversationEvent(_ e: RealtimeEvent) {
        switch e {
        case .toolCall(let callID, let name, let arguments):
            toolCalled(callID: callID, name: name, arguments: arguments)
        case .usage(let u):
            usage += u
            account(now: now)
            if today != nil { today!.tokens += Int64(u.totalTokens) }
            // Judged at the next timeout (now), not here: pausing closes the session
            // whose events are being read.
            capsDue = true
            log(.debug, e.description)
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
            assistant = on ? .speaking(since: now) : .silent
            lastActivity = now
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
        // On demand the press's audio is kept before the session is configured.
        return user || (speaksRealtime && !conversation.isConfigured && !backlog.active) || halfDuplexHolds
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
