import CSystem
import Wire

/// systemd's notification protocol (sd_notify(3)) without libsystemd: one datagram of
/// `KEY=VALUE` lines to the `AF_UNIX` socket named by `$NOTIFY_SOCKET`. A name starting
/// with `@` is an abstract socket (the `@` becomes a leading NUL byte).
public final class SystemdNotifier {
    private let fd: Int32
    private let path: [UInt8]
    /// `WATCHDOG_USEC` when it is meant for this process (`WATCHDOG_PID` unset or ours):
    /// pings must come at least this often, and Linnet sends them at half of it.
    public let watchdogInterval: Duration?

    /// Nil when not started by systemd with `Type=notify` (no `$NOTIFY_SOCKET`).
    public init?(socketPath: String? = environment("NOTIFY_SOCKET"),
                 watchdogUSec: String? = environment("WATCHDOG_USEC"),
                 watchdogPID: String? = environment("WATCHDOG_PID")) {
        var interval: Duration? = nil
        if let text = watchdogUSec, let usec = Int64(text), usec > 0 {
            if let pidText = watchdogPID, let pid = Int32(pidText), pid != getpid() {
                interval = nil
            } else {
                interval = .microseconds(usec)
            }
        }
        watchdogInterval = interval
        guard let socketPath, !socketPath.isEmpty,
              socketPath.startsWithBytes("/") || socketPath.startsWithBytes("@") else { return nil }
        var bytes = Array(socketPath.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < 108 else { return nil }  // sizeof(sun_path)
        path = bytes
        // systemd waits for READY=1 from a Type=notify service and stops it when none
        // comes: a socket that cannot be made must be said, not taken for no systemd.
        do throws(SystemError) {
            fd = try sys("socket(AF_UNIX)") { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        } catch {
            Log.warning("cannot notify systemd at $NOTIFY_SOCKET (\(error)): no readiness or watchdog pings")
            return nil
        }
    }

    deinit { closeDescriptor(fd) }

    /// Sends `state` (e.g. `"READY=1\nSTATUS=connected"`); false if it could not.
    @discardableResult
    public func notify(_ state: String) -> Bool {
        sendDatagram(fd: fd, to: path, Array(state.utf8))
    }

    public func ready() -> Bool { notify("READY=1") }
    public func watchdog() -> Bool { notify("WATCHDOG=1") }
    public func status(_ text: String) -> Bool { notify("STATUS=" + text) }
    public func stopping() -> Bool { notify("STOPPING=1") }
}

/// Sends `message` as one datagram on the `AF_UNIX` socket `fd` to the socket named
/// `path` (a leading NUL byte: an abstract name); true if all of it went. systemd's
/// notification and journal sockets both take one datagram per message.
func sendDatagram(fd: Int32, to path: [UInt8], _ message: [UInt8]) -> Bool {
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { dst in
        for (i, b) in path.enumerated() { dst[i] = b }
    }
    // Abstract names are not NUL-terminated: the length says where they end.
    let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (path[0] == 0 ? 0 : 1))
    let sent = message.withUnsafeBytes { m in
        withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, m.baseAddress, m.count, Int32(MSG_NOSIGNAL), $0, length)
            }
        }
    }
    return sent == message.count
}
