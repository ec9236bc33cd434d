// MCP servers on the LAN as the model's tools: the Model Context Protocol's
// streamable HTTP transport (modelcontextprotocol.io, specification 2025-11-25,
// "Transports" §2 and "Lifecycle"), as far as a device that only calls tools needs it.
// Pure: what to send, and what a response means. The runtime (Runtime/MCPClient.swift)
// carries the exchanges.
//
// What is kept from the protocol and why:
// - The lifecycle handshake: `initialize` (offering the newest revision we speak), the
//   server's revision checked against the ones we speak (Lifecycle §"Version
//   negotiation": a revision we do not speak ends it), then the `initialized`
//   notification. Revisions 2025-03-26, 2025-06-18 and 2025-11-25 share what is used
//   here.
// - `Mcp-Session-Id` from the initialize response, sent on every later request
//   (Transports §2.5), and `MCP-Protocol-Version` (§2.7). A 404 to a request that
//   carried the id means the session is gone: the runtime starts a new one once.
// - A POST's answer is either one JSON object or an SSE stream (§2.1.5); in a stream
//   the response is the `data` of the event whose JSON-RPC id is ours, and requests or
//   notifications the server puts before it are skipped (a device offers no sampling,
//   roots or elicitation: its `capabilities` are empty).
// - `tools/list`, paged by `nextCursor`; `tools/call`, whose `content` text blocks are
//   the result and whose `isError` marks a failure the model should read.
// Bounds (a server that lies or hangs costs nothing but its own tools): the HTTP
// client's body limit and one deadline per exchange, at most `maxPages` pages and
// `maxTools` tools a server, names and schemas checked as the tools file's are.
import Wire
import JSON
import Signaling

/// An MCP server the tools file names (`"mcp": [{"name", "url", ...}]`).
public struct MCPServerSpec: Sendable, Equatable {
    /// Prefixes its tools' names for the model (`home_HassTurnOn`): the name space of
    /// one server cannot take another's or the file's own tool names.
    public let name: String
    /// The MCP endpoint (one URL that takes POST, Transports §2).
    public let url: HTTPURL
    /// A bearer token (Home Assistant's long-lived access token), sent to this URL's
    /// origin only.
    public let tokenFile: String?
    /// Each exchange's deadline (the handshake's too) and a call's timeout.
    public let timeout: Duration
    public let maxOutputBytes: Int
    public let maxPerMinute: Int
    /// Only these of the server's tools are offered (nil: all it lists, up to
    /// `maxTools`). A kiosk rarely wants the model to reach all of Home Assistant.
    public let allow: [String]?

    public static let maxServers = 8
    /// Tools taken from one server; those past it are left out and said so.
    public static let maxTools = 32
    /// `tools/list` pages followed (a server whose cursor never ends).
    public static let maxPages = 8
    /// The largest schema a server's tool may have (it goes into every session.update).
    public static let maxSchemaBytes = 8 << 10
    public static let maxDescriptionBytes = 1 << 10
    public static let defaultTimeout = Duration.seconds(5)

    /// The servers of a tools file (`{"mcp": [...]}`): none when it has no "mcp".
    public static func parse(_ file: JSONValue) throws(ToolSpecError) -> [MCPServerSpec] {
        guard let m = file["mcp"] else { return [] }
        guard let list = m.array else { throw ToolSpecError(tool: nil, "\"mcp\" is a list of servers") }
        guard list.count <= maxServers else { throw ToolSpecError(tool: nil, "\(list.count) MCP servers; at most \(maxServers)") }
        var out: [MCPServerSpec] = []
        for (i, s) in list.enumerated() {
            let spec = try MCPServerSpec(s, index: i)
            if out.contains(where: { $0.name.bytesEqual(spec.name) }) { throw ToolSpecError(tool: "mcp " + spec.name, "the name is used twice") }
            out.append(spec)
        }
        return out
    }

