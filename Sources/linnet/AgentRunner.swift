// The agent on the loop: the Supervisor's decisions carried out (sessions created,
// audio switched, sessions closed), the microphone's frames sent to the session that
// carries the audio and its voice played, push-to-talk and mute, the provider's events,
// stats lines, the status file and the systemd watchdog. Wiring only: the decisions
// live in the Agent module, the protocols in theirs.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import DTLS
import Peer
import ICE
import Agent
import Devices
import Codec
import Audio
import Media

/// What the runner needs besides the config.
struct RunnerParts {
    var route: Route
    var token: String?
    var http: HTTPSend
    var identity: Identity
    var crypto: CryptoRandom
    var addresses: [IPAddress]
    var stun: SocketAddress?
}

final class AgentRunner {
    let loop: EventLoop
    let config: Config
    let parts: RunnerParts
    let audio: AudioIO
    let supervisor: Supervisor
    var sessions: [Int: ProviderSession] = [:]
    var activeID: Int?
    var events: EventLog?
    var notifier: SystemdNotifier?
    var statusPath: String?
    var supervisorTimer: EventLoop.TimerID?
    var supervisorDeadline = Instant.distantFuture
    var statsTimer: EventLoop.TimerID?
    var watchdog: WatchdogDriver?
    var button: ButtonInput?
    var lights: Lights?
    var conversation: Conversation
    /// Lines to send on the events channel of every new session (`send` key).
    var sendOnOpen: [String] = []
    var stopping = false
    var stopped = false
    var onStopped: (ExitStatus) -> Void = { _ in }
    var exitStatus = ExitStatus.ok
    var firstConnectedAt: Instant?
    var everConnected: Bool { firstConnectedAt != nil }
    var lastConnectMilliseconds: Int64?
    var reconnects = 0
    var lastFailureStatus = ExitStatus.unavailable
    /// `max-attempts`: how many failed attempts, and how much waiting, before giving up.
    var attemptLimit: AttemptLimit
    var stateSince: Instant
    var totals = (sent: 0, received: 0, decoded: 0, concealed: 0)
    var lastStats: (at: Instant, bytes: Int)?

    init(loop: EventLoop, config: Config, parts: RunnerParts, audio: AudioIO) {
        self.loop = loop
        self.config = config
        self.parts = parts
        self.audio = audio
        var policy = SupervisorPolicy()
        policy.maximumSessionAge = .seconds(Int64(config.maximumSessionSeconds))
        // WHIP can restart ICE (where the endpoint gave an ETag; a session without one
        // reports that at once and a fresh session follows).
        if case .whip = parts.route { policy.iceRestart = true }
        var seed: UInt64 = 0
        if let bytes = try? parts.crypto.bytes(8) { for b in bytes { seed = seed << 8 | UInt64(b) } }
        supervisor = Supervisor(policy: policy, seed: seed)
        attemptLimit = AttemptLimit(maximumAttempts: config.maxAttempts, waitPerRetry: policy.maximumBackoff)
        var openAIRoute = false
        if case .openai = parts.route { openAIRoute = true }
        conversation = Conversation(config: config, openAIRoute: openAIRoute)
        stateSince = loop.now
    }

    // MARK: Start and stop

    func start() throws(CLIFailure) {
        audio.onFrame = { frame in self.uplink(frame) }
        audio.onSkip = { frames in self.skipUplink(frames) }
        // Playout is pulled by the speaker's clock (Devices' DuplexAudio), not a timer.
        audio.onPlayout = { out in self.activeSession?.media.playout(now: self.loop.now, into: out) ?? 0 }
        try audio.start()
        conversation.send = { text in self.activeSession?.sendEvent(text) }
        conversation.log = { type, fields in self.log(type, fields) }
        conversation.onExpired = {
            // The provider's limit came before our rollover: replace the session now.
            if let id = self.activeID { self.supervisor.ended(id, now: self.loop.now); self.drive() }
        }
        if let lights {
            lights.state = { self.lightState() }
            lights.start()
        }
        if config.statsSeconds > 0 { tickStats(every: .seconds(Int64(config.statsSeconds))) }
        if let notifier {
            // READY once the loop runs (Type=notify, sd_notify(3)).
            loop.schedule(after: .zero) { _ = notifier.ready() }
            if let interval = notifier.watchdogInterval {
                watchdog = WatchdogDriver(loop: loop, notifier: notifier, interval: WatchdogHealth.interval(watchdogMicroseconds: interval.microseconds)) {
                    self.audio.progress
                }
                watchdog?.start()
            }
        }
        if let summary = attemptLimit.summary { Log.info(summary) }
        supervisor.start(now: loop.now)
        drive()
    }

