// The one I/O shell around the Agent core (Agent/AgentCore.swift): it carries out what
// the core asks (bind a session's UDP sockets, send datagrams, run HTTP(S) exchanges,
// mute, write records and the status file, exit) and feeds back what happens (datagrams,
// HTTP results, audio frames, the button, signals, timers). It decides nothing: every
// decision is the core's, tested there on a manual clock.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import DTLS
import Peer
import ICE
import Agent
import Settings
import Devices
import Codec
import Audio
import Media

/// What the runtime needs besides the core.
public struct RuntimeParts {
    /// Where sessions gather host candidates (one UDP socket each, per session).
    var addresses: [IPAddress]
    var http: HTTPClient
    var media: MediaSettings

    /// TURN servers (resolved) every session allocates a relay on.
    var relays: [(server: TURNServer, address: SocketAddress)] = []
    /// The tools file's tools and tokens, and where exec tools' programs are.
    public var tools = LoadedTools.none
    public var toolsDirectory = "/etc/linnet/tools.d"
    /// The MCP servers (asked for their tools before the runtime was made).
    public var mcp: MCPClients?

    public init(addresses: [IPAddress], http: HTTPClient, media: MediaSettings,
                relays: [(server: TURNServer, address: SocketAddress)] = []) {
        self.addresses = addresses
        self.http = http
        self.media = media
        self.relays = relays
    }
}

public final class Runtime {
    let loop: EventLoop
    let core: AgentCore
    let parts: RuntimeParts
    let audio: AudioIO
    /// Each session's network paths: host sockets, TURN allocations, ICE-TCP.
    var paths: [Int: SessionPaths] = [:]
    var calls: [RequestID: HTTPCall] = [:]
    public var events: EventLog?
    public var notifier: SystemdNotifier?
    public var statusFile = StatusFile(path: nil)
    /// Runs the model's tool calls (`.runTool`); set by `run` when a tools file is given.
    public var tools: ToolRunner
    /// Where the sessions open now are kept, to be closed by the next start if this
    /// process dies with them open (`state-dir`/open-sessions.jsonl); nil: not kept.
    public var pendingClosesPath: String?
    var pendingCloses: [Int: PendingClose] = [:]
    /// The local day's usage, kept so that a daily cap survives a restart
    /// (`state-dir`/daily-usage.json); nil: not kept.
    public var usagePath: String?
    var usageSaved: (bytes: [UInt8], at: Instant)?
    var timer: DeadlineTimer!
    var watchdog: WatchdogDriver?
    public var button: ButtonInput?
    public var lights: Lights?
    /// The wake word's detector (`attachWake`).
    var wake: WakeListener?
    public var onStopped: (ExitStatus) -> Void = { _ in }
    var stopped = false

    public init(loop: EventLoop, core: AgentCore, parts: RuntimeParts, audio: AudioIO) {
        self.loop = loop
        self.core = core
        self.parts = parts
        self.audio = audio
        tools = ToolRunner(loop: loop, directory: parts.toolsDirectory, http: parts.http, tokens: parts.tools.tokens)
        tools.mcp = parts.mcp
        // Unowned in the closures the runtime's own parts keep (its timer, the audio
        // side's callbacks, its relay paths): they never outlive it, and a strong
        // capture would be a reference cycle that outlives the command. (unsafe:
        // Embedded Swift has no runtime for checked unowned references.)
        timer = DeadlineTimer(loop: loop) { [unowned(unsafe) self] in
            guard !self.stopped else { return }
            self.feedAudioCounters()
            self.core.handleTimeout(now: self.loop.now)
            self.drive()
        }
        // The session that asks owns what it gets; playout reads it through the core.
        let settings = parts.media
        core.makeMedia = { id in
            // The core fails the session on nil with a short reason; which setting or
            // libopus error it was is only known here.
            do throws(MediaError) {
                return try MediaPath(settings)
            } catch {
                Log.warning("session \(id): the call's media could not be set up: \(error)")
                return nil
            }
        }
    }

