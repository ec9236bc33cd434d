// The function tools a device offers its model, as declared in the tools file
// (`tools = /etc/linnet/tools.json`): what each is called and described as, the JSON
// Schema of its arguments, and what it touches on the device. Loaded once, judged whole:
// a file with one bad tool is refused with the tool and the reason, never half used.
import Wire
import JSON
import Audio
import Settings
import Signaling

/// What a tool does when the model calls it.
public enum ToolAction: Sendable, Equatable {
    /// Drive an output line: high for `pulse` then low again (a door strike), or set to
    /// the call's boolean `on` (a light) when `pulse` is nil.
    case gpio(line: GPIOLine, pulse: Duration?)
    /// Run a program from the tools directory by file name (no shell, no path from the
    /// model): the arguments as JSON on its standard input, its standard output the result.
    case exec(program: String)
    /// POST the arguments as JSON to `url`; the response body is the result. The bearer
    /// token, read from `tokenFile` at start, goes to that URL's origin only.
    case http(url: HTTPURL, tokenFile: String?)
    /// Call `tool` (its name on the server) on the MCP server the tools file calls
    /// `server` (MCP.swift), with the arguments as they are.
    case mcp(server: String, tool: String)
}

public struct ToolSpec: Sendable, Equatable {
    public let name: String
    public let description: String
    /// The arguments' JSON Schema (checked by `ArgumentSchema` before anything runs).
    public let parameters: JSONValue
    /// What `ArgumentSchema` checks the arguments against: `parameters` itself for the
    /// file's own tools; for an MCP server's tool, the part of its schema Linnet
    /// enforces (the server checks its own schema whole, as the protocol has it).
    public let checked: JSONValue
    public let action: ToolAction
    /// How long a call may take before it is stopped and the model told so.
    public let timeout: Duration
    /// The most of a result kept for the model (the rest is cut, and it is told so).
    public let maxOutputBytes: Int
    /// Calls allowed in any 60 s; more are answered with an error, not run.
    public let maxPerMinute: Int

    public static let defaultTimeout = Duration.seconds(10)
    public static let defaultMaxOutputBytes = 16 << 10
    public static let defaultMaxPerMinute = 10
    /// Bounds on what the file may ask for: a tool is a short action, and what it
    /// returns goes into the model's context.
    public static let maxTools = 64
    public static let maxTimeout = Duration.seconds(120)
    public static let maxOutputBytesLimit = 256 << 10

    /// The function declaration in `session.update`'s `tools` (GA shape: a flat
    /// `{"type":"function","name","description","parameters"}`).
    public var declaration: JSONValue {
        ["type": "function", "name": .string(name), "description": .string(description), "parameters": parameters]
    }

    /// The tools of a tools file (`{"tools": [...]}`), all or none.
    public static func parse(_ file: JSONValue) throws(ToolSpecError) -> [ToolSpec] {
        guard case .object(let top) = file, file["tools"]?.array != nil || (file["tools"] == nil && file["mcp"] != nil) else {
            throw ToolSpecError(tool: nil, "the file is a JSON object with a \"tools\" list, an \"mcp\" list of servers, or both")
        }
        for (key, _) in top where !["tools", "mcp"].containsBytes(equalTo: key) {
            throw ToolSpecError(tool: nil, "unknown key \"\(utf8Prefix(key, maxBytes: 40))\" (a tools file has \"tools\" and \"mcp\")")
        }
        let list = file["tools"]?.array ?? []
        guard list.count <= maxTools else { throw ToolSpecError(tool: nil, "\(list.count) tools; at most \(maxTools)") }
        var out: [ToolSpec] = []
        for (i, t) in list.enumerated() {
            let spec = try ToolSpec(t, index: i)
            if out.contains(where: { $0.name.bytesEqual(spec.name) }) {
                throw ToolSpecError(tool: spec.name, "the name is used twice")
            }
            out.append(spec)
        }
        return out
    }

