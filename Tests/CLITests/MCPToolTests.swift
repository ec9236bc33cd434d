import Testing
import Foundation

/// An MCP server made with the protocol's official Python SDK (Tests/Interop/mcp_server.py,
/// `mcp` from PyPI in the interop venv), or its hostile variant, as a subprocess.
final class MCPServerProcess {
    let lines: LineProcess
    let port: Int
    let log: String

    init(python: String, _ extra: [String] = [], name: String) throws {
        log = temporary("\(name)-requests.jsonl")
        unlink(log)
        lines = try LineProcess(python, ["-u", InteropPeer.packageRoot + "/Tests/Interop/mcp_server.py", "--log", log] + extra,
                                stderr: temporary("\(name)-mcp.log"))
        guard let ready = lines.waitFor({ $0.hasPrefix("READY ") }), let p = Int(ready.dropFirst(6)) else {
            throw NSError(domain: "mcp_server.py did not say READY", code: 1)
        }
        port = p
    }

    var url: String { "http://127.0.0.1:\(port)/mcp" }

    /// Each request the server saw: its JSON-RPC method, whether it carried the session
    /// id, the protocol version header and the Authorization header.
    func requests() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    deinit {
        // SIGKILL: uvicorn takes SIGTERM as a graceful shutdown that can wait on the
        // SDK's session tasks for good; nothing of the server's is wanted after the test.
        if lines.process.isRunning { lines.signal(SIGKILL) }
        lines.process.waitUntilExit()
        unlink(log)
    }
}

/// MCP servers' tools through `linnet tool` and `linnet check` (the paths `run` uses:
/// the handshake and `tools/list` at start, `tools/call` per call), against the SDK's
/// server in both of its answer styles, and against servers that refuse, hang or lie.
@Suite(.serialized) struct MCPToolTests {
    func toolsFile(_ servers: String, name: String) throws -> String {
        let path = temporary("\(name)-tools.json")
        try #"{"mcp": [\#(servers)]}"#.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// The SDK's server, answering with SSE streams and with plain JSON: the tool is
    /// listed under the server's name and called; every request after `initialize`
    /// carries the session id the server gave and the negotiated revision; the token
    /// goes with each.
    @Test(arguments: [false, true]) func anSDKServersToolIsListedAndCalled(json: Bool) throws {
        guard let python = InteropPeer.require() else { return }
        let name = json ? "mcp-json" : "mcp-sse"
        let server = try MCPServerProcess(python: python, ["--token", "ha-secret"] + (json ? ["--json"] : []), name: name)
        let token = temporary("\(name)-token")
        try "ha-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        defer { unlink(token) }
        let tools = try toolsFile(#"{"name": "home", "url": "\#(server.url)", "token-file": "\#(token)"}"#, name: name)
        defer { unlink(tools) }
        let r = try Linnet.run(["tool", "home_set_light", #"{"room": "hall", "on": true}"#, "--tools", tools])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.trimmingCharacters(in: .whitespacesAndNewlines) == "hall light on")
        let seen = server.requests()
        #expect(seen.map { $0["rpc"] as? String ?? $0["method"] as? String ?? "?" }
                == ["initialize", "notifications/initialized", "tools/list", "tools/call", "DELETE"] as [String],
                "\(seen)")
        #expect(seen.first?["session"] as? Bool == false)
        #expect(seen.dropFirst().allSatisfy { $0["session"] as? Bool == true && $0["version"] as? String == "2025-11-25" }, "\(seen)")
        #expect(seen.allSatisfy { $0["authorization"] as? String == "Bearer ha-secret" }, "\(seen)")
    }

    /// `check` asks each server as `run` would and names what it offers.
    @Test func checkListsAServersTools() throws {
        guard let python = InteropPeer.require() else { return }
        let server = try MCPServerProcess(python: python, name: "mcp-check")
        let tools = try toolsFile(#"{"name": "home", "url": "\#(server.url)", "allow": ["set_light", "broken"]}"#, name: "mcp-check")
        defer { unlink(tools) }
        let r = try Linnet.run(["check", "--tools", tools])
        let line = r.out.split(separator: "\n").first { $0.hasPrefix("mcp:") }.map(String.init) ?? ""
        #expect(line.contains("mcp home (\(server.url)): MCP 2025-11-25, 2 tools: home_set_light, home_broken"), "\(r.out)\n\(r.err)")
    }

    /// Refused, hung, lying and oversized: each costs the server's own tools or the one
    /// call, with a reason; the model's arguments are checked before anything is sent.
    @Test func hostileServersCostOnlyTheirOwnTools() throws {
        guard let python = InteropPeer.require() else { return }
        let good = try MCPServerProcess(python: python, name: "mcp-good")
        let locked = try MCPServerProcess(python: python, ["--token", "other"], name: "mcp-locked")
        let endless = try MCPServerProcess(python: python, ["--hostile", "stream-forever"], name: "mcp-endless")
        let tools = try toolsFile("""
            {"name": "home", "url": "\(good.url)", "timeout-ms": 1500},
            {"name": "locked", "url": "\(locked.url)"},
            {"name": "endless", "url": "\(endless.url)", "timeout-ms": 1000}
            """, name: "mcp-hostile")
        defer { unlink(tools) }

        // The good server's tool works beside the two that give nothing.
        let ok = try Linnet.run(["tool", "home_set_light", #"{"room": "attic", "on": false}"#, "--tools", tools])
        #expect(ok.status == 0 && ok.out.contains("attic light off"), "\(ok.err)")
        #expect(ok.err.contains("mcp locked") && ok.err.contains("401"), "\(ok.err)")
        // Streamed comments, never a response: cut at the deadline or the body limit.
        #expect(ok.err.contains("mcp endless"), "\(ok.err)")
        #expect(locked.requests().count == 1, "no more than the refused initialize: \(locked.requests())")

        // A tool of a server that refused is not there.
        let gone = try Linnet.run(["tool", "locked_set_light", #"{"room": "x", "on": true}"#, "--tools", tools])
        #expect(gone.status == 78, "\(gone.err)")

        // Arguments the server's schema refuses are refused here, before a call is sent.
        let calls = good.requests().filter { $0["rpc"] as? String == "tools/call" }.count
        let bad = try Linnet.run(["tool", "home_set_light", #"{"room": 5, "on": true}"#, "--tools", tools])
        #expect(bad.status == 65 && bad.err.contains("arguments.room: expected string"), "\(bad.err)")
        #expect(good.requests().filter { $0["rpc"] as? String == "tools/call" }.count == calls)

        // The tool's own failure (isError) reaches the caller as a failure with its text.
        let broken = try Linnet.run(["tool", "home_broken", #"{"x": 3}"#, "--tools", tools])
        #expect(broken.status == 69 && broken.err.contains("Error executing tool broken"), "\(broken.err)")
        // 10 MB of result: over the HTTP client's 1 MiB body limit, refused as it arrives.
        let big = try Linnet.run(["tool", "home_big", "{}", "--tools", tools])
        #expect(big.status == 69 && big.err.contains("larger than 1048576 bytes"), "\(big.err)")
        // A tool that never answers is given up at its timeout.
        let hung = try Linnet.run(["tool", "home_wait_forever", "{}", "--tools", tools])
        #expect(hung.status == 69 && (hung.err.contains("no answer") || hung.err.contains("did not finish")), "\(hung.err)")
    }
}