    // MARK: Start and stop

    /// The sessions open now, one JSON line each, replaced whole (SafeFile), removed
    /// when none is open. A failure is said once and the file given up.
    func writePendingCloses() {
        guard let path = pendingClosesPath else { return }
        if pendingCloses.isEmpty {
            unlink(path)
            return
        }
        var bytes: [UInt8] = []
        for id in pendingCloses.keys.sorted() {
            bytes += pendingCloses[id]!.json.serialized()
            bytes.append(10)
        }
        do throws(SafeFile.Failure) { try SafeFile.replace(path, with: bytes, durable: true) } catch {
            Log.warning("the open sessions file: \(error); a session left open by a crash will not be closed at the next start")
            pendingClosesPath = nil
        }
    }

    /// Closes what a previous run left open (it was killed mid-call): each request sent
    /// once with the device's token (for its configured origin only), bounded like any
    /// close; the file is cleared before, so a close that keeps failing is not repeated
    /// at every start.
    func closeLeftOpen() {
        guard let path = pendingClosesPath else { return }
        let file: (bytes: [UInt8], info: RegularFileInfo)
        do throws(FileReadError) { file = try readRegularFile(path, limit: 64 << 10) } catch {
            if error.isMissing { return }
            Log.warning("the open sessions file \(error): not closing what a previous run may have left open")
            return
        }
        unlink(path)
        for line in file.bytes.split(separator: 10) {
            // The file is replaced whole (SafeFile), so a line that is not a close was
            // edited by hand or damaged on disk: said, as that session stays open.
            guard let v = try? JSONValue.parse(Array(line)), let close = PendingClose(json: v) else {
                Log.warning("the open sessions file \(path): a line that is not a session to close, skipped")
                continue
            }
            Log.info("closing the session a previous run left open: \(close.method) \(close.url)")
            let request = close.request(bearer: core.deviceCredential)
            _ = parts.http.send(request, timeout: core.settings.closeTimeout) { result in
                switch result {
                case .success(let r): Log.info("the session a previous run left open: \(close.url) answered \(r.status)")
                case .failure(let e): Log.warning("the session a previous run left open: \(close.url): \(e)")
                }
            }
        }
    }

    public func start() throws(CLIFailure) {
        closeLeftOpen()
        let voice = core.settings.localBargeIn != nil ? audio.voice : nil
        let canceller = core.settings.micHold == .whileEchoAudible ? audio.canceller : nil
        let wakeFlag = wake != nil ? audio.voice : nil
        audio.onFrame = { [unowned(unsafe) self] frame in
            self.feedAudioCounters()
            let d = self.audio.downlinkHeard()
            self.core.downlink(heard: d.heard, spurtStart: d.spurtStart, voiceEnd: d.voiceEnd)
            // The capture thread's flag, read from its atomic (the thread itself only
            // stores it): first, so a barge-in's flush comes before this frame goes.
            if let canceller { self.core.echo(audible: canceller.echoAudible, now: self.loop.now) }
            if let voice { self.core.localVoice(heldFor: voice.voiceHeld, now: self.loop.now) }
            if let flag = wakeFlag { self.core.wakeVoice(heldFor: flag.voiceHeld, now: self.loop.now) }
            frame.withUnsafeBufferPointer { self.core.uplink($0, now: self.loop.now) }
            self.drive()
        }
        audio.onSkip = { [unowned(unsafe) self] frames in
            self.core.skipUplink(samples: UInt32(truncatingIfNeeded: min(frames, 1 << 20) * Int(self.audio.frameClock.rtpTicks)), now: self.loop.now)
            self.drive()
        }
        // Playout is pulled by the speaker's clock (Devices' DuplexAudio), not a timer.
        audio.onPlayout = { [unowned(unsafe) self] out in
            guard let m = self.core.playing else { return (0, 0, false) }
            let before = m.streamSamples
            let n = m.playout(now: self.loop.now, into: out)
            return (n, m.streamSamples - before, m.lastConcealed)
        }
        try audio.start()
        if let wake {
            try wake.start(loop: loop) { [unowned(unsafe) self] score in
                self.core.wake(score: score, now: self.loop.now)
                self.drive()
            }
            Log.info("wake word: listening (cutoff \(Int(wake.cutoff * 100)) %)")
        }
        if let lights {
            lights.state = { self.lightState() }
            lights.start()
        }
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
        core.setCalendar(localCalendar(), restored: restoreUsage())
        core.start(now: loop.now)
        scheduleMetrics()
        drive()
    }

