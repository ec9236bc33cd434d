import Testing
import Foundation
import Glibc

/// "Turns that get lost or answered wrongly", end to end: push-to-talk turns
/// against the aiortc stand-in's OpenAI route where the service's timing is the
/// awkward one, and what Linnet sent (as the stand-in recorded it, with times) and
/// printed.
@Suite(.serialized) struct OpenAITurnTests {
    struct Run {
        let peer: InteropPeer
        let agent: LineProcess
        let log: String
        let cleanup: [String]
    }

    func start(_ extra: [String], name: String, linnet more: [String] = []) throws -> Run? {
        guard let python = InteropPeer.require() else { return nil }
        let peer = try InteropPeer(python: python, mode: "openai", extra: ["--ephemeral", "--token", "device-secret"] + extra, name: name)
        let token = temporary("\(name)-token"), input = temporary("\(name)-in.wav"), log = temporary("\(name)-run.log")
        try "device-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(300, amplitude: 0.2, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let base = "http://127.0.0.1:\(peer.port)"
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--openai", "--token-url", base + "/token", "--openai-url", base + "/v1/realtime/calls",
                                     "--token-file", token, "--turn-detection", "ptt", "--input", input, "--loop-input", "--playback", "none",
                                     "--events", "-", "--stats-seconds", "1"] + more, stderr: log)
        return Run(peer: peer, agent: agent, log: log, cleanup: [token, input, log])
    }

    func type(_ t: String, _ extra: (([String: Any]) -> Bool)? = nil) -> (String) -> Bool {
        { line in
            guard let e = event(line), e["type"] as? String == t else { return false }
            return extra?(e) ?? true
        }
    }

    func finalTranscript(_ role: String, _ text: String? = nil) -> (String) -> Bool {
        type("transcript") { $0["role"] as? String == role && $0["final"] as? Bool == true && (text == nil || $0["text"] as? String == text) }
    }

    /// A turn: press, 0.5 to 1.5 s of audio, release. The hold ends at the first stats
    /// tick at least 0.5 s after the press by the events' own clock (`t`): the first
    /// tick may come at once after a press made at any moment, and a press shorter than
    /// 150 ms commits nothing.
    func talk(_ agent: LineProcess) {
        agent.signal(SIGUSR1)
        let down = agent.waitFor(type("ptt") { $0["talking"] as? Bool == true }).flatMap(event)
        #expect(down != nil)
        let t0 = down?["t"] as? Double ?? 0
        #expect(agent.waitFor(type("stats") { ($0["t"] as? Double ?? 0) >= t0 + 0.5 }) != nil)
        agent.signal(SIGUSR1)
    }

    func end(_ r: Run) throws -> [String: Any] {
        r.agent.signal(SIGTERM)
        #expect(r.agent.waitFor { isState($0, "closed") } != nil)
        r.agent.process.waitUntilExit()
        #expect(r.agent.process.terminationStatus == 0)
        let report = try r.peer.stop()
        return (report["sessions"] as? [[String: Any]])?.first ?? [:]
    }

    /// The stand-in's usage, as it said it sent it in each response.done: the count of
    /// responses and the sum of one token figure (`input_token_details`, `audio_tokens`).
    struct SentUsage {
        let responses: [[String: Any]]
        func sum(_ details: String, _ figure: String) -> Double {
            Double(responses.reduce(0) { $0 + ((($1[details] as? [String: Any])?[figure] as? Int) ?? 0) })
        }
    }

    /// Two push-to-talk turns, each answered, then the end of the call: what the
    /// stand-in's report says of the usage it sent.
    func twoTurnsThenEnd(_ r: Run) throws -> SentUsage {
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        for _ in 0..<2 {
            talk(r.agent)
            #expect(r.agent.waitFor(finalTranscript("assistant", "Hello there, friend.")) != nil)
        }
        let sent = try end(r)["openai_usage_sent"] as? [[String: Any]] ?? []
        #expect(sent.count >= 2, "\(sent)")
        return SentUsage(responses: sent)
    }

    /// A function tool end to end: the stand-in's model calls `weather` (GA events,
    /// arguments streamed), Linnet checks the arguments against the tools file's schema,
    /// runs the program from tools-dir with them on stdin, and sends its output back as
    /// a `function_call_output`; the model's next turn reads it.
    @Test func anExecToolsOutputReachesTheModelsNextTurn() throws {
        let dir = temporary("openai-tools")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The program answers from its arguments, so the output proves they arrived.
        try "#!/usr/bin/python3\nimport json, sys\nprint('sunny in ' + json.load(sys.stdin)['city'], end='')\n"
            .write(toFile: dir + "/weather", atomically: true, encoding: .utf8)
        chmod(dir + "/weather", 0o755)
        try #"{"tools": [{"name": "weather", "description": "Today's weather for a city.", "exec": {"program": "weather"}, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}]}"#
            .write(toFile: dir + "/tools.json", atomically: true, encoding: .utf8)
        guard let r = try start(["--tool-call", #"weather:{"city":"Nice"}"#, "--reply", "Here is the weather."], name: "openai-tools",
                                linnet: ["--tools", dir + "/tools.json", "--tools-dir", dir]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        let ran = r.agent.waitFor(type("tool_run"))
        #expect((ran.flatMap { event($0) }?["name"] as? String) == "weather", "\(ran ?? "no tool_run")")
        let result = r.agent.waitFor(type("tool_result"))
        #expect((result.flatMap { event($0) }?["output"] as? String) == "sunny in Nice", "\(result ?? "no tool_result")")
        // The model's next turn, which read the output.
        #expect(r.agent.waitFor(finalTranscript("assistant", "Here is the weather. The tool said: sunny in Nice")) != nil)
        let session = try end(r)
        #expect(session["openai_tools_offered"] as? [String] == ["weather"])
        let outputs = session["openai_tool_outputs"] as? [[String: Any]] ?? []
        #expect(outputs.count == 1 && outputs.first?["output"] as? String == "sunny in Nice", "\(outputs)")
        let errors = (session["openai_events_sent_log"] as? [[String: Any]] ?? []).filter { $0["type"] as? String == "error" }
        #expect(errors.isEmpty, "the stand-in refused: \(errors)")
    }

    /// An http tool end to end: the stand-in's model calls `set_scene`, Linnet POSTs the
    /// arguments to the webhook with the bearer token of its token file, and the body
    /// the webhook answered reaches the model's next turn.
    @Test func anHTTPToolsAnswerReachesTheModelsNextTurn() throws {
        guard let python = InteropPeer.require() else { return }
        let log = temporary("openai-http-hook.jsonl"), token = temporary("openai-http-ha-token"), tools = temporary("openai-http-tools.json")
        unlink(log)
        defer { for f in [log, token, tools] { unlink(f) } }
        let hook = try LineProcess(python, ["-u", InteropPeer.packageRoot + "/Tests/Interop/http_tool_server.py", log], stderr: temporary("openai-http-hook.log"))
        defer { hook.signal(SIGKILL); hook.process.waitUntilExit() }
        guard let ready = hook.waitFor({ $0.hasPrefix("READY ") }), let port = Int(ready.dropFirst(6)) else { Issue.record("no webhook"); return }
        try "ha-long-lived-token\n".write(toFile: token, atomically: true, encoding: .utf8)
        try #"{"tools": [{"name": "set_scene", "description": "Sets a scene.", "http": {"url": "http://127.0.0.1:\#(port)/api/services/scene/turn_on", "token-file": "\#(token)"}, "parameters": {"type": "object", "properties": {"entity_id": {"enum": ["scene.evening", "scene.away"]}}, "required": ["entity_id"], "additionalProperties": false}}]}"#
            .write(toFile: tools, atomically: true, encoding: .utf8)
        guard let r = try start(["--tool-call", #"set_scene:{"entity_id":"scene.away"}"#, "--reply", "Done."], name: "openai-http",
                                linnet: ["--tools", tools]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        let answer = #"{"state": "on", "entity_id": "scene.away"}"#
        let result = r.agent.waitFor(type("tool_result"))
        #expect((result.flatMap { event($0) }?["output"] as? String) == answer, "\(result ?? "no tool_result")")
        #expect(r.agent.waitFor(finalTranscript("assistant", "Done. The tool said: " + answer)) != nil)
        _ = try end(r)
        let posts = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(posts.count == 1, "\(posts)")
        #expect(posts.first?["path"] as? String == "/api/services/scene/turn_on")
        #expect(posts.first?["authorization"] as? String == "Bearer ha-long-lived-token")
        #expect(posts.first?["body"] as? String == #"{"entity_id":"scene.away"}"#)
    }

    /// An MCP server's tool end to end, with the SDK's server (`mcp` from PyPI): listed
    /// at start and offered in session.update under the server's name; by the time the
    /// model calls it the server has forgotten that session (idle, as after a restart),
    /// so the call's 404 makes Linnet start a new one and call again; the output reaches
    /// the model's next turn.
    @Test func anMCPServersToolIsCalledAfterItsSessionWasForgotten() throws {
        guard let python = InteropPeer.require() else { return }
        let server = try MCPServerProcess(python: python, ["--idle", "0.5"], name: "openai-mcp")
        let tools = temporary("openai-mcp-tools.json")
        try #"{"mcp": [{"name": "home", "url": "\#(server.url)", "allow": ["set_light"]}]}"#.write(toFile: tools, atomically: true, encoding: .utf8)
        defer { unlink(tools) }
        guard let r = try start(["--tool-call", #"home_set_light:{"room":"kitchen","on":true}"#, "--reply", "Done."], name: "openai-mcp",
                                linnet: ["--tools", tools]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        // The session the start made is gone before the model calls.
        #expect(server.lines.waitFor { $0.hasPrefix("FORGOT ") } != nil)
        talk(r.agent)
        let result = r.agent.waitFor(type("tool_result"))
        #expect((result.flatMap { event($0) }?["output"] as? String) == "kitchen light on", "\(result ?? "no tool_result")")
        #expect(r.agent.waitFor(finalTranscript("assistant", "Done. The tool said: kitchen light on")) != nil)
        let session = try end(r)
        #expect(session["openai_tools_offered"] as? [String] == ["home_set_light"])
        let seen = server.requests().map { $0["rpc"] as? String ?? $0["method"] as? String ?? "?" }
        #expect(seen == ["initialize", "notifications/initialized", "tools/list", "tools/call",
                         "initialize", "notifications/initialized", "tools/call"], "\(seen)")
        let errors = (session["openai_events_sent_log"] as? [[String: Any]] ?? []).filter { $0["type"] as? String == "error" }
        #expect(errors.isEmpty, "the stand-in refused: \(errors)")
    }

    /// Fleet metrics through the real thing: Debian's prometheus-node-exporter serves
    /// the file Linnet wrote (its textfile collector refuses a file whose families,
    /// HELP or TYPE lines are inconsistent: `node_textfile_scrape_error`), and the
    /// figures match what the stand-in said it sent: the tokens of each response.done's
    /// usage, summed, and one session that connected once.
    @Test func metricsReachNodeExporterAndAddUp() throws {
        guard let exporter = NodeExporter.require(), let python = InteropPeer.require() else { return }
        let dir = temporary("metrics-dir")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        guard let r = try start(["--reply", "Hello there, friend."], name: "openai-metrics", linnet: ["--textfile-dir", dir]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        let usage = try twoTurnsThenEnd(r)
        let sum = usage.sum

        let scraped = try exporter.scrape(directory: dir, python: python)
        func value(_ series: String) -> Double? {
            scraped.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last!) }
        }
        #expect(value("node_textfile_scrape_error") == 0, "\(scraped)")
        #expect(value(#"linnet_provider_tokens_total{direction="input",modality="audio"}"#) == sum("input_token_details", "audio_tokens"))
        #expect(value(#"linnet_provider_tokens_total{direction="input",modality="text"}"#) == sum("input_token_details", "text_tokens"))
        #expect(value(#"linnet_provider_tokens_total{direction="output",modality="audio"}"#) == sum("output_token_details", "audio_tokens"))
        #expect(value(#"linnet_provider_tokens_total{direction="output",modality="text"}"#) == sum("output_token_details", "text_tokens"))
        #expect(value("linnet_provider_cached_tokens_total") == sum("input_token_details", "cached_tokens"))
        #expect(value("linnet_provider_responses_total") == Double(usage.responses.count))
        #expect(value("linnet_connects_total") == 1)
        #expect(value(#"linnet_session_starts_total{reason="initial"}"#) == 1)
        #expect(value(#"linnet_session_state{state="closed"}"#) == 1, "the last write is the closed session")
        #expect((value(#"linnet_rtp_packets_total{direction="sent"}"#) ?? 0) > 0)
        #expect(scraped.contains(#"linnet_build_info{version=""#))
        #expect((value("linnet_metrics_timestamp_seconds") ?? 0) > 1_700_000_000)
        // Written whole and renamed: nothing but the file is left in the directory.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["linnet.prom"])
    }

    /// The fleet's whole path with the real servers: Linnet writes linnet.prom, Debian's
    /// node_exporter serves it, Debian's Prometheus scrapes it every second during a call.
    /// Prometheus's HTTP API then answers with the call's known figures (one connected
    /// session while it runs; after it, the tokens the stand-in said it sent, one
    /// connect, the closed state), and every series the Grafana dashboard
    /// (board/grafana/linnet-fleet.json) names was scraped (the watchdog's only under
    /// systemd, which this run is not: they are on the virtual board).
    @Test func prometheusScrapesACall() throws {
        guard let exporter = NodeExporter.require(), let prometheus = PrometheusServer.require(),
              let python = InteropPeer.require() else { return }
        let dir = temporary("prom-textfiles")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let (served, exporterPort) = try exporter.serve(directory: dir)
        defer { served.stop() }
        let server = try prometheus.start(target: "127.0.0.1:\(exporterPort)", name: "prom")
        defer { server.stop() }
        guard let r = try start(["--reply", "Hello there, friend."], name: "openai-prom", linnet: ["--textfile-dir", dir]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        // Scraped while the call is up: the device is connected, and the scrape is good.
        #expect(try server.waitFor(#"linnet_session_state{state="connected"}"#, equals: 1, python: python), "never scraped connected")
        #expect(try server.value(#"up{job="linnet"}"#, python: python) == 1)
        // The path figures exist once RTCP has measured them (the first receiver report
        // with a round trip comes some seconds into the call): the call lasts until they
        // were scraped, or a loaded machine's short call could end before them.
        for series in ["linnet_rtt_seconds", "linnet_jitter_seconds", "linnet_remote_loss_ratio"] {
            #expect(try server.waitFor("count(last_over_time(\(series)[10m]))", equals: 1, python: python), "\(series) never scraped")
        }
        let usage = try twoTurnsThenEnd(r)
        let sum = usage.sum
        // The last file (the closed session) scraped: its figures are the call's.
        #expect(try server.waitFor(#"linnet_session_state{state="closed"}"#, equals: 1, python: python), "never scraped the closed state")
        #expect(try server.value("node_textfile_scrape_error", python: python) == 0)
        #expect(try server.value(#"linnet_provider_tokens_total{direction="input",modality="audio"}"#, python: python) == sum("input_token_details", "audio_tokens"))
        #expect(try server.value(#"linnet_provider_tokens_total{direction="output",modality="audio"}"#, python: python) == sum("output_token_details", "audio_tokens"))
        #expect(try server.value(#"linnet_provider_tokens_total{direction="output",modality="text"}"#, python: python) == sum("output_token_details", "text_tokens"))
        #expect(try server.value("linnet_provider_responses_total", python: python) == Double(usage.responses.count))
        #expect(try server.value("linnet_connects_total", python: python) == 1)
        let tokens = sum("input_token_details", "audio_tokens") + sum("input_token_details", "text_tokens")
            + sum("output_token_details", "audio_tokens") + sum("output_token_details", "text_tokens")
        #expect(try server.value("linnet_daily_tokens", python: python) == tokens, "the day's count is the responses' tokens")
        #expect((try server.value(#"linnet_network_bytes_total{direction="received"}"#, python: python) ?? 0) > 10_000)
        // The dashboard's series, each scraped at least once during the call.
        let names = try GrafanaDashboard.load().seriesNames
        #expect(names.count >= 20, "\(names)")
        for name in names where !name.hasPrefix("linnet_watchdog_") {
            let seen = try server.value("count(last_over_time({__name__=\"\(name)\"}[10m]))", python: python)
            #expect((seen ?? 0) > 0, "the dashboard's \(name) was never scraped")
        }
    }

    /// A daily token cap through the binary: once the responses' tokens reach it the
    /// session is closed and the state is `paused` (events, status file); the day's
    /// count is in state-dir. A restart with the same state-dir starts paused and sends
    /// the provider nothing; `linnet check` says the cap is reached.
    @Test func aDailyTokenCapHoldsAcrossARestart() throws {
        let state = temporary("cap-state"), status = temporary("cap-status.json")
        try? FileManager.default.removeItem(atPath: state)
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: state); unlink(status) }
        let caps = ["--max-daily-tokens", "50", "--state-dir", state, "--status-file", status]
        guard let r = try start(["--reply", "Hello there, friend."], name: "openai-cap", linnet: caps) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        #expect(r.agent.waitFor(type("cap") { $0["reached"] as? Bool == true }) != nil)
        #expect(r.agent.waitFor { isState($0, "paused") } != nil)
        // The status file is written just after the event line: read it after the next one.
        #expect(r.agent.waitFor(type("stats")) != nil)
        let statusText = (try? String(contentsOfFile: status, encoding: .utf8)) ?? ""
        #expect(statusText.contains(#""state":"paused""#) && statusText.contains("max-daily-tokens reached"), "\(statusText)")
        _ = try end(r)
        let kept = try String(contentsOfFile: state + "/daily-usage.json", encoding: .utf8)
        let tokens = (try JSONSerialization.jsonObject(with: Data(kept.utf8)) as? [String: Any])?["tokens"] as? Int ?? 0
        #expect(tokens >= 50, "\(kept)")

        // Restarted: paused from the start, no offer made.
        guard let again = try start(["--reply", "Hello there, friend."], name: "openai-cap2", linnet: caps) else { return }
        defer { for f in again.cleanup { unlink(f) } }
        #expect(again.agent.waitFor { isState($0, "paused") } != nil)
        let call = try end(again)
        #expect(call.isEmpty || (call["ever_connected"] as? Bool) != true, "no session while capped: \(call)")
        let check = try Linnet.run(["check", "--max-daily-tokens", "50", "--state-dir", state, "--capture", "none", "--playback", "none"])
        #expect(check.out.contains("caps: WARNING, max-daily-tokens reached"), "\(check.out)")
    }

    /// Sessions on demand through the binary and the stand-in: no session until the
    /// press (state paused, the stand-in offered nothing); the press connects one, and
    /// the turn the stand-in commits holds all the audio from the press to the release
    /// (the backlog kept while connecting), not the press less the connection time;
    /// the reply comes; idle-seconds later the session is closed.
    @Test func onDemandTheTurnHoldsTheAudioFromThePress() throws {
        guard let r = try start(["--reply", "Hello there, friend."], name: "openai-ondemand",
                                linnet: ["--session", "on-demand", "--idle-seconds", "5"]) else { return }
        defer { for f in r.cleanup { unlink(f) } }
        #expect(r.agent.waitFor { isState($0, "paused") } != nil, "no session until the press")
        r.agent.signal(SIGUSR1)
        let down = try #require(r.agent.waitFor(type("ptt") { $0["talking"] as? Bool == true }).flatMap(event))
        #expect(r.agent.waitFor { isState($0, "connecting") } != nil)
        let first = try #require(r.agent.waitFor(type("on_demand") { $0["first_packet_ms"] != nil }).flatMap(event))
        let t0 = down["t"] as? Double ?? 0
        #expect(r.agent.waitFor(type("stats") { ($0["t"] as? Double ?? 0) >= t0 + 0.5 }) != nil)
        r.agent.signal(SIGUSR1)
        let up = try #require(r.agent.waitFor(type("ptt") { $0["talking"] as? Bool == false }).flatMap(event))
        #expect(r.agent.waitFor(finalTranscript("assistant", "Hello there, friend.")) != nil)
        #expect(r.agent.waitFor { isState($0, "paused") } != nil, "closed after idle-seconds")
        let call = try end(r)
        let held = (up["t"] as? Double ?? 0) - (down["t"] as? Double ?? 0)
        let sent = call["openai_events_sent_log"] as? [[String: Any]] ?? []
        let committed = sent.first { $0["type"] as? String == "conversation.item.input_audio_transcription.completed" }?["seconds"] as? Double ?? 0
        let waited = Double(first["first_packet_ms"] as? Int ?? 0) / 1000
        print("on demand (stand-in): press → first packet \(Int(waited * 1000)) ms; held \(String(format: "%.2f", held)) s, the turn committed \(String(format: "%.2f", committed)) s")
        // All of the hold (its frames at 20 ms granularity, and the release's tail on top).
        #expect(committed >= held - 0.04, "committed \(committed) s of a \(held) s hold (\(waited) s to connect)")
    }

    /// Without push-to-talk nothing would start a session on demand: a configuration
    /// error, said before anything is opened.
    @Test func onDemandNeedsPushToTalk() throws {
        let r = try Linnet.run(["run", "--whip", "http://127.0.0.1:9/whip", "--session", "on-demand", "--capture", "none", "--playback", "none"])
        #expect(r.status == 78 && r.err.contains("session = on-demand needs push-to-talk"), "\(r.status) \(r.err)")
    }

    /// Barge-in while a long answer is being generated: Linnet cancels it, and the
    /// stand-in (`--cancel-done-after 1.5`) keeps the cancelled response active for
    /// 1.5 s, refusing any `response.create` before its `response.done` with
    /// `conversation_already_has_active_response`. The second turn is committed inside
    /// that window; Linnet holds its create until the `response.done` and the turn is
    /// answered, with no error on the wire.
    @Test func createWaitsForTheCancelledResponsesDone() throws {
        let reply = Array(repeating: "word", count: 40).joined(separator: " ")  // 2 s of deltas
        guard let r = try start(["--cancel-done-after", "1.5", "--reply", reply], name: "oai-race") else { return }
        defer { r.cleanup.forEach { unlink($0) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        #expect(r.agent.waitFor(finalTranscript("user")) != nil)
        #expect(r.agent.waitFor(type("speaking") { $0["role"] as? String == "assistant" && $0["on"] as? Bool == true }) != nil)
        talk(r.agent)  // over the answer
        #expect(r.agent.waitFor(finalTranscript("assistant", reply)) != nil, "the second turn was answered")
        let call = try end(r)
        let received = call["openai_events_received"] as? [[String: Any]] ?? []
        let sent = call["openai_events_sent_log"] as? [[String: Any]] ?? []
        func at(_ list: [[String: Any]], _ match: ([String: Any]) -> Bool) -> [Double] { list.filter(match).compactMap { $0["t"] as? Double } }
        let cancels = at(received) { $0["type"] as? String == "response.cancel" }
        let commits = at(received) { $0["type"] as? String == "input_audio_buffer.commit" }
        let creates = at(received) { $0["type"] as? String == "response.create" }
        let cancelledDone = at(sent) { $0["type"] as? String == "response.done" && $0["status"] as? String == "cancelled" }
        #expect(cancels.count == 1 && commits.count == 2 && creates.count == 2 && cancelledDone.count == 1,
                "cancel \(cancels) commit \(commits) create \(creates) done(cancelled) \(cancelledDone)")
        // The race happened: the second turn was committed while the cancelled response
        // was still active, and its create went out only after that response's done.
        if commits.count == 2, creates.count == 2, let done = cancelledDone.first {
            #expect(commits[1] < done, "second commit at \(commits[1]) s, cancelled response done at \(done) s")
            #expect(creates[1] >= done, "second create at \(creates[1]) s, before the done at \(done) s")
        }
        let refusals = sent.filter { $0["type"] as? String == "error" }.compactMap { $0["code"] as? String }
        #expect(refusals.isEmpty, "the stand-in refused: \(refusals)")
        // The press cut the first answer's voice: the stand-in was told how much of its
        // item the speaker had played (the press comes as it starts: little or nothing),
        // never more than it had sent (it refuses more).
        let truncates = call["openai_truncates"] as? [[String: Any]] ?? []
        #expect(truncates.count == 1, "\(truncates)")
        if let t = truncates.first, let end = t["audio_end_ms"] as? Int, let sentMS = t["sent_ms"] as? Int {
            #expect(end >= 0 && end <= sentMS + 20, "audio_end_ms \(end), \(sentMS) ms sent")
        }
    }

    /// The user's transcription completes after the assistant has answered it
    /// (`--late-transcript 1`: OpenAI's guide says completions may come in any order).
    /// Linnet still prints `user:` before the `assistant:` line answering it, in its
    /// events and in its log.
    @Test func userLineComesBeforeTheAnswerToIt() throws {
        guard let r = try start(["--late-transcript", "1"], name: "oai-late") else { return }
        defer { r.cleanup.forEach { unlink($0) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        let user = r.agent.waitFor(finalTranscript("user"))
        #expect(user.flatMap { event($0)?["text"] as? String } == "hello linnet")
        #expect(!r.agent.lines.contains(where: finalTranscript("assistant")), "an assistant line came before the user line")
        #expect(r.agent.waitFor(finalTranscript("assistant", "Hi, this is the test provider.")) != nil)
        let call = try end(r)
        // On the wire the answer did come first.
        let sent = call["openai_events_sent_log"] as? [[String: Any]] ?? []
        let answered = sent.firstIndex { ($0["type"] as? String)?.hasSuffix("output_audio_transcript.done") == true }
        let transcribed = sent.firstIndex { $0["type"] as? String == "conversation.item.input_audio_transcription.completed" }
        #expect(answered != nil && transcribed != nil && answered! < transcribed!, "\(sent.map { $0["type"] ?? "" })")
        let text = (try? String(contentsOfFile: r.log, encoding: .utf8)) ?? ""
        let u = text.range(of: "user: hello linnet"), a = text.range(of: "assistant: Hi, this is the test provider.")
        #expect(u != nil && a != nil && u!.lowerBound < a!.lowerBound, "\(text)")
    }
}

/// Debian's prometheus-node-exporter, with only its textfile collector, on a free port.
/// Debian's Prometheus server, scraping one target every second, with its own empty
/// storage; queried through its HTTP API (`/api/v1/query`).
struct PrometheusServer {
    let path: String

    static func require() -> PrometheusServer? {
        let p = "/usr/bin/prometheus"
        if FileManager.default.isExecutableFile(atPath: p) { return PrometheusServer(path: p) }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("prometheus is not installed (make setup installs it)")
        }
        return nil
    }

    final class Running {
        let process: LineProcess
        let port: Int
        let dir: String
        init(process: LineProcess, port: Int, dir: String) {
            self.process = process
            self.port = port
            self.dir = dir
        }
        func stop() {
            process.stop()
            try? FileManager.default.removeItem(atPath: dir)
        }

        /// The instant query's single value (nil: no series). Waits, bounded, for the
        /// answer with `equals` when given (the scrape is every second).
        func query(_ expr: String, equals: Double?, python: String) throws -> Double? {
            let script = """
            import json, sys, time, urllib.parse, urllib.request
            url = 'http://127.0.0.1:\(port)/api/v1/query?' + urllib.parse.urlencode({'query': sys.argv[1]})
            want = None if sys.argv[2] == '-' else float(sys.argv[2])
            deadline = time.monotonic() + 30
            while True:
                r = json.load(urllib.request.urlopen(url, timeout=10))['data']['result']
                v = float(r[0]['value'][1]) if len(r) == 1 else None
                if want is None or v == want or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            print('none' if v is None else repr(v), flush=True)
            """
            let p = try LineProcess(python, ["-c", script, expr, equals.map { String($0) } ?? "-"], stderr: temporary("prom-query.log"))
            defer { p.stop() }
            guard let line = p.nextLine() else { throw NSError(domain: "prometheus query failed: \(expr)", code: 1) }
            return Double(line)
        }
        func value(_ expr: String, python: String) throws -> Double? { try query(expr, equals: nil, python: python) }
        func waitFor(_ expr: String, equals: Double, python: String) throws -> Bool { try query(expr, equals: equals, python: python) == equals }
    }

    func start(target: String, name: String) throws -> Running {
        let dir = temporary("\(name)-prometheus")
        try? FileManager.default.removeItem(atPath: dir)
        try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true)
        try """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: linnet
                static_configs:
                  - targets: ['\(target)']
            """.write(toFile: dir + "/prometheus.yml", atomically: true, encoding: .utf8)
        let (s, port) = boundTCPSocket()
        close(s)
        let p = try LineProcess("/bin/sh", ["-c", "exec \(path) --config.file=\(dir)/prometheus.yml --storage.tsdb.path=\(dir)/data --web.listen-address=127.0.0.1:\(port) 2>&1"],
                                stderr: temporary("\(name)-prometheus.log"))
        guard p.waitFor({ $0.contains("Server is ready to receive web requests") }) != nil else {
            p.stop()
            throw NSError(domain: "prometheus did not start", code: 1)
        }
        return Running(process: p, port: port, dir: dir)
    }
}

/// board/grafana/linnet-fleet.json: the metric names its panels query.
struct GrafanaDashboard {
    let json: [String: Any]

    static func load() throws -> GrafanaDashboard {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("board/grafana/linnet-fleet.json").path
        return GrafanaDashboard(json: try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any] ?? [:])
    }

    var expressions: [String] {
        (json["panels"] as? [[String: Any]] ?? []).flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
    }

    /// Every `linnet_…` name in the panels' expressions.
    var seriesNames: [String] {
        var names = Set<String>()
        for e in expressions {
            var rest = Substring(e)
            while let r = rest.range(of: "linnet_") {
                let tail = rest[r.lowerBound...]
                let name = tail.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
                names.insert(String(name))
                rest = tail.dropFirst(name.count)
            }
        }
        return names.sorted()
    }
}

struct NodeExporter {
    let path: String

    /// node_exporter serving `directory`'s textfiles on a free port until stopped.
    func serve(directory: String) throws -> (LineProcess, Int) {
        let (s, port) = boundTCPSocket()
        close(s)
        let exporter = try LineProcess("/bin/sh", ["-c", "exec \(path) --web.listen-address=127.0.0.1:\(port) --collector.disable-defaults --collector.textfile --collector.textfile.directory=\(directory) 2>&1"],
                                       stderr: temporary("node-exporter-serve.log"))
        guard exporter.waitFor({ $0.contains("Listening on") }) != nil else {
            exporter.stop()
            throw NSError(domain: "node_exporter did not start", code: 1)
        }
        return (exporter, port)
    }

    /// The binary, or nil to skip; on CI a missing one is a failure (scripts/setup.sh
    /// installs it).
    static func require() -> NodeExporter? {
        let p = "/usr/bin/prometheus-node-exporter"
        if FileManager.default.isExecutableFile(atPath: p) { return NodeExporter(path: p) }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("prometheus-node-exporter is not installed (make setup installs it)")
        }
        return nil
    }

    /// One scrape of `/metrics` with `directory` as the textfile directory.
    func scrape(directory: String, python: String) throws -> String {
        let (exporter, port) = try serve(directory: directory)
        defer { exporter.stop() }
        let get = try LineProcess(python, ["-c", "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:\(port)/metrics', timeout=10).read().decode())"],
                                  stderr: temporary("node-exporter-get.log"))
        var lines: [String] = []
        while let l = get.nextLine() { lines.append(l) }
        get.stop()
        return lines.joined(separator: "\n")
    }
}
