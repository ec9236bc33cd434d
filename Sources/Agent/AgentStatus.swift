// The status file (a kiosk UI reads it): its contents and how the core fills them in.
// Apart from the core's inputs and decisions, which only decide when it is rewritten.
import Wire
import JSON
import Peer

/// What the status file says (a kiosk UI reads it).
public struct AgentStatus: Sendable, Equatable {
    public var state: SessionState
    public var sinceSeconds: Double
    public var muted: Bool
    public var turnDetection: String
    public var reconnects: Int
    public var session: Int?
    public var rttMilliseconds: Double?
    public var lastUser: String?
    public var lastAssistant: String?
    /// Why nothing works until a person acts (`insufficient_quota`), while it lasts.
    public var problem: String? = nil
    /// The provider's tokens for this run so far (nil before any response reported).
    public var tokens: (input: Int, output: Int)? = nil
    /// The local day's usage (with a calendar), and the cap reached, if one is.
    public var today: DailyUsage? = nil
    public var capped: String? = nil

    public static func == (a: AgentStatus, b: AgentStatus) -> Bool {
        a.state == b.state && a.sinceSeconds == b.sinceSeconds && a.muted == b.muted && a.turnDetection.bytesEqual(b.turnDetection)
            && a.reconnects == b.reconnects && a.session == b.session && a.rttMilliseconds == b.rttMilliseconds
            && bytesEqual(a.lastUser, b.lastUser) && bytesEqual(a.lastAssistant, b.lastAssistant) && bytesEqual(a.problem, b.problem)
            && a.tokens?.input == b.tokens?.input && a.tokens?.output == b.tokens?.output && a.today == b.today
            && bytesEqual(a.capped, b.capped)
    }

    /// The file's bytes: one JSON object and a newline.
    public var json: [UInt8] {
        var o = JSONObject()
        o["state"] = .string(state.rawValue)
        o["since_s"] = .number(JSONNumber(sinceSeconds))
        o["muted"] = .bool(muted)
        o["turn_detection"] = .string(turnDetection)
        o["reconnects"] = .number(JSONNumber(reconnects))
        if let session { o["session"] = .number(JSONNumber(session)) }
        if let rttMilliseconds { o["rtt_ms"] = .number(JSONNumber(rttMilliseconds)) }
        if let lastUser { o["last_user"] = .string(lastUser) }
        if let lastAssistant { o["last_assistant"] = .string(lastAssistant) }
        if let problem { o["problem"] = .string(problem) }
        if let tokens {
            o["tokens_in"] = .number(JSONNumber(tokens.input))
            o["tokens_out"] = .number(JSONNumber(tokens.output))
        }
        if let today {
            var d = JSONObject()
            d["date"] = .string(DailyUsage.date(today.day))
            d["connected_s"] = .number(JSONNumber(Double(today.connectedMilliseconds / 100) / 10))
            d["tokens"] = .number(JSONNumber(Double(today.tokens)))
            if let capped { d["cap_reached"] = .string(capped) }
            o["today"] = .object(d)
        }
        return AgentStatus.fileBytes(o)
    }

    /// The file's bytes before the run has a session, with the same keys: `new` at
    /// start, `waiting` with what it waits for (the sound device) as its `problem`.
    public static func beforeSession(turnDetection: String, waitingFor problem: String?) -> [UInt8] {
        var o = JSONObject()
        o["state"] = .string(problem == nil ? SessionState.new.rawValue : "waiting")
        o["since_s"] = .number(JSONNumber(0))
        o["turn_detection"] = .string(turnDetection)
        if let problem { o["problem"] = .string(problem) }
        return fileBytes(o)
    }

    /// One JSON object and a newline.
    static func fileBytes(_ o: JSONObject) -> [UInt8] {
        var bytes = JSONValue.object(o).serialized()
        bytes.append(10)
        return bytes
    }
}

extension AgentCore {
    public var statusSnapshot: AgentStatus {
        AgentStatus(state: supervisor.state, sinceSeconds: Double((now - stateSince).milliseconds) / 1000, muted: muted,
                    turnDetection: settings.turnDetectionName, reconnects: reconnects, session: activeID,
                    rttMilliseconds: activeSession?.peer?.stats.roundTripTime.map { Double($0.microseconds) / 1000 },
                    lastUser: lastUserText, lastAssistant: lastAssistantText, problem: problem ?? capped ?? settings.deviceProblem,
                    tokens: usage.responses > 0 ? (usage.inputTokens, usage.outputTokens) : nil, today: todaySoFar, capped: capped)
    }

    func writeStatus() { emit(.status(statusSnapshot)) }
}
