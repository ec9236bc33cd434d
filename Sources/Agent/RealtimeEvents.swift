// What the Realtime conversation tells its caller: who spoke (`RealtimeRole`), what
// happened (`RealtimeEvent`, with its log line and its `--events` record) and each step
// of the drive loop (`RealtimeOutput`). Apart from the conversation's state machine so
// that the log, the events file and the supervisor can read them without it.
import Wire
import JSON

/// Who said a transcript line.
public enum RealtimeRole: String, Sendable, Equatable {
    case user
    case assistant
}

/// What happened in the conversation, for the log, the events file and the supervisor.
public enum RealtimeEvent: Sendable, Equatable {
    /// `session.created` (`updated: false`) or `session.updated` (`updated: true`).
    case sessionReady(updated: Bool)
    /// A `response.done`'s `usage` (tokens by modality).
    case usage(ProviderUsage)
    /// What was said. `final: false` carries the text so far (from deltas); `final:
    /// true` is the one complete line of the item. `itemID` is empty when the server
    /// (or a relay) named no item.
    case transcript(role: RealtimeRole, text: String, final: Bool, itemID: String)
    /// An `error` event (or a failed transcription or response): the server's code
    /// (nil when it gave none), its message, and the type of our client event it names
    /// (`response.cancel`), when it names one we sent.
    case providerError(code: String?, message: String, clientEvent: String?)
    /// The provider ended the session at its limit (error code `session_expired`);
    /// follows the `.providerError` of the same event.
    case sessionExpired(message: String)
    /// The assistant started (true) or stopped (false) speaking.
    case speaking(Bool)
    /// The server's VAD heard the user start (true) or stop (false) speaking
    /// (`input_audio_buffer.speech_started` / `speech_stopped`).
    case userSpeech(Bool)
    /// A release with less audio than `minimumCommitMilliseconds`: nothing was
    /// committed. `sentMilliseconds` is the audio sent since the press, `held` how long
    /// the button was down.
    case tooShort(sentMilliseconds: Int, held: Duration)
    /// A server message that could not be used; the reason names what was wrong.
    case malformed(String)
    /// `session.updated` shows a setting other than the one we asked for (the server
    /// or a backend kept its own); `what` says which and how.
    case settingIgnored(String)
    /// No `session.updated` came within `sessionUpdateWarning` of our `session.update`:
    /// the device stops waiting (the microphone opens, `send` lines go out), but the
    /// server may still be running with its defaults.
    case sessionNotConfirmed(waited: Duration)
    /// A commit was answered neither by `input_audio_buffer.committed` nor by an error
    /// naming it within `commitAnswerTimeout`: the response is asked for anyway (a relay
    /// may not forward `committed`).
    case commitUnconfirmed(waited: Duration)
    /// The session's own end (`session.expires_at`, Unix seconds), from
    /// `session.created`: the rollover is planned from it.
    case expires(at: Int64)
    /// The user cut the assistant off: `conversation.item.truncate` went out for its
    /// audio item, at `audioEndMilliseconds` of it played out of the speaker.
    case truncated(itemID: String, audioEndMilliseconds: Int)
    /// The final line of an assistant item the user cut off: only what was heard
    /// (`heardMilliseconds` of its audio), never the whole reply.
    case interrupted(text: String, heardMilliseconds: Int, itemID: String)
    /// The model called a function tool: its call id, the tool's name and the arguments
    /// as the JSON text it generated (not yet checked). Exactly one `toolOutput` answers it.
    case toolCall(callID: String, name: String, arguments: String)
}

extension RealtimeEvent: CustomStringConvertible {
    /// One log line; the provider's text in it is escaped and capped (`TranscriptLine`).
    public var description: String {
        switch self {
        case .sessionReady(let updated): return updated ? "session updated" : "session created"
        case .usage(let u): return "response usage: \(u.inputTokens) tokens in (\(u.inputAudioTokens) audio, \(u.inputCachedTokens) cached), \(u.outputTokens) out (\(u.outputAudioTokens) audio)"
        case .transcript(let role, let text, let final, _):
            return final ? TranscriptLine(role: role, text: text).description
                         : escapedLine(prefix: role.rawValue + " (so far): ", text: text, maxBytes: TranscriptLine.defaultMaxBytes)
        case .providerError(let code, let message, let clientEvent):
            let head = "provider error" + (code.map { " " + escapedLine(prefix: "", text: $0, maxBytes: 64) } ?? "")
                + (clientEvent.map { " (after " + $0 + ")" } ?? "") + ": "
            return escapedLine(prefix: head, text: message, maxBytes: 400)
        case .sessionExpired(let message): return escapedLine(prefix: "session expired: ", text: message, maxBytes: 400)
        case .speaking(let on): return on ? "assistant speaking" : "assistant silent"
        case .userSpeech(let on): return on ? "user speech started" : "user speech stopped"
        case .tooShort(let sent, let held):
            return "push-to-talk too short: \(sent) ms of audio sent in \(held), nothing committed"
        case .malformed(let reason): return "unusable provider event: " + reason
        case .settingIgnored(let what): return escapedLine(prefix: "provider ignored a setting: ", text: what, maxBytes: 200)
        case .sessionNotConfirmed(let waited):
            return "no session.updated within \(waited) of session.update: going on, but the provider may be using its default voice and turn detection"
        case .commitUnconfirmed(let waited):
            return "no input_audio_buffer.committed within \(waited) of the commit: asking for the response anyway"
        case .expires(let at): return "the provider's session expires at \(at) (Unix time)"
        case .truncated(_, let ms): return "barge-in: the provider told the reply was heard for \(ms) ms"
        case .interrupted(let text, let ms, _):
            return escapedLine(prefix: "assistant (interrupted after \(ms) ms): ", text: text, maxBytes: TranscriptLine.defaultMaxBytes)
        case .toolCall(_, let name, let arguments):
            return escapedLine(prefix: "tool call: \(escapedLine(prefix: "", text: name, maxBytes: 64)) ", text: arguments, maxBytes: 300)
        }
    }

