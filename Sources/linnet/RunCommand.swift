// `linnet run`: the agent, what systemd starts. Config (file < LINNET_* environment <
// flags), the route, the audio ends, then the Agent core in the Runtime on one poll loop until
// SIGTERM/SIGINT or --seconds.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import DTLS
import Peer
import Agent
import Settings
import Audio
import Devices
import Media
import Runtime
import ICE

enum RunCommand {
    static func run(_ args: [String]) -> ExitStatus {
        do throws(CLIFailure) {
            return try execute(args)
        } catch {
            Log.error(error.message)
            return error.status
        }
    }

    static func route(_ config: Config) throws(CLIFailure) -> Route {
        if let whip = config.whip { return .whip(whip) }
        if let backend = config.backend, let chat = config.chat { return .backend(base: backend, chat: chat) }
        if config.openai, let tokenURL = config.tokenURL { return .openai(calls: config.openaiURL, tokenURL: tokenURL) }
        throw CLIFailure(.config, "run needs a provider: --whip URL, --backend URL --chat ID, or --openai --token-url URL")
    }

    /// The bearer token: `token-file`, else `$CREDENTIALS_DIRECTORY/token` (systemd's
    /// LoadCredential=) when it exists, else — outside systemd — `/etc/linnet/token`, the
    /// file the unit hands over (`tokenSource`). Never logged. The last is a fallback
    /// nobody asked for by name, so a file there that cannot be read (root only, and
    /// run by hand as another user) is a warning and no token, not a stop.
    static func token(_ config: Config) throws(CLIFailure) -> String? {
        guard let source = tokenSource(config) else { return nil }
        if source.origin == .system, let why = unreadable(source.path) {
            Log.warning("token: \(why); going on without a token")
            return nil
        }
        return try readToken(source.path)
    }

    /// Where the bearer token is read from, and why that file.
    struct TokenSource: Equatable {
        enum Origin: Equatable {
            /// `token-file` (flag, environment or config file).
            case tokenFile
            /// `$CREDENTIALS_DIRECTORY/token`: systemd's `LoadCredential=token:…`.
            case credential
            /// `/etc/linnet/token` outside systemd: what the unit would hand over.
            case system
        }
        var path: String
        var origin: Origin
    }

    static let systemTokenPath = "/etc/linnet/token"

    static func tokenSource(_ config: Config) -> TokenSource? {
        tokenSource(tokenFile: config.tokenFile, credentialsDirectory: environment("CREDENTIALS_DIRECTORY"))
    }

    /// `token-file` if set; else, under systemd ($CREDENTIALS_DIRECTORY set), the
    /// credential if it exists; else `systemPath` if it exists. Under systemd the
    /// credential is the only source: the unit decides what the service may read.
    static func tokenSource(tokenFile: String?, credentialsDirectory: String?, systemPath: String = systemTokenPath) -> TokenSource? {
        if let tokenFile { return TokenSource(path: tokenFile, origin: .tokenFile) }
        if let dir = credentialsDirectory {
            return fileExists(dir + "/token") ? TokenSource(path: dir + "/token", origin: .credential) : nil
        }
        return fileExists(systemPath) ? TokenSource(path: systemPath, origin: .system) : nil
    }

    /// Why `path` cannot be read, in words a person can act on ("…: Permission denied —
    /// root only: use sudo"); nil when it can be.
    static func unreadable(_ path: String) -> String? { ICEServers.unreadable(path) }

    static func signalingHost(_ route: Route) -> String {
        switch route {
        case .whip(let u): return u.host
        case .backend(let u, _): return u.host
        case .openai(let calls, _): return calls.host
        }
    }