    /// Closes every session (provider-side close first), then reports through `onStopped`.
    func stop(_ status: ExitStatus = .ok, _ reason: String? = nil) {
        guard !stopping else { return }
        stopping = true
        exitStatus = status
        // The last figures of the call, whatever the stats interval.
        if activeSession != nil { writeStats() }
        if let reason { if status == .ok { Log.info(reason) } else { Log.error(reason) } }
        supervisor.close(now: loop.now)
        drive()
        finishIfIdle()
    }

    func finishIfIdle() {
        guard stopping, !stopped, sessions.isEmpty else { return }
        stopped = true
        if let t = statsTimer { loop.cancel(t) }
        if let t = supervisorTimer { loop.cancel(t) }
        watchdog?.stop()
        button?.close()
        lights?.close()
        audio.stop()
        _ = notifier?.stopping()
        onStopped(exitStatus)
    }

    var activeSession: ProviderSession? { activeID.flatMap { sessions[$0] } }

    // MARK: The supervisor's decisions

    func drive() {
        while true {
            switch supervisor.pollOutput() {
            case .action(let a): perform(a)
            case .timeout(let t):
                arm(t)
                return
            }
        }
    }

    func arm(_ deadline: Instant) {
        guard deadline != supervisorDeadline else { return }
        if let supervisorTimer { loop.cancel(supervisorTimer) }
        supervisorTimer = nil
        supervisorDeadline = deadline
        guard deadline < .distantFuture else { return }
        supervisorTimer = loop.schedule(at: deadline) {
            self.supervisorTimer = nil
            self.supervisorDeadline = .distantFuture
            self.supervisor.handleTimeout(now: self.loop.now)
            self.drive()
        }
    }

    func perform(_ action: SupervisorAction) {
        switch action {
        case .startSession(let id, let reason):
            if reason != .initial { reconnects += 1 }
            startSession(id, reason: reason)
        case .restartICE(let id):
            guard let s = sessions[id] else { return supervisor.restartFailed(id, now: loop.now) }
            log("ice_restart", [("session", .number(JSONNumber(id)))])
            s.restartICE { ok in
                if !ok {
                    self.supervisor.restartFailed(id, now: self.loop.now)
                    self.drive()
                }
                // On success the session reports `connected` once checks succeed; the
                // supervisor's restart timeout covers the case where they do not.
            }
        case .switchAudio(let id):
            let previous = activeID
            activeID = id
            conversation.reset()
            if let s = sessions[id] {
                if let ms = s.connectMilliseconds ?? s.offerSentAt.map({ (loop.now - $0).milliseconds }) { lastConnectMilliseconds = ms }
                log("audio", [("session", .number(JSONNumber(id))), ("from", previous.map { .number(JSONNumber($0)) } ?? .null)])
                if let channel = s.eventsChannel, s.call.peer.label(of: channel) != nil { conversation.channelOpened(now: loop.now) }
            }
        case .closeSession(let id):
            guard let s = sessions[id] else { return }
            if activeID == id { activeID = nil }
            let p = s.call.peer.stats
            totals.sent += p.rtpSent
            totals.received += p.rtpReceived
            totals.decoded += s.media.stats.framesDecoded
            totals.concealed += s.media.stats.concealed
            s.close {
                self.sessions[id] = nil
                self.finishIfIdle()
            }
        case .stateChanged(let state, let reason):
            stateChanged(state, reason)
        case .retryScheduled(let delay, let attempt, let failure):
            log("retry", [("attempt", .number(JSONNumber(attempt))), ("delay_ms", .number(JSONNumber(Int(delay.milliseconds)))),
                          ("error", .string(failure.description))])
            if case .giveUp(let why) = attemptLimit.failed(attempt: attempt, delay: delay) {
                let status: ExitStatus
                if case .unauthorized = failure { status = .config } else { status = lastFailureStatus }
                loop.schedule(after: .zero) { self.stop(status, "\(why): \(failure)") }
            } else {
                Log.info("attempt \(attempt) failed; the next in \(delay.milliseconds) ms")
            }
        }
    }

