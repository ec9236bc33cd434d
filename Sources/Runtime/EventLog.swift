// `--events FILE`: session events and data-channel messages as JSON lines, for scripts
// and a kiosk UI ("-": standard output).
//
// An events output that fails (the reader of a pipe went away: `linnet run --events - |
// head -1`; a full disk; /dev/full) is reported once, on stderr, and no more events are
// written; the call goes on. Events are a view of the call, not the call: losing the
// view must not end it, and must not go unsaid either.
//
// A file is appended to, so what led up to a restart (a watchdog kill) is still there
// after it; each run starts with a `start` line (pid, the wall clock) since `t` counts
// from each run's start. A regular file is kept to `maxBytes`: past it, it becomes
// FILE.1 (replacing the one before) and a new FILE begins, so a device that runs for
// months does not fill /run's RAM or an SD card.
import CSystem
import Wire
import JSON
import Platform
import Agent

public final class EventLog {
    var fd: Int32
    let ownsDescriptor: Bool
    /// Where a regular file is rotated (FILE → FILE.1); nil: never (stdout, a FIFO, a
    /// character device).
    let maxBytes: Int?
    var written = 0
    public static let defaultMaxBytes = 4 << 20
    let path: String
    let start: Instant
    /// Added to every line (`events-label`: tells devices apart in fleet logs).
    let label: String?
    /// The write error that ended the output, once there was one.
    private(set) var failure: SystemError?

    public init(path: String, start: Instant, label: String? = nil, maxBytes: Int = EventLog.defaultMaxBytes) throws(CLIFailure) {
        self.path = path
        self.start = start
        self.label = label
        if path.bytesEqual("-") {
            fd = 1
            ownsDescriptor = false
            self.maxBytes = nil
        } else {
            // Without blocking: a FIFO nobody reads yet is an error, not a silent hang.
            switch openForWriting(path, flags: O_CREAT | O_APPEND) {
            case .success(let f): fd = f
            case .failure(let e): throw CLIFailure(.config, "--events '\(path)': \(writeOpenReason(e))")
            }
            ownsDescriptor = true
            var st = stat()
            if fstat(fd, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) {
                self.maxBytes = maxBytes
                written = Int(st.st_size)
            } else {
                self.maxBytes = nil
            }
        }
        write("start", [("pid", JSONValue(Int(getpid()))), ("unix", JSONValue(Int(RealtimeClock.unixSeconds())))], now: start)
    }

    /// FILE becomes FILE.1 and a new FILE begins; a failure leaves the current one.
    func rotate() {
        guard let maxBytes, written >= maxBytes else { return }
        guard rename(path, path + ".1") == 0 else {
            Log.warning("--events '\(path)': cannot rotate to '\(path).1' (\(SystemError.message(csystem_errno()))); it grows on")
            written = Int.min  // said once
            return
        }
        switch openForWriting(path, flags: O_CREAT | O_APPEND) {
        case .success(let f):
            close(fd)
            fd = f
            written = 0
        case .failure(let e):
            // Keep writing to the renamed file rather than losing events.
            Log.warning("--events '\(path)': cannot start a new file after rotating (\(writeOpenReason(e))); writing on to '\(path).1'")
            written = Int.min
        }
    }

    deinit { if ownsDescriptor { close(fd) } }

    /// Writes one line: `{"t": seconds, "type": …, …fields}`.
    public func write(_ type: String, _ fields: [(String, JSONValue)], now: Instant) {
        guard failure == nil else { return }
        var object = JSONObject()
        object["t"] = .number(JSONNumber(Double((now - start).microseconds) / 1_000_000))
        object["type"] = .string(type)
        if let label { object["device"] = .string(label) }
        for (k, v) in fields { object[k] = v }
        var bytes = JSONValue.object(object).serialized()
        bytes.append(10)
        written &+= bytes.count
        if let (error, _) = writeFully(fd: fd, bytes) {
            failure = error
            let what = path.bytesEqual("-") ? "standard output" : "'\(path)'"
            if error.code == EPIPE {
                Log.warning("--events: the reader of \(what) went away (\(SystemError.message(error.code))); no more events are written, the call goes on")
            } else {
                Log.warning("--events \(what): \(SystemError.message(error.code)); no more events are written, the call goes on")
            }
            return
        }
        rotate()
    }
}