    init(_ s: JSONValue, index: Int) throws(ToolSpecError) {
        guard case .object(let o) = s else { throw ToolSpecError(tool: "mcp #\(index + 1)", "a server is a JSON object") }
        // Short, so that prefixed tool names stay within the provider's 64.
        guard let name = o["name"]?.string, !name.utf8.isEmpty, name.utf8.count <= 16,
              name.utf8.allSatisfy({ ToolSpec.nameByte($0) && $0 != 95 }) else {
            throw ToolSpecError(tool: "mcp #\(index + 1)", "\"name\": 1 to 16 letters, digits or '-'")
        }
        let tool = "mcp " + name
        for (key, _) in o where !["name", "url", "token-file", "timeout-ms", "max-output-bytes", "max-per-minute", "allow"].containsBytes(equalTo: key) {
            throw ToolSpecError(tool: tool, "unknown key \"\(utf8Prefix(key, maxBytes: 40))\"")
        }
        guard let text = o["url"]?.string else { throw ToolSpecError(tool: tool, "url: the server's MCP endpoint (http://host:port/mcp)") }
        do throws(HTTPError) { url = try HTTPURL(text) } catch { throw ToolSpecError(tool: tool, "url: \(error)") }
        tokenFile = o["token-file"]?.string
        if let t = tokenFile, !t.startsWithBytes("/") { throw ToolSpecError(tool: tool, "token-file: an absolute path") }
        if o["token-file"] != nil && tokenFile == nil { throw ToolSpecError(tool: tool, "token-file: an absolute path") }
        timeout = .milliseconds(Int64(try ToolSpec.whole(o["timeout-ms"], tool: tool, key: "timeout-ms", default: Int(MCPServerSpec.defaultTimeout.milliseconds),
                                                   range: 100...Int(ToolSpec.maxTimeout.milliseconds))))
        maxOutputBytes = try ToolSpec.whole(o["max-output-bytes"], tool: tool, key: "max-output-bytes", default: ToolSpec.defaultMaxOutputBytes,
                                            range: 64...ToolSpec.maxOutputBytesLimit)
        maxPerMinute = try ToolSpec.whole(o["max-per-minute"], tool: tool, key: "max-per-minute", default: ToolSpec.defaultMaxPerMinute, range: 1...600)
        if let a = o["allow"] {
            guard let names = a.array?.compactMap({ $0.string }), names.count == a.array?.count, !names.isEmpty else {
                throw ToolSpecError(tool: tool, "allow: a list of the server's tool names")
            }
            allow = names
        } else {
            allow = nil
        }
        self.name = name
    }
}

/// Why an MCP exchange did not give what was asked, in words for the log and the model.
public struct MCPError: Error, Equatable, CustomStringConvertible {
    public let reason: String
    /// The server no longer knows our session (404 to a request that carried its id).
    public let sessionGone: Bool
    public init(_ reason: String, sessionGone: Bool = false) {
        self.reason = reason
        self.sessionGone = sessionGone
    }
    public var description: String { reason }
}

public enum MCPWire {
    /// The revisions this client speaks, newest first; the first is offered.
    public static let versions = ["2025-11-25", "2025-06-18", "2025-03-26"]
    /// A JSON-RPC response's nesting, and a session id's length (§2.5.1: visible ASCII).
    static let maxDepth = 64
    static let maxSessionIDBytes = 256

    // MARK: requests

    public static func initialize(id: Int, clientVersion: String) -> [UInt8] {
        request(id: id, method: "initialize", params: [
            "protocolVersion": .string(versions[0]),
            // A device offers the server nothing back: no roots, sampling or elicitation.
            "capabilities": .object(JSONObject()),
            "clientInfo": ["name": "linnet", "version": .string(clientVersion)],
        ])
    }

    public static let initialized: [UInt8] = (["jsonrpc": "2.0", "method": "notifications/initialized"] as JSONValue).serialized()

    public static func listTools(id: Int, cursor: String?) -> [UInt8] {
        request(id: id, method: "tools/list", params: cursor.map { ["cursor": .string($0)] } ?? .object(JSONObject()))
    }

    public static func callTool(id: Int, name: String, arguments: JSONValue) -> [UInt8] {
        request(id: id, method: "tools/call", params: ["name": .string(name), "arguments": arguments])
    }

    static func request(id: Int, method: String, params: JSONValue) -> [UInt8] {
        (["jsonrpc": "2.0", "id": JSONValue(id), "method": .string(method), "params": params] as JSONValue).serialized()
    }