    /// Loads the wake word's model (`wake-word`, `wake-model`) for the capture's tap;
    /// a missing or unreadable model is the configuration's error, said at start.
    public func attachWake(config: Config) throws(CLIFailure) {
        guard config.wakeEnabled, let path = config.wakeModelPath else { return }
        guard let tap = audio.wakeTap, let rate = SampleRate(rawValue: audio.rate) else {
            throw CLIFailure(.config, "a wake word needs a microphone (capture or input), not silence")
        }
        guard audio.voice != nil else {
            throw CLIFailure(.config, "a wake word's turn ends on the voice flag: set voice-flag = on")
        }
        let files = try WakeModelFiles.load(path)
        wake = try WakeListener(files: files, sensitivity: config.wakeSensitivity, tap: tap, rate: rate)
    }

    public func stop(_ status: ExitStatus = .ok, _ reason: String? = nil) {
        core.stop(status, reason: reason, now: loop.now)
        drive()
    }

    public func toggle() {
        core.toggle(now: loop.now)
        drive()
    }

    /// The button's events: talk (hold, or toggle's alternation) and the long press,
    /// which ends the conversation and starts a fresh one (a new provider session).
    public func button(_ e: ButtonEvent) {
        switch e {
        case .talk(let down): core.talk(down, now: loop.now)
        case .longPress: core.newConversation(now: loop.now)
        }
        drive()
    }

    /// What the status LEDs show.
    func lightState() -> (LightState, Double) {
        let level = audio.meter.map { StatusPattern.level(dBFS: $0.rmsDBFS) } ?? 0
        switch core.state {
        case .new, .closed: return (.idle, 0)
        case .connecting: return (.connecting, 0)
        case .disconnected, .failed: return (.error, 0)
        // Paused by a daily cap, or on demand waiting for a press (idle).
        case .paused: return (core.capped != nil ? .paused : .idle, 0)
        case .connected:
            // A tool at work is what the user waits for ("I'll open the door").
            if core.tools.running > 0 { return (.working, 0) }
            if core.assistantSpeaking { return (.speaking, 0) }
            if core.muted { return (.muted, 0) }
            return (.listening, level)
        }
    }

    // MARK: Driving the core

    func feedAudioCounters() {
        audio.sayDeviceChanges(now: loop.now)
        var a = AudioCounters()
        let x = audio.xruns
        a.captureXruns = x.capture
        a.playbackXruns = x.playback
        a.timelineJumps = audio.timelineJumps
        a.captureStalls = audio.clock.stalls
        a.captureStaleFrames = audio.clock.staleFrames
        a.micDBFS = audio.meter?.rmsDBFS
        core.audio = a
    }

