import Testing
import Foundation
import Glibc
@testable import linnet
@testable import Runtime
import Platform
import Agent
import Devices
import Wire

/// A child process whose standard output is read line by line as it comes (blocking
/// reads: the test waits on the process, never on a clock).
final class LineProcess {
    let process = Process()
    let fd: Int32
    var buffer: [UInt8] = []
    var lines: [String] = []

    init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], stderr: String) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        process.environment = env
        let out = Pipe()
        process.standardOutput = out
        _ = FileManager.default.createFile(atPath: stderr, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: stderr)
        try process.run()
        fd = out.fileHandleForReading.fileDescriptor
    }

    /// How long a read waits for output before the test gives up on the process: a
    /// line that never comes fails the test (nil) instead of hanging the whole run.
    static let silenceLimitMilliseconds: Int32 = 300_000

    /// The next line, or nil at end of output (or after `silenceLimitMilliseconds` with none).
    func nextLine() -> String? {
        while true {
            if let nl = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<nl], as: UTF8.self)
                buffer.removeSubrange(...nl)
                lines.append(line)
                return line
            }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&ready, 1, LineProcess.silenceLimitMilliseconds) == 0 {
                Issue.record("no output from \(process.executableURL?.lastPathComponent ?? "the process") for \(LineProcess.silenceLimitMilliseconds / 1000) s")
                return nil
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    /// Reads lines until one satisfies `match` (returned), or output ends (nil).
    func waitFor(_ match: (String) -> Bool) -> String? {
        while let line = nextLine() { if match(line) { return line } }
        return nil
    }

    func signal(_ s: Int32) { kill(process.processIdentifier, s) }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }

    deinit { if process.isRunning { process.terminate(); process.waitUntilExit() } }
}

/// `linnet answer` on a given port (0: any); returns it once READY.
func startAnswerer(port: Int, name: String) throws -> (LineProcess, Int) {
    let p = try LineProcess(Linnet.executable.path, ["answer", "--listen", "127.0.0.1:\(port)"], stderr: temporary("\(name).log"))
    guard let ready = p.waitFor({ $0.hasPrefix("READY ") }), let got = Int(ready.dropFirst(6)) else {
        throw NSError(domain: "linnet answer did not start", code: 1)
    }
    return (p, got)
}

/// A TCP socket bound to a free loopback port, not listening, and the port.
func boundTCPSocket() -> (Int32, Int) {
    let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, len) } }
    _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) } }
    return (s, Int(UInt16(bigEndian: addr.sin_port)))
}

