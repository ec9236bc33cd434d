// The provider's event conversation on the events channel, as the runner sees it: the
// Agent module's RealtimeConversation (pure) for the session carrying the audio,
// its messages sent, its events logged ("user: …", "assistant: …") and written to
// --events. A new session (reconnect, rollover) gets a fresh conversation.
import Wire
import JSON
import Platform
import Agent

final class Conversation {
    let settings: RealtimeSettings
    var machine: RealtimeConversation
    var send: (String) -> Void = { _ in }
    var log: (String, [(String, JSONValue)]) -> Void = { _, _ in }
    /// What the provider's session ended with (`session_expired`), for the runner.
    var onExpired: () -> Void = {}
    var lastUserText: String?
    var lastAssistantText: String?
    var assistantSpeaking = false

    init(config: Config, openAIRoute: Bool) {
        var s = RealtimeSettings(config: config)
        // Without a transcription model the service sends no user transcripts; on the
        // direct OpenAI route Linnet asks for its small one unless told otherwise (a
        // backend configures its own sessions).
        if s.transcriptionModel == nil && openAIRoute { s.transcriptionModel = "gpt-4o-mini-transcribe" }
        // 100 ms is the service's floor for a commit, counted from what reached its
        // buffer; RTP arrives behind the data channel, so 150 ms of sent audio keeps a
        // just-long-enough press from failing as `commit_empty`.
        s.minimumCommitMilliseconds = 150
        settings = s
        machine = RealtimeConversation(settings: s)
    }

    /// A new provider session carries the audio: start its conversation afresh.
    func reset() {
        machine = RealtimeConversation(settings: settings)
        assistantSpeaking = false
    }

    func channelOpened(now: Instant) {
        machine.channelOpened(now: now)
        drain()
    }

    func received(_ text: String, now: Instant) {
        machine.received(text: text, now: now)
        drain()
    }

    func press(now: Instant) {
        machine.press(now: now)
        drain()
    }

    func release(now: Instant) {
        machine.release(now: now)
        drain()
    }

    func audioSent(milliseconds: Int, now: Instant) { machine.audioSent(milliseconds: milliseconds) }

    func drain() {
        while true {
            switch machine.pollOutput() {
            case .none: return
            case .send(let text): send(text)
            case .event(let e): report(e)
            }
        }
    }

    func report(_ e: RealtimeEvent) {
        switch e {
        case .transcript(let role, let text, let final, _):
            // Partial lines are many (one per token): only final ones are logged and
            // written; the status file shows the latest line.
            guard final else { return }
            if role == .user { lastUserText = text } else { lastAssistantText = text }
            Log.info(e.description)
        case .providerError(let code, _, _):
            // Cancelling a response that had just finished is a race nobody can avoid.
            if code == "response_cancel_not_active" { Log.debug(e.description) } else { Log.warning(e.description) }
        case .sessionExpired:
            Log.info(e.description)
            onExpired()
        case .malformed, .settingIgnored:
            Log.warning(e.description)
        case .tooShort:
            Log.info(e.description)
        case .speaking(let on):
            assistantSpeaking = on
            Log.debug(e.description)
        case .sessionReady, .userSpeech:
            Log.debug(e.description)
        }
        let entry = e.eventLogEntry
        log(entry.type, entry.fields)
    }
}
