import CSystem

/// Signals delivered through a signalfd on the loop instead of asynchronous handlers,
/// so SIGTERM/SIGINT/SIGUSR1 are handled like any other input (no async-signal-safety
/// puzzles, no interrupted real-time threads).
///
/// `block()` must run before any thread starts: new threads inherit the mask, so no
/// thread ever receives these signals asynchronously.
public final class SignalSource {
    public let fd: Int32
    let signals: [Int32]

    public init(_ signals: [Int32]) throws(SystemError) {
        var set = sigset_t()
        sigemptyset(&set)
        for s in signals { sigaddset(&set, s) }
        _ = pthread_sigmask(SIG_BLOCK, &set, nil)
        fd = try sys("signalfd") { signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC)) }
        self.signals = signals
    }

    deinit { closeDescriptor(fd) }

    /// The signals that arrived since the last call, in order.
    public func drain() -> [Int32] {
        var out: [Int32] = []
        var info = signalfd_siginfo()
        while read(fd, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
            out.append(Int32(info.ssi_signo))
        }
        return out
    }
}

/// Process-wide signal dispositions set once at start.
public enum ProcessSignals {
    /// Ignores SIGPIPE and SIGXFSZ, before any thread starts (the disposition is
    /// process-wide). By default a write to a closed pipe (`linnet run --events - |
    /// head -1`) or past `RLIMIT_FSIZE` (systemd's `LimitFSIZE=`) kills the process on
    /// the spot: no provider-side close, a status file left at `connected`, a WAV header
    /// never patched. Ignored, they become `EPIPE` and `EFBIG` from write(2), which each
    /// output reports once and survives (the call goes on).
    public static func ignoreWriteSignals() {
        csystem_ignore_signal(SIGPIPE)
        csystem_ignore_signal(SIGXFSZ)
    }

    /// `SIGHUP`, `SIGTERM`… for log lines; the number for others.
    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGHUP: return "SIGHUP"
        case SIGINT: return "SIGINT"
        case SIGTERM: return "SIGTERM"
        case SIGUSR1: return "SIGUSR1"
        case SIGPIPE: return "SIGPIPE"
        default: return "signal \(signal)"
        }
    }
}
