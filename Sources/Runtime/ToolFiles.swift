// The tools file and what it names, read once at start: a file that cannot be used
// stops the start with the tool and the fix (exit 78), never a device that half works.
import CSystem
import Wire
import Platform
import JSON
import Agent
import Audio

public struct LoadedTools: Sendable {
    public let specs: [ToolSpec]
    /// The MCP servers whose tools are asked for at start (MCPClients.discover).
    public let servers: [MCPServerSpec]
    /// Each http tool's bearer token, by token file (read now: the service may not be
    /// able to read /etc/linnet later, after it dropped privileges).
    public let tokens: [(file: String, credential: String)]

    public static let none = LoadedTools(specs: [], servers: [], tokens: [])

    /// Reads and judges `path` (JSON, at most 256 KiB); `directory` is where exec tools'
    /// programs must be.
    public static func load(_ path: String, directory: String) throws(CLIFailure) -> LoadedTools {
        let bytes: [UInt8]
        do throws(FileReadError) { bytes = try readRegularFile(path, limit: 256 << 10).bytes } catch {
            throw CLIFailure(.config, "cannot read the tools file \(error)")
        }
        let json: JSONValue
        do throws(JSONError) { json = try JSONValue.parse(bytes) } catch {
            throw CLIFailure(.config, "the tools file \(path) is not JSON: \(error)")
        }
        let specs: [ToolSpec]
        do throws(ToolSpecError) { specs = try ToolSpec.parse(json) } catch {
            throw CLIFailure(.config, "the tools file \(path): \(error)")
        }
        let servers: [MCPServerSpec]
        do throws(ToolSpecError) { servers = try MCPServerSpec.parse(json) } catch {
            throw CLIFailure(.config, "the tools file \(path): \(error)")
        }
        var tokens: [(file: String, credential: String)] = []
        var tokenFiles: [(owner: String, file: String)] = []
        for spec in specs { if case .http(_, let file?) = spec.action { tokenFiles.append(("tool '\(spec.name)'", file)) } }
        for server in servers { if let file = server.tokenFile { tokenFiles.append(("mcp \(server.name)", file)) } }
        for (owner, file) in tokenFiles {
            if !tokens.contains(where: { $0.file.bytesEqual(file) }) {
                let token: [UInt8]
                do throws(FileReadError) { token = try readRegularFile(file, limit: 8 << 10).bytes } catch {
                    throw CLIFailure(.config, "the tools file \(path): \(owner): cannot read its token file \(error)")
                }
                // One line: trailing whitespace and the newline an editor adds go.
                var t = token[...]
                while let last = t.last, last == 10 || last == 13 || last == 32 || last == 9 { t = t.dropLast() }
                guard !t.isEmpty, !t.contains(10), !t.contains(13) else {
                    throw CLIFailure(.config, "the tools file \(path): \(owner): the token file \(file) must hold one line")
                }
                tokens.append((file, String(decoding: t, as: UTF8.self)))
            }
        }
        return LoadedTools(specs: specs, servers: servers, tokens: tokens)
    }

    /// A gpio tool on the button's or an LED's line, as the configuration names them:
    /// the kernel would refuse the tool's request while Linnet holds the line (EBUSY),
    /// so it is a configuration error now, not a failed call later.
    public func lineConflict(ptt: GPIOLine?, leds: [GPIOLine]) -> String? {
        for spec in specs {
            guard case .gpio(let line, _) = spec.action else { continue }
            if let ptt, ptt == line { return "tool '\(spec.name)': \(line) is the push-to-talk button's line" }
            if leds.contains(line) { return "tool '\(spec.name)': \(line) is a status LED's line" }
        }
        return nil
    }