    static func execute(_ args: [String]) throws(CLIFailure) -> ExitStatus {
        var (config, configPath) = try loadConfig(.run, args, requireRoute: true)
        Log.level = config.logLevel
        if let configPath { Log.info("config: \(configPath)") }
        let route = try route(config)
        let token = try token(config)
        // The tools file is configuration: judged before any device is opened.
        let tools = try config.tools.map { path throws(CLIFailure) in try LoadedTools.load(path, directory: config.toolsDir) } ?? .none
        if let c = tools.lineConflict(ptt: config.ptt, leds: config.leds) { throw CLIFailure(.config, "the tools file: " + c) }
        if config.sessionMode == .onDemand, config.effectiveTurnDetection != .ptt {
            throw CLIFailure(.config, "session = on-demand needs push-to-talk (a ptt button, the space bar or SIGUSR1, with turn-detection = ptt): nothing else would start a session")
        }
        // From here the process's memory holds the token (and soon the DTLS key and
        // the requests that carry the token): no core dump, no ptrace or /proc/<pid>/mem
        // by other processes of the same user (PR_SET_DUMPABLE 0; the unit also has
        // LimitCORE=0). A gcore of a running agent showed the token twice.
        if csystem_set_dumpable(0) != 0 {
            Log.warning("cannot make the process non-dumpable: \(SystemError.message(csystem_errno())); a core dump would hold the token")
        }
        // Signals are blocked before any thread starts, so only signalfd sees them.
        // SIGHUP is a stop like SIGTERM (the terminal went away; a reload is not
        // implemented): the provider-side close, the status file and the WAV header
        // are all finished before exit.
        let signals = try wrap { () throws(SystemError) in try SignalSource([SIGINT, SIGTERM, SIGHUP, SIGUSR1]) }
        let loop = try wrap { () throws(SystemError) in try EventLoop() }
        // Handlers hold the runtime, which holds the loop: let go of them at the end.
        defer { loop.close() }
        // The button first: what it can do decides the mode. A configured button that
        // cannot be used (no permission, no such line, a HAT not mounted) must not leave
        // the device muted for good: without `ptt-required` the call runs in voice mode
        // (the microphone open, the provider detecting speech), and says so loudly — in
        // the log, the status file and `check`. (Refusing to run would leave a kiosk
        // silent and restarting; with `ptt-required = true` it does.)
        let (button, buttonProblem) = try ButtonInput.open(config: config, loop: loop)
        if let buttonProblem {
            if config.turnDetection == nil {
                config.ptt = nil
                Log.error("\(buttonProblem): running in voice mode instead (the microphone is open; the provider detects speech). ptt-required = true refuses to run instead")
            } else {
                Log.error("\(buttonProblem): carrying on with turn-detection \(config.turnDetection!.rawValue) (the space bar or SIGUSR1 still talk)")
            }
        }
        let stun = ICEServers.stun(config).flatMap { resolveSTUN($0, loop: loop) }
        let turn = try ICEServers.turnServers(config)
        let relays = ICEServers.resolve(turn, loop: loop) { Log.warning($0) }
        if config.iceTransportPolicy == .relay && relays.isEmpty {
            throw CLIFailure(.unavailable, "ice-transport-policy relay, and no TURN server could be resolved")
        }
        let crypto = try wrap { () throws(DTLSError) in try CryptoRandom() }
        let identity = try wrap { () throws(DTLSError) in try Identity(random: crypto) }
        let host = signalingHost(route)
        let hostIsLoopback = IPAddress(host)?.isLoopback ?? host.bytesEqual("localhost")
        let addresses = gatherAddresses(includeLoopback: hostIsLoopback || !config.interfaces.isEmpty,
                                        only: config.interfaces.isEmpty ? nil : config.interfaces)
        guard !addresses.isEmpty else { throw CLIFailure(.unavailable, "no usable network address to gather candidates on (is the network up?)") }

        // The events file from the start: a wait for the sound device is in it too.
        let events = try config.events.map { (path: String) throws(CLIFailure) in try EventLog(path: path, start: loop.now, label: config.eventsLabel) }
        // The status file says at once that this run has not connected: the unit keeps
        // /run/linnet across restarts (RuntimeDirectoryPreserve=restart), so a process
        // killed by the watchdog left "connected" there, and a kiosk UI (or the virtual
        // board's harness) read it while this run still waited for its sound card.
        var status = StatusFile(path: config.statusFile ?? (isWritableDirectory("/run/linnet") ? "/run/linnet/status.json" : nil))
        func startingStatus(_ problem: String?) {
            status.write(AgentStatus.beforeSession(turnDetection: config.effectiveTurnDetection.rawValue, waitingFor: problem))
        }
        startingStatus(nil)
        guard let audio = try openAudioWaiting(config, loop: loop, signals: signals, events: events, waiting: startingStatus) else { return .ok }

        // One client for the whole run: the CA bundle is parsed once, on the first https
        // request; a CA file that cannot be used is an error now, not at the first call.
        let client: HTTPClient
        do throws(HTTPClientError) { client = try HTTPClient(loop: loop, caFile: config.caFile, pins: config.pins) } catch {
            throw CLIFailure(.config, error.description)
        }
        client.log = { Log.debug($0) }
        // pin-sha256 is for the device's own servers, never OpenAI's rotating chain.
        client.pinsApply = { RouteClient.pinsApply(to: $0, route: route) }
        var sendOnOpen: [String] = []
        if let path = config.send {
            let bytes: [UInt8]
            do throws(FileReadError) { bytes = try readRegularFile(path, limit: 16 << 20).bytes } catch {
                throw CLIFailure(.dataError, "cannot read the send file \(error)")
            }
            // One message a line: split at each LF byte, a CR before it dropped (a file
            // from a Windows editor), blank lines skipped.
            sendOnOpen = bytes.split(separator: 0x0A).map { $0.last == 0x0D ? $0.dropLast() : $0 }.filter { !$0.isEmpty }
                .map { String(decoding: $0, as: UTF8.self) }
        }
        for line in tools.summary(directory: config.toolsDir) { line.ok ? Log.info("tool " + line.text) : Log.warning("tool " + line.text) }
        // MCP servers are asked for their tools now, each within its timeout: a server
        // that is down is said, and its tools are not offered this run.
        var offered = tools.specs
        let mcp = tools.servers.isEmpty ? nil : MCPClients(tools.servers, http: client, tokens: tools.tokens)
        if let mcp {
            let found = mcp.discover(loop: loop)
            for line in found.lines { line.ok ? Log.info(line.text) : Log.warning(line.text) }
            offered += found.tools
        }
        var settings = AgentSettings(config: config, route: route, token: token, stun: stun, sendOnOpen: sendOnOpen, tools: offered)
        settings.relayOnly = config.iceTransportPolicy == .relay
        settings.configuredRelays = relays.map { $0.server }
        settings.deviceProblem = buttonProblem
        let core = AgentCore(settings: settings, identity: identity, crypto: crypto, seed: try randomSeed(crypto))
        let media = MediaSettings(rate: config.rate, frameMilliseconds: audio.frameClock.milliseconds, bitrate: Int32(config.bitrate),
                                  complexity: Int32(config.complexity), fec: config.fec, dtx: config.dtx)
        var parts = RuntimeParts(addresses: addresses, http: client, media: media, relays: relays)
        parts.tools = tools
        parts.toolsDirectory = config.toolsDir
        parts.mcp = mcp
        let runner = Runtime(loop: loop, core: core, parts: parts, audio: audio)
        try runner.attachWake(config: config)
        runner.events = events
        // systemd's StateDirectory= (a list, colon-separated: the first is ours).
        let stateDir = config.stateDir ?? environment("STATE_DIRECTORY").map { String($0.split(byte: UInt8(ascii: ":")).first ?? "") }
        if let dir = stateDir, !dir.isEmpty {
            runner.pendingClosesPath = dir + "/open-sessions.jsonl"
            runner.usagePath = dir + "/daily-usage.json"
        }
        runner.notifier = SystemdNotifier()
        runner.statusFile = status
        // Metrics where node_exporter's textfile collector looks (Debian's default
        // directory) when this is the service (systemd gave it a notify socket) and it
        // may write there; a run by hand writes them only where it is told, so it never
        // fights the service over the one file.
        let nodeExporterDir = "/var/lib/prometheus/node-exporter"
        let isService = environment("NOTIFY_SOCKET") != nil
        if let dir = config.textfileDir ?? (isService && isWritableDirectory(nodeExporterDir) ? nodeExporterDir : nil) {
            runner.metricsFile = StatusFile(path: dir + "/linnet.prom", label: "metrics file")
            Log.info("metrics: \(dir)/linnet.prom")
        }
        var exit = ExitStatus.ok
        runner.onStopped = { (status: ExitStatus) in
            exit = status
            loop.stop()
        }
        loop.watch(fd: signals.fd) { _ in
            for s in signals.drain() {
                if s == SIGUSR1 {
                    runner.toggle()
                } else {
                    Log.info(s == SIGHUP ? "stopping (SIGHUP: a stop, not a reload)" : "stopping (\(ProcessSignals.name(s)))")
                    runner.stop()
                }
            }
        }
        button?.onEvent = { e in runner.button(e) }
        runner.button = button
        runner.lights = Lights.open(config: config, loop: loop)
        let terminal = TerminalKeys(loop: loop) { key in
            if key == UInt8(ascii: " ") { runner.toggle() }
        }
        if terminal != nil {
            Log.info(config.effectiveTurnDetection == .ptt ? "push-to-talk: press space to talk, space again to send" : "press space to mute or unmute")
        }
        Log.info("linnet \(linnetVersion): \(route.name) at \(describe(route)); turn detection \(config.effectiveTurnDetection.rawValue)")
        try runner.start()
        try wrap { () throws(SystemError) in try loop.run() }
        runner.dispose()
        terminal?.restore()
        exit = audio.finalStatus(exit)
        return exit
    }