func event(_ line: String) -> [String: Any]? {
    (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
}

func isState(_ line: String, _ state: String) -> Bool {
    guard let e = event(line) else { return false }
    return e["type"] as? String == "state" && e["state"] as? String == state
}

@Suite(.serialized) struct AgentEndToEndTests {
    /// The answerer dies mid-call (SIGKILL: no goodbye) and comes back on the same port:
    /// the agent notices, retries, and is connected with audio flowing again once the
    /// answerer answers again. A smoke test of the wiring (sockets, HTTP, events, exit):
    /// the timing (disconnected within 3 s of the last packet, reconnected within the
    /// backoff ceiling) is asserted on the simulated clock by AgentTests'
    /// `AgentCoreConnectionTests.answererKilledAndRestartedReconnects`.
    @Test func answererKilledAndRestartedReconnects() throws {
        var (answerer, port) = try startAnswerer(port: 0, name: "agent-answer-1")
        let input = temporary("agent-tone.wav"), output = temporary("agent-out.wav")
        defer { unlink(input); unlink(output) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--whip", "http://127.0.0.1:\(port)/whip", "--input", input, "--loop-input", "--output", output,
                                     "--events", "-", "--stats-seconds", "1"], stderr: temporary("agent-run.log"))
        defer { agent.stop() }
        #expect(agent.waitFor { isState($0, "connected") } != nil)
        // Audio flows on session 1 before the fault.
        #expect(agent.waitFor { ($0.contains("\"stats\"") && (event($0)?["packets_received"] as? Int ?? 0) > 10) } != nil)
        answerer.signal(SIGKILL)
        answerer.stop()
        #expect(agent.waitFor { isState($0, "disconnected") } != nil)
        // Back on the same port.
        (answerer, _) = try startAnswerer(port: port, name: "agent-answer-2")
        defer { answerer.stop() }
        #expect(agent.waitFor { isState($0, "connected") } != nil)
        // Audio flows on the new session: its stats show packets received.
        let stats = agent.waitFor {
            guard let e = event($0), e["type"] as? String == "stats" else { return false }
            return (e["session"] as? Int ?? 1) > 1 && (e["packets_received"] as? Int ?? 0) > 10
        }
        #expect(stats != nil)
        // The audio threads' timeline jumps are reported (each moves the echo reference).
        #expect(stats.flatMap { event($0) }?["audio_timeline_jumps"] is Int, "\(stats ?? "")")
        #expect(agent.lines.contains { ($0.contains("\"retry\"") || $0.contains("\"session\"")) })
        // SIGTERM ends it cleanly: closed, exit 0.
        agent.signal(SIGTERM)
        #expect(agent.waitFor { isState($0, "closed") } != nil)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
    }

    /// The backend is down when the agent starts: it backs off (growing, jittered
    /// delays, logged as retry events) and connects once the backend comes up. The
    /// delays checked here are the ones the core reports; that each next attempt starts
    /// when its delay runs out is checked on the simulated clock by AgentTests'
    /// `AgentCoreConnectionTests.backendDownAtStartThenUp`.
    @Test func backendDownAtStartThenUp() throws {
        // A free port nobody listens on (bound, read, released).
        let (s, port) = boundTCPSocket()
        close(s)
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--backend", "http://127.0.0.1:\(port)", "--chat", "c1", "--capture", "none", "--playback", "none",
                                     "--events", "-"], stderr: temporary("agent-down.log"))
        defer { agent.stop() }
        var delays: [Int] = []
        while delays.count < 3, let line = agent.waitFor({ $0.contains("\"retry\"") }) {
            delays.append(event(line)?["delay_ms"] as? Int ?? -1)
        }
        #expect(delays.count == 3)
        // Full jitter under a doubling ceiling: 0.5 s, 1 s, 2 s.
        for (i, d) in delays.enumerated() { #expect(d >= 0 && d <= 500 << i, "retry \(i + 1) waited \(d) ms") }
        #expect(agent.lines.contains { isState($0, "failed") })
        let (answerer, _) = try startAnswerer(port: port, name: "agent-down-answer")
        defer { answerer.stop() }
        #expect(agent.waitFor { isState($0, "connected") } != nil)
        agent.signal(SIGTERM)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
        // The backend's close route was called on the way out.
        answerer.stop()
        let log = (try? String(contentsOfFile: temporary("agent-down-answer.log"), encoding: .utf8)) ?? ""
        #expect(log.contains("ended"), "answerer log: \(log.suffix(400))")
    }

    /// Rollover: with a 10 s session limit a second session starts, audio switches to it
    /// once it is connected and only then is the old one closed — the echo of a steady
    /// tone comes back without a gap a person would hear. That it starts 9 s after the
    /// connection (a tenth before the limit) and that no uplink frame is lost at the
    /// switch is asserted on the simulated clock by AgentTests'
    /// `AgentCoreConnectionTests.rolloverSwitchesSessionsWithoutAGap`.
    @Test func rolloverSwitchesSessionsWithoutAGap() throws {
        let (answerer, port) = try startAnswerer(port: 0, name: "rollover-answer")
        defer { answerer.stop() }
        let input = temporary("rollover-tone.wav"), output = temporary("rollover-out.wav")
        defer { unlink(input); unlink(output) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(440, amplitude: 0.25, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--whip", "http://127.0.0.1:\(port)/whip", "--input", input, "--loop-input", "--output", output,
                                     "--events", "-", "--max-session-seconds", "10", "--seconds", "12"], stderr: temporary("rollover-run.log"))
        defer { agent.stop() }
        var events: [[String: Any]] = []
        while let line = agent.nextLine() { if let e = event(line) { events.append(e) } }
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
        let states = events.filter { $0["type"] as? String == "state" }.compactMap { $0["state"] as? String }
        #expect(states == ["connecting", "connected", "closed"], "no state change a listener would see: \(states)")
        let sessions = events.filter { $0["type"] as? String == "session" }
        #expect(sessions.map { $0["reason"] as? String ?? "" } == ["initial", "rollover"])
        let switched = events.filter { $0["type"] as? String == "audio" }.map { $0["session"] as? Int ?? 0 }
        #expect(switched == [1, 2])
        // Every 100 ms window of the returned audio from its first second to the call's
        // end holds the tone, the switch included (the echo is what was sent; levels
        // within 3 dB). Judged over the echo's span: the output file also holds the
        // silence before the call connected and after it closed, which a loaded machine
        // stretches.
        let (_, back) = try WAVFile.read16(output)
        let rms = 0.25 * 32_767 / 2.0.squareRoot()
        let echo = Array(toneSpan(back, 440, rate: 48_000).dropFirst(48_000))
        let fraction = fractionOfWindowsWithTone(echo, 440, rate: 48_000, rms: rms)
        #expect(echo.count >= 10 * 48_000, "the echo lasted \(echo.count / 480) cs of the 12 s call: \(toneWindowMap(back, 440, rate: 48_000, rms: rms))")
        #expect(fraction > 0.95, "440 Hz in \(Int(fraction * 100)) % of windows: \(toneWindowMap(back, 440, rate: 48_000, rms: rms))")
    }

    /// An https provider whose certificate does not verify (self-signed) is refused with
    /// a clear reason and the configuration exit status; the same server with its CA
    /// given as ca-file gets the offer. The TLS server is Python's ssl (OpenSSL, an
    /// independent TLS stack).
    @Test func selfSignedProviderIsRefused() throws {
        let dir = temporary("tls-fixtures")
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try HTTPSFixtures.selfCertificate.write(toFile: dir + "/self.pem", atomically: true, encoding: .utf8)
        try HTTPSFixtures.selfKey.write(toFile: dir + "/self.key", atomically: true, encoding: .utf8)
        try HTTPSFixtures.localhostCertificate.write(toFile: dir + "/leaf.pem", atomically: true, encoding: .utf8)
        try HTTPSFixtures.localhostKey.write(toFile: dir + "/leaf.key", atomically: true, encoding: .utf8)
        try HTTPSFixtures.rootCertificate.write(toFile: dir + "/root.pem", atomically: true, encoding: .utf8)
        func server(_ cert: String, _ key: String) throws -> (LineProcess, Int) {
            // Python's ssl (OpenSSL): answers every request with 201 and a body that is
            // not SDP, so a request that got through TLS is told apart by its error.
            let script = """
            import http.server, signal, ssl, sys
            # The test runner's threads block SIGTERM and children inherit the mask.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            class H(http.server.BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers.get('Content-Length', 0)))
                    body = b'not an SDP answer'
                    self.send_response(201); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
                do_DELETE = do_POST
                def log_message(self, *a): pass
            s = http.server.HTTPServer(('127.0.0.1', 0), H)
            c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
            s.socket = c.wrap_socket(s.socket, server_side=True)
            print('READY', s.server_address[1], flush=True)
            s.serve_forever()
            """
            let p = try LineProcess("/usr/bin/python3", ["-c", script, cert, key], stderr: temporary("tls-server.log"))
            guard let ready = p.waitFor({ $0.hasPrefix("READY ") }), let port = Int(ready.dropFirst(6)) else {
                throw NSError(domain: "TLS test server did not start", code: 1)
            }
            return (p, port)
        }
        let (bad, badPort) = try server(dir + "/self.pem", dir + "/self.key")
        defer { bad.stop() }
        let r = try Linnet.run(["run", "--whip", "https://localhost:\(badPort)/whip", "--max-attempts", "1", "--capture", "none", "--playback", "none"])
        #expect(r.status == 78, "\(r.err)")
        #expect(r.err.contains("not issued by a trusted CA"), "\(r.err)")
        // Trusted through ca-file: TLS completes and the server's answer (not SDP) is
        // what fails, as data (65), not as trust.
        let (good, goodPort) = try server(dir + "/leaf.pem", dir + "/leaf.key")
        defer { good.stop() }
        let t = try Linnet.run(["run", "--whip", "https://localhost:\(goodPort)/whip", "--ca-file", dir + "/root.pem", "--max-attempts", "1",
                                "--capture", "none", "--playback", "none"])
        #expect(!t.err.contains("trusted CA"), "\(t.err)")
        #expect(t.status == 65 && t.err.contains("unusable"), "\(t.err)")
    }

    /// The OpenAI route against the aiortc peer's scripted Realtime server (the same flow
    /// on the core: AgentTests' `AgentCoreConversationTests`): the device
    /// token buys an ephemeral key at --token-url, the call is made with that key, and
    /// push-to-talk (SIGUSR1 toggles) sends exactly session.update, clear, commit,
    /// response.create; the transcripts come back as user:/assistant: lines. A press
    /// too short to commit sends its clear and nothing else. SIGTERM hangs up.
    @Test func openAIPushToTalkFlow() throws {
        guard let python = InteropPeer.require() else { return }
        let peer = try InteropPeer(python: python, mode: "openai", extra: ["--ephemeral", "--token", "device-secret"], name: "openai")
        let token = temporary("openai-token"), input = temporary("openai-in.wav"), log = temporary("openai-run.log")
        let output = temporary("openai-out.wav")
        defer { unlink(token); unlink(input); unlink(log); unlink(output) }
        try "device-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(300, amplitude: 0.2, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let base = "http://127.0.0.1:\(peer.port)"
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--openai", "--token-url", base + "/token", "--openai-url", base + "/v1/realtime/calls",
                                     "--token-file", token, "--turn-detection", "ptt", "--input", input, "--loop-input", "--output", output,
                                     "--events", "-", "--stats-seconds", "1"], stderr: log)
        defer { agent.stop() }
        func type(_ t: String, _ extra: (([String: Any]) -> Bool)? = nil) -> (String) -> Bool {
            { line in
                guard let e = event(line), e["type"] as? String == t else { return false }
                return extra?(e) ?? true
            }
        }
        #expect(agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        agent.signal(SIGUSR1)  // press
        #expect(agent.waitFor(type("ptt") { $0["talking"] as? Bool == true }) != nil)
        // Two stats ticks: at least a second of (unmuted) audio went out.
        #expect(agent.waitFor(type("stats")) != nil)
        #expect(agent.waitFor(type("stats")) != nil)
        agent.signal(SIGUSR1)  // release
        let user = agent.waitFor(type("transcript") { $0["role"] as? String == "user" })
        #expect(user.flatMap { event($0)?["text"] as? String } == "hello linnet")
        let assistant = agent.waitFor(type("transcript") { $0["role"] as? String == "assistant" })
        #expect(assistant.flatMap { event($0)?["text"] as? String } == "Hi, this is the test provider.")
        // A tap: pressed and released at once.
        #expect(agent.waitFor(type("speaking") { $0["on"] as? Bool == false }) != nil)
        agent.signal(SIGUSR1)
        #expect(agent.waitFor(type("ptt") { $0["talking"] as? Bool == true }) != nil)
        agent.signal(SIGUSR1)
        #expect(agent.waitFor(type("ptt_too_short")) != nil)
        agent.signal(SIGTERM)
        #expect(agent.waitFor { isState($0, "closed") } != nil)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
        let report = try peer.stop()
        let call = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        let received = (call["openai_events_received"] as? [[String: Any]] ?? []).compactMap { $0["type"] as? String }
        // turn_detection alone first, then the rest; both pass the stand-in's
        // GA schema check (it reports an error otherwise, checked below).
        #expect(received == ["session.update", "session.update", "input_audio_buffer.clear", "input_audio_buffer.commit", "response.create",
                             "input_audio_buffer.clear"], "\(received)")
        let sentByPeer = call["openai_events_sent"] as? [String] ?? []
        #expect(!sentByPeer.contains("error"), "the scripted server reported an error: \(sentByPeer)")
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(text.contains("user: hello linnet") && text.contains("assistant: Hi, this is the test provider."))
        #expect(!text.contains("device-secret") && !text.contains("ek_"), "no token in the log")
        let http = report["http"] as? [[String: Any]] ?? []
        #expect(http.contains { ($0["path"] as? String) == "/token" && ($0["status"] as? Int) == 200 })
        #expect(http.contains { ($0["path"] as? String)?.hasSuffix("/hangup") == true && ($0["status"] as? Int) == 200 })
        // The answer had OpenAI's shape (the stand-in's default on this route): one
        // session-level fingerprint, a ufrag with '/', a UDP candidate and a TCP passive
        // one on 443, setup:active. Linnet has no ICE-TCP: it skipped the TCP candidate
        // and the call ran over UDP (aioice checked every STUN USERNAME against that ufrag).
        let answer = (call["answer_sdp"] as? String ?? "").replacingOccurrences(of: "\r\n", with: "\n")
        let sessionPart = answer.components(separatedBy: "\nm=").first ?? ""
        let mediaPart = answer.dropFirst(sessionPart.count)
        #expect(sessionPart.contains("\na=fingerprint:sha-256 ") && !mediaPart.contains("a=fingerprint:"), "\(answer)")
        let ufrag = answer.split(separator: "\n").first { $0.hasPrefix("a=ice-ufrag:") }.map { String($0.dropFirst(12)) } ?? ""
        #expect(ufrag.contains("/"), "ufrag \(ufrag)")
        #expect(answer.contains(" udp ") && answer.contains(" tcp ") && answer.contains(" 443 typ host tcptype passive ufrag \(ufrag)"), "\(answer)")
        #expect(answer.contains("a=setup:active") && !answer.contains("a=setup:passive") && !answer.contains("a=setup:actpass"))
        let pairs = call["selected_pairs"] as? [[String: Any]] ?? []
        #expect(!pairs.isEmpty && pairs.allSatisfy { ($0["remote"] as? [String: Any])?["protocol"] as? String == "udp" }, "\(pairs)")
        // Audio both ways: aiortc decoded Linnet's 300 Hz while the button was held, and
        // Linnet's --output holds the assistant's 440 Hz voice (1.5 s per response).
        let (_, heard) = try WAVFile.read16(peer.record)
        let heardWindows = fractionOfWindowsWithTone(heard, 300, rate: 48_000, rms: 0.2 * 32_767 / 2.0.squareRoot(), levelDB: 3) * Double(heard.count / 4_800)
        #expect(heardWindows >= 8, "aiortc heard 300 Hz in \(Int(heardWindows)) windows of 100 ms")
        let (_, back) = try WAVFile.read16(output)
        let voiceRMS = pow(10, -12.0 / 20) * 32_767 / 2.0.squareRoot() / 2.0.squareRoot()
        let voiceWindows = fractionOfWindowsWithTone(back, 440, rate: 48_000, rms: voiceRMS, levelDB: 1) * Double(back.count / 4_800)
        #expect(voiceWindows >= 10, "Linnet got the 440 Hz voice in \(Int(voiceWindows)) windows of 100 ms")
    }

    /// This machine has no GPIO chip: a required button is a clear error (69) naming what
    /// is missing; an optional one is an error in the log and the status file, and the
    /// agent goes on in voice mode, the microphone open, never muted for good (here to
    /// its first attempt, which max-attempts ends).
    @Test func missingButton() throws {
        let required = try Linnet.run(["run", "--whip", "http://127.0.0.1:9/whip", "--ptt", "GPIO17", "--ptt-required",
                                       "--capture", "none", "--playback", "none"])
        #expect(required.status == 69, "\(required.err)")
        #expect(required.err.contains("push-to-talk button") && required.err.contains("GPIO"), "\(required.err)")
        let status = temporary("missing-button-status.json")
        defer { unlink(status) }
        let optional = try Linnet.run(["run", "--whip", "http://127.0.0.1:9/whip", "--ptt", "GPIO17", "--max-attempts", "1",
                                       "--capture", "none", "--playback", "none", "--status-file", status])
        #expect(optional.err.contains("push-to-talk button GPIO17: no GPIO chips found") && optional.err.contains("running in voice mode instead"),
                "\(optional.err)")
        #expect(optional.err.contains("turn detection vad"), "\(optional.err)")
        #expect(optional.err.contains("giving up after 1 failed attempt"), "\(optional.err)")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: status))) as? [String: Any] ?? [:]
        #expect(json["muted"] as? Bool == false && json["turn_detection"] as? String == "vad", "\(json)")
        #expect((json["problem"] as? String)?.contains("push-to-talk button GPIO17") == true, "\(json)")
    }

    /// SIGTERM in the states that are not `connected` (the others end every test): while
    /// waiting out a backoff, and with the offer still unanswered by a server that
    /// accepted the connection and says nothing. Each ends: closed, exit 0. That it ends
    /// at once (and, connected to a provider that ignores the DELETE, at the close
    /// timeout) is asserted on the simulated clock by AgentTests'
    /// `AgentCoreConnectionTests.sigtermWhileBackingOffOrConnecting`.
    @Test func sigtermWhileBackingOffOrConnecting() throws {
        let (s, port) = boundTCPSocket()
        defer { close(s) }
        for listening in [false, true] {
            // Not listening: refused, backoff. Listening (never accepted, never read):
            // the kernel completes the handshake and the offer waits for an answer.
            if listening { #expect(listen(s, 4) == 0) }
            let agent = try LineProcess(Linnet.executable.path,
                                        ["run", "--whip", "http://127.0.0.1:\(port)/whip", "--capture", "none", "--playback", "none",
                                         "--events", "-"], stderr: temporary("agent-term.log"))
            if listening {
                #expect(agent.waitFor { event($0)?["type"] as? String == "session" } != nil)
            } else {
                #expect(agent.waitFor { $0.contains("\"retry\"") } != nil)
            }
            agent.signal(SIGTERM)
            #expect(agent.waitFor { isState($0, "closed") } != nil)
            agent.process.waitUntilExit()
            #expect(agent.process.terminationStatus == 0)
        }
    }

    /// A 401 is a configuration problem: "check the token", a long back-off, and with
    /// max-attempts the configuration exit status (78). The whole status → class → exit
    /// rule (and the back-off) is checked on the core by AgentTests'
    /// `AgentCoreFailureTests`; this is the wiring against an independent server.
    @Test func unauthorizedSaysCheckTheToken() throws {
        guard let python = InteropPeer.require() else { return }
        let peer = try InteropPeer(python: python, mode: "echo", extra: ["--token", "right"], name: "auth")
        let token = temporary("agent-token")
        try "wrong\n".write(toFile: token, atomically: true, encoding: .utf8)
        defer { unlink(token) }
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:\(peer.port)/whip", "--token-file", token, "--max-attempts", "1",
                                "--capture", "none", "--playback", "none"])
        _ = try peer.stop()
        #expect(r.status == 78, "\(r.err)")
        #expect(r.err.contains("check the token"))
        #expect(!r.err.contains("wrong"), "the token never appears in the log")
    }
}

