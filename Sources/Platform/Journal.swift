import CSystem
import Wire

/// journald's native protocol (systemd.io, "Native Journal Protocol") without libsystemd:
/// one datagram per entry to `/run/systemd/journal/socket`, its fields as `KEY=value`
/// lines; a value holding a newline goes as `KEY`, a newline, its length as 64-bit
/// little-endian, the value and a newline. journald adds the trusted fields itself
/// (`_PID`, `_SYSTEMD_UNIT`…), so an entry sent here reads like a line of the service's
/// standard error, plus the fields a fleet filters on (`MESSAGE_ID`, `LINNET_STATE`…).
public final class Journal {
    private let fd: Int32
    private let path: [UInt8]

    /// The journal, when standard error goes to it (`$JOURNAL_STREAM`: systemd set it
    /// up) and its socket can be used; nil otherwise (lines then go to standard error).
    nonisolated(unsafe) public static var shared: Journal? = environment("JOURNAL_STREAM") != nil ? Journal() : nil

    public init?(socketPath: String = "/run/systemd/journal/socket") {
        let bytes = Array(socketPath.utf8)
        guard bytes.first == UInt8(ascii: "/"), bytes.count < 108 else { return nil }  // a path; sizeof(sun_path)
        path = bytes
        let s = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { return nil }
        fd = s
    }

    deinit { closeDescriptor(fd) }

    /// An entry's datagram. Field names are what journald accepts: uppercase ASCII
    /// letters, digits and underscores, not starting with an underscore (those are its
    /// own, trusted fields); a name that is not is left out.
    public static func entry(_ fields: [(String, String)]) -> [UInt8] {
        var out: [UInt8] = []
        for (name, value) in fields {
            let key = Array(name.utf8)
            guard let first = key.first, first != UInt8(ascii: "_"), key.count <= 64,
                  key.allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }) else { continue }
            let v = Array(value.utf8)
            out += key
            if v.contains(10) {
                out.append(10)
                var n = UInt64(v.count)
                for _ in 0..<8 { out.append(UInt8(truncatingIfNeeded: n)); n >>= 8 }
            } else {
                out.append(UInt8(ascii: "="))
            }
            out += v
            out.append(10)
        }
        return out
    }

    /// Sends one entry; false when journald did not take it (the caller writes the line
    /// to standard error instead, so nothing is lost).
    public func send(_ fields: [(String, String)]) -> Bool {
        sendDatagram(fd: fd, to: path, Journal.entry(fields))
    }
}
