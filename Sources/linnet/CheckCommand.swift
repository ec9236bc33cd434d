// `linnet check`: what `run` would use, checked one line each — the config, the token
// (read from the file the service would read, and sent, so a 401/403 shows), the audio
// devices (opened and closed again), the push-to-talk line, the STUN server, and
// whether the provider's route answers. For installers and for the person standing
// next to a board that does not talk. A line is `ok`, `WARNING` (what run would log as
// a warning and carry on: the exit status is not affected) or `FAILED`.
import CSystem
import Wire
import Platform
import Signaling
import Devices
import Audio
import Agent
import Settings
import Runtime
import ICE

enum CheckCommand {
    static func run(_ args: [String]) -> ExitStatus {
        var worst = ExitStatus.ok
        func line(_ what: String, _ result: Result<String, CLIFailure>) {
            switch result {
            case .success(let text): writeOut("\(what): ok, \(text)\n")
            case .failure(let f):
                writeOut("\(what): FAILED, \(f.message)\n")
                if worst == .ok { worst = f.status }
            }
        }
        func warning(_ what: String, _ text: String) { writeOut("\(what): WARNING, \(text)\n") }
        let config: Config
        do throws(CLIFailure) {
            let (c, path) = try loadConfig(.check, args)
            config = c
            line("config", .success(path.map { "read \($0)" } ?? "no file (defaults, environment and flags)"))
        } catch {
            line("config", .failure(error))
            return worst
        }
        Log.level = .error  // ALSA's and the HTTP client's own chatter is not what we print

        // The token as the service gets it (RunCommand.tokenSource), and what it is
        // called there, so a person sees which file was read.
        var token: String? = nil
        if let source = RunCommand.tokenSource(config) {
            if let why = RunCommand.unreadable(source.path) {
                line("token", .failure(CLIFailure(.config, why)))
            } else {
                do throws(CLIFailure) {
                    let t = try RunCommand.readToken(source.path)
                    token = t
                    let origin: String
                    switch source.origin {
                    case .tokenFile: origin = "token-file"
                    case .credential: origin = "the systemd credential"
                    case .system: origin = "what the service gets as its credential"
                    }
                    line("token", .success("\(t.utf8.count) characters from \(source.path) (\(origin); not shown)"))
                } catch {
                    line("token", .failure(error))
                }
            }
        } else {
            let looked = environment("CREDENTIALS_DIRECTORY").map { "\($0)/token" } ?? RunCommand.systemTokenPath
            line("token", .success("none (no token-file, no \(looked); the provider must not need one)"))
        }

        // The rest as the service would find it: run by root, as its user with the unit's
        // groups (systemd/linnet.service: User=linnet, SupplementaryGroups=audio gpio
        // spi). Root can open every device; the service cannot, and "ok" from root said
        // nothing about the button the service could not open.
        if geteuid() == 0 {
            if let user = ServiceUser.lookup(config.serviceUser, supplementary: ["audio", "gpio", "spi"]) {
                switch user.become() {
                case .success:
                    let groups = user.groups.map { $0.name }.joined(separator: " ")
                    line("user", .success("the rest is checked as the service's user \(user.name) (uid \(user.uid), groups \(groups.isEmpty ? "none" : groups)), as it runs"))
                case .failure(let e):
                    warning("user", "cannot become the service's user \(user.name) (\(e)): the rest is checked as root, which may open what the service cannot")
                }
            } else {
                warning("user", "no user \(config.serviceUser) (the package makes linnet): the rest is checked as root, which may open what the service cannot")
            }
        }

        // Fleet metrics: where run will write them, as the service's user.
        if let dir = config.textfileDir {
            line("metrics", isWritableDirectory(dir) ? .success("\(dir)/linnet.prom can be written")
                 : .failure(CLIFailure(.config, "cannot write in the textfile-dir '\(dir)'")))
        } else if isWritableDirectory("/var/lib/prometheus/node-exporter") {
            line("metrics", .success("/var/lib/prometheus/node-exporter/linnet.prom, when run as the service (node_exporter's textfile directory)"))
        }

        // Daily caps: what they are and what today has used (the state file run keeps).
        if config.maxDailyMinutes != nil || config.maxDailyTokens != nil {
            let caps = DailyCaps(minutes: config.maxDailyMinutes, tokens: config.maxDailyTokens)
            var limits: [String] = []
            if let m = caps.minutes { limits.append("\(m) connected minutes") }
            if let t = caps.tokens { limits.append("\(t) tokens") }
            let dir = config.stateDir ?? environment("STATE_DIRECTORY").map { String($0.split(byte: UInt8(ascii: ":")).first ?? "") } ?? "/var/lib/linnet"
            let path = dir + "/daily-usage.json"
            let unix = RealtimeClock.unixSeconds()
            let today = Int((unix + RealtimeClock.utcOffsetSeconds(at: unix)) / 86_400)
            var used = DailyUsage(day: today)
            var source = "nothing used today"
            do throws(FileReadError) {
                let file = try readRegularFile(path, limit: 4096)
                if let u = DailyUsage.parse(file.bytes) {
                    if u.day == today { used = u; source = "\(path)" }
                } else {
                    warning("caps", "\(path) is not a usage file Linnet wrote; run will count today from zero")
                }
            } catch {
                if !error.isMissing { warning("caps", "\(error)") }
            }
            let usedText = "today (\(DailyUsage.date(today))) \(used.connectedMilliseconds / 60_000) min connected, \(used.tokens) tokens (\(source))"
            if let why = caps.reached(used) {
                warning("caps", "\(why): no session until \(DailyUsage.date(today + 1)) 00:00 local time; \(usedText)")
            } else {
                line("caps", .success("a day: \(limits.joined(separator: ", ")); \(usedText)"))
            }
        }

        var captureCard: Int? = nil, playbackCard: Int? = nil
        if let input = config.input {
            do throws(FileError) {
                let r = try WAVReader(path: input)
                line("input", .success("\(input): \(r.format.sampleFormat) \(r.format.sampleRate) Hz × \(r.format.channels)"))
            } catch {
                line("input", .failure(CLIFailure(.dataError, error.description)))
            }
        } else if !config.capture.bytesEqual("none") {
            let (result, card) = openPCM(config.capture, .capture, rate: config.rate)
            line("capture", result)
            captureCard = card
        }
        if let output = config.output {
            line("output", isWritableDirectory(directory(of: output)) ? .success("\(output) can be written")
                 : .failure(CLIFailure(.config, "cannot write in the directory of '\(output)'")))
        } else if !config.playback.bytesEqual("none") {
            let (result, card) = openPCM(config.playback, .playback, rate: config.rate)
            line("playback", result)
            playbackCard = card
        }
        // Echo cancellation compares the two streams sample by sample: on one card they
        // run on one clock; on two, their clocks drift apart and the canceller does not
        // follow the drift (its tests: ERLE 2–3 dB at ±100 ppm).
        if let c = captureCard, let p = playbackCard {
            if c == p {
                line("clock", .success("capture and playback share card \(c): one clock, as echo cancellation needs"))
            } else if config.aec {
                warning("clock", "capture is on card \(c), playback on card \(p): two clocks drift apart, and aec does not compensate drift (use one card for both)")
            } else {
                line("clock", .success("capture on card \(c), playback on card \(p): two clocks (aec would need one card for both)"))
            }
        }
        if let ptt = config.ptt, config.pttMode != .open {
            // As run opens it (BoardIO.swift): the line requested and let go, so a chip
            // this user may not open, a line in use or one that is not there shows here.
            do throws(GPIOError) {
                let b = try GPIOButton.open(line: ptt, mode: config.pttMode, debounce: .milliseconds(Int64(config.pttDebounceMS)),
                                            longPress: nil, now: MonotonicClock.now())
                line("ptt", .success("\(b.name) can be used (\(config.pttMode.rawValue))"))
            } catch {
                if config.pttRequired {
                    line("ptt", .failure(CLIFailure(.unavailable, "\(ptt): \(error) (ptt-required: run stops here)")))
                } else {
                    warning("ptt", "\(ptt): \(error) — run falls back to voice mode, the microphone open (ptt-required = true makes this an error)")
                }
            }
        }
        if let wake = checkWakeModel(config: config) { line("wake", wake) }
        // The tools file, judged as run would, and what each tool touches.
        do throws(CLIFailure) {
            let tools = try config.tools.map { p throws(CLIFailure) in try LoadedTools.load(p, directory: config.toolsDir) } ?? .none
            if let c = tools.lineConflict(ptt: config.ptt, leds: config.leds) { line("tools", .failure(CLIFailure(.config, c))) }
            for t in tools.summary(directory: config.toolsDir) { line("tool", t.ok ? .success(t.text) : .failure(CLIFailure(.config, t.text))) }
            // Each MCP server asked as run will ask it: what it offers, or why nothing.
            if !tools.servers.isEmpty {
                let loop: EventLoop
                do throws(SystemError) { loop = try EventLoop() } catch { throw CLIFailure(.software, error.description) }
                defer { loop.close() }
                let client: HTTPClient
                do throws(HTTPClientError) { client = try HTTPClient(loop: loop, caFile: config.caFile, pins: []) } catch {
                    throw CLIFailure(.config, error.description)
                }
                for t in MCPClients(tools.servers, http: client, tokens: tools.tokens).discover(loop: loop).lines {
                    line("mcp", t.ok ? .success(t.text) : .failure(CLIFailure(.unavailable, t.text)))
                }
            }
        } catch {
            line("tools", .failure(error))
        }
        if let s = config.stun {
            do throws(Resolver.Failure) {
                let a = try Resolver.resolve(s.host, port: s.port)
                line("stun", .success("\(s) is \(a.map { $0.description }.joined(separator: ", "))"))
            } catch {
                line("stun", .failure(CLIFailure(.unavailable, error.description)))
            }
        }
        // Each TURN server: an allocation, as a session makes it, then its release.
        do throws(CLIFailure) {
            let servers = try ICEServers.turnServers(config)
            if !servers.isEmpty {
                checkRelays(servers, config: config, line: line)
            }
        } catch {
            line("turn", .failure(error))
        }
        if let url = providerURL(config) {
            line("provider", reach(url, config: config, token: token))
        } else {
            line("provider", .failure(CLIFailure(.config, "no route: set whip, backend (with chat) or openai (with token-url)")))
        }
        return worst
    }