    /// Carries out everything the core asked for, until it wants a timer.
    func drive() {
        while true {
            switch core.pollOutput() {
            case .bind(let id): bind(id)
            case .unbind(let id): unbind(id)
            case .transmit(let id, let bytes, let from, let to):
                let peer = core.peer(of: id)
                paths[id]?.transmit(bytes, from: from, to: to, for: peer)
                peer?.recycle(bytes)
            case .http(let id, let request, let timeout):
                calls[id] = parts.http.send(request, timeout: timeout) { [unowned(unsafe) self] result in
                    self.calls[id] = nil
                    switch result {
                    case .success(let r): self.core.httpResponse(id, r, wallClock: RealtimeClock.unixSeconds(), now: self.loop.now)
                    case .failure(let e): self.core.httpFailed(id, e.transportFailure, now: self.loop.now)
                    }
                    self.drive()
                }
            case .cancelHTTP(let id):
                calls.removeValue(forKey: id)?.cancel()
            case .mute(let on):
                audio.mute.setMuted(on)
            case .flushPlayback(let id), .duckPlayback(let id):
                // Barge-in (or its duck): what is queued to play goes now, in the ring
                // and the device (the core has emptied or silenced the session's
                // jitter buffer; a duck's 15-30 ms queued would otherwise still play).
                if id == core.activeID { audio.flushPlayback() }
            case .earcon:
                audio.playEarcon()
            case .switchAudio:
                break  // Playout follows `core.playing`.
            case .pendingClose(let id, let close):
                pendingCloses[id] = close
                writePendingCloses()
            case .addRelay(let server, let address):
                learnedRelays.append((server, address))
            case .resolveRelay(let server):
                resolve(server)
            case .runTool(let run):
                tools.start(run) { [unowned(unsafe) self] result in
                    self.core.toolFinished(run.id, result, now: self.loop.now)
                    self.drive()
                }
            case .cancelTool(let id):
                tools.cancel(id)
            case .refreshRelays(let id):
                for path in paths[id]?.relays ?? [] { path.refresh() }
            case .record(let type, let fields):
                events?.write(type, fields, now: loop.now)
            case .log(let level, let text):
                switch level {
                case .error: Log.error(text)
                case .warning: Log.warning(text)
                case .info: Log.info(text)
                case .debug: Log.debug(text)
                }
            case .journal(let level, let text, let fields):
                let l: LogLevel
                switch level {
                case .error: l = .error
                case .warning: l = .warning
                case .info: l = .info
                case .debug: l = .debug
                }
                Log.structured(l, text, fields)
            case .notify(let text):
                _ = notifier?.status(text)
            case .status(let s):
                writeStatus(s)
            case .exit(let status):
                finish(status)
            case .timeout(let t):
                timer.arm(t)
                return
            }
        }
    }

    // MARK: Sockets

    func bind(_ id: Int) {
        let session: SessionPaths
        let ice = core.settings.peer.ice
        do throws(SessionPathsError) {
            session = try SessionPaths(loop: loop, label: "session \(id)", addresses: parts.addresses,
                                       tcpLimit: ice.tcpActive ? ice.maximumTCPRemotes : nil, failures: sendFailures)
        } catch {
            core.socketsUnavailable(session: id, reason: error.description, now: loop.now)
            return
        }
        // Unowned: the paths are the runtime's, released by `unbind` (a cycle otherwise).
        session.onPacket = { [unowned(unsafe) self] packet, from, local in
            self.core.handleDatagram(session: id, packet, from: from, local: local, now: self.loop.now)
        }
        session.afterInput = { [unowned(unsafe) self] in self.drive() }
        session.relays = startRelays(id)
        paths[id] = session
        core.socketsBound(session: id, addresses: session.localAddresses, relays: session.relays.count, now: loop.now)
    }

    /// The realm each configured TURN server accepted its credentials under.
    /// Keyed by the server URL's bytes: String keys hash through Unicode normalisation,
    /// which would link its tables into the release binary (scripts/unicode-users.py).
    var pinnedRealms: [[UInt8]: String] = [:]
    let sendFailures = SendFailures()
    /// TURN servers the provider's answers named (added for later sessions).
    var learnedRelays: [(server: TURNServer, address: SocketAddress)] = []
    var learnResolver: BackgroundResolver?

    /// Resolves a TURN server the provider named by host; the core judges the addresses.
    func resolve(_ server: TURNServer) {
        if learnResolver == nil {
            do throws(SystemError) { learnResolver = try BackgroundResolver(loop: loop, maxThreads: 1) } catch {
                return core.relayUnresolved(server, reason: "no resolver thread (\(error))", now: loop.now)
            }
        }
        guard let resolver = learnResolver else { return }
        _ = resolver.resolve(server.url.host, port: server.url.port) { result in
            switch result {
            case .success(let addresses): self.core.relayResolved(server, addresses: addresses, now: self.loop.now)
            case .failure(let e): self.core.relayUnresolved(server, reason: e.description, now: self.loop.now)
            }
            self.drive()
        }
    }