    /// The headers of a POST (Transports §2.1.2–2.1.4, §2.5, §2.7); the caller adds the
    /// bearer token for the server's origin.
    public static func headers(sessionID: String?, version: String?) -> HTTPHeaders {
        var h = HTTPHeaders([("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")])
        if let sessionID { h.add("Mcp-Session-Id", sessionID) }
        if let version { h.add("MCP-Protocol-Version", version) }
        return h
    }

    // MARK: responses

    /// The `result` of the JSON-RPC response to `id` in a POST's answer: a JSON body, or
    /// an SSE stream (`text/event-stream`) whose events carry JSON-RPC messages.
    /// `sentSession`: the request carried a session id (so a 404 means it is gone).
    public static func result(of response: HTTPResponse, id: Int, sentSession: Bool) throws(MCPError) -> JSONValue {
        guard response.status >= 200 && response.status < 300 else {
            if response.status == 404 && sentSession { throw MCPError("the server no longer knows this session (404)", sessionGone: true) }
            throw MCPError("the server answered \(response.status)" + excerpt(response))
        }
        let type = response.headers["Content-Type"] ?? ""
        // Media types are case-insensitive (RFC 9110 §8.3.1), parameters may follow.
        let lower = lowercasedASCII(type)
        var messages: [[UInt8]] = []
        if lower.startsWithBytes("text/event-stream") {
            messages = sseData(response.body)
        } else if lower.startsWithBytes("application/json") {
            messages = [response.body]
        } else {
            throw MCPError("the server answered with \(type.isEmpty ? "no content type" : "'\(utf8Prefix(type, maxBytes: 60))'"), not JSON or an event stream")
        }
        for m in messages {
            guard let v = try? JSONValue.parse(m, limits: JSONLimits(maxDepth: maxDepth)) else { continue }
            // A batch is not sent by a server to a single request; each message alone.
            guard v["id"]?.int == id, v["method"] == nil else { continue }
            if let e = v["error"] {
                let code = e["code"]?.int.map { " (\($0))" } ?? ""
                throw MCPError("the server refused: " + utf8Prefix(e["message"]?.string ?? "an error", maxBytes: 200) + code)
            }
            guard let r = v["result"] else { throw MCPError("a response with neither result nor error") }
            return r
        }
        throw MCPError(messages.isEmpty ? "the answer held no message" : "the answer held no response to request \(id)")
    }

    /// The `data` of each event in an SSE body (HTML Living Standard §9.2.6: lines
    /// split at CR, LF or CRLF; `data:` lines joined with LF; a blank line ends an event;
    /// one space after the colon dropped). Events without data are skipped.
    static func sseData(_ body: [UInt8]) -> [[UInt8]] {
        var out: [[UInt8]] = []
        var data: [UInt8] = []
        var hasData = false
        var i = 0
        func line(_ l: ArraySlice<UInt8>) {
            if l.isEmpty {
                if hasData { out.append(data) }
                data = []
                hasData = false
                return
            }
            guard l.starts(with: Array("data".utf8)) else { return }
            var v = l.dropFirst(4)
            if let c = v.first {
                guard c == 58 else { return }   // "data" followed by something else: another field
                v = v.dropFirst()
                if v.first == 32 { v = v.dropFirst() }
            }
            if hasData { data.append(10) }
            data.append(contentsOf: v)
            hasData = true
        }
        var start = 0
        while i < body.count {
            let b = body[i]
            if b == 10 || b == 13 {
                line(body[start..<i])
                if b == 13 && i + 1 < body.count && body[i + 1] == 10 { i += 1 }
                start = i + 1
            }
            i += 1
        }
        // A stream cut mid-event (the deadline, the body limit) dispatches nothing more.
        return out
    }