    static func checkRelays(_ servers: [TURNServer], config: Config, line: (String, Result<String, CLIFailure>) -> Void) {
        let loop: EventLoop
        do throws(SystemError) { loop = try EventLoop() } catch { return line("turn", .failure(CLIFailure(.software, error.description))) }
        defer { loop.close() }
        let client: HTTPClient
        do throws(HTTPClientError) { client = try HTTPClient(loop: loop, caFile: config.caFile, pins: []) } catch {
            return line("turn", .failure(CLIFailure(.config, error.description)))
        }
        var unresolved: [String] = []
        let resolved = ICEServers.resolve(servers, loop: loop) { unresolved.append($0) }
        for why in unresolved { line("turn", .failure(CLIFailure(.unavailable, why))) }
        for (server, address) in resolved {
            switch RelayProbe.allocate(loop: loop, server: server, address: address, http: client, timeout: .seconds(5)) {
            case .success(let a):
                let mapped = a.mapped.map { ", seen from \($0)" } ?? ""
                line("turn", .success("\(server) (\(address), \(server.transport)): relayed address \(a.relayed)\(mapped), in \(a.after.milliseconds) ms"))
            case .failure(let f):
                line("turn", .failure(CLIFailure(f.isConfiguration ? .config : .unavailable, "\(server) (\(address), \(server.transport)): \(f)")))
            }
        }
    }

