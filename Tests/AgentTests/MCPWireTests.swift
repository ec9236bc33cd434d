import Testing
import Wire
import JSON
import Signaling
@testable import Agent

private func json(_ text: String) throws -> JSONValue { try JSONValue.parse(text) }

private func server(_ extra: String = "") throws -> MCPServerSpec {
    try MCPServerSpec.parse(json(#"{"mcp": [{"name": "home", "url": "http://ha.local:8123/api/mcp"\#(extra)}]}"#))[0]
}

private func response(_ status: Int = 200, type: String, _ body: String, session: String? = nil) -> HTTPResponse {
    var h = HTTPHeaders([("content-type", type)])
    if let session { h.add("mcp-session-id", session) }
    return HTTPResponse(status: status, headers: h, body: Array(body.utf8))
}

/// What an MCP server's answers mean (MCP.swift), against the bytes the official Python
/// SDK's server sends (captured from `mcp` 2.3.0 over streamable HTTP) and against lies.
@Suite struct MCPWireTests {
    /// The SDK's SSE answer to `initialize`, as it came off the wire (CRLF lines).
    static let sdkInitialize = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"capabilities\":{\"prompts\":{\"listChanged\":false},\"resources\":{\"listChanged\":false,\"subscribe\":false},\"tools\":{\"listChanged\":false}},\"protocolVersion\":\"2025-11-25\",\"serverInfo\":{\"name\":\"lights\",\"version\":\"\"}}}\r\n\r\n"

    @Test func theSDKsHandshakeIsRead() throws {
        let r = response(type: "text/event-stream", Self.sdkInitialize, session: "07136f33c169426fbb4fe774c9de8fff")
        let result = try MCPWire.result(of: r, id: 1, sentSession: false)
        let (version, session) = try MCPWire.initialized(result, response: r)
        #expect(version == "2025-11-25" && session == "07136f33c169426fbb4fe774c9de8fff")
        // What we sent: the newest revision offered, empty client capabilities.
        let sent = try JSONValue.parse(MCPWire.initialize(id: 1, clientVersion: "0.1.0"))
        #expect(sent["params"]?["protocolVersion"]?.string == "2025-11-25")
        #expect(sent["params"]?["capabilities"] == .object(JSONObject()))
    }

    /// An SSE stream: a server's own request and a notification before the response are
    /// skipped; multi-line data is joined with LF; LF-only lines work as CRLF do.
    @Test func theResponseIsFoundInAStream() throws {
        let body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"roots/list\"}\n\n" +
            ": a comment\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n" +
            "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{\"ok\":true}}\n\n"
        let result = try MCPWire.result(of: response(type: "text/event-stream; charset=utf-8", body), id: 7, sentSession: true)
        #expect(result["ok"]?.bool == true)
        // A stream cut before the response ends (the deadline or the body limit): no response.
        #expect(throws: MCPError("the answer held no message")) {
            try MCPWire.result(of: response(type: "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}"), id: 7, sentSession: true)
        }
    }

    @Test func liesAndRefusalsAreSaid() throws {
        // Someone else's response.
        #expect(throws: MCPError("the answer held no response to request 2")) {
            try MCPWire.result(of: response(type: "application/json", #"{"jsonrpc":"2.0","id":3,"result":{}}"#), id: 2, sentSession: true)
        }
        // A JSON-RPC error, with its code.
        #expect(throws: MCPError("the server refused: Unknown tool: x (-32602)")) {
            try MCPWire.result(of: response(type: "application/json", #"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Unknown tool: x"}}"#),
                               id: 2, sentSession: true)
        }
        // 404 means the session is gone only when a session id was sent.
        let gone = response(404, type: "application/json", #"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}"#)
        #expect(throws: MCPError("the server no longer knows this session (404)", sessionGone: true)) { try MCPWire.result(of: gone, id: 2, sentSession: true) }
        #expect((try? MCPWire.result(of: gone, id: 2, sentSession: false)) == nil)
        do { _ = try MCPWire.result(of: gone, id: 2, sentSession: false) } catch { #expect(!error.sessionGone) }
        // Not JSON, not a stream: a login page in front of the server.
        #expect(throws: MCPError("the server answered with 'text/html', not JSON or an event stream")) {
            try MCPWire.result(of: response(type: "text/html", "<html>"), id: 1, sentSession: false)
        }
    }

    @Test func theHandshakeRefusesWhatItCannotUse() throws {
        let ok = #"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}}}"#
        #expect(try MCPWire.initialized(json(ok), response: response(type: "application/json", "")).version == "2025-06-18")
        // A revision we do not speak (Lifecycle: the client disconnects).
        #expect(throws: MCPError("the server speaks MCP 2024-11-05; Linnet speaks 2025-11-25, 2025-06-18, 2025-03-26")) {
            try MCPWire.initialized(json(#"{"protocolVersion":"2024-11-05","capabilities":{"tools":{}}}"#), response: response(type: "application/json", ""))
        }
        #expect(throws: MCPError("the server offers no tools (capabilities has no \"tools\")")) {
            try MCPWire.initialized(json(#"{"protocolVersion":"2025-11-25","capabilities":{}}"#), response: response(type: "application/json", ""))
        }
        // A session id that would put a header of its own into every request.
        var h = HTTPHeaders([("Content-Type", "application/json")])
        h.fields.append((name: "Mcp-Session-Id", value: "abc\r\nX-Evil: 1"))
        #expect(throws: MCPError("the server's Mcp-Session-Id is not visible ASCII of at most 256 bytes")) {
            try MCPWire.initialized(json(ok), response: HTTPResponse(status: 200, headers: h))
        }
    }

    /// A server's tools become the model's functions under the server's name; what
    /// cannot be offered is left out and said.
    @Test func toolsAreNamedForTheModelAndBounded() throws {
        let list = try json(#"""
        {"tools": [
          {"name": "light.turn_on", "description": "Turns a light on.", "inputSchema": {"type": "object", "$schema": "https://json-schema.org/draft/2020-12/schema",
            "properties": {"entity": {"type": "string", "format": "entity-id"}, "level": {"anyOf": [{"type": "integer"}, {"type": "null"}], "minimum": "x"}}, "required": ["entity"]}},
          {"name": "GetLiveContext", "inputSchema": {"type": "object"}},
          {"name": "arrayish", "inputSchema": {"type": "array"}},
          {"name": "\#(String(repeating: "n", count: 70))", "inputSchema": {"type": "object"}},
          {"description": "no name", "inputSchema": {"type": "object"}}
        ], "nextCursor": "page2"}
        """#)
        let page = MCPWire.tools(list, server: try server(), have: 0)
        #expect(page.specs.map { $0.name } == ["home_light_turn_on", "home_GetLiveContext"])
        #expect(page.specs.first?.action == .mcp(server: "home", tool: "light.turn_on"))
        #expect(page.specs.last?.description == "GetLiveContext", "no description: the name stands in")
        #expect(page.skipped.count == 3, "\(page.skipped)")
        #expect(page.next == "page2")
        // The model sees the server's schema; the device checks what it can enforce of it.
        let spec = page.specs[0]
        #expect(spec.parameters["$schema"] != nil)
        #expect(spec.checked == (try json(#"{"type": "object", "properties": {"entity": {"type": "string"}, "level": {}}, "required": ["entity"]}"#)))
        var calls = ToolCalls(page.specs)
        guard case .refuse(let why) = calls.call(callID: "c", name: "home_light_turn_on", arguments: #"{"entity": 5}"#, now: Instant(nanoseconds: 0)) else {
            Issue.record("a number where the schema says string was let through"); return
        }
        #expect(why.contains("expected string"))
        // An allow list keeps only what it names; the server's limit on tools holds.
        let allowed = MCPWire.tools(list, server: try server(#", "allow": ["GetLiveContext"]"#), have: 0)
        #expect(allowed.specs.map { $0.name } == ["home_GetLiveContext"] && allowed.skipped.isEmpty)
        #expect(MCPWire.tools(list, server: try server(), have: MCPServerSpec.maxTools - 1).specs.count == 1)
    }

    @Test func aCallsResultIsText() throws {
        #expect(MCPWire.callResult(try json(#"{"content":[{"type":"text","text":"hall light on"}],"isError":false,"structuredContent":{"result":"hall light on"}}"#))
                == .output("hall light on", truncated: false))
        #expect(MCPWire.callResult(try json(#"{"content":[{"type":"text","text":"Error executing tool broken"}],"isError":true}"#))
                == .failed("Error executing tool broken"))
        #expect(MCPWire.callResult(try json(#"{"content":[{"type":"image","data":"AAAA","mimeType":"image/png"},{"type":"text","text":"a cat"}]}"#))
                == .output("[image content left out]\na cat", truncated: false))
        #expect(MCPWire.callResult(try json(#"{"content":[],"structuredContent":{"t":21}}"#)) == .output(#"{"t":21}"#, truncated: false))
    }

    @Test func theServersOfAToolsFileAreChecked() throws {
        let file = try json(#"{"mcp": [{"name": "home", "url": "http://ha.local:8123/api/mcp", "token-file": "/etc/linnet/ha-token", "timeout-ms": 3000}]}"#)
        #expect(try ToolSpec.parse(file).isEmpty, "a file of servers only")
        let s = try MCPServerSpec.parse(file)[0]
        #expect(s.tokenFile == "/etc/linnet/ha-token" && s.timeout == .milliseconds(3000) && s.allow == nil)
        func refused(_ text: String) -> String? {
            do { _ = try MCPServerSpec.parse(try json(text)); _ = try ToolSpec.parse(try json(text)); return nil } catch let e as ToolSpecError { return e.description } catch { return "\(error)" }
        }
        #expect(refused(#"{"mcp": [{"name": "my_home", "url": "http://a/mcp"}]}"#) == #"mcp #1: "name": 1 to 16 letters, digits or '-'"#)
        #expect(refused(#"{"mcp": [{"name": "home", "url": "http://a/mcp", "token": "x"}]}"#) == #"mcp home: unknown key "token""#)
        #expect(refused(#"{"mcp": [{"name": "home", "url": "http://a/mcp", "token-file": "ha-token"}]}"#) == "mcp home: token-file: an absolute path")
        #expect(refused(#"{"mcp": [{"name": "a", "url": "http://a/mcp"}, {"name": "a", "url": "http://b/mcp"}]}"#) == "mcp a: the name is used twice")
        #expect(refused(#"{"tools": [], "servers": []}"#) == #"unknown key "servers" (a tools file has "tools" and "mcp")"#)
    }
}
