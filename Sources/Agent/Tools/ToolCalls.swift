// The model's tool calls, judged and tracked: a call to a tool that exists, with
// arguments its schema accepts, within its rate, is handed to the runtime to run (off
// the loop: audio never waits for a tool); anything else is answered at once with an
// error the model can read. Every call gets exactly one answer: the tool's result, its
// failure, or its timeout. Pure: time is an input.
import Wire
import JSON

/// One call the runtime is to carry out.
public struct ToolRun: Sendable, Equatable {
    /// The core's number for this run (`AgentCore.toolFinished`, `.cancelTool`).
    public let id: Int
    public let spec: ToolSpec
    /// The arguments, checked against `spec.parameters`.
    public let arguments: JSONValue
}

/// How a run ended, as the runtime saw it.
public enum ToolResult: Sendable, Equatable {
    /// What the tool returned (its standard output, the response body, "ok"), and
    /// whether it was cut at the tool's `maxOutputBytes`.
    case output(String, truncated: Bool)
    /// It could not be done; why, for the model and the log.
    case failed(String)
}

public struct ToolCalls {
    public let specs: [ToolSpec]
    /// Per spec, the instants of its calls in the last minute (the rate window).
    private var recent: [[Instant]]
    private var inFlight: [(id: Int, callID: String, tool: Int, deadline: Instant)] = []
    private var nextID = 1
    /// Runs at once, over all tools: a model calling in a loop is refused, not queued.
    public static let maxInFlight = 4
    /// The most argument text a call may carry (a tool's arguments are a few fields).
    public static let maxArgumentBytes = 16 << 10
    /// Past a tool's own timeout, the runtime has this long to report before the model
    /// is told it timed out anyway (a runner that never reports costs nothing more).
    public static let grace = Duration.seconds(1)

    public init(_ specs: [ToolSpec]) {
        self.specs = specs
        recent = Array(repeating: [], count: specs.count)
    }

    public enum Verdict: Sendable, Equatable {
        case run(ToolRun)
        /// Not run: the output to give the model now (a JSON error object).
        case refuse(String)
    }

    /// The model called `name` with `arguments` (the JSON text it generated).
    public mutating func call(callID: String, name: String, arguments: String, now: Instant) -> Verdict {
        guard let index = specs.firstIndex(where: { $0.name.bytesEqual(name) }) else {
            return .refuse(Self.error("there is no tool named '\(utf8Prefix(name, maxBytes: 64))'"))
        }
        let spec = specs[index]
        guard arguments.utf8.count <= Self.maxArgumentBytes else {
            return .refuse(Self.error("the arguments are longer than \(Self.maxArgumentBytes) bytes"))
        }
        let value: JSONValue
        do throws(JSONError) {
            // An empty string is what a call with no arguments may carry.
            value = arguments.utf8.isEmpty ? .object(JSONObject()) : try JSONValue.parse(arguments, limits: JSONLimits(maxDepth: ArgumentSchema.maxDepth))
        } catch {
            return .refuse(Self.error("the arguments are not JSON: \(error)"))
        }
        if let v = ArgumentSchema.violation(value, spec.checked) { return .refuse(Self.error(v)) }
        // The rate: calls in the last 60 s, this one included.
        recent[index].removeAll { now - $0 >= .seconds(60) }
        guard recent[index].count < spec.maxPerMinute else {
            return .refuse(Self.error("'\(spec.name)' was called \(spec.maxPerMinute) times in the last minute, its limit; try again later"))
        }
        guard inFlight.count < Self.maxInFlight else {
            return .refuse(Self.error("\(Self.maxInFlight) tools are running; wait for their results"))
        }
        recent[index].append(now)
        let id = nextID
        nextID += 1
        inFlight.append((id, callID, index, now + spec.timeout + Self.grace))
        return .run(ToolRun(id: id, spec: spec, arguments: value))
    }

    /// The runtime finished run `id`: the call it answers and the output for the model
    /// (nil: unknown, or already answered by its timeout).
    public mutating func finished(_ id: Int, _ result: ToolResult) -> (callID: String, output: String, ok: Bool)? {
        guard let i = inFlight.firstIndex(where: { $0.id == id }) else { return nil }
        let run = inFlight.remove(at: i)
        let spec = specs[run.tool]
        switch result {
        case .output(let text, let truncated):
            var out = utf8Prefix(text, maxBytes: spec.maxOutputBytes)
            if truncated || out.utf8.count < text.utf8.count {
                out += "\n[the result was cut at \(spec.maxOutputBytes) bytes]"
            }
            return (run.callID, out, true)
        case .failed(let why):
            return (run.callID, Self.error(why), false)
        }
    }

    /// The earliest instant a run times out.
    public var deadline: Instant? { inFlight.map { $0.deadline }.min() }

    /// Runs past their deadline: each is answered as timed out (and the runtime is to
    /// stop it, by `id`).
    public mutating func handleTimeout(now: Instant) -> [(id: Int, callID: String, output: String)] {
        var out: [(id: Int, callID: String, output: String)] = []
        while let i = inFlight.firstIndex(where: { $0.deadline <= now }) {
            let run = inFlight.remove(at: i)
            let spec = specs[run.tool]
            out.append((run.id, run.callID, Self.error("'\(spec.name)' did not finish within \(spec.timeout.milliseconds) ms and was stopped")))
        }
        return out
    }

    public var running: Int { inFlight.count }

    /// The output the model gets for a call that was not done: a JSON object it can
    /// read and act on.
    static func error(_ message: String) -> String {
        let v: JSONValue = ["error": .string(message)]
        return v.serializedString()
    }
}