    init(_ t: JSONValue, index: Int) throws(ToolSpecError) {
        guard case .object(let o) = t else { throw ToolSpecError(tool: "#\(index + 1)", "a tool is a JSON object") }
        guard let name = o["name"]?.string else { throw ToolSpecError(tool: "#\(index + 1)", "no \"name\"") }
        // The provider's rule for function names: 1–64 of [A-Za-z0-9_-].
        guard !name.utf8.isEmpty, name.utf8.count <= 64, name.utf8.allSatisfy({ ToolSpec.nameByte($0) }) else {
            throw ToolSpecError(tool: utf8Prefix(name, maxBytes: 64), "a name is 1 to 64 letters, digits, '_' or '-'")
        }
        for (key, _) in o where !["name", "description", "parameters", "gpio", "exec", "http", "timeout-ms", "max-output-bytes", "max-per-minute"].containsBytes(equalTo: key) {
            throw ToolSpecError(tool: name, "unknown key \"\(utf8Prefix(key, maxBytes: 40))\"")
        }
        guard let description = o["description"]?.string, !description.isEmpty else {
            throw ToolSpecError(tool: name, "no \"description\": the model decides from it when to call the tool")
        }
        self.name = name
        self.description = description
        timeout = .milliseconds(Int64(try ToolSpec.whole(o["timeout-ms"], tool: name, key: "timeout-ms", default: Int(ToolSpec.defaultTimeout.milliseconds),
                                                   range: 100...Int(ToolSpec.maxTimeout.milliseconds))))
        maxOutputBytes = try ToolSpec.whole(o["max-output-bytes"], tool: name, key: "max-output-bytes", default: ToolSpec.defaultMaxOutputBytes,
                                            range: 64...ToolSpec.maxOutputBytesLimit)
        maxPerMinute = try ToolSpec.whole(o["max-per-minute"], tool: name, key: "max-per-minute", default: ToolSpec.defaultMaxPerMinute, range: 1...600)

        let kinds = ["gpio", "exec", "http"].filter { o[$0] != nil }
        guard kinds.count == 1 else { throw ToolSpecError(tool: name, "exactly one of \"gpio\", \"exec\" or \"http\" says what the tool does") }
        var parameters = o["parameters"]
        if let g = o["gpio"] {
            guard let lineText = g["line"]?.string, let line = parseGPIOLine(lineText) else {
                throw ToolSpecError(tool: name, "gpio.line: a GPIO line name (GPIO27) or CHIP:OFFSET")
            }
            var pulse: Duration? = nil
            if let p = g["pulse-ms"] {
                pulse = .milliseconds(Int64(try ToolSpec.whole(p, tool: name, key: "gpio.pulse-ms", default: 0, range: 10...60_000)))
            }
            // The arguments are Linnet's to define: a pulse takes none, a set takes `on`.
            guard parameters == nil else { throw ToolSpecError(tool: name, "a gpio tool's parameters are Linnet's own (none for a pulse, \"on\" for a set): leave \"parameters\" out") }
            parameters = pulse != nil
                ? ["type": "object", "properties": .object(JSONObject()), "additionalProperties": false]
                : ["type": "object", "properties": ["on": ["type": "boolean", "description": "true: on, false: off"]], "required": ["on"], "additionalProperties": false]
            action = .gpio(line: line, pulse: pulse)
        } else if let e = o["exec"] {
            guard let program = e["program"]?.string, ToolSpec.isPlainFileName(program) else {
                throw ToolSpecError(tool: name, "exec.program: the file name of a program in the tools directory (no '/', not '.' or '..')")
            }
            action = .exec(program: program)
        } else {
            let h = o["http"]!
            guard let text = h["url"]?.string else { throw ToolSpecError(tool: name, "http.url: the URL the arguments are POSTed to") }
            let url: HTTPURL
            do throws(HTTPError) { url = try HTTPURL(text) } catch {
                throw ToolSpecError(tool: name, "http.url: \(error)")
            }
            let token = h["token-file"]?.string
            if let token, !token.startsWithBytes("/") { throw ToolSpecError(tool: name, "http.token-file: an absolute path") }
            action = .http(url: url, tokenFile: token)
        }
        let schema = parameters ?? ["type": "object", "properties": .object(JSONObject()), "additionalProperties": false]
        if let p = ArgumentSchema.problem(schema) { throw ToolSpecError(tool: name, p) }
        // The provider takes an object schema for a function's arguments.
        guard let type = schema["type"]?.string, type.bytesEqual("object") else {
            throw ToolSpecError(tool: name, "parameters: the arguments are an object (\"type\": \"object\")")
        }
        self.parameters = schema
        checked = schema
    }

    /// An MCP server's tool (MCPWire.tools): its limits are the server's.
    init(mcp server: MCPServerSpec, remote: String, name: String, description: String, schema: JSONValue) {
        self.name = name
        self.description = description
        parameters = schema
        checked = ArgumentSchema.enforceable(schema)
        action = .mcp(server: server.name, tool: remote)
        timeout = server.timeout
        maxOutputBytes = server.maxOutputBytes
        maxPerMinute = server.maxPerMinute
    }

    static func nameByte(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95 || b == 45
    }

    /// A file name with no directory in it: what `exec.program` may be.
    static func isPlainFileName(_ s: String) -> Bool {
        !s.utf8.isEmpty && s.utf8.count <= 255 && !s.utf8.contains(47) && !s.utf8.contains(0) && !s.bytesEqual(".") && !s.bytesEqual("..")
    }

    static func whole(_ v: JSONValue?, tool: String, key: String, default d: Int, range: ClosedRange<Int>) throws(ToolSpecError) -> Int {
        guard let v else { return d }
        guard let n = v.int, range.contains(n) else {
            throw ToolSpecError(tool: tool, "\(key): a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return n
    }
}

/// What is wrong with a tools file: the tool (by name, or `#n` before it has one) and why.
public struct ToolSpecError: Error, Equatable, CustomStringConvertible {
    public let tool: String?
    public let reason: String
    init(tool: String?, _ reason: String) {
        self.tool = tool
        self.reason = reason
    }
    /// An MCP server is named as the file names it (`mcp home`), a tool in quotes.
    public var description: String { (tool.map { $0.startsWithBytes("mcp ") ? "\($0): " : "tool '\($0)': " } ?? "") + reason }
}