    /// The audio devices, waited for while they are not there: a USB microphone pulled
    /// and put back, a sound card whose driver binds late. Exiting instead made systemd
    /// restart the service every few seconds until its start limit, after which it
    /// stayed failed even once the card was back. Meanwhile: READY=1 and WATCHDOG=1 (the
    /// process is not stuck, it waits), STATUS=, the status file (`waiting`, with the
    /// reason as its `problem`) and one log line saying what for, retried from 0.5 s
    /// doubling to 2 s (a card put back is in use within 2 s; an open attempt costs a
    /// few milliseconds); a stop signal ends the wait cleanly (nil).
    static func openAudioWaiting(_ config: Config, loop: EventLoop, signals: SignalSource, events: EventLog?,
                                 waiting: (String?) -> Void) throws(CLIFailure) -> AudioIO? {
        let notifier = SystemdNotifier()
        var delay = Duration.milliseconds(500)
        var said: String? = nil
        while true {
            do throws(CLIFailure) {
                let audio = try AudioIO.open(config: config, loop: loop)
                if said != nil {
                    Log.info("the sound device is back: going on")
                    events?.write("audio_wait", [("reason", .null)], now: loop.now)
                }
                return audio
            } catch {
                guard error.deviceMissing else { throw error }
                if said == nil {
                    Log.error("\(error.message): waiting for it (checked again every few seconds; the call starts when it is there)")
                    _ = notifier?.ready()
                }
                if !(said?.bytesEqual(error.message) ?? false) {
                    _ = notifier?.status("waiting for the sound device: " + error.message)
                    waiting("waiting for the sound device: " + error.message)
                    events?.write("audio_wait", [("reason", .string(error.message))], now: loop.now)
                }
                said = error.message
            }
            // The wait, on the signal descriptor: a stop ends it at once.
            let watchdogHalf = notifier?.watchdogInterval.map { $0 / 2 } ?? delay
            var left = delay
            while left > .zero {
                let slice = min(left, watchdogHalf)
                var fd = pollfd(fd: signals.fd, events: Int16(POLLIN), revents: 0)
                let n = poll(&fd, 1, Int32(clamping: slice.milliseconds))
                if n > 0, !signals.drain().filter({ $0 != SIGUSR1 }).isEmpty {
                    Log.info("stopping while waiting for the sound device")
                    return nil
                }
                _ = notifier?.watchdog()
                left = left - slice
            }
            delay = min(delay * 2, .seconds(2))
            reloadALSAConfiguration()
        }
    }

