// Runs the tools the agent core hands over (`.runTool`), on the loop but never blocking
// it: a program's pipes and its end are watched like sockets, an HTTP tool is one more
// exchange, a GPIO pulse is a timer. Each run reports once (`done`), unless cancelled.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import Agent
import Audio
import Devices

public final class ToolRunner {
    let loop: EventLoop
    /// Where `exec` tools' programs are (`tools-dir`): a program is named by file name.
    let directory: String
    let http: HTTPClient
    let gpio: any GPIOLibrary
    /// Bearer tokens of `http` tools, read once at start, by token file.
    let tokens: [(file: String, credential: String)]
    /// The tools file's MCP servers (their sessions outlive a call).
    var mcp: MCPClients?
    private var running: [Int: Running] = [:]
    /// Lines a set tool drove, held until Linnet stops: a released line is the
    /// kernel's again, and on a Raspberry Pi its pin goes back to an input
    /// (pinctrl-bcm2835's free), so the light a set turned on would go out at once.
    private var held: [(id: GPIOLine, line: any GPIORequestedLine)] = []
    /// Programs killed on a cancel, kept until their end is seen and they are reaped
    /// (no zombie is left behind, and `linnet tool` waits for it before exiting).
    private var reaping: [Int: Running] = [:]
    var killedNotReaped: Int { reaping.count }

    final class Running {
        let id: Int
        let done: (ToolResult) -> Void
        var pid: Int32 = 0
        var stdout: Int32 = -1
        var pidfd: Int32 = -1
        var outputSource: EventLoop.SourceID?
        var endSource: EventLoop.SourceID?
        var output: [UInt8] = []
        var limit = 0
        var truncated = false
        var exitCode: Int32?
        var outputClosed = false
        var call: HTTPCall?
        var mcp: MCPClient.Handle?
        var line: (any GPIORequestedLine)?
        var timer: EventLoop.TimerID?
        init(id: Int, done: @escaping (ToolResult) -> Void) {
            self.id = id
            self.done = done
        }
    }

    init(loop: EventLoop, directory: String, http: HTTPClient, gpio: any GPIOLibrary = LibGPIOD(),
         tokens: [(file: String, credential: String)] = []) {
        self.loop = loop
        self.directory = directory
        self.http = http
        self.gpio = gpio
        self.tokens = tokens
    }

    /// Starts `run`; `done` is called once with its result, from the loop.
    func start(_ run: ToolRun, done: @escaping (ToolResult) -> Void) {
        let r = Running(id: run.id, done: done)
        running[run.id] = r
        switch run.spec.action {
        case .exec(let program): exec(r, program: program, spec: run.spec, arguments: run.arguments)
        case .http(let url, let tokenFile): post(r, url: url, tokenFile: tokenFile, spec: run.spec, arguments: run.arguments)
        case .gpio(let line, let pulse): drive(r, line: line, pulse: pulse, arguments: run.arguments)
        case .mcp(let server, let tool): callMCP(r, server: server, tool: tool, spec: run.spec, arguments: run.arguments)
        }
    }

    /// Stops run `id` (the core answered it as timed out): the program's process group
    /// is killed, an exchange cancelled, a line set back low. No result follows.
    func cancel(_ id: Int) {
        guard let r = running.removeValue(forKey: id) else { return }
        if r.pid > 0 && r.exitCode == nil {
            kill(-r.pid, SIGKILL)
            if r.endSource != nil {
                // Its output is not wanted; its end is, to reap it (`reaped`).
                if let s = r.outputSource { loop.unwatch(s) }
                r.outputSource = nil
                if r.stdout >= 0 { close(r.stdout) }
                r.stdout = -1
                r.outputClosed = true
                reaping[r.id] = r
                return
            }
        }
        r.call?.cancel()
        r.mcp?.cancel()
        if let line = r.line {
            // Best effort: a line that refuses now refused its first write too, and that
            // was reported.
            try? line.setValue(false)
            line.release()
        }
        if let t = r.timer { loop.cancel(t) }
        release(r, reap: true)
    }

    /// Every run stopped (the process ends).
    func stopAll() {
        for id in Array(running.keys) { cancel(id) }
        for h in held { h.line.release() }
        held = []
    }

    private func finish(_ r: Running, _ result: ToolResult) {
        guard running.removeValue(forKey: r.id) != nil else { return }
        release(r, reap: false)
        r.done(result)
    }

    private func release(_ r: Running, reap: Bool) {
        if let s = r.outputSource { loop.unwatch(s) }
        if let s = r.endSource { loop.unwatch(s) }
        r.outputSource = nil
        r.endSource = nil
        if r.stdout >= 0 { close(r.stdout) }
        r.stdout = -1
        if r.pidfd >= 0 { close(r.pidfd) }
        r.pidfd = -1
        if reap && r.pid > 0 && r.exitCode == nil {
            // Killed with SIGKILL: it ends at once; reap it when it has (a zombie would
            // otherwise stay until Linnet exits).
            let pid = r.pid
            var code: Int32 = 0
            if csystem_reap(pid, &code) == 0 {
                _ = loop.schedule(after: .milliseconds(100)) { var c: Int32 = 0; _ = csystem_reap(pid, &c) }
            }
        }
    }