    /// The revision the server chose, if we speak it, and the session id it gave.
    public static func initialized(_ result: JSONValue, response: HTTPResponse) throws(MCPError) -> (version: String, sessionID: String?) {
        guard let v = result["protocolVersion"]?.string else { throw MCPError("the initialize result has no protocolVersion") }
        guard versions.containsBytes(equalTo: v) else {
            throw MCPError("the server speaks MCP \(utf8Prefix(v, maxBytes: 20)); Linnet speaks \(versions.joined(separator: ", "))")
        }
        guard result["capabilities"]?["tools"] != nil else { throw MCPError("the server offers no tools (capabilities has no \"tools\")") }
        var session: String? = nil
        if let s = response.headers["Mcp-Session-Id"] {
            // §2.5.1: visible ASCII only. Anything else (CR, LF) is never echoed into a header.
            guard !s.utf8.isEmpty, s.utf8.count <= maxSessionIDBytes, s.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else {
                throw MCPError("the server's Mcp-Session-Id is not visible ASCII of at most \(maxSessionIDBytes) bytes")
            }
            session = s
        }
        return (v, session)
    }

    /// One page of `tools/list`: the tools as the model's functions (the server's name
    /// as prefix), what was left out and why, and the next page's cursor.
    public static func tools(_ result: JSONValue, server: MCPServerSpec, have: Int) -> (specs: [ToolSpec], skipped: [String], next: String?) {
        var specs: [ToolSpec] = []
        var skipped: [String] = []
        for t in result["tools"]?.array ?? [] {
            // An allow list names what is wanted: the rest is not looked at.
            if let allow = server.allow, !allow.containsBytes(equalTo: t["name"]?.string ?? "") { continue }
            guard let remote = t["name"]?.string, !remote.utf8.isEmpty, remote.utf8.count <= 128 else {
                skipped.append("a tool with no usable name")
                continue
            }
            let shown = utf8Prefix(remote, maxBytes: 64)
            guard have + specs.count < MCPServerSpec.maxTools else {
                skipped.append("\(shown): more than \(MCPServerSpec.maxTools) tools")
                continue
            }
            // The provider's function names: [A-Za-z0-9_-]{1,64}. Other bytes become '_'.
            let name = server.name + "_" + String(decoding: remote.utf8.map { ToolSpec.nameByte($0) ? $0 : 95 }, as: UTF8.self)
            guard name.utf8.count <= 64 else { skipped.append("\(shown): the name is too long"); continue }
            guard let schema = t["inputSchema"], schema["type"]?.string.map({ $0.bytesEqual("object") }) == true else {
                skipped.append("\(shown): its inputSchema is not an object schema")
                continue
            }
            guard schema.serialized().count <= MCPServerSpec.maxSchemaBytes else {
                skipped.append("\(shown): its inputSchema is larger than \(MCPServerSpec.maxSchemaBytes) bytes")
                continue
            }
            let description = utf8Prefix(t["description"]?.string ?? t["title"]?.string ?? remote, maxBytes: MCPServerSpec.maxDescriptionBytes)
            specs.append(ToolSpec(mcp: server, remote: remote, name: name, description: description, schema: schema))
        }
        let next = result["nextCursor"]?.string
        return (specs, skipped, next.flatMap { $0.utf8.isEmpty || $0.utf8.count > 1024 ? nil : $0 })
    }

    /// What a `tools/call` result gives the model: its text blocks (other content kinds
    /// named), or `structuredContent` when it has no text; `isError` a failure (Server
    /// Features, Tools §"Error Handling": the model should see it and may retry).
    public static func callResult(_ result: JSONValue) -> ToolResult {
        var parts: [String] = []
        for c in result["content"]?.array ?? [] {
            if let type = c["type"]?.string, type.bytesEqual("text"), let text = c["text"]?.string {
                parts.append(text)
            } else if let type = c["type"]?.string {
                parts.append("[\(utf8Prefix(type, maxBytes: 20)) content left out]")
            }
        }
        if parts.isEmpty, let s = result["structuredContent"] { parts.append(s.serializedString()) }
        let text = parts.joined(separator: "\n")
        if result["isError"]?.bool == true { return .failed(text.isEmpty ? "the tool reported an error" : text) }
        return .output(text.isEmpty ? "ok" : text, truncated: false)
    }

    static func excerpt(_ r: HTTPResponse) -> String {
        let e = r.bodyExcerpt(120)
        return e.isEmpty ? "" : ": " + e
    }
}