    /// The STUN server's IPv4 address, looked up off the loop and bounded (5 s): the
    /// server is an optimisation (server-reflexive candidates), so a resolver that fails
    /// or never answers must not keep the device off the air, nor hold up start-up.
    static func resolveSTUN(_ s: HostPort, loop: EventLoop, timeout: Duration = .seconds(5)) -> SocketAddress? {
        if let ip = IPAddress(s.host), ip.isV4 { return SocketAddress(ip: ip, port: s.port) }
        let resolver: BackgroundResolver
        do throws(SystemError) { resolver = try BackgroundResolver(loop: loop, maxThreads: 1) } catch {
            Log.warning("stun '\(s)': \(error); gathering host candidates only")
            return nil
        }
        var result: Result<[SocketAddress], Resolver.Failure>? = nil
        let ticket = resolver.resolve(s.host, port: s.port) { result = $0 }
        let deadline = loop.now + timeout
        while result == nil, loop.now < deadline {
            do throws(SystemError) { try loop.runOnce(maxWait: deadline - loop.now) } catch { break }
        }
        switch result {
        case nil:
            resolver.cancel(ticket)
            Log.warning("stun '\(s)': the resolver did not answer within \(timeout.milliseconds / 1000) s; gathering host candidates only")
            return nil
        case .failure(let error):
            Log.warning("stun '\(s)': \(error); gathering host candidates only")
            return nil
        case .success(let addresses):
            guard let v4 = addresses.first(where: { $0.ip.isV4 }) else {
                Log.warning("stun '\(s)': no IPv4 address; gathering host candidates only")
                return nil
            }
            return v4
        }
    }