@Suite(.serialized) struct WatchdogTests {
    /// READY and regular WATCHDOG=1 pings reach a fake NOTIFY_SOCKET while the capture
    /// thread runs; freezing the thread (the test seam) stops them; thawing resumes them.
    @Test func pingsStopWhenTheCaptureThreadFreezes() throws {
        let path = temporary("notify.sock")
        unlink(path)
        let receiver = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(receiver); unlink(path) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in path.utf8CString.withUnsafeBytes { raw.copyMemory(from: $0) } }
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(receiver, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(bound == 0)
        let notifier = try #require(SystemdNotifier(socketPath: path, watchdogUSec: "200000", watchdogPID: nil))
        #expect(notifier.watchdogInterval == .milliseconds(200))

        let input = temporary("watchdog-in.wav")
        defer { unlink(input) }
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16, samples: [Int32](repeating: 0, count: 4_800))
        final class NullSink: CaptureSink, @unchecked Sendable {
            func captureStarted(_ format: DeviceFormat) {}
            func captureStopped(_ format: DeviceFormat) {}
            func captured(_ samples: UnsafeRawBufferPointer, frames: Int, format: DeviceFormat, time: Instant) {}
        }
        let capture = try CaptureThread(input: .file(input, paced: true, loop: true), sink: NullSink())
        try capture.start()
        defer { capture.stop() }
        let loop = try EventLoop()
        let driver = WatchdogDriver(loop: loop, notifier: notifier, interval: WatchdogHealth.interval(watchdogMicroseconds: 200_000)) {
            PipelineProgress(captureFrames: Int(capture.counters.periods.load(ordering: .relaxed)), playbackFrames: nil)
        }
        _ = notifier.ready()
        driver.start()
        // What arrives on the socket, in order, with the phase it arrived in and the time.
        var received: [(phase: Int, text: String)] = []
        var phase = 0
        loop.watch(fd: receiver) { _ in
            var buffer = [UInt8](repeating: 0, count: 512)
            let n = recv(receiver, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if n > 0 {
                let text = String(decoding: buffer[0..<n], as: UTF8.self)
                received.append((phase, text))
            }
        }
        // Phase 0: 10 checks running; phase 1: frozen for 10 checks; phase 2: thawed for 10
        // checks. The phases follow the driver's checks, not the wall clock, so a loaded
        // machine that runs the loop's timers late stretches each phase instead of
        // shortening it (CI once saw two pings in a thawed second). The 60 s deadline only
        // ends a run that stopped checking at all, which the expectations then report.
        var checksAtFreeze = 0, checksWhileFrozen = 0, checksAtThaw = 0, withheldAtThaw = false
        func step() {
            switch phase {
            case 0 where driver.checks >= 10:
                phase = 1; checksAtFreeze = driver.checks; capture.freezeForTesting(true)
            case 1 where driver.checks - checksAtFreeze >= 10:
                phase = 2
                checksWhileFrozen = driver.checks - checksAtFreeze
                withheldAtThaw = driver.withheld
                checksAtThaw = driver.checks
                capture.freezeForTesting(false)
            case 2 where driver.checks - checksAtThaw >= 10:
                loop.stop()
                return
            default: break
            }
            _ = loop.schedule(after: .milliseconds(20)) { step() }
        }
        step()
        _ = loop.schedule(after: .seconds(60)) { loop.stop() }
        try loop.run()
        driver.stop()
        #expect(received.first?.text == "READY=1")
        let pings = received.filter { $0.text == "WATCHDOG=1" }
        let running = pings.filter { $0.phase == 0 }.count, frozen = pings.filter { $0.phase == 1 }.count
        let thawed = pings.filter { $0.phase == 2 }.count
        #expect(running >= 3, "pings while running: \(running)")
        // At most two pings can follow the freeze: one for periods delivered before it,
        // one for the period the thread was in the middle of (it checks the flag at the
        // top of its loop). After that, none for the rest of the frozen second.
        #expect(frozen <= 2, "pings while frozen: \(frozen)")
        // Ten checks of the frozen thread: the pings are being withheld.
        #expect(checksWhileFrozen >= 10 && withheldAtThaw, "checks while frozen: \(checksWhileFrozen), withheld: \(withheldAtThaw)")
        // Ten checks after thawing: the capture thread runs again, and pings resume.
        #expect(thawed >= 3, "pings after thawing: \(thawed) in \(driver.checks - checksAtThaw) checks")
        #expect(driver.withheld == false)
    }
}
