// The MCP servers of the tools file, on the loop: the handshake and `tools/list` at
// start (`MCPClients.discover`), then a `tools/call` per model call (ToolRunner). What
// to send and what an answer means is Agent's MCPWire; this is only the exchanges.
// Each exchange has the server's deadline and the HTTP client's size limits, so a
// server that is down, lies or streams forever costs its own tools and nothing else.
import Wire
import Platform
import JSON
import Signaling
import Agent

public final class MCPClient {
    public let spec: MCPServerSpec
    let http: HTTPClient
    /// The bearer token for the server's origin (nil: none configured).
    let credential: BearerCredential?
    /// The revision and session the last handshake gave.
    private(set) var version: String?
    private(set) var sessionID: String?
    private var nextID = 1
    /// The loop's clock (each exchange gets the time left to the caller's deadline).
    let now: () -> Instant

    init(spec: MCPServerSpec, http: HTTPClient, token: String?, now: @escaping () -> Instant) {
        self.spec = spec
        self.http = http
        self.now = now
        credential = token.map { BearerCredential(token: $0, for: spec.url) }
    }

    /// An exchange in flight, to cancel (a call may take two: a new session first).
    public final class Handle {
        var current: HTTPCall?
        var cancelled = false
        func cancel() {
            cancelled = true
            current?.cancel()
            current = nil
        }
    }

    // MARK: discovery

    /// The handshake, then every page of `tools/list`: the server's tools as the
    /// model's functions and what was left out, or why none.
    func discover(deadline: Instant,
                  done: @escaping (Result<(tools: [ToolSpec], skipped: [String]), MCPError>) -> Void) -> Handle {
        let handle = Handle()
        handshake(handle, deadline: deadline) { [self] error in
            if let error { return done(.failure(error)) }
            var tools: [ToolSpec] = []
            var skipped: [String] = []
            func page(_ cursor: String?, _ n: Int) {
                let id = takeID()
                exchange(handle, MCPWire.listTools(id: id, cursor: cursor), id: id, deadline: deadline, Reply { result in
                    switch result {
                    case .failure(let e): done(.failure(MCPError("tools/list: \(e)")))
                    case .success(let (value, _)):
                        let p = MCPWire.tools(value ?? .null, server: self.spec, have: tools.count)
                        tools += p.specs
                        skipped += p.skipped
                        if let next = p.next, n + 1 < MCPServerSpec.maxPages, tools.count < MCPServerSpec.maxTools {
                            page(next, n + 1)
                        } else {
                            if p.next != nil { skipped.append("pages past \(MCPServerSpec.maxPages) or \(MCPServerSpec.maxTools) tools") }
                            done(.success((tools, skipped)))
                        }
                    }
                })
            }
            page(nil, 0)
        }
        return handle
    }

    /// `initialize`, then the `initialized` notification (Lifecycle §"Initialization").
    private func handshake(_ handle: Handle, deadline: Instant, done: @escaping (MCPError?) -> Void) {
        version = nil
        sessionID = nil
        let id = takeID()
        exchange(handle, MCPWire.initialize(id: id, clientVersion: LinnetVersion.string), id: id, deadline: deadline, Reply { [self] result in
            switch result {
            case .failure(let e): return done(MCPError("initialize: \(e)"))
            case .success(let (value, response)):
                do throws(MCPError) {
                    let r = try MCPWire.initialized(value ?? .null, response: response)
                    version = r.version
                    sessionID = r.sessionID
                } catch {
                    return done(error)
                }
                exchange(handle, MCPWire.initialized, id: nil, deadline: deadline, Reply { result in
                    if case .failure(let e) = result { return done(MCPError("notifications/initialized: \(e)")) }
                    done(nil)
                })
            }
        })
    }

    // MARK: calls

    /// `tools/call` for `tool` (its name on the server). A session the server has
    /// forgotten (it restarted) is made again once, and the call sent again.
    func call(tool: String, arguments: JSONValue, deadline: Instant,
              done: @escaping (ToolResult) -> Void) -> Handle {
        let handle = Handle()
        func send(retry: Bool) {
            let id = takeID()
            exchange(handle, MCPWire.callTool(id: id, name: tool, arguments: arguments), id: id, deadline: deadline, Reply { [self] result in
                switch result {
                case .success(let (value, _)):
                    done(MCPWire.callResult(value ?? .null))
                case .failure(let e) where e.sessionGone && retry:
                    Log.info("MCP server \(spec.name): its session was gone; starting a new one")
                    handshake(handle, deadline: deadline) { error in
                        if let error { return done(.failed("the MCP server \(self.spec.name): \(error)")) }
                        send(retry: false)
                    }
                case .failure(let e):
                    done(.failed("the MCP server \(spec.name): \(e)"))
                }
            })
        }
        if version == nil {
            // No session yet (the server was down at start, or a handshake failed).
            handshake(handle, deadline: deadline) { [self] error in
                if let error { return done(.failed("the MCP server \(spec.name): \(error)")) }
                send(retry: false)
            }
        } else {
            send(retry: true)
        }
        return handle
    }

    /// Ends the session (Transports §2.5.3: a client that is done SHOULD send DELETE);
    /// `done` runs once, whatever the answer (a 405 says the server does not allow it).
    func close(deadline: Instant, done: @escaping () -> Void) -> Handle {
        let handle = Handle()
        let left = deadline - now()
        guard let sessionID, left > .zero else { done(); return handle }
        var headers = MCPWire.headers(sessionID: sessionID, version: version)
        if let value = credential?.authorization(for: spec.url) { headers.add("Authorization", value) }
        self.sessionID = nil
        version = nil
        handle.current = http.send(HTTPRequest(method: "DELETE", url: spec.url, headers: headers), timeout: left) { _ in
            handle.current = nil
            done()
        }
        return handle
    }