    // MARK: exec

    private func exec(_ r: Running, program: String, spec: ToolSpec, arguments: JSONValue) {
        let path = directory + "/" + program
        // The program must be a regular file in the directory itself: a symlink there
        // could point anywhere (lstat does not follow it).
        var st = stat()
        guard lstat(path, &st) == 0 else {
            return finish(r, .failed("the program \(path) is missing: \(SystemError.message(csystem_errno()))"))
        }
        guard st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else {
            return finish(r, .failed("the program \(path) is not a regular file (a symlink or a directory is not run)"))
        }
        guard access(path, X_OK) == 0 else {
            return finish(r, .failed("the program \(path) is not executable by this user"))
        }
        var input: [Int32] = [-1, -1], output: [Int32] = [-1, -1]
        guard pipe(&input) == 0 else { return finish(r, .failed("no pipe: \(SystemError.message(csystem_errno()))")) }
        guard pipe(&output) == 0 else {
            close(input[0]); close(input[1])
            return finish(r, .failed("no pipe: \(SystemError.message(csystem_errno()))"))
        }
        // Close-on-exec on all four (the child gets its ends by dup2, which clears it),
        // and our end of its output non-blocking: the loop reads what is there.
        for fd in input + output { _ = csystem_fcntl_int(fd, F_SETFD, FD_CLOEXEC) }
        _ = csystem_fcntl_int(output[0], F_SETFL, csystem_fcntl_int(output[0], F_GETFL, 0) | O_NONBLOCK)
        // stderr goes to the journal with Linnet's own: a tool's diagnostics are its
        // author's to read there.
        let err: Int32 = 2
        var pid: Int32 = 0
        let environment = ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "LINNET_TOOL=\(spec.name)"]
        let code = withCStrings([path]) { argv in
            withCStrings(environment) { envp in
                csystem_spawn(path, argv, envp, input[0], output[1], err, directory, &pid)
            }
        }
        close(input[0])
        close(output[1])
        guard code == 0 else {
            close(input[1]); close(output[0])
            return finish(r, .failed("could not start \(path): \(SystemError.message(code))"))
        }
        r.pid = pid
        r.stdout = output[0]
        r.limit = spec.maxOutputBytes
        // The arguments on stdin, then end of file. Small (ToolCalls caps them far below
        // a pipe's 64 KiB), so one write does it; a program that does not read them
        // does not block us either (the pipe holds them).
        let body = arguments.serialized()
        _ = body.withUnsafeBytes { write(input[1], $0.baseAddress, $0.count) }
        close(input[1])
        r.outputSource = loop.watch(fd: r.stdout) { [unowned(unsafe) self] _ in self.readOutput(r) }
        let pidfd = csystem_pidfd_open(pid)
        if pidfd >= 0 {
            r.pidfd = pidfd
            r.endSource = loop.watch(fd: pidfd) { [unowned(unsafe) self] _ in self.reaped(r) }
        } else {
            // No pidfd (a kernel before 5.3): look for the end every 50 ms.
            poll(r)
        }
    }

    private func poll(_ r: Running) {
        r.timer = loop.schedule(after: .milliseconds(50)) { [unowned(unsafe) self] in
            guard self.running[r.id] === r else { return }
            self.reaped(r)
            if r.exitCode == nil { self.poll(r) }
        }
    }

    private func readOutput(_ r: Running) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while r.stdout >= 0 {
            let n = buffer.withUnsafeMutableBytes { read(r.stdout, $0.baseAddress, $0.count) }
            if n > 0 {
                let room = r.limit - r.output.count
                r.output += buffer[0..<min(n, max(room, 0))]
                if n > room {
                    // More than the tool may return: stop it now, rather than read a
                    // flood only to throw it away.
                    r.truncated = true
                    if r.exitCode == nil { kill(-r.pid, SIGKILL) }
                    return closeOutput(r)
                }
                continue
            }
            if n == 0 { return closeOutput(r) }
            let e = csystem_errno()
            if e == EINTR { continue }
            if e != EAGAIN { closeOutput(r) }
            return
        }
    }

    private func closeOutput(_ r: Running) {
        r.outputClosed = true
        if let s = r.outputSource { loop.unwatch(s) }
        r.outputSource = nil
        if r.stdout >= 0 { close(r.stdout) }
        r.stdout = -1
        complete(r)
    }

    private func reaped(_ r: Running) {
        var code: Int32 = 0
        let got = csystem_reap(r.pid, &code)
        guard got != 0 else { return }
        r.exitCode = got > 0 ? code : 255
        reaping[r.id] = nil
        if let s = r.endSource { loop.unwatch(s) }
        r.endSource = nil
        if r.pidfd >= 0 { close(r.pidfd) }
        r.pidfd = -1
        // What it wrote before ending is still in the pipe.
        if !r.outputClosed { readOutput(r) }
        complete(r)
    }

    private func complete(_ r: Running) {
        guard r.outputClosed, let code = r.exitCode else { return }
        let text = String(decoding: r.output, as: UTF8.self)
        if r.truncated { return finish(r, .output(text, truncated: true)) }
        if code == 0 { return finish(r, .output(text, truncated: false)) }
        let said = utf8Prefix(text, maxBytes: 200)
        finish(r, .failed(code > 128 ? "the program was ended by signal \(code - 128)" : "the program exited with status \(code)" + (said.isEmpty ? "" : ": " + said)))
    }

    // MARK: http

    private func post(_ r: Running, url: HTTPURL, tokenFile: String?, spec: ToolSpec, arguments: JSONValue) {
        var headers = HTTPHeaders([("Content-Type", "application/json"), ("Accept", "application/json, text/plain")])
        if let tokenFile {
            guard let token = tokens.first(where: { $0.file.bytesEqual(tokenFile) })?.credential else {
                return finish(r, .failed("the token file \(tokenFile) could not be read at start"))
            }
            // The token goes to the configured URL's origin only; a redirect elsewhere is
            // not followed with it (HTTPClient follows none).
            if let value = BearerCredential(token: token, for: url).authorization(for: url) { headers.add("Authorization", value) }
        }
        let limit = spec.maxOutputBytes
        r.call = http.send(HTTPRequest(method: "POST", url: url, headers: headers, body: arguments.serialized()), timeout: spec.timeout) { [unowned(unsafe) self] result in
            switch result {
            case .success(let response):
                let body = String(decoding: response.body.prefix(limit), as: UTF8.self)
                if response.status >= 200 && response.status < 300 {
                    self.finish(r, .output(body.isEmpty ? "ok" : body, truncated: response.body.count > limit))
                } else {
                    self.finish(r, .failed("\(url) answered \(response.status)" + (body.isEmpty ? "" : ": " + utf8Prefix(body, maxBytes: 200))))
                }
            case .failure(let e):
                self.finish(r, .failed("\(url): \(e)"))
            }
        }
    }

    // MARK: mcp

    private func callMCP(_ r: Running, server: String, tool: String, spec: ToolSpec, arguments: JSONValue) {
        guard let client = mcp?.client(server) else { return finish(r, .failed("the MCP server \(server) is not set up")) }
        r.mcp = client.call(tool: tool, arguments: arguments, deadline: loop.now + spec.timeout) { [unowned(unsafe) self] result in
            r.mcp = nil
            self.finish(r, result)
        }
    }

    // MARK: gpio

    private func drive(_ r: Running, line id: GPIOLine, pulse: Duration?, arguments: JSONValue) {
        if pulse == nil, let h = held.first(where: { $0.id == id }) {
            let on = arguments["on"]?.bool ?? false
            do throws(SystemError) { try h.line.setValue(on) } catch { return finish(r, .failed("the line \(id): \(error)")) }
            return finish(r, .output(on ? "on" : "off", truncated: false))
        }
        if held.contains(where: { $0.id == id }) {
            return finish(r, .failed("the line \(id) is held by a set tool of this device"))
        }
        let line: any GPIORequestedLine
        do throws(GPIOError) {
            let chips = gpio.chips()
            let resolved = try resolveLine(id, chips: chips)
            line = try requestLine(resolved, chips: chips, library: gpio, consumer: "linnet-tool", .output(activeLow: false, initial: false))
        } catch {
            return finish(r, .failed("the line \(id): \(error)"))
        }
        let on = pulse != nil ? true : (arguments["on"]?.bool ?? false)
        do throws(SystemError) { try line.setValue(on) } catch {
            line.release()
            return finish(r, .failed("the line \(id): \(error)"))
        }
        guard let pulse else {
            // A set keeps its level while Linnet runs: the line stays requested (`held`).
            held.append((id, line))
            return finish(r, .output(on ? "on" : "off", truncated: false))
        }
        r.line = line
        r.timer = loop.schedule(after: pulse) { [unowned(unsafe) self] in
            r.line = nil
            var result = ToolResult.output("pulsed for \(pulse.milliseconds) ms", truncated: false)
            do throws(SystemError) { try line.setValue(false) } catch {
                result = .failed("the line \(id) could not be set low again: \(error)")
            }
            line.release()
            self.finish(r, result)
        }
    }
}

/// Runs `body` with `strings` as a NULL-terminated C array (argv, envp), all freed after.
func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { s in
        let bytes = Array(s.utf8)
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
        for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
        p[bytes.count] = 0
        return p
    }
    pointers.append(nil)
    defer { for p in pointers { p?.deallocate() } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
