// The hands-free turn a wake word opens: earcon, listen, end on the user's silence.
import Wire

/// What a wake turn asks of the core.
public enum WakeAction: Equatable, Sendable {
    /// Play the earcon now (locally; it is never sent).
    case earcon
    /// Open the microphone for the user's turn (a press of the button).
    case open
    /// The user spoke and fell silent: end the turn and ask for the answer (a release).
    case close
    /// Nobody spoke after the wake: end the turn with nothing committed (no answer to
    /// a silent buffer).
    case abandon
}

/// The wake word's turn as a pure state machine with time as input (the core drives it
/// from `wake`, its voice flag and its timeouts).
///
/// - The earcon plays first, and the microphone opens when it has played, so the chime
///   is not in what is sent even with no echo canceller (`aec = off`).
/// - The turn ends on the voice flag (Linnet's own, speexdsp's): once voice was heard,
///   `endSilence` without it ends the turn; a turn nobody speaks in is abandoned after
///   `noSpeech`; a turn that never falls silent (a television) ends at `longest`.
/// - A wake while a turn is open starts it again (the user said the word again): the
///   earcon confirms it, and what was said so far is dropped by the press that follows.
public struct WakeTurn: Sendable {
    public struct Timing: Sendable, Equatable {
        /// How long the earcon plays (`Earcon.duration`), plus the output's latency.
        public var earcon: Duration
        public var endSilence: Duration
        public var noSpeech: Duration
        public var longest: Duration
        public init(earcon: Duration = .milliseconds(200), endSilence: Duration = .milliseconds(900),
                    noSpeech: Duration = .seconds(6), longest: Duration = .seconds(20)) {
            self.earcon = earcon
            self.endSilence = endSilence
            self.noSpeech = noSpeech
            self.longest = longest
        }
    }

    public enum Phase: Equatable, Sendable {
        case idle
        case chiming(until: Instant)
        /// `voiceAt`: when the flag was last on (nil: not yet in this turn).
        case listening(since: Instant, voiceAt: Instant?)
    }

    public let timing: Timing
    public private(set) var phase = Phase.idle
    /// Wakes, turns that ended on silence, turns abandoned, turns cut at `longest`.
    public private(set) var wakes = 0
    public private(set) var closed = 0
    public private(set) var abandoned = 0
    public private(set) var cutLong = 0

    public init(timing: Timing = Timing()) { self.timing = timing }

    public var isOpen: Bool { if case .listening = phase { return true } else { return false } }
    public var isActive: Bool { phase != .idle }

    /// The detector fired.
    public mutating func wake(now: Instant) -> WakeAction {
        wakes += 1
        phase = .chiming(until: now + timing.earcon)
        return .earcon
    }

    /// The voice flag's state at a frame: held for `heldFor` (zero: not on).
    public mutating func voice(heldFor: Duration, now: Instant) -> WakeAction? {
        guard case .listening(let since, _) = phase else { return nil }
        if heldFor > .zero {
            phase = .listening(since: since, voiceAt: now)
            return nil
        }
        return check(now: now)
    }

    /// The next moment `timeout` has something to do.
    public var deadline: Instant? {
        switch phase {
        case .idle: return nil
        case .chiming(let until): return until
        case .listening(let since, let voiceAt):
            let end = voiceAt.map { $0 + timing.endSilence } ?? since + timing.noSpeech
            return min(end, since + timing.longest)
        }
    }

    public mutating func timeout(now: Instant) -> WakeAction? {
        switch phase {
        case .idle: return nil
        case .chiming(let until):
            guard now >= until else { return nil }
            phase = .listening(since: now, voiceAt: nil)
            return .open
        case .listening: return check(now: now)
        }
    }

    /// The turn ended from outside (the button was pressed, the session went away).
    public mutating func cancel() { phase = .idle }

    private mutating func check(now: Instant) -> WakeAction? {
        guard case .listening(let since, let voiceAt) = phase else { return nil }
        if now - since >= timing.longest {
            phase = .idle
            cutLong += 1
            return voiceAt == nil ? .abandon : .close
        }
        if let v = voiceAt {
            guard now - v >= timing.endSilence else { return nil }
            phase = .idle
            closed += 1
            return .close
        }
        guard now - since >= timing.noSpeech else { return nil }
        phase = .idle
        abandoned += 1
        return .abandon
    }
}
