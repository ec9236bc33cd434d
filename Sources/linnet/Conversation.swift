// The provider's event conversation on the events channel, as the runner sees it.
// (Adapter over the Agent module's Realtime state machine.)
import Wire
import JSON
import Agent

final class Conversation {
    var send: (String) -> Void = { _ in }
    var log: (String, [(String, JSONValue)]) -> Void = { _, _ in }
    var lastUserText: String?
    var lastAssistantText: String?

    init(config: Config) {}

    func channelOpened(now: Instant) {}
    func received(_ text: String, now: Instant) {}
    func press(now: Instant) {}
    func release(now: Instant) {}
    func audioSent(milliseconds: Int, now: Instant) {}
}
