import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import ICE
import Wire

// Support for the coturn interop tests (CoturnTests.swift): a turnserver process on
// loopback, POSIX sockets, and a poll() loop that drives the sans-IO TURNClient with
// real time. Test code: Foundation and POSIX are fine here.

struct InteropError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

func monotonicNow() -> Instant {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Instant(nanoseconds: Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec))
}

struct Errno: Error, Equatable { let code: Int32 }

func errnoText() -> String { String(cString: strerror(errno)) }

// MARK: Sockets (IPv4 loopback is all these tests need)

enum Sock {
    static func sockaddr(_ a: SocketAddress) -> sockaddr_in {
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = a.port.bigEndian
        let b = a.ip.bytes
        sin.sin_addr.s_addr = (UInt32(b[0]) << 24 | UInt32(b[1]) << 16 | UInt32(b[2]) << 8 | UInt32(b[3])).bigEndian
        return sin
    }

    static func address(_ sin: sockaddr_in) -> SocketAddress {
        let a = UInt32(bigEndian: sin.sin_addr.s_addr)
        return SocketAddress(ip: .v4(a), port: UInt16(bigEndian: sin.sin_port))
    }

    static func withSockaddr<R>(_ a: SocketAddress, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var sin = sockaddr(a)
        return withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: Glibc.sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    static func open(_ type: Int32) throws -> Int32 {
        let fd = socket(AF_INET, type, 0)
        guard fd >= 0 else { throw InteropError("socket: \(errnoText())") }
        return fd
    }

    /// A UDP socket bound to 127.0.0.1 on a free port.
    static func udp() throws -> Int32 {
        let fd = try open(Int32(SOCK_DGRAM.rawValue))
        let rc = withSockaddr(SocketAddress(ip: IPAddress("127.0.0.1")!, port: 0)) { bind(fd, $0, $1) }
        guard rc == 0 else { close(fd); throw InteropError("bind: \(errnoText())") }
        return fd
    }

    static func tcpConnect(_ to: SocketAddress) throws -> Int32 {
        let fd = try open(Int32(SOCK_STREAM.rawValue))
        let rc = withSockaddr(to) { connect(fd, $0, $1) }
        guard rc == 0 else { close(fd); throw InteropError("connect \(to): \(errnoText())") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    static func udpConnect(_ fd: Int32, _ to: SocketAddress) throws {
        let rc = withSockaddr(to) { connect(fd, $0, $1) }
        guard rc == 0 else { throw InteropError("connect \(to): \(errnoText())") }
    }

    static func local(_ fd: Int32) -> SocketAddress {
        var sin = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &sin) {
            $0.withMemoryRebound(to: Glibc.sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return address(sin)
    }

    static func sendTo(_ fd: Int32, _ bytes: [UInt8], _ to: SocketAddress) throws {
        let n = withSockaddr(to) { sa, len in bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sa, len) } }
        guard n == bytes.count else { throw InteropError("sendto \(to): \(errnoText())") }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
            guard n > 0 else { throw InteropError("write: \(errnoText())") }
            off += n
        }
    }

    /// One datagram without blocking: nil when none waits; throws on a socket error
    /// (ECONNREFUSED from an ICMP port unreachable on a connected socket).
    static func receive(_ fd: Int32) throws(Errno) -> ([UInt8], SocketAddress)? {
        var buf = [UInt8](repeating: 0, count: 65_536)
        var sin = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let n = buf.withUnsafeMutableBytes { raw in
            withUnsafeMutablePointer(to: &sin) {
                $0.withMemoryRebound(to: Glibc.sockaddr.self, capacity: 1) { recvfrom(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT), $0, &len) }
            }
        }
        if n < 0 {
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            throw Errno(code: errno)
        }
        return (Array(buf[0..<n]), address(sin))
    }