    static func describe(_ route: Route) -> String {
        switch route {
        case .whip(let u): return u.description
        case .backend(let u, let chat): return "\(u) chat \(chat)"
        case .openai(let calls, _): return calls.description
        }
    }

    static func readToken(_ path: String) throws(CLIFailure) -> String {
        let file: (bytes: [UInt8], info: RegularFileInfo)
        do throws(FileReadError) { file = try readRegularFile(path, limit: 65_536) } catch {
            throw CLIFailure(.config, "cannot read the token file \(error)")
        }
        // As ssh does for private keys: a secret others can read is worth one warning
        // (not an error: systemd credentials and read-only images may not allow a fix).
        if file.info.mode & 0o044 != 0 {
            Log.warning("the token file '\(path)' is readable by others (mode \(octal(file.info.mode))); chmod 600 '\(path)'")
        }
        // Bytes, not Characters: Swift reads "\r\n" as one Character, so a String-level
        // hasSuffix("\n") misses a CRLF ending (a token saved on Windows).
        var bytes = file.bytes
        while let last = bytes.last, last == 0x0A || last == 0x0D || last == 0x20 || last == 0x09 { bytes.removeLast() }
        guard !bytes.isEmpty, !bytes.contains(0x0A) else { throw CLIFailure(.config, "the token file '\(path)' must hold one line") }
        guard !bytes.contains(where: { $0 < 0x21 || $0 > 0x7E }) else {
            throw CLIFailure(.config, "the token file '\(path)' holds characters a bearer token cannot have")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `0644`.
    static func octal(_ mode: UInt32) -> String {
        var digits = ""
        var m = mode & 0o7777
        for _ in 0..<4 {
            digits = String(m & 7) + digits
            m >>= 3
        }
        return digits
    }
}