    /// One allocation per configured TURN server, for session `id` (a new session,
    /// e.g. a rollover, gets fresh ones; the old ones are released with its sockets).
    func startRelays(_ id: Int) -> [RelayPath] {
        let tls = RelayTLS(http: parts.http)
        var paths: [RelayPath] = []
        for (i, r) in (parts.relays + learnedRelays).enumerated() {
            let seed = UInt64(truncatingIfNeeded: loop.now.nanoseconds) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(i) &+ UInt64(id) << 32
            var server = r.server
            let configured = i < parts.relays.count
            // The configured credentials stay with the realm they were first accepted
            // under (TURNServer.realm).
            if configured { server.realm = pinnedRealms[Array(server.url.description.utf8)] }
            let path = RelayPath(loop: loop, server: server, address: r.address, tls: tls, seed: seed)
            let name = "\(r.server) (\(r.address))"
            path.onAllocated = { [unowned(unsafe) self] path, relayed, mapped in
                if configured, let realm = path.client.realm { self.pinnedRealms[Array(server.url.description.utf8)] = realm }
                let after = path.allocatedAfter?.milliseconds ?? 0
                self.core.relayAllocated(session: id, relayed: relayed, mapped: mapped, server: r.address.ip,
                                         via: "\(name) over \(r.server.transport) in \(after) ms", now: self.loop.now)
                self.drive()
            }
            path.onFailed = { [unowned(unsafe) self] failure in
                self.core.relayFailed(session: id, server: name, reason: failure.description,
                                      configuration: failure.isConfiguration, now: self.loop.now)
                self.drive()
            }
            path.onData = { [unowned(unsafe) self] relayed, from, packet in
                guard let session = self.paths[id] else { return }
                session.onPacket(packet, from, relayed)
                session.afterInput()
            }
            path.start()
            paths.append(path)
        }
        return paths
    }

    func unbind(_ id: Int) {
        paths.removeValue(forKey: id)?.close()
    }

    // MARK: Files

    /// The status file, on each state change and stats tick; the metrics file and the
    /// day's usage too.
    func writeStatus(_ s: AgentStatus) {
        statusFile.write(s.json)
        writeMetrics()
        saveUsage(force: true)
    }

    // MARK: The day's usage

    /// The monotonic clock against local calendar time (the zone's offset now).
    func localCalendar() -> LocalCalendar {
        let unix = RealtimeClock.unixSeconds()
        let local = unix + RealtimeClock.utcOffsetSeconds(at: unix)
        return LocalCalendar(localSecondsAtZero: local - loop.now.nanoseconds / 1_000_000_000)
    }

    /// The usage an earlier run kept; nil when there is none or it cannot be used
    /// (said: the count then starts from zero, and a cap with it).
    func restoreUsage() -> DailyUsage? {
        guard let path = usagePath else { return nil }
        let file: (bytes: [UInt8], info: RegularFileInfo)
        do throws(FileReadError) { file = try readRegularFile(path, limit: 4096) } catch {
            if error.isMissing { return nil }
            Log.warning("the daily usage file \(error): today's usage counts from zero")
            return nil
        }
        guard let u = DailyUsage.parse(file.bytes) else {
            Log.warning("the daily usage file \(path) is not one Linnet wrote: today's usage counts from zero")
            return nil
        }
        return u
    }