    /// Two ports that are free for both TCP and UDP on 127.0.0.1 (coturn listens on
    /// both with the same number; the TLS listener takes the second).
    static func freePorts() throws -> (UInt16, UInt16) {
        var found: [UInt16] = []
        var fds: [Int32] = []
        defer { for fd in fds { close(fd) } }
        for _ in 0..<20 where found.count < 2 {
            let t = try open(Int32(SOCK_STREAM.rawValue))
            fds.append(t)
            guard withSockaddr(SocketAddress(ip: IPAddress("127.0.0.1")!, port: 0), { bind(t, $0, $1) }) == 0 else { continue }
            let port = local(t).port
            let u = try open(Int32(SOCK_DGRAM.rawValue))
            fds.append(u)
            guard withSockaddr(SocketAddress(ip: IPAddress("127.0.0.1")!, port: port), { bind(u, $0, $1) }) == 0 else { continue }
            found.append(port)
        }
        guard found.count == 2 else { throw InteropError("no free ports") }
        return (found[0], found[1])
    }
}

// MARK: The server

/// turnserver (coturn) on 127.0.0.1 with long-term credentials linnet:secret in realm
/// linnet.test. Started under `timeout` so that even a crashed test run leaves no
/// server behind; `stop()` (also from deinit) ends it.
final class Coturn {
    static let path = ["/usr/bin/turnserver", "/usr/sbin/turnserver", "/usr/local/bin/turnserver"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }
    static let user = "linnet", password = "secret", realm = "linnet.test"

    let process = Process()
    let port: UInt16
    let tlsPort: UInt16?
    let dir: URL
    let command: String
    private let logBuffer = LogBuffer()

    var address: SocketAddress { SocketAddress(ip: IPAddress("127.0.0.1")!, port: port) }
    var log: String { logBuffer.text }

    /// `tls`: also a TLS listener with a certificate for "turn.linnet.test" signed by a
    /// CA made here; the CA's PEM is `caPEM`.
    init(tls: Bool = false) throws {
        guard let path = Self.path else { throw InteropError("turnserver not installed") }
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-coturn-\(getpid())-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let ports = try Sock.freePorts()
        port = ports.0
        tlsPort = tls ? ports.1 : nil
        var args = [
            "-n", "-v", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", "--listening-port=\(port)",
            "--lt-cred-mech", "--user=\(Self.user):\(Self.password)", "--realm=\(Self.realm)",
            "--allow-loopback-peers", "--no-cli", "--no-dtls", "--log-file=stdout", "--simple-log",
            "--pidfile=\(dir.path)/turnserver.pid", "--userdb=\(dir.path)/turndb",
        ]
        if tls {
            try Self.makeCertificates(in: dir)
            args += ["--tls-listening-port=\(ports.1)", "--cert=\(dir.path)/server.pem", "--pkey=\(dir.path)/server.key"]
        } else {
            args += ["--no-tls"]
        }
        command = ([path] + args).joined(separator: " ")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        // SIGKILL after 300 s at the latest, even if this test process dies first.
        process.arguments = ["-s", "KILL", "300", path] + args
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        do {
            try waitReady(pipe.fileHandleForReading.fileDescriptor)
        } catch {
            stop()
            throw error
        }
        // Keep reading its log so that turnserver never blocks on a full pipe.
        let handle = pipe.fileHandleForReading
        let buffer = logBuffer
        Thread {
            while true {
                let d = handle.availableData
                if d.isEmpty { return }
                buffer.append(String(decoding: d, as: UTF8.self))
            }
        }.start()
    }

