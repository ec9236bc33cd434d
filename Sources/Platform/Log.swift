import CSystem

/// Severity of a log line, with its syslog/journald priority number.
public enum LogLevel: Int32, Comparable, Sendable {
    case error = 3
    case warning = 4
    case info = 6
    case debug = 7

    /// Ordered by verbosity: error < warning < info < debug.
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }

    /// Parses the `--log-level` spellings (`error`, `warn`/`warning`, `info`, `debug`).
    public init?(name: String) {
        switch name {
        case "error": self = .error
        case "warn", "warning": self = .warning
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }

    var word: String {
        switch self {
        case .error: return "error"
        case .warning: return "warning"
        case .info: return "info"
        case .debug: return "debug"
        }
    }
}

/// Logging to standard error, one `write(2)` per line so lines from different threads
/// never interleave. Under systemd (`$JOURNAL_STREAM` set) each line starts with the
/// journald priority prefix `<3>`…`<7>` (sd-daemon(3)), so `journalctl -p warning` works;
/// on a terminal it reads `linnet: warning: …` instead.
///
/// Never called from the real-time audio threads: they count, the loop logs.
public enum Log {
    nonisolated(unsafe) public static var level: LogLevel = .info
    nonisolated(unsafe) public static var journal: Bool = environment("JOURNAL_STREAM") != nil

    public static func error(_ message: @autoclosure () -> String) { emit(.error, message) }
    public static func warning(_ message: @autoclosure () -> String) { emit(.warning, message) }
    public static func info(_ message: @autoclosure () -> String) { emit(.info, message) }
    public static func debug(_ message: @autoclosure () -> String) { emit(.debug, message) }

    public static func emit(_ lvl: LogLevel, _ message: () -> String) {
        guard lvl <= level else { return }
        writeLine(format(lvl, message()))
    }

    /// The line exactly as written (without the newline).
    public static func format(_ lvl: LogLevel, _ message: String) -> String {
        if journal { return "<\(lvl.rawValue)>" + message }
        return lvl == .info ? "linnet: " + message : "linnet: \(lvl.word): " + message
    }

    static func writeLine(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        writeAll(fd: 2, bytes)
    }
}

/// Writes all of `bytes` to `fd`, retrying short writes and EINTR; gives up silently on
/// any other error (a closed stderr must not take the agent down).
public func writeAll(fd: Int32, _ bytes: [UInt8]) {
    bytes.withUnsafeBytes { raw in
        var done = 0
        while done < raw.count {
            let n = write(fd, raw.baseAddress! + done, raw.count - done)
            if n > 0 { done += n } else if n < 0 && csystem_errno() == EINTR { continue } else { return }
        }
    }
}

/// Writes a string to standard output (the CLI's normal output).
public func writeOut(_ text: String) {
    writeAll(fd: 1, Array(text.utf8))
}