    func stateChanged(_ state: SessionState, _ reason: String?) {
        stateSince = loop.now
        let text = reason.map { "\(state.rawValue): \($0)" } ?? state.rawValue
        if state == .failed { Log.error("session \(text)") } else { Log.info("session \(text)") }
        var fields: [(String, JSONValue)] = [("state", .string(state.rawValue))]
        if let reason { fields.append(("reason", .string(reason))) }
        log("state", fields)
        _ = notifier?.status("session \(text)")
        writeStatus()
        if state == .connected {
            attemptLimit.connected()
            if firstConnectedAt == nil {
                firstConnectedAt = loop.now
                if config.seconds > 0 {
                    loop.schedule(after: .seconds(Int64(config.seconds))) { self.stop(.ok, "ending after \(self.config.seconds) s (--seconds)") }
                }
            }
        }
    }

    func startSession(_ id: Int, reason: StartReason) {
        let call: Call
        do throws(CallError) {
            call = try Call(loop: loop, role: .offerer, addresses: parts.addresses, stun: parts.stun, identity: parts.identity, crypto: parts.crypto)
        } catch {
            lastFailureStatus = .unavailable
            loop.schedule(after: .zero) { self.supervisor.failed(id, .transient(error.description), now: self.loop.now); self.drive() }
            return
        }
        let media: MediaPath
        do throws(MediaError) {
            media = try MediaPath(MediaSettings(rate: audio.rate, frameMilliseconds: audio.frameClock.milliseconds, bitrate: Int32(config.bitrate),
                                                complexity: Int32(config.complexity), fec: config.fec, dtx: config.dtx))
        } catch {
            lastFailureStatus = .software
            loop.schedule(after: .zero) { self.supervisor.failed(id, .transient(error.description), now: self.loop.now); self.drive() }
            return
        }
        let session = ProviderSession(id: id, loop: loop, route: parts.route, token: parts.token, http: parts.http, call: call,
                                      media: media, channelLabel: config.eventsChannel)
        session.queued = sendOnOpen
        session.onReport = { r in
            self.report(id, r)
            self.drive()
        }
        sessions[id] = session
        log("session", [("id", .number(JSONNumber(id))), ("reason", .string(reason.rawValue))])
        session.start()
    }

    func report(_ id: Int, _ r: SessionReport) {
        let now = loop.now
        switch r {
        case .connected: supervisor.connected(id, now: now)
        case .disconnected: supervisor.disconnected(id, now: now)
        case .failed(let f, let status):
            lastFailureStatus = status
            supervisor.failed(id, f, now: now)
        case .ended(let why):
            Log.info("session \(id): \(why)")
            supervisor.ended(id, now: now)
        case .channelOpened(let channel, let label):
            log("channel", [("event", "open"), ("label", .string(label)), ("id", .number(JSONNumber(Int(channel))))])
            if id == activeID, label == config.eventsChannel { conversation.channelOpened(now: now) }
        case .message(let label, let text, let binary):
            if let text {
                log("message", [("label", .string(label)), ("text", .string(text))])
                if id == activeID, label == config.eventsChannel { conversation.received(text, now: now) }
            } else if let binary {
                log("message", [("label", .string(label)), ("binary", .string(Base64.encode(binary)))])
            }
        case .channelClosed(let channel):
            log("channel", [("event", "closed"), ("id", .number(JSONNumber(Int(channel))))])
        case .channelRejected(let label):
            log("channel", [("event", "rejected"), ("label", .string(label))])
        }
    }

    // MARK: Audio

    func uplink(_ frame: [Int16]) {
        guard let s = activeSession, s.wasConnected, !s.closing else { return }
        let media = s.media
        // Opus writes straight into the RTP packet (Peer.sendAudio(samples:now:encode:)).
        frame.withUnsafeBufferPointer { pcm in
            s.call.peer.sendAudio(samples: media.clock.rtpTicks, now: loop.now) { room in media.encode(pcm, into: room) }
        }
        s.call.pump()
        conversation.audioSent(milliseconds: media.clock.milliseconds, now: loop.now)
    }

    /// Uplink time that passed with nothing to send (stale frames dropped after a stall,
    /// audio never captured): RTP time moves on by it, as it does for a frame the
    /// encoder left out, so the far end plays what follows at the right time.
    func skipUplink(_ frames: Int) {
        guard let s = activeSession, s.wasConnected, !s.closing, frames > 0 else { return }
        s.call.peer.skipAudio(samples: UInt32(truncatingIfNeeded: min(frames, 1 << 20) * Int(s.media.clock.rtpTicks)))
    }

