/// The push-to-talk button's logic, pure: raw edges in, debounced talk and long-press
/// events out. No I/O and no clock; `GPIOButton` feeds it edges read from the kernel and
/// the loop calls `handleTimeout(now:)` at `nextDeadline`.
///
/// Design decisions:
/// - Debounce by stability: a level counts once the raw line has stayed there for
///   `debounce` (default 20 ms). A contact bounces for a few milliseconds; a glitch
///   shorter than `debounce` (a spike picked up on a long cable) never becomes a press.
///   The price is `debounce` of latency on each press, far below what a person notices.
/// - Events are ordered on the line's own timeline: a deadline that fell before an edge
///   (a release settling, a long press running out) is handled before that edge, even
///   when both arrive in one read.
/// - `.talk` events alternate strictly (true, false, true…), so the mute gate and the
///   provider's push-to-talk flow can follow them without keeping their own state.
/// - A long press (default 3 s) ends the talking it started (`.talk(false)` first, then
///   `.longPress`): the person meant "new session", not "say something for 3 s". Its
///   release then does nothing.
/// - Hold mode talks on press and stops on release. Toggle mode switches on press, so
///   it answers as fast as hold mode. Open mode never gates the microphone but still
///   reports long presses.
/// - A button already held when the line is opened is ignored until released: a stuck
///   or shorted button must not open the microphone at boot.
///
/// Drive contract (ARCHITECTURE.md "Drive loop"): after `handleEdge` or `handleTimeout`,
/// drain `pollOutput()` until it returns `.timeout`, and call `handleTimeout` then.
import Wire
import Audio

/// What the button means to the agent.
public enum ButtonEvent: Sendable, Equatable, CustomStringConvertible {
    /// Start (true) or stop (false) talking: open or close the mute gate.
    case talk(Bool)
    /// The button was held for the long-press time: end the session or start a new one.
    case longPress

    public var description: String {
        switch self {
        case .talk(let on): return on ? "talk on" : "talk off"
        case .longPress: return "long press"
        }
    }
}

/// What `ButtonLogic.pollOutput()` has next.
public enum ButtonOutput: Sendable, Equatable {
    case event(ButtonEvent)
    /// Nothing more until this deadline (`Instant.distantFuture`: nothing is pending).
    case timeout(Instant)
}

public struct ButtonLogic: Sendable {
    public static let defaultDebounce = Duration.milliseconds(20)
    public static let defaultLongPress = Duration.seconds(3)

    public let mode: PTTMode
    public let debounce: Duration
    /// Nil: long presses are not reported.
    public let longPress: Duration?

    /// The line as last seen, and since when.
    var raw: Bool
    var rawSince: Instant
    /// The debounced level.
    public private(set) var pressed: Bool
    /// When the current accepted press began; nil for a press held since start-up.
    var pressStart: Instant? = nil
    var longFired = false
    /// Whether the microphone is open by the button's account.
    public private(set) var talking = false
    var queue: [ButtonEvent] = []
    var queueHead = 0

    /// - Parameters:
    ///   - pressed: the line's level when it was opened (a held button is ignored until
    ///     it is released).
    ///   - now: when that level was read.
    public init(mode: PTTMode, debounce: Duration = ButtonLogic.defaultDebounce,
                longPress: Duration? = ButtonLogic.defaultLongPress, pressed: Bool = false, now: Instant) {
        self.mode = mode
        self.debounce = debounce
        self.longPress = longPress
        self.raw = pressed
        self.rawSince = now
        self.pressed = pressed
    }

    /// The line changed to `pressed` (already active-low corrected) at `at`. Edges must
    /// come in time order; an edge to the level the line already has is harmless.
    public mutating func handleEdge(pressed level: Bool, at: Instant) {
        // Whatever settled before this edge happened first.
        handleTimeout(now: at)
        guard level != raw else { return }
        raw = level
        rawSince = at
    }

    /// Handles every deadline at or before `now`, in time order.
    public mutating func handleTimeout(now: Instant) {
        while true {
            let settle = settleDeadline
            let long = longDeadline
            if let s = settle, s <= now, long.map({ s <= $0 }) ?? true {
                accept()
            } else if let l = long, l <= now {
                fireLongPress()
            } else {
                return
            }
        }
    }

    /// The next event, or the deadline to call `handleTimeout` at.
    public mutating func pollOutput() -> ButtonOutput {
        if queueHead < queue.count {
            let e = queue[queueHead]
            queueHead += 1
            if queueHead == queue.count {
                queue.removeAll(keepingCapacity: true)
                queueHead = 0
            }
            return .event(e)
        }
        return .timeout(nextDeadline ?? .distantFuture)
    }

    /// The earliest pending deadline (a level settling, a long press running out).
    public var nextDeadline: Instant? {
        switch (settleDeadline, longDeadline) {
        case (let s?, let l?): return min(s, l)
        case (let s?, nil): return s
        case (nil, let l?): return l
        case (nil, nil): return nil
        }
    }

    var settleDeadline: Instant? { raw != pressed ? rawSince + debounce : nil }

    /// Held while a release is settling: that release began before the long-press
    /// time (else the long press would have fired first), so it decides; a bounce back
    /// to pressed brings the deadline back.
    var longDeadline: Instant? {
        guard let longPress, pressed, raw, !longFired, let start = pressStart else { return nil }
        return start + longPress
    }

    private mutating func accept() {
        pressed = raw
        if pressed {
            // The press began when the contact settled, not when it was accepted.
            pressStart = rawSince
            longFired = false
            switch mode {
            case .hold: setTalking(true)
            case .toggle: setTalking(!talking)
            case .open: break
            }
        } else {
            let counted = pressStart != nil && !longFired
            pressStart = nil
            if counted && mode == .hold { setTalking(false) }
        }
    }

    private mutating func fireLongPress() {
        longFired = true
        setTalking(false)
        queue.append(.longPress)
    }

    private mutating func setTalking(_ on: Bool) {
        guard on != talking else { return }
        talking = on
        queue.append(.talk(on))
    }
}
