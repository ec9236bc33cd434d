// One line of an earlier session's conversation carried into the next session, and the
// rule for which lines fit. Its own value because the agent core keeps the history
// across sessions while each `RealtimeConversation` lives for one session only.

/// One line of an earlier session's conversation, carried into a new session
/// (`conversation.item.create`) so the assistant remembers it across a rollover or a
/// reconnect.
public struct CarriedTurn: Sendable, Equatable {
    public var role: RealtimeRole
    public var text: String
    public init(role: RealtimeRole, text: String) {
        self.role = role
        self.text = text
    }

    /// The last `count` turns of `turns` whose texts fit in `maxBytes` of UTF-8 in all
    /// (the newest are kept: they matter most to the next answer).
    public static func recent(_ turns: [CarriedTurn], count: Int, maxBytes: Int) -> [CarriedTurn] {
        var out: [CarriedTurn] = []
        var used = 0
        for t in turns.reversed() {
            guard out.count < count else { break }
            let n = t.text.utf8.count
            if used + n > maxBytes { break }
            used += n
            out.append(t)
        }
        return out.reversed()
    }
}
