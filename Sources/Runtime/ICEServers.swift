// The configured ICE servers made usable: TURN URLs with their credentials and
// resolved addresses (for `run` and `check`), and a stun: URL as the STUN server.
import Wire
import Platform
import ICE
import Settings
import Agent
import Signaling
import CSystem

public enum ICEServers {
    /// TURN servers with credentials; a `turn:` URL without them is a configuration
    /// error (exit 78) now rather than a 401 at every session.
    public static func turnServers(_ config: Config) throws(CLIFailure) -> [TURNServer] {
        let urls = config.iceServers.filter { $0.isTURN }
        if config.iceTransportPolicy == .relay && urls.isEmpty {
            throw CLIFailure(.config, "ice-transport-policy relay needs a turn: or turns: URL in ice-server")
        }
        guard !urls.isEmpty else { return [] }
        guard let username = config.iceUsername, !username.isEmpty else {
            throw CLIFailure(.config, "ice-server \(urls[0]) needs ice-username (and ice-credential)")
        }
        guard let credential = try credential(config) else {
            throw CLIFailure(.config, "ice-server \(urls[0]) needs ice-credential, ice-credential-file or the ice-credential systemd credential")
        }
        if let problem = TURNServer.credentialProblem(username: username, credential: credential) {
            throw CLIFailure(.config, "ice-username / ice-credential: \(problem)")
        }
        return urls.map { TURNServer(url: $0, username: username, credential: credential) }
    }

    /// The first `stun:` URL, when `stun` itself is not set.
    public static func stun(_ config: Config) -> HostPort? {
        if let s = config.stun { return s }
        guard let u = config.iceServers.first(where: { $0.scheme == .stun }) else { return nil }
        return HostPort(host: u.host, port: u.port)
    }

    public static func credential(_ config: Config) throws(CLIFailure) -> String? {
        if let c = config.iceCredential { return c }
        var path = config.iceCredentialFile
        if path == nil, let dir = environment("CREDENTIALS_DIRECTORY") {
            let p = dir + "/ice-credential"
            if unreadable(p) == nil { path = p }
        }
        guard let path else { return nil }
        let file: (bytes: [UInt8], info: RegularFileInfo)
        do throws(FileReadError) { file = try readRegularFile(path, limit: 4_096) } catch {
            throw CLIFailure(.config, "cannot read the ice-credential file \(error)")
        }
        var bytes = file.bytes
        while let last = bytes.last, last == 0x0A || last == 0x0D { bytes.removeLast() }
        guard !bytes.isEmpty, !bytes.contains(0x0A) else { throw CLIFailure(.config, "the ice-credential file '\(path)' must hold one line") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Each server's address, looked up off the loop and bounded (5 s in all). A server
    /// that cannot be resolved is left out with a warning: the call may not need it,
    /// and the next start tries again. IPv4 first (a relay reaches IPv4 peers).
    public static func resolve(_ servers: [TURNServer], loop: EventLoop, timeout: Duration = .seconds(5),
                        warn: (String) -> Void) -> [(server: TURNServer, address: SocketAddress)] {
        var out: [(server: TURNServer, address: SocketAddress)] = []
        var pending: [(TURNServer, Int)] = []
        var results: [Int: Result<[SocketAddress], Resolver.Failure>] = [:]
        var resolver: BackgroundResolver? = nil
        var tickets: [BackgroundResolver.Ticket] = []
        for (i, s) in servers.enumerated() {
            if let ip = s.url.ip {
                out.append((s, SocketAddress(ip: ip, port: s.url.port)))
                continue
            }
            if resolver == nil {
                do throws(SystemError) { resolver = try BackgroundResolver(loop: loop, maxThreads: 2) } catch {
                    warn("ice-server \(s.url): \(error); not using it")
                    continue
                }
            }
            pending.append((s, i))
            if let resolver { tickets.append(resolver.resolve(s.url.host, port: s.url.port) { results[i] = $0 }) }
        }
        let deadline = loop.now + timeout
        while results.count < pending.count, loop.now < deadline {
            do throws(SystemError) { try loop.runOnce(maxWait: deadline - loop.now) } catch { break }
        }
        for t in tickets { resolver?.cancel(t) }
        for (s, i) in pending {
            switch results[i] {
            case nil:
                warn("ice-server \(s.url): the resolver did not answer within \(timeout.milliseconds / 1000) s; not using it")
            case .failure(let e):
                warn("ice-server \(s.url): \(e); not using it")
            case .success(let addresses):
                guard let a = addresses.first(where: { $0.ip.isV4 }) ?? addresses.first else {
                    warn("ice-server \(s.url): no address; not using it")
                    continue
                }
                var server = s
                server.address = a.ip
                out.append((server, a))
            }
        }
        return out
    }

    /// Why `path` cannot be read by this process (nil: it can), with a hint when only
    /// root can.
    public static func unreadable(_ path: String) -> String? {
        guard access(path, R_OK) != 0 else { return nil }
        let code = csystem_errno()
        var text = "cannot read \(path): \(SystemError.message(code))"
        var info = stat()
        if code == EACCES, geteuid() != 0, stat(path, &info) == 0, info.st_uid == 0 { text += " — root only: use sudo" }
        return text
    }
}
