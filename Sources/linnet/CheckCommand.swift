// `linnet check`: what `run` would use, checked one line each — the config, the token,
// the audio devices (opened and closed again), the push-to-talk line, the STUN server,
// and whether the provider's route answers at all. For installers and for the person
// standing next to a board that does not talk.
import CSystem
import Wire
import Platform
import Signaling
import Devices
import Audio
import Agent

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
        let config: Config
        do throws(CLIFailure) {
            let (c, path) = try RunCommand.loadConfig(args, requireRoute: false)
            config = c
            line("config", .success(path.map { "read \($0)" } ?? "no file (defaults, environment and flags)"))
        } catch {
            line("config", .failure(error))
            return worst
        }
        Log.level = .error  // ALSA's and the HTTP client's own chatter is not what we print

        do throws(CLIFailure) {
            let token = try RunCommand.token(config)
            line("token", .success(token.map { "\($0.utf8.count) characters (not shown)" } ?? "none (the provider must not need one)"))
        } catch {
            line("token", .failure(error))
        }

        if let input = config.input {
            do throws(FileError) {
                let r = try WAVReader(path: input)
                line("input", .success("\(input): \(r.format.sampleFormat) \(r.format.sampleRate) Hz × \(r.format.channels)"))
            } catch {
                line("input", .failure(CLIFailure(.dataError, error.description)))
            }
        } else if config.capture != "none" {
            line("capture", openPCM(config.capture, .capture, rate: config.rate))
        }
        if let output = config.output {
            line("output", isWritableDirectory(directory(of: output)) ? .success("\(output) can be written")
                 : .failure(CLIFailure(.config, "cannot write in the directory of '\(output)'")))
        } else if config.playback != "none" {
            line("playback", openPCM(config.playback, .playback, rate: config.rate))
        }
        if let ptt = config.ptt {
            let chips = GPIOChips.list()
            let found: Bool
            switch ptt {
            case .name(let n): found = chips.contains { $0.lines.contains(n) }
            case .chip(let chip, let offset): found = chips.contains { ($0.name == chip || $0.label == chip) && offset < $0.lines.count }
            }
            let there = chips.isEmpty ? "no GPIO chips here" : "chips: " + chips.map { "\($0.name) (\($0.label), \($0.lines.count) lines)" }.joined(separator: ", ")
            line("ptt", found ? .success("line \(ptt) exists") : .failure(CLIFailure(.unavailable, "line \(ptt) not found; \(there)")))
        }
        if let s = config.stun {
            do throws(Resolver.Failure) {
                let a = try Resolver.resolve(s.host, port: s.port)
                line("stun", .success("\(s) is \(a.map { $0.description }.joined(separator: ", "))"))
            } catch {
                line("stun", .failure(CLIFailure(.unavailable, error.description)))
            }
        }
        if let url = config.whip ?? config.backend ?? (config.openai ? config.tokenURL : nil) {
            line("provider", reach(url, config: config))
        } else {
            line("provider", .failure(CLIFailure(.config, "no route: set whip, backend (with chat) or openai (with token-url)")))
        }
        return worst
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func openPCM(_ name: String, _ stream: PCMStream, rate: Int) -> Result<String, CLIFailure> {
        var request = PCMRequest()
        request.acceptedRates = [rate, 48_000, 44_100, 24_000, 16_000]
        do throws(ALSAError) {
            let pcm = try PCM(device: name, stream: stream, request: request)
            return .success("'\(name)' opens: \(pcm.format)")
        } catch {
            return .failure(CLIFailure(.unavailable, error.description))
        }
    }

    /// One request to the route's URL on a loop of its own: any HTTP answer means the
    /// server is there (a WHIP endpoint answers OPTIONS or 405; a backend 404 for /).
    static func reach(_ url: HTTPURL, config: Config) -> Result<String, CLIFailure> {
        let loop: EventLoop
        do throws(SystemError) { loop = try EventLoop() } catch { return .failure(CLIFailure(.software, error.description)) }
        let client: HTTPClient
        do throws(HTTPClientError) { client = try HTTPClient(loop: loop, caFile: config.caFile, pins: config.pins) } catch {
            return .failure(CLIFailure(.config, error.description))
        }
        var result: Result<String, CLIFailure> = .failure(CLIFailure(.unavailable, "no answer"))
        let started = loop.now
        client.send(HTTPRequest(method: "OPTIONS", url: url), timeout: .seconds(5)) { r in
            switch r {
            case .success(let response):
                let ms = (loop.now - started).milliseconds
                result = .success("\(url) answers (HTTP \(response.status) to OPTIONS in \(ms) ms)")
            case .failure(let e):
                result = .failure(CLIFailure(e.isConfigurationProblem ? .config : .unavailable, "\(url): \(e)"))
            }
            loop.stop()
        }
        do throws(SystemError) { try loop.run() } catch { return .failure(CLIFailure(.software, error.description)) }
        return result
    }
}