    /// Reads the log until every listener says it is open (`-v` prints "UDP listener
    /// opened on: …" and "TCP listener opened on : …", "TLS/TCP …" once it has a
    /// certificate), polling with a deadline.
    private func waitReady(_ fd: Int32) throws {
        let end = monotonicNow() + .seconds(15)
        var text = ""
        var needed = ["UDP listener opened on: 127.0.0.1:\(port)", "TCP listener opened on : 127.0.0.1:\(port)"]
        if let tlsPort { needed.append("TCP listener opened on : 127.0.0.1:\(tlsPort)") }
        while !needed.allSatisfy({ text.contains($0) }) {
            let left = end - monotonicNow()
            guard left > .zero else { throw InteropError("turnserver not ready within 15 s:\n\(text)") }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, Int32(left.nanoseconds / 1_000_000) + 1)
            guard p.revents != 0 else { continue }
            var buf = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &buf, buf.count)
            if n <= 0 { throw InteropError("turnserver exited:\n\(text)") }
            text += String(decoding: buf[0..<n], as: UTF8.self)
        }
        logBuffer.append(text)
    }

    /// Kills turnserver (the child of `timeout`, found by its parent's pid in /proc:
    /// `timeout` does not pass its own SIGTERM on reliably), then reaps `timeout`.
    func stop() {
        if process.isRunning {
            let pid = process.processIdentifier
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
            for c in children.split(separator: " ").compactMap({ Int32($0) }) { kill(c, SIGKILL) }
            if children.isEmpty { kill(pid, SIGKILL) }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: dir)
    }

    deinit { stop() }

    /// A CA and a server certificate for turn.linnet.test, with openssl (RSA 2048:
    /// what every TLS stack takes).
    static func makeCertificates(in dir: URL) throws {
        let d = dir.path
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(d)/ca.key", "-out", "\(d)/ca.pem",
             "-days", "2", "-subj", "/CN=Linnet Test CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(d)/server.key", "-out", "\(d)/server.csr",
             "-subj", "/CN=turn.linnet.test"],
            ["x509", "-req", "-in", "\(d)/server.csr", "-CA", "\(d)/ca.pem", "-CAkey", "\(d)/ca.key", "-CAcreateserial",
             "-out", "\(d)/server.pem", "-days", "2", "-extfile", "\(d)/ext.cnf"],
        ]
        try "subjectAltName=DNS:turn.linnet.test\n".write(toFile: "\(d)/ext.cnf", atomically: true, encoding: .utf8)
        for args in steps {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            p.arguments = args
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
            guard p.terminationStatus == 0 else { throw InteropError("openssl \(args.joined(separator: " ")) failed") }
        }
    }
}

/// The server's log, appended by the thread that drains its pipe.
final class LogBuffer: @unchecked Sendable {
    private let lock = NSLock()
    private var value = ""
    func append(_ s: String) { lock.lock(); value += s; lock.unlock() }
    var text: String { lock.lock(); defer { lock.unlock() }; return value }
}

// MARK: Links to the server

/// How the test talks to the server: one UDP socket, a TCP connection, or TLS over TCP.
protocol TURNLink: AnyObject {
    var fd: Int32 { get }
    var localAddress: SocketAddress { get }
    /// Sends one message the client produced.
    func write(_ bytes: [UInt8], now: Instant) throws
    /// What is readable now, as whole TURN messages; nil at end of stream.
    func read(now: Instant) throws -> [[UInt8]]?
    var deadline: Instant { get }
    func handleTimeout(now: Instant) throws
    func close()
}

extension TURNLink {
    var deadline: Instant { .distantFuture }
    func handleTimeout(now: Instant) throws {}
}

final class UDPLink: TURNLink {
    let fd: Int32
    let server: SocketAddress
    init(server: SocketAddress) throws {
        fd = try Sock.udp()
        self.server = server
    }
    var localAddress: SocketAddress { Sock.local(fd) }
    func write(_ bytes: [UInt8], now: Instant) throws { try Sock.sendTo(fd, bytes, server) }
    func read(now: Instant) throws -> [[UInt8]]? {
        var out: [[UInt8]] = []
        do {
            while let (d, from) = try Sock.receive(fd) {
                if from == server { out.append(d) }
            }
        } catch {
            throw InteropError("udp receive: errno \(error)")
        }
        return out
    }
    func close() { Glibc.close(fd) }
}

final class TCPLink: TURNLink {
    let fd: Int32
    var framer = TURNStreamFramer()
    init(server: SocketAddress) throws { fd = try Sock.tcpConnect(server) }
    var localAddress: SocketAddress { Sock.local(fd) }
    func write(_ bytes: [UInt8], now: Instant) throws { try Sock.writeAll(fd, bytes) }
    func read(now: Instant) throws -> [[UInt8]]? {
        var buf = [UInt8](repeating: 0, count: 65_536)
        let n = recv(fd, &buf, buf.count, Int32(MSG_DONTWAIT))
        if n == 0 { return nil }
        if n < 0 { return errno == EAGAIN ? [] : nil }
        return try framer.feed(Array(buf[0..<n]))
    }
    func close() { Glibc.close(fd) }
}

// MARK: Driving the client

