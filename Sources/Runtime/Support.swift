// What every command's shell shares: the one error the CLI reports and exits on, the
// typed-error wrapper, the core's seed, terminal keys, a silent microphone, and how
// device and HTTP failures map onto exit statuses.
import CSystem
import Wire
import Platform
import DTLS
import Devices
import Agent
import Peer

/// `1.5` (one decimal, no floating-point printing: Embedded Swift has none).
public func tenths(_ seconds: Double) -> String {
    let t = Int(saturating: (seconds * 10).rounded())
    return "\(t / 10).\(t % 10)"
}

/// An error the CLI reports and exits on.
public struct CLIFailure: Error {
    public let status: ExitStatus
    public let message: String
    /// A sound device that is not there (not a file, not a refusal): `run` waits for it
    /// rather than exiting (a USB microphone unplugged, a HAT driver not bound yet).
    public var deviceMissing = false
    public init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// Silence when no microphone is configured (`capture = none`).
public final class SilenceSource: FrameSource {
    public func nextFrame(into frame: inout [Int16]) -> Bool {
        for i in 0..<frame.count { frame[i] = 0 }
        return true
    }
}

/// Single keys from the terminal (raw mode, no echo) when standard input is one; the
/// terminal's settings come back on `restore` (and at exit through the loop's end).
public final class TerminalKeys {
    let loop: EventLoop
    var saved = termios()
    var source: EventLoop.SourceID?

    public init?(loop: EventLoop, onKey: @escaping (UInt8) -> Void) {
        self.loop = loop
        guard isatty(0) == 1, tcgetattr(0, &saved) == 0 else { return nil }
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
        guard tcsetattr(0, TCSANOW, &raw) == 0 else { return nil }
        source = loop.watch(fd: 0) { _ in
            var byte: UInt8 = 0
            let n = read(0, &byte, 1)
            if n == 1 { onKey(byte) } else if n == 0, let s = self.source {
                loop.unwatch(s)
                self.source = nil
            }
        }
    }

    public func restore() {
        if let source { loop.unwatch(source) }
        source = nil
        _ = tcsetattr(0, TCSANOW, &saved)
    }
}

/// Runs `body`, turning its typed error into a CLIFailure (software error) with its text.
public func wrap<T, E: Error & CustomStringConvertible>(_ body: () throws(E) -> T) throws(CLIFailure) -> T {
    do { return try body() } catch { throw CLIFailure(.software, error.description) }
}

public func fileExists(_ path: String) -> Bool { access(path, F_OK) == 0 }

public func isWritableDirectory(_ path: String) -> Bool { access(path, W_OK | X_OK) == 0 }


/// 64 bits from the cryptographic generator: the agent core's seed (backoff jitter,
/// SSRCs, tie-breakers).
public func randomSeed(_ crypto: CryptoRandom) throws(CLIFailure) -> UInt64 {
    var seed: UInt64 = 0
    let bytes = try wrap { () throws(DTLSError) in try crypto.bytes(8) }
    for b in bytes { seed = seed << 8 | UInt64(b) }
    return seed
}

extension DeviceError {
    /// Whether the error means "not there" (a missing device or file) rather than bad data.
    public var isMissing: Bool {
        switch self {
        case .alsa(let e):
            if case .open = e { return true }
            return false
        case .file(let e):
            if case .system = e { return true }
            // Missing or unreadable (an errno) as before; a FIFO or a directory is bad data.
            if case .unreadable(let r) = e { return r.code != nil }
            return false
        case .thread, .pipeline: return false
        }
    }
}

extension HTTPClientError {
    /// This failure's exit status by the rule of `ExitStatus` (README, CLI.md: 65, 69, 78).
    public var exitStatus: ExitStatus {
        if isConfigurationProblem { return .config }
        switch self {
        case .http(.truncated): return .unavailable
        case .http: return .dataError
        default: return .unavailable
        }
    }
}

/// Datagrams a socket refused, said once per reason: a path that fails (no route, a
/// full buffer) fails for every packet, 50 a second, and the log must not drown in
/// them. The peer counts each one (`Peer.transmitFailed`, the stats' `send_failed`).
final class SendFailures {
    /// errno values already said; 0 stands for a full socket buffer.
    private var said: [Int32] = []

    /// Sends one of `peer`'s datagrams on `socket`. One the socket refuses (an errno,
    /// or a full send buffer) is lost: ICE's checks and consent are there to notice a
    /// path that stopped working. It is taken back out of the peer's counts, and the
    /// line to log is returned the first time its reason is seen. Both drivers of a
    /// `Peer` (`Runtime`, `Call`) send through here.
    func send(_ bytes: [UInt8], on socket: UDPSocket, to address: SocketAddress, for peer: Peer?) -> String? {
        var refused: SystemError? = nil
        var sent = false
        do throws(SystemError) { sent = try socket.send(bytes, to: address) } catch { refused = error }
        guard !sent else { return nil }
        peer?.transmitFailed(bytes)
        return note(refused, to: address, counted: "; counted in send_failed")
    }

    /// The line to log for this failure, the first time its reason is seen; `counted`
    /// says where each one is counted, if anywhere.
    func note(_ error: SystemError?, to address: SocketAddress, counted: String = "") -> String? {
        let code = error?.code ?? 0
        guard !said.contains(code) else { return nil }
        said.append(code)
        let why = error.map { $0.description } ?? "the socket's send buffer is full"
        return "a datagram to \(address) was not sent (\(why))\(counted), said once"
    }
}