    // MARK: one exchange

    private func takeID() -> Int {
        defer { nextID += 1 }
        return nextID
    }

    /// One POST: the result of the response to `id`, or for a notification (`id` nil)
    /// only its acceptance (202, §2.1.4).
    /// What an exchange hands its answer to. A class rather than a closure argument:
    /// the optimiser made a copy of `exchange` for each closure passed to it (seven, some
    /// 10 KB of arm64) for an exchange made a few times a minute at most.
    final class Reply {
        let done: (Result<(JSONValue?, HTTPResponse), MCPError>) -> Void
        init(_ done: @escaping (Result<(JSONValue?, HTTPResponse), MCPError>) -> Void) { self.done = done }
    }

    @inline(never)
    private func exchange(_ handle: Handle, _ body: [UInt8], id: Int?, deadline: Instant, _ reply: Reply) {
        let done = reply.done
        guard !handle.cancelled else { return }
        let left = deadline - now()
        guard left > .zero else { return done(.failure(MCPError("no time left"))) }
        var headers = MCPWire.headers(sessionID: sessionID, version: version)
        if let value = credential?.authorization(for: spec.url) { headers.add("Authorization", value) }
        let sent = sessionID != nil
        handle.current = http.send(HTTPRequest(method: "POST", url: spec.url, headers: headers, body: body), timeout: left) { result in
            handle.current = nil
            switch result {
            case .failure(let e):
                done(.failure(MCPError("\(e)")))
            case .success(let response):
                guard let id else {
                    if response.status >= 200 && response.status < 300 { return done(.success((nil, response))) }
                    if response.status == 404 && sent { return done(.failure(MCPError("the session is gone (404)", sessionGone: true))) }
                    return done(.failure(MCPError("the server answered \(response.status)")))
                }
                do throws(MCPError) {
                    done(.success((try MCPWire.result(of: response, id: id, sentSession: sent), response)))
                } catch {
                    done(.failure(error))
                }
            }
        }
    }
}

/// Every MCP server of the tools file, found by name for a call.
public final class MCPClients {
    public let clients: [MCPClient]

    public init(_ servers: [MCPServerSpec], http: HTTPClient, tokens: [(file: String, credential: String)]) {
        let loop = http.loop
        clients = servers.map { s in
            MCPClient(spec: s, http: http, token: s.tokenFile.flatMap { f in tokens.first { $0.file.bytesEqual(f) }?.credential }, now: { loop.now })
        }
    }

    func client(_ name: String) -> MCPClient? { clients.first { $0.spec.name.bytesEqual(name) } }

    /// Ends every open session, running `loop` for at most `limit` (a command's end).
    public func close(loop: EventLoop, limit: Duration = .seconds(1)) {
        var left = 0
        let deadline = loop.now + limit
        var handles: [MCPClient.Handle] = []
        for c in clients {
            left += 1
            handles.append(c.close(deadline: deadline) { left -= 1 })
        }
        while left > 0 && loop.now < deadline {
            do throws(SystemError) { try loop.runOnce(maxWait: deadline - loop.now) } catch { break }
        }
        for h in handles { h.cancel() }
    }

    /// Asks every server for its tools at once, running `loop` until all have answered
    /// or failed (each within its own timeout). The tools found, and one line a server
    /// for the log and `check` (`ok` false: its tools are not offered).
    public func discover(loop: EventLoop) -> (tools: [ToolSpec], lines: [(text: String, ok: Bool)]) {
        var results: [Result<(tools: [ToolSpec], skipped: [String]), MCPError>?] = Array(repeating: nil, count: clients.count)
        var handles: [MCPClient.Handle] = []
        for (i, c) in clients.enumerated() {
            handles.append(c.discover(deadline: loop.now + c.spec.timeout) { results[i] = $0 })
        }
        let until = loop.now + (clients.map { $0.spec.timeout }.max() ?? .zero) + .seconds(1)
        while results.contains(where: { $0.map { _ in false } ?? true }) && loop.now < until {
            do throws(SystemError) { try loop.runOnce(maxWait: until - loop.now) } catch { break }
        }
        for h in handles { h.cancel() }
        var tools: [ToolSpec] = []
        var lines: [(text: String, ok: Bool)] = []
        for (c, r) in zip(clients, results) {
            let head = "mcp \(c.spec.name) (\(c.spec.url))"
            switch r {
            case .success(let found)?:
                // A name a tool of the file (or an earlier server) already has is left out.
                var offered: [String] = []
                var skipped = found.skipped
                for t in found.tools {
                    if tools.contains(where: { $0.name.bytesEqual(t.name) }) { skipped.append("\(t.name): the name is taken"); continue }
                    tools.append(t)
                    offered.append(t.name)
                }
                lines.append(("\(head): MCP \(c.version ?? "?"), \(offered.count) tools" + (offered.isEmpty ? "" : ": " + offered.joined(separator: ", "))
                              + (skipped.isEmpty ? "" : "; left out: " + skipped.joined(separator: "; ")), true))
            case .failure(let e)?:
                lines.append(("\(head): \(e); its tools are not offered", false))
            case nil:
                lines.append(("\(head): no answer within \(c.spec.timeout.milliseconds) ms; its tools are not offered", false))
            }
        }
        return (tools, lines)
    }
}
