// `--events FILE`: session events and data-channel messages as JSON lines, for scripts
// and a kiosk UI ("-": standard output).
import CSystem
import Wire
import JSON
import Platform

final class EventLog {
    let fd: Int32
    let ownsDescriptor: Bool
    let start: Instant
    /// Added to every line (`events-label`: tells devices apart in fleet logs).
    let label: String?

    init(path: String, start: Instant, label: String? = nil) throws(CLIFailure) {
        self.start = start
        self.label = label
        if path == "-" {
            fd = 1
            ownsDescriptor = false
        } else {
            let f = csystem_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
            guard f >= 0 else { throw CLIFailure(.config, "--events '\(path)': \(SystemError.message(csystem_errno()))") }
            fd = f
            ownsDescriptor = true
        }
    }

    deinit { if ownsDescriptor { close(fd) } }

    /// Writes one line: `{"t": seconds, "type": …, …fields}`.
    func write(_ type: String, _ fields: [(String, JSONValue)], now: Instant) {
        var object = JSONObject()
        object["t"] = .number(JSONNumber(Double((now - start).microseconds) / 1_000_000))
        object["type"] = .string(type)
        if let label { object["device"] = .string(label) }
        for (k, v) in fields { object[k] = v }
        var bytes = JSONValue.object(object).serialized()
        bytes.append(10)
        writeAll(fd: fd, bytes)
    }
}