    /// A POSIX path is bytes: its last '/' is found as a byte.
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(ofByte: UInt8(ascii: "/")) else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Whether the device opens, and the sound card under it (nil: none or not open).
    static func openPCM(_ name: String, _ stream: PCMStream, rate: Int) -> (Result<String, CLIFailure>, Int?) {
        var request = PCMRequest()
        request.acceptedRates = [rate, 48_000, 44_100, 24_000, 16_000]
        do throws(ALSAError) {
            let pcm = try PCM(device: name, stream: stream, request: request)
            let card = pcm.card
            return (.success("'\(name)' opens: \(pcm.format)" + (card.map { " (card \($0))" } ?? "")), card)
        } catch {
            return (.failure(CLIFailure(.unavailable, error.description)), nil)
        }
    }

    /// The URL run sends the device's token to first: the WHIP endpoint, the backend's
    /// voice route for the chat, or OpenAI's token URL.
    static func providerURL(_ config: Config) -> HTTPURL? {
        if let whip = config.whip { return whip }
        if var backend = config.backend {
            if let chat = config.chat { backend = RoutePath.backendOffer(backend, chat: chat) }
            return backend
        }
        return config.openai ? config.tokenURL : nil
    }

    /// One OPTIONS request to the route's URL, with the token run would send, on a loop
    /// of its own. Any HTTP answer means the server is there (a WHIP endpoint answers
    /// OPTIONS or 405, a backend perhaps 404) — except 401/403, which says the token is
    /// missing or wrong, as it would be for run.
    static func reach(_ url: HTTPURL, config: Config, token: String?) -> Result<String, CLIFailure> {
        let loop: EventLoop
        do throws(SystemError) { loop = try EventLoop() } catch { return .failure(CLIFailure(.software, error.description)) }
        defer { loop.close() }
        let client: HTTPClient
        do throws(HTTPClientError) { client = try HTTPClient(loop: loop, caFile: config.caFile, pins: config.pins) } catch {
            return .failure(CLIFailure(.config, error.description))
        }
        var result: Result<String, CLIFailure> = .failure(CLIFailure(.unavailable, "no answer"))
        let started = loop.now
        var headers = HTTPHeaders()
        if let token { headers.add("Authorization", "Bearer " + token) }
        client.send(HTTPRequest(method: "OPTIONS", url: url, headers: headers), timeout: .seconds(5)) { r in
            switch r {
            case .success(let response) where response.status == 401 || response.status == 403:
                // Our own reason phrase, not the server's: it could echo the token back.
                let reason = response.status == 401 ? "Unauthorized" : "Forbidden"
                let sent = token == nil ? " (no token was sent: set token-file, or put it in \(RunCommand.systemTokenPath))" : ""
                result = .failure(CLIFailure(.config, "\(response.status) \(reason) from \(url) — check the token\(sent)"))
            case .success(let response):
                let ms = (loop.now - started).milliseconds
                result = .success("\(url) answers (HTTP \(response.status) to OPTIONS in \(ms) ms)")
            case .failure(let e):
                result = .failure(CLIFailure(e.exitStatus, "\(url): \(e)"))
            }
            loop.stop()
        }
        do throws(SystemError) { try loop.run() } catch { return .failure(CLIFailure(.software, error.description)) }
        return result
    }
}
