// The state and counters an audio thread shares with the loop: written with atomics on
// the real-time side, read by the loop for stats, logs and the watchdog.
import Synchronization

/// The states an audio thread reports (read by the loop for logs and the watchdog).
public enum AudioThreadState: Int, Sendable {
    case starting = 0, running, reopening, finished, stopped
}

/// Counters shared between an audio thread and the loop: written with relaxed atomics
/// on the real-time side, read by the loop for stats, logs and the watchdog.
public final class AudioThreadCounters: Sendable {
    public let periods = Atomic<UInt64>(0)
    public let frames = Atomic<UInt64>(0)
    public let xruns = Atomic<UInt64>(0)
    public let reopenings = Atomic<UInt64>(0)
    /// Playback: flushes carried out (the buffer dropped on request).
    public let flushes = Atomic<UInt64>(0)
    /// Times the thread's timeline jumped to a measurement instead of counting on
    /// (FrameTimeline: a start, an xrun, a stall): each one can move the echo
    /// canceller's reference against the microphone.
    public let timelineJumps = Atomic<UInt64>(0)
    /// Monotonic nanoseconds of the last period handled: the watchdog's heartbeat.
    public let lastPeriodNanoseconds = Atomic<Int64>(0)
    let stateRaw = Atomic<Int>(AudioThreadState.starting.rawValue)
    /// The last ALSA error code seen (negative errno), for the loop to log.
    public let lastError = Atomic<Int32>(0)

    public init() {}

    public var state: AudioThreadState { AudioThreadState(rawValue: stateRaw.load(ordering: .acquiring)) ?? .stopped }
    func set(_ s: AudioThreadState) { stateRaw.store(s.rawValue, ordering: .releasing) }
}