    // MARK: Push-to-talk and mute

    /// The button (or key, or signal) went down (`true`) or up.
    func talk(_ down: Bool) {
        switch config.effectiveTurnDetection {
        case .ptt:
            audio.mute.setMuted(!down)
            log("ptt", [("talking", .bool(down))])
            if down { conversation.press(now: loop.now) } else { conversation.release(now: loop.now) }
        case .vad:
            // An open microphone: the button mutes (a privacy switch).
            if down { mute(!audio.mute.isMuted) }
        }
        writeStatus()
    }

    var talking = false

    /// The button's events: talk (hold, or toggle's alternation) and the long press,
    /// which ends the conversation and starts a fresh one (a new provider session).
    func button(_ e: ButtonEvent) {
        switch e {
        case .talk(let down):
            talking = down
            talk(down)
        case .longPress:
            Log.info("long press: starting a new conversation")
            log("ptt", [("long_press", .bool(true))])
            if let id = activeID {
                supervisor.ended(id, now: loop.now)
                drive()
            }
        }
    }

    /// What the status LEDs show.
    func lightState() -> (LightState, Double) {
        let level = audio.meter.map { StatusPattern.level(dBFS: $0.rmsDBFS) } ?? 0
        switch supervisor.state {
        case .new, .closed: return (.idle, 0)
        case .connecting: return (.connecting, 0)
        case .disconnected, .failed: return (.error, 0)
        case .connected:
            if conversation.assistantSpeaking { return (.speaking, 0) }
            if audio.mute.isMuted { return (.muted, 0) }
            return (.listening, level)
        }
    }

    /// The terminal key and SIGUSR1 toggle: talk / stop talking (ptt), mute / unmute.
    func toggle() {
        switch config.effectiveTurnDetection {
        case .ptt:
            talking.toggle()
            talk(talking)
        case .vad:
            talk(true)
        }
    }

    func mute(_ on: Bool) {
        audio.mute.setMuted(on)
        Log.info(on ? "microphone muted" : "microphone open")
        log("mute", [("muted", .bool(on))])
        writeStatus()
    }

    // MARK: Events, stats, status

    func log(_ type: String, _ fields: [(String, JSONValue)]) {
        events?.write(type, fields, now: loop.now)
    }

    func tickStats(every interval: Duration) {
        statsTimer = loop.schedule(after: interval) {
            self.writeStats()
            self.tickStats(every: interval)
        }
    }

    /// One stats line: state, RTT, loss, jitter, packets, xruns, bitrate.
    func statsFields() -> [(String, JSONValue)] {
        var f: [(String, JSONValue)] = [("state", .string(supervisor.state.rawValue)), ("reconnects", .number(JSONNumber(reconnects)))]
        let x = audio.xruns
        f.append(("capture_xruns", .number(JSONNumber(x.capture))))
        // Stops of the uplink past 200 ms (the process stopped, the loop held) and the
        // frames dropped as stale after them rather than sent late in a burst.
        f.append(("capture_stalls", .number(JSONNumber(audio.clock.stalls))))
        f.append(("capture_stale_frames", .number(JSONNumber(audio.clock.staleFrames))))
        f.append(("playback_xruns", .number(JSONNumber(x.playback))))
        if let meter = audio.meter { f.append(("mic_dbfs", .number(JSONNumber((meter.rmsDBFS * 10).rounded() / 10)))) }
        guard let s = activeSession else { return f }
        let p = s.call.peer.stats
        f.append(("session", .number(JSONNumber(s.id))))
        f.append(("packets_sent", .number(JSONNumber(p.rtpSent))))
        f.append(("packets_received", .number(JSONNumber(p.rtpReceived))))
        f.append(("packets_lost", .number(JSONNumber(Int(p.packetsLost)))))
        f.append(("remote_loss_percent", .number(JSONNumber((Double(p.remoteFractionLost) * 1000 / 256).rounded() / 10))))
        f.append(("jitter_ms", .number(JSONNumber((Double(p.jitter) / 4.8).rounded() / 10))))
        f.append(("concealed", .number(JSONNumber(s.media.stats.concealed))))
        f.append(("fec_recovered", .number(JSONNumber(s.media.stats.fecRecovered))))
        f.append(("srtp_dropped", .number(JSONNumber(p.srtpDropped))))
        // DTLS/SRTP from addresses ICE never validated, and STUN that failed its
        // integrity check: strangers (issue 13), dropped without an answer.
        f.append(("stranger_dropped", .number(JSONNumber(p.unvalidatedDropped + s.call.peer.iceStats.unauthenticated))))
        if let rtt = p.roundTripTime { f.append(("rtt_ms", .number(JSONNumber((Double(rtt.microseconds) / 100).rounded() / 10)))) }
        let now = loop.now
        if let last = lastStats, now > last.at, s.media.bytesSent >= last.bytes {
            let kbps = Double(s.media.bytesSent - last.bytes) * 8 / (Double((now - last.at).microseconds) / 1_000_000) / 1000
            f.append(("bitrate_kbps", .number(JSONNumber((kbps * 10).rounded() / 10))))
        }
        lastStats = (now, s.media.bytesSent)
        if let ms = lastConnectMilliseconds { f.append(("connect_ms", .number(JSONNumber(Int(ms))))) }
        return f
    }