    /// Writes the day's usage when it changed: at once on a state change, a cap or the
    /// exit (`force`), else at most once a minute (the file is on the board's SD card,
    /// and the count lost to a power cut is at most that minute's connected time).
    func saveUsage(force: Bool) {
        guard let path = usagePath, let u = core.todaySoFar else { return }
        let bytes = u.json
        if let saved = usageSaved {
            if saved.bytes == bytes { return }
            if !force, loop.now - saved.at < .seconds(60) { return }
        }
        do throws(SafeFile.Failure) { try SafeFile.replace(path, with: bytes, durable: true) } catch {
            Log.warning("the daily usage file: \(error); a daily cap will not survive a restart")
            usagePath = nil
            return
        }
        usageSaved = (bytes, loop.now)
    }

    // MARK: Metrics

    /// `linnet.prom` for node_exporter's textfile collector (nil: none). Written whole
    /// and renamed (SafeFile), as the collector's documentation asks, so a scrape never
    /// reads half a file.
    public var metricsFile = StatusFile(path: nil)
    /// How often the metrics are rewritten besides state changes: their freshness
    /// sample must move even when nothing else does (stats-seconds is 0 by default).
    public static let metricsInterval = Duration.seconds(15)
    var metricsTimer: EventLoop.TimerID?

    func writeMetrics() {
        guard metricsFile.path != nil else { return }
        var text = core.metricsText(version: LinnetVersion.string, unixTime: Double(RealtimeClock.unixSeconds()))
        if let w = watchdog {
            // Whether the pipeline is moving, as the watchdog judges it (0: the pings
            // are withheld and systemd is about to restart the service).
            text += Array("""
                # HELP linnet_watchdog_healthy 1 while the audio pipeline moves (WATCHDOG=1 sent), 0 while the pings are withheld.
                # TYPE linnet_watchdog_healthy gauge
                linnet_watchdog_healthy \(w.withheld ? 0 : 1)
                # HELP linnet_watchdog_pings_total WATCHDOG=1 pings sent to systemd.
                # TYPE linnet_watchdog_pings_total counter
                linnet_watchdog_pings_total \(w.pings)

                """.utf8)
        }
        metricsFile.write(text)
    }

    func scheduleMetrics() {
        guard metricsFile.path != nil || usagePath != nil, !stopped else { return }
        metricsTimer = loop.schedule(after: Runtime.metricsInterval) { [unowned(unsafe) self] in
            self.feedAudioCounters()
            self.writeMetrics()
            // The zone's offset may have changed (summer time).
            self.core.setCalendar(self.localCalendar())
            self.saveUsage(force: false)
            self.scheduleMetrics()
        }
    }

    /// Lets go of everything the runtime's callbacks captured (the audio side's
    /// closures hold the runtime, which holds the audio side): called once the loop has
    /// stopped, so a command leaves no reference cycle behind.
    public func dispose() {
        audio.onFrame = { _ in }
        audio.onSkip = { _ in }
        audio.onPlayout = { _ in (0, 0, false) }
        onStopped = { _ in }
        lights?.state = { (.idle, 0) }
        core.makeMedia = { _ in nil }
        watchdog = nil
    }

    func finish(_ status: ExitStatus) {
        guard !stopped else { return }
        stopped = true
        timer.cancel()
        if let t = metricsTimer { loop.cancel(t) }
        // The last figures, with the session closed.
        writeMetrics()
        saveUsage(force: true)
        watchdog?.stop()
        tools.stopAll()
        button?.close()
        lights?.close()
        audio.stop()
        _ = notifier?.stopping()
        onStopped(status)
    }
}

/// Sends `WATCHDOG=1` at half of `WATCHDOG_USEC` while the pipeline is healthy (the
/// Agent module decides); a stall logs once and withholds the pings, and systemd
/// restarts the service when its `WatchdogSec=` runs out.
public final class WatchdogDriver {
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

extension HTTPClientError {
    /// The core's view of a failed exchange: nothing came, garbage came, or a person
    /// must act (README's exit-status rule: 69, 65, 78).
    var transportFailure: HTTPTransportFailure {
        if isConfigurationProblem { return HTTPTransportFailure(.configuration, description) }
        switch exitStatus {
        case .dataError: return HTTPTransportFailure(.badData, description)
        default: return HTTPTransportFailure(.noAnswer, description)
        }
    }
}
