// `--events FILE`: session events and data-channel messages as JSON lines, for scripts
// and a kiosk UI ("-": standard output).
//
// An events output that fails (the reader of a pipe went away: `linnet run --events - |
// head -1`; a full disk; /dev/full) is reported once, on stderr, and no more events are
// written; the call goes on. Events are a view of the call, not the call: losing the
// view must not end it, and must not go unsaid either.
import CSystem
import Wire
import JSON
import Platform
import Agent

public final class EventLog {
    let fd: Int32
    let ownsDescriptor: Bool
    let path: String
    let start: Instant
    /// Added to every line (`events-label`: tells devices apart in fleet logs).
    let label: String?
    /// The write error that ended the output, once there was one.
    private(set) var failure: SystemError?

    public init(path: String, start: Instant, label: String? = nil) throws(CLIFailure) {
        self.path = path
        self.start = start
        self.label = label
        if path.bytesEqual("-") {
            fd = 1
            ownsDescriptor = false
        } else {
            // Without blocking: a FIFO nobody reads yet is an error, not a silent hang.
            switch openForWriting(path, flags: O_CREAT | O_APPEND) {
            case .success(let f): fd = f
            case .failure(let e): throw CLIFailure(.config, "--events '\(path)': \(writeOpenReason(e))")
            }
            ownsDescriptor = true
        }
    }

    deinit { if ownsDescriptor { close(fd) } }

    /// Writes one line: `{"t": seconds, "type": …, …fields}`.
    func write(_ type: String, _ fields: [(String, JSONValue)], now: Instant) {
        guard failure == nil else { return }
        var object = JSONObject()
        object["t"] = .number(JSONNumber(Double((now - start).microseconds) / 1_000_000))
        object["type"] = .string(type)
        if let label { object["device"] = .string(label) }
        for (k, v) in fields { object[k] = v }
        var bytes = JSONValue.object(object).serialized()
        bytes.append(10)
        if let (error, _) = writeFully(fd: fd, bytes) {
            failure = error
            let what = path.bytesEqual("-") ? "standard output" : "'\(path)'"
            if error.code == EPIPE {
                Log.warning("--events: the reader of \(what) went away (\(SystemError.message(error.code))); no more events are written, the call goes on")
            } else {
                Log.warning("--events \(what): \(SystemError.message(error.code)); no more events are written, the call goes on")
            }
        }
    }
}