    /// The event as an `--events` line: a type and its fields (text as sent, the JSON
    /// serializer escapes it). Partial transcripts are `final: false` lines too; a
    /// writer that wants only "what was said" keeps the `final` ones.
    public var eventLogEntry: (type: String, fields: [(String, JSONValue)]) {
        switch self {
        case .sessionReady(let updated):
            return ("provider_session", [("state", updated ? "updated" : "created")])
        case .usage(let u):
            return ("usage", [("input_text_tokens", JSONValue(u.inputTextTokens)), ("input_audio_tokens", JSONValue(u.inputAudioTokens)),
                              ("input_cached_tokens", JSONValue(u.inputCachedTokens)), ("output_text_tokens", JSONValue(u.outputTextTokens)),
                              ("output_audio_tokens", JSONValue(u.outputAudioTokens))])
        case .transcript(let role, let text, let final, let itemID):
            var fields: [(String, JSONValue)] = [("role", .string(role.rawValue)), ("text", .string(text)), ("final", .bool(final))]
            if !itemID.isEmpty { fields.append(("item", .string(itemID))) }
            return ("transcript", fields)
        case .providerError(let code, let message, let clientEvent):
            var fields: [(String, JSONValue)] = [("code", code.map { JSONValue.string($0) } ?? .null), ("message", .string(message))]
            if let clientEvent { fields.append(("after", .string(clientEvent))) }
            return ("provider_error", fields)
        case .sessionExpired(let message):
            return ("session_expired", [("message", .string(message))])
        case .speaking(let on):
            return ("speaking", [("role", "assistant"), ("on", .bool(on))])
        case .userSpeech(let on):
            return ("speaking", [("role", "user"), ("on", .bool(on))])
        case .tooShort(let sent, let held):
            return ("ptt_too_short", [("sent_ms", JSONValue(sent)), ("held_ms", JSONValue(Int(held.milliseconds)))])
        case .malformed(let reason):
            return ("provider_malformed", [("reason", .string(reason))])
        case .settingIgnored(let what):
            return ("setting_ignored", [("what", .string(what))])
        case .sessionNotConfirmed(let waited):
            return ("session_not_confirmed", [("waited_ms", JSONValue(Int(waited.milliseconds)))])
        case .commitUnconfirmed(let waited):
            return ("commit_unconfirmed", [("waited_ms", JSONValue(Int(waited.milliseconds)))])
        case .expires(let at):
            return ("session_expires", [("at", JSONValue(Int(at)))])
        case .truncated(let item, let ms):
            return ("truncate", [("item", .string(item)), ("audio_end_ms", JSONValue(ms))])
        case .interrupted(let text, let ms, let itemID):
            var fields: [(String, JSONValue)] = [("role", "assistant"), ("text", .string(text)), ("final", true),
                                                 ("interrupted", true), ("heard_ms", JSONValue(ms))]
            if !itemID.isEmpty { fields.append(("item", .string(itemID))) }
            return ("transcript", fields)
        case .toolCall(let callID, let name, let arguments):
            return ("tool_call", [("call", .string(callID)), ("name", .string(name)), ("arguments", .string(arguments))])
        }
    }
}

/// One step of the drive loop.
public enum RealtimeOutput: Sendable, Equatable {
    /// A JSON text to send on `oai-events` (a text message, PPID 51).
    case send(String)
    case event(RealtimeEvent)
    /// The reply was cut (local speech over it, a press, the server's VAD: its
    /// `output_audio_buffer.cleared`): empty the local playback at once (the jitter
    /// buffer, the device's ring and buffer; without it their depth keeps playing after
    /// the cut), and silence what still arrives of that reply. The server streams it
    /// until it hears our `output_audio_buffer.clear` or its VAD fires, and what it sent
    /// before (in flight, in its sender's queues) arrives after the cut, even after its
    /// `output_audio_buffer.cleared`: without the hold, 50–90 ms of the reply were heard
    /// again 20 ms after the speaker fell silent (the stand-in, on loopback). The hold
    /// ends when a new reply's audio starts (`.releasePlayback`), or after
    /// `MediaPath.cutHold` at most.
    case cutPlayback
    /// A new reply's audio has started: what arrives now is to be heard.
    case releasePlayback
    /// Nothing more until the next input (`nextDeadline` says when a timer is due).
    case none
}
