import CSystem
import Wire

/// A non-blocking TCP connection.
public final class TCPSocket {
    public let fd: Int32
    public let remote: SocketAddress

    init(fd: Int32, remote: SocketAddress) {
        self.fd = fd
        self.remote = remote
    }

    /// Starts connecting to `address`; the loop reports POLLOUT when the attempt ends,
    /// then `finishConnect()` says how.
    public static func connect(to address: SocketAddress) throws(SystemError) -> TCPSocket {
        let family = address.ip.isV4 ? AF_INET : AF_INET6
        let fd = try sys("socket") { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(4))
        let r = SockAddr.with(address) { CSystem.connect(fd, $0, $1) }
        if r < 0 {
            let e = csystem_errno()
            if e != EINPROGRESS && e != EINTR {
                closeDescriptor(fd)
                throw SystemError("connect \(address)", code: e)
            }
        }
        return TCPSocket(fd: fd, remote: address)
    }

    deinit { closeDescriptor(fd) }

    /// After POLLOUT on a connecting socket: throws the connect error (refused,
    /// unreachable, timed out) if it failed.
    public func finishConnect() throws(SystemError) {
        var error: Int32 = 0
        var length = socklen_t(4)
        _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
        if error != 0 { throw SystemError("connect \(remote)", code: error) }
    }

    /// Sends what the kernel takes now; returns the bytes taken (0 when it would block).
    public func send(_ bytes: UnsafeRawBufferPointer) throws(SystemError) -> Int {
        let r = try sysNonBlocking("send") { CSystem.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
        if case .done(let n) = r { return n }
        return 0
    }

    /// Receives into `buffer`: the byte count, 0 at end of stream, nil when nothing is
    /// waiting.
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int? {
        let r = try sysNonBlocking("recv") { recv(fd, buffer.baseAddress, buffer.count, 0) }
        if case .done(let n) = r { return n }
        return nil
    }

    /// Closes the sending side (the peer reads end of stream).
    public func shutdownWrite() { _ = shutdown(fd, Int32(SHUT_WR)) }
}

/// A listening TCP socket (the built-in answerer's HTTP side).
public final class TCPListener {
    public let fd: Int32
    public let localAddress: SocketAddress

    public init(bind address: SocketAddress, backlog: Int32 = 16) throws(SystemError) {
        let family = address.ip.isV4 ? AF_INET : AF_INET6
        let fd = try sys("socket") { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do throws(SystemError) {
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(4))
            _ = try sys("bind \(address)") { SockAddr.with(address) { bind(fd, $0, $1) } }
            _ = try sys("listen") { listen(fd, backlog) }
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            _ = withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            localAddress = withUnsafePointer(to: &storage) { SockAddr.decode(UnsafeRawPointer($0)) } ?? address
            self.fd = fd
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    deinit { closeDescriptor(fd) }

    /// Accepts one waiting connection; nil when none is waiting.
    public func accept() throws(SystemError) -> TCPSocket? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let r = try sysNonBlocking("accept") {
            withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { CSystem.accept(fd, $0, &length) }
            }
        }
        guard case .done(let client) = r else { return nil }
        // accept4 needs _GNU_SOURCE (see CSystem): set the flags in two calls instead.
        _ = csystem_fcntl_int(client, F_SETFL, csystem_fcntl_int(client, F_GETFL, 0) | O_NONBLOCK)
        _ = csystem_fcntl_int(client, F_SETFD, FD_CLOEXEC)
        let remote = withUnsafePointer(to: &storage) { SockAddr.decode(UnsafeRawPointer($0)) } ?? SocketAddress(ip: .anyV4, port: 0)
        return TCPSocket(fd: client, remote: remote)
    }
}

/// Host name resolution through the system resolver (getaddrinfo, so /etc/hosts,
/// nsswitch and IPv6 all apply). IP literals are returned without a lookup.
///
/// getaddrinfo blocks: callers on the loop use it only for signaling set-up, where a
/// slow resolver delays one request, never audio (the real-time threads are separate).
public enum Resolver {
    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        case notFound(host: String, reason: String)
        public var description: String {
            switch self {
            case .notFound(let host, let reason): return "cannot resolve '\(host)': \(reason)"
            }
        }
    }

    public static func resolve(_ host: String, port: UInt16) throws(Failure) -> [SocketAddress] {
        if let ip = IPAddress(host) { return [SocketAddress(ip: ip, port: port)] }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>? = nil
        let r = getaddrinfo(host, String(port), &hints, &result)
        guard r == 0, let first = result else {
            let reason = gai_strerror(r).map { String(cString: $0) } ?? "error \(r)"
            throw .notFound(host: host, reason: reason)
        }
        defer { freeaddrinfo(first) }
        var out: [SocketAddress] = []
        var node: UnsafeMutablePointer<addrinfo>? = first
        while let n = node {
            if let a = n.pointee.ai_addr, let decoded = SockAddr.decode(UnsafeRawPointer(a)), !out.contains(decoded) {
                out.append(decoded)
            }
            node = n.pointee.ai_next
        }
        return out
    }
}

/// The addresses of the machine's up interfaces, for ICE host candidates.
public struct InterfaceAddress: Sendable, Equatable {
    public var name: String
    public var address: IPAddress
    public var index: UInt32
}

public enum Interfaces {
    /// IPv4 and IPv6 addresses of every interface that is up; loopback ones included
    /// only when `includeLoopback` (tests, and signaling on loopback, need them).
    public static func list(includeLoopback: Bool) -> [InterfaceAddress] {
        var head: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&head) == 0, let first = head else { return [] }
        defer { freeifaddrs(first) }
        var out: [InterfaceAddress] = []
        var node: UnsafeMutablePointer<ifaddrs>? = first
        while let n = node {
            node = n.pointee.ifa_next
            let flags = n.pointee.ifa_flags
            guard flags & UInt32(IFF_UP) != 0, let sa = n.pointee.ifa_addr,
                  let decoded = SockAddr.decode(UnsafeRawPointer(sa)) else { continue }
            let loopback = flags & UInt32(IFF_LOOPBACK) != 0
            if loopback && !includeLoopback { continue }
            let name = String(cString: n.pointee.ifa_name)
            out.append(InterfaceAddress(name: name, address: decoded.ip, index: if_nametoindex(n.pointee.ifa_name)))
        }
        return out
    }
}