    func writeStats() {
        let f = statsFields()
        log("stats", f)
        var line = "stats:"
        for (k, v) in f { line += " \(k)=\(v.serializedText)" }
        Log.info(line)
        writeStatus()
    }

    /// The status file for a kiosk UI: rewritten whole (temp file + rename, so a reader
    /// never sees half of it) on each state change and stats tick; a path that is not
    /// safe to write is said once and dropped (Platform/SafeFile.swift).
    func writeStatus() {
        guard let path = statusPath else { return }
        var o = JSONObject()
        o["state"] = .string(supervisor.state.rawValue)
        o["since_s"] = .number(JSONNumber(Double((loop.now - stateSince).milliseconds) / 1000))
        o["muted"] = .bool(audio.mute.isMuted)
        o["turn_detection"] = .string(config.effectiveTurnDetection.rawValue)
        o["reconnects"] = .number(JSONNumber(reconnects))
        if let s = activeSession {
            o["session"] = .number(JSONNumber(s.id))
            if let rtt = s.call.peer.stats.roundTripTime { o["rtt_ms"] = .number(JSONNumber(Double(rtt.microseconds) / 1000)) }
        }
        if let t = conversation.lastUserText { o["last_user"] = .string(t) }
        if let t = conversation.lastAssistantText { o["last_assistant"] = .string(t) }
        var bytes = JSONValue.object(o).serialized()
        bytes.append(10)
        // Never through a planted symlink, never over a device node (`--status-file
        // /dev/null`), only in a directory nobody else controls: SafeFile.
        do throws(SafeFile.Failure) {
            try SafeFile.replace(path, with: bytes)
        } catch {
            Log.warning("status file: \(error); not writing it any more")
            statusPath = nil
        }
    }
}

/// Sends `WATCHDOG=1` at half of `WATCHDOG_USEC` while the pipeline is healthy (the
/// Agent module decides); a stall logs once and withholds the pings, and systemd
/// restarts the service when its `WatchdogSec=` runs out.
final class WatchdogDriver {
    let loop: EventLoop
    let notifier: SystemdNotifier
    let interval: Duration
    let progress: () -> PipelineProgress
    var health = WatchdogHealth()
    var timer: EventLoop.TimerID?
    var withheld = false
    var pings = 0
    var checks = 0

    init(loop: EventLoop, notifier: SystemdNotifier, interval: Duration, progress: @escaping () -> PipelineProgress) {
        self.loop = loop
        self.notifier = notifier
        self.interval = interval
        self.progress = progress
    }

    func start() { schedule() }

    func schedule() {
        timer = loop.schedule(after: interval) {
            self.check()
            self.schedule()
        }
    }

    func check() {
        checks += 1
        switch health.check(progress(), now: loop.now) {
        case .ping:
            if withheld { Log.info("watchdog: the pipeline moves again") }
            withheld = false
            if notifier.watchdog() { pings += 1 }
        case .withhold(let why):
            if !withheld { Log.error("watchdog: \(why); withholding WATCHDOG=1 so systemd restarts us") }
            withheld = true
        }
    }

    func stop() {
        if let timer { loop.cancel(timer) }
        timer = nil
    }
}

extension JSONValue {
    /// The compact JSON text of a value (for `key=value` log lines).
    var serializedText: String { String(decoding: serialized(), as: UTF8.self) }
}
