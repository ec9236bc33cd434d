import CSystem
import Wire

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

    /// A line with journald fields (`MESSAGE_ID`, `LINNET_STATE`…): a native journal
    /// entry when standard error goes to the journal, else written as any other line.
    public static func structured(_ lvl: LogLevel, _ message: String, _ fields: [(String, String)]) {
        guard lvl <= level else { return }
        if journal, let j = Journal.shared,
           j.send([("MESSAGE", message), ("PRIORITY", String(lvl.rawValue)), ("SYSLOG_IDENTIFIER", "linnet")] + fields) { return }
        writeLine(format(lvl, message))
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
    _ = writeFully(fd: fd, bytes)
}

/// Writes all of `bytes` to `fd`, retrying short writes and EINTR. Returns nil when all
/// was written, else the error (`EPIPE` for a reader that went away, `ENOSPC` for a full
/// disk) and how many bytes did get written before it. SIGPIPE is ignored process-wide
/// (`ProcessSignals.ignoreWriteSignals`), so a closed pipe is this error, not a death.
public func writeFully(fd: Int32, _ bytes: [UInt8]) -> (error: SystemError, written: Int)? {
    bytes.withUnsafeBytes { raw in writeFully(fd: fd, raw) }
}

public func writeFully(fd: Int32, _ raw: UnsafeRawBufferPointer) -> (error: SystemError, written: Int)? {
    var done = 0
    while done < raw.count {
        let n = write(fd, raw.baseAddress! + done, raw.count - done)
        if n > 0 { done += n; continue }
        let code = n < 0 ? csystem_errno() : EIO
        if code == EINTR { continue }
        // A write of 0 bytes to a non-empty buffer does not happen on Linux files,
        // pipes or sockets; were it to, looping would spin, so call it an I/O error.
        return (SystemError("write", code: code), done)
    }
    return nil
}

/// Writes a string to standard output (the CLI's normal output).
public func writeOut(_ text: String) {
    writeAll(fd: 1, Array(text.utf8))
}
