/// Severity of a log line, with its syslog/journald priority number.
///
/// One type for the whole program: `Platform.Log` filters and prefixes lines by it and
/// the `log-level` setting parses into it. It lives here, below both, because a pure
/// module (Settings) may not import the IO module (Platform) that writes the lines.
public enum LogLevel: Int32, Comparable, Sendable, CaseIterable {
    case error = 3
    case warning = 4
    case info = 6
    case debug = 7

    /// The `log-level` spelling CLI.md documents for `.warning`.
    public static var warn: LogLevel { .warning }

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

    /// The word a log line carries (`linnet: warning: …`).
    public var word: String {
        switch self {
        case .error: return "error"
        case .warning: return "warning"
        case .info: return "info"
        case .debug: return "debug"
        }
    }

    /// The spelling `log-level` documents and lists: `warn` for `.warning` (CLI.md).
    public var name: String { self == .warning ? "warn" : word }
}
