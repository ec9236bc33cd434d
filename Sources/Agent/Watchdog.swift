// Watchdog health: whether to send systemd `WATCHDOG=1` (sd_notify(3)) at this check.
// The pings are a promise that the whole pipeline works, not that the process exists:
// systemd restarts Linnet when they stop (`WatchdogSec=`), so they stop exactly when a
// restart would help — an audio thread stuck in a driver, or a loop that no longer
// turns. The check itself runs on a loop timer, so a stuck loop sends nothing at all.
import Wire

/// One sample of the pipeline's progress counters, read by the loop at each check.
public struct PipelineProgress: Sendable, Equatable {
    /// Periods the capture thread has delivered; nil when capture is deliberately idle
    /// (no capture device in use, e.g. a file as the microphone).
    public var captureFrames: Int?
    /// Periods the playback thread has written; nil when no playback device is in use.
    public var playbackFrames: Int?

    public init(captureFrames: Int?, playbackFrames: Int?) {
        self.captureFrames = captureFrames
        self.playbackFrames = playbackFrames
    }
}

public enum WatchdogVerdict: Sendable, Equatable {
    case ping
    /// Hold the ping back; the reason is logged once per stall.
    case withhold(String)
}

public struct WatchdogHealth: Sendable {
    var last: PipelineProgress?
    var lastCheck: Instant?

    public init() {}

    /// Decides at a check; pings only when every thread in use has moved since the last
    /// check (the first check only records a baseline and pings: the threads have just
    /// been started and systemd's first deadline is a full interval away).
    public mutating func check(_ progress: PipelineProgress, now: Instant) -> WatchdogVerdict {
        defer {
            last = progress
            lastCheck = now
        }
        guard let last else { return .ping }
        if let c = progress.captureFrames, let before = last.captureFrames, c == before {
            return .withhold("no capture frames since the last check: the capture thread is stuck")
        }
        if let p = progress.playbackFrames, let before = last.playbackFrames, p == before {
            return .withhold("no playback frames since the last check: the playback thread is stuck")
        }
        return .ping
    }

    /// The check interval for `WATCHDOG_USEC` (half of it, as sd_watchdog_enabled(3)
    /// recommends), never below 100 ms: capture delivers a period every 10 ms, so
    /// each check sees several.
    public static func interval(watchdogMicroseconds usec: Int64) -> Duration {
        max(.milliseconds(100), .microseconds(usec / 2))
    }
}