/// A TURN client on a link, with peers (UDP sockets on loopback), driven by poll().
final class TURNSession {
    var client: TURNClient<SystemRandomNumberGenerator>
    let link: TURNLink
    var events: [TURNEvent] = []
    /// What the client sent / received, by kind, in order ("allocate", "send-indication",
    /// "channel-data", "data-indication", …).
    var sentKinds: [String] = []
    var receivedKinds: [String] = []
    var peers: [Int32] = []
    var peerReceived: [Int32: [([UInt8], SocketAddress)]] = [:]
    var peerErrors: [Int32: [Int32]] = [:]

    init(link: TURNLink, password: String = Coturn.password, transport: TURNTransport, port: UInt16) {
        self.link = link
        let url = ICEServerURL(scheme: transport == .tls ? .turns : .turn, host: "127.0.0.1", port: port, transport: transport)
        client = TURNClient(server: TURNServer(url: url, username: Coturn.user, credential: password),
                            rng: SystemRandomNumberGenerator())
    }

    static func kind(_ b: [UInt8]) -> String {
        guard let f = b.first else { return "empty" }
        if ChannelData.isChannelData(firstByte: f) { return "channel-data" }
        guard let m = try? STUNMessage.parse(b) else { return "garbage" }
        let names: [UInt16: String] = [0x003: "allocate", 0x004: "refresh", 0x006: "send", 0x007: "data",
                                       0x008: "create-permission", 0x009: "channel-bind"]
        let cls: String
        switch m.type.messageClass {
        case .request: cls = ""
        case .indication: cls = "-indication"
        case .successResponse: cls = "-success"
        case .errorResponse: cls = "-error-\(m.errorCode?.code ?? 0)"
        }
        return (names[m.type.method] ?? "method-\(m.type.method)") + cls
    }

    func addPeer() throws -> (fd: Int32, address: SocketAddress) {
        let fd = try Sock.udp()
        peers.append(fd)
        return (fd, Sock.local(fd))
    }

    func drainClient() throws {
        while true {
            switch client.pollOutput() {
            case .send(let b):
                sentKinds.append(Self.kind(b))
                try link.write(b, now: monotonicNow())
            case .event(let e): events.append(e)
            case .timeout: return
            }
        }
    }

    /// Runs the loop until `done()` holds or `seconds` pass; says whether it held.
    @discardableResult
    func pump(seconds: Int64 = 10, tick: Duration? = nil, until done: () -> Bool) throws -> Bool {
        let end = monotonicNow() + .seconds(seconds)
        while true {
            try drainClient()
            if done() { return true }
            let now = monotonicNow()
            if now >= end { return false }
            var wake = min(client.deadline, link.deadline, end)
            if wake < now { wake = now }
            if let tick, now + tick < wake { wake = now + tick }
            let ms = Int32(min((wake - now).nanoseconds / 1_000_000 + 1, 60_000))
            var fds = [pollfd(fd: link.fd, events: Int16(POLLIN), revents: 0)]
            for p in peers { fds.append(pollfd(fd: p, events: Int16(POLLIN), revents: 0)) }
            _ = poll(&fds, nfds_t(fds.count), ms)
            let t = monotonicNow()
            if fds[0].revents != 0 {
                if let messages = try link.read(now: t) {
                    for m in messages {
                        receivedKinds.append(Self.kind(m))
                        client.handleMessage(m, now: t)
                    }
                } else {
                    client.connectionLost("end of stream")
                }
            }
            for (i, p) in peers.enumerated() where fds[i + 1].revents != 0 {
                do {
                    while let d = try Sock.receive(p) { peerReceived[p, default: []].append(d) }
                } catch {
                    peerErrors[p, default: []].append(error.code)
                }
            }
            if t >= client.deadline { client.handleTimeout(now: t) }
            if t >= link.deadline { try link.handleTimeout(now: t) }
        }
    }

    func allocate() throws -> Duration {
        let start = monotonicNow()
        client.allocate(now: start)
        let ok = try pump(seconds: 45) { !events.isEmpty }
        guard ok else { throw InteropError("no answer to Allocate") }
        return monotonicNow() - start
    }

    func close() {
        link.close()
        for p in peers { Glibc.close(p) }
        peers.removeAll()
    }
}
