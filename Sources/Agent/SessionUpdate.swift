// The `session.update` bodies a `RealtimeConversation` sends when the events channel
// opens. They depend on the settings alone (no conversation state), so they read apart
// from the state machine, and tests can check the JSON without driving a session.
import JSON
import Settings

extension RealtimeConversation {
    /// The `session.update` sent on open (GA shape: `session.type` "realtime",
    /// `audio.input.transcription.model`, `audio.input.turn_detection`,
    /// `audio.output.voice`). Fields left nil in the settings are not sent, so the
    /// server keeps its own (a backend may have set them when it created the session).
    /// Every `session.update` sent on open, in order: `turn_detection` in
    /// its own first update, so a refusal of the rest (a voice the session cannot
    /// change) cannot leave the server's VAD answering a push-to-talk device; then the
    /// rest. Only what is configured is sent: a backend's choices survive.
    public func sessionUpdates() -> [JSONValue] {
        var out: [JSONValue] = []
        if let td = turnDetectionValue() {
            var input = JSONObject()
            input["turn_detection"] = td
            out.append(Self.update(audioInput: input))
        }
        if let rest = sessionUpdate(includingTurnDetection: false) { out.append(rest) }
        return out
    }

    /// The whole configuration in one `session.update` (GA shape).
    public func sessionUpdate() -> JSONValue {
        sessionUpdate(includingTurnDetection: true) ?? Self.update(audioInput: JSONObject())
    }

    /// What `turn_detection` is sent as, if anything: null for push-to-talk (turns end
    /// with our commit); in voice mode only a configured kind or figure, stated with
    /// `create_response`/`interrupt_response` (the server answers and stops when the
    /// user talks over it). `threshold` and `silence_duration_ms` are `server_vad`'s.
    func turnDetectionValue() -> JSONValue? {
        switch settings.turnDetection {
        case .ptt:
            return .null
        case .vad:
            guard settings.vadType != nil || settings.vadThreshold != nil || settings.vadSilenceMilliseconds != nil else { return nil }
            let type = settings.vadType ?? .serverVAD
            var td = JSONObject()
            td["type"] = .string(type.rawValue)
            if type == .serverVAD {
                if let t = settings.vadThreshold { td["threshold"] = .number(JSONNumber(t)) }
                if let ms = settings.vadSilenceMilliseconds { td["silence_duration_ms"] = JSONValue(ms) }
            }
            td["create_response"] = true
            td["interrupt_response"] = true
            return .object(td)
        }
    }

    static func update(audioInput: JSONObject) -> JSONValue {
        var audio = JSONObject()
        audio["input"] = .object(audioInput)
        return ["type": "session.update", "session": ["type": "realtime", "audio": .object(audio)]]
    }

    func sessionUpdate(includingTurnDetection: Bool) -> JSONValue? {
        var input = JSONObject()
        if let model = settings.transcriptionModel {
            input["transcription"] = ["model": .string(model)]
        }
        if let nr = settings.noiseReduction {
            input["noise_reduction"] = nr == .off ? .null : ["type": .string(nr.rawValue)]
        }
        if includingTurnDetection, let td = turnDetectionValue() { input["turn_detection"] = td }
        var audio = JSONObject()
        if !input.isEmpty { audio["input"] = .object(input) }
        if let voice = settings.voice {
            audio["output"] = ["voice": .string(voice)]
        }
        var session = JSONObject()
        session["type"] = "realtime"
        if let instructions = settings.instructions {
            session["instructions"] = .string(instructions)
        }
        if !audio.isEmpty { session["audio"] = .object(audio) }
        if !settings.tools.isEmpty {
            session["tools"] = .array(settings.tools)
            session["tool_choice"] = "auto"
        }
        guard session.count > 1 else { return nil }
        return ["type": "session.update", "session": .object(session)]
    }
}