    /// What each tool would touch, one line each, for `linnet check` and the start's
    /// log; `ok` false for a program that would not run as things stand.
    public func summary(directory: String) -> [(text: String, ok: Bool)] {
        specs.map { spec in
            switch spec.action {
            case .gpio(let line, let pulse):
                return ("\(spec.name): gpio \(line) " + (pulse.map { "pulse \($0.milliseconds) ms" } ?? "set on/off"), true)
            case .exec(let program):
                let path = directory + "/" + program
                var st = stat()
                let state: String
                if lstat(path, &st) != 0 {
                    state = "missing"
                } else if st.st_mode & UInt32(S_IFMT) != UInt32(S_IFREG) {
                    state = "not a regular file: it will not be run"
                } else {
                    state = access(path, X_OK) == 0 ? "ok" : "not executable by this user"
                }
                return ("\(spec.name): exec \(path) (\(state)), \(spec.timeout.milliseconds) ms at most", state.bytesEqual("ok"))
            case .http(let url, let token):
                return ("\(spec.name): POST \(url)" + (token != nil ? " with its bearer token" : ""), true)
            case .mcp(let server, let tool):
                return ("\(spec.name): \(tool) on the MCP server \(server)", true)
            }
        }
    }
}

extension LoadedTools {
    /// `linnet tool NAME 'JSON'`: one call by hand, through the checks and the runner a
    /// model's call goes through (schema, timeout, output cap, clean environment); the
    /// result, or why not: 65 for arguments the schema refuses, 69 for a tool that
    /// failed or timed out, 78 for a tool the file does not have.
    public func runByHand(_ name: String, arguments: String, directory: String, caFile: String?) throws(CLIFailure) -> String {
        let loop: EventLoop
        do throws(SystemError) { loop = try EventLoop() } catch { throw CLIFailure(.software, error.description) }
        defer { loop.close() }
        let http: HTTPClient
        do throws(HTTPClientError) { http = try HTTPClient(loop: loop, caFile: caFile, pins: []) } catch {
            throw CLIFailure(.config, error.description)
        }
        // An MCP server's tools are known only once it is asked (never for a tool of the
        // file's own).
        var all = specs
        var mcp: MCPClients?
        if !servers.isEmpty && !specs.contains(where: { $0.name.bytesEqual(name) }) {
            let clients = MCPClients(servers, http: http, tokens: tokens)
            let found = clients.discover(loop: loop)
            for line in found.lines where !line.ok { Log.warning(line.text) }
            all += found.tools
            mcp = clients
        }
        guard all.contains(where: { $0.name.bytesEqual(name) }) else {
            let known = all.map { $0.name }.joined(separator: ", ")
            throw CLIFailure(.config, "no tool named '\(name)' in the tools file" + (known.isEmpty ? "" : " (it has: \(known))"))
        }
        var calls = ToolCalls(all)
        let run: ToolRun
        switch calls.call(callID: "by-hand", name: name, arguments: arguments, now: loop.now) {
        case .run(let r): run = r
        case .refuse(let why): throw CLIFailure(.dataError, why)
        }
        let runner = ToolRunner(loop: loop, directory: directory, http: http, tokens: tokens)
        runner.mcp = mcp
        defer { mcp?.close(loop: loop) }
        var result: ToolResult?
        runner.start(run) { result = $0 }
        let deadline = loop.now + run.spec.timeout
        while result == nil {
            let now = loop.now
            if now >= deadline {
                runner.cancel(run.id)
                // Its end, so no process outlives the command (a second at most: it was
                // sent SIGKILL).
                let until = now + .seconds(1)
                while runner.killedNotReaped > 0 && loop.now < until { try? loop.runOnce(maxWait: .milliseconds(50)) }
                throw CLIFailure(.unavailable, "'\(name)' did not finish within \(run.spec.timeout.milliseconds) ms and was stopped")
            }
            do throws(SystemError) { try loop.runOnce(maxWait: deadline - now) } catch { throw CLIFailure(.software, error.description) }
        }
        guard let answer = calls.finished(run.id, result!) else { throw CLIFailure(.software, "the run was lost") }
        if case .failed(let why) = result! { throw CLIFailure(.unavailable, why) }
        return answer.output
    }
}
