import CSystem
import Wire

/// Converts between `SocketAddress` and the C `sockaddr` forms.
public enum SockAddr {
    /// Calls `body` with a `sockaddr` pointer and length for `address`.
    public static func with<R>(_ address: SocketAddress, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        switch address.ip {
        case .v4(let a):
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = address.port.bigEndian
            sin.sin_addr.s_addr = a.bigEndian
            return withUnsafePointer(to: &sin) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .v6:
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = address.port.bigEndian
            sin6.sin6_scope_id = address.scopeID
            let bytes = address.ip.bytes
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { dst in
                for i in 0..<16 { dst[i] = bytes[i] }
            }
            return withUnsafePointer(to: &sin6) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
    }

    /// The address in a `sockaddr_storage`, or nil for a family other than IPv4/IPv6.
    public static func decode(_ storage: UnsafeRawPointer) -> SocketAddress? {
        let family = storage.load(as: sa_family_t.self)
        if family == sa_family_t(AF_INET) {
            let sin = storage.load(as: sockaddr_in.self)
            return SocketAddress(ip: .v4(UInt32(bigEndian: sin.sin_addr.s_addr)), port: UInt16(bigEndian: sin.sin_port))
        }
        if family == sa_family_t(AF_INET6) {
            let sin6 = storage.load(as: sockaddr_in6.self)
            var addr = sin6.sin6_addr
            let ip = withUnsafeBytes(of: &addr) { IPAddress(bytes: $0) }!
            // IPv4-mapped (::ffff:a.b.c.d) from a dual-stack socket: report it as IPv4.
            if case .v6(let h, let l) = ip, h == 0, l >> 32 == 0xFFFF {
                return SocketAddress(ip: .v4(UInt32(truncatingIfNeeded: l)), port: UInt16(bigEndian: sin6.sin6_port))
            }
            return SocketAddress(ip: ip, port: UInt16(bigEndian: sin6.sin6_port), scopeID: sin6.sin6_scope_id)
        }
        return nil
    }
}

/// A non-blocking UDP socket bound to one local address.
public final class UDPSocket {
    public let fd: Int32
    /// The bound address, with the port the kernel chose when 0 was asked for.
    public let localAddress: SocketAddress

    public init(bind address: SocketAddress) throws(SystemError) {
        let family = address.ip.isV4 ? AF_INET : AF_INET6
        let fd = try sys("socket") { socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do throws(SystemError) {
            if !address.ip.isV4 {
                var one: Int32 = 1
                _ = try sys("setsockopt(IPV6_V6ONLY)") { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(4)) }
            }
            _ = try sys("bind \(address)") { SockAddr.with(address) { bind(fd, $0, $1) } }
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            _ = try sys("getsockname") {
                withUnsafeMutablePointer(to: &storage) { p in
                    p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
                }
            }
            guard let local = withUnsafePointer(to: &storage, { SockAddr.decode(UnsafeRawPointer($0)) }) else {
                throw SystemError("getsockname", code: EAFNOSUPPORT)
            }
            var bound = local
            bound.scopeID = address.scopeID
            self.fd = fd
            self.localAddress = bound
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    deinit { closeDescriptor(fd) }

    /// Sends one datagram. Returns false when the socket buffer is full (the datagram is
    /// dropped, as the network would); throws on real errors (unreachable, no route).
    @discardableResult
    public func send(_ bytes: UnsafeRawBufferPointer, to address: SocketAddress) throws(SystemError) -> Bool {
        let r = try sysNonBlocking("sendto \(address)") {
            SockAddr.with(address) { sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, $1) }
        }
        if case .done = r { return true }
        return false
    }

    @discardableResult
    public func send(_ bytes: [UInt8], to address: SocketAddress) throws(SystemError) -> Bool {
        let r = try sysNonBlocking("sendto \(address)") {
            bytes.withUnsafeBytes { raw in
                SockAddr.with(address) { sendto(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL), $0, $1) }
            }
        }
        if case .done = r { return true }
        return false
    }

    /// Receives one datagram into `buffer`; nil when none is waiting. A datagram larger
    /// than the buffer is truncated to it (the caller's parser then rejects it).
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> (count: Int, from: SocketAddress)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let r = try sysNonBlocking("recvfrom") {
            withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(fd, buffer.baseAddress, buffer.count, 0, $0, &length)
                }
            }
        }
        guard case .done(let n) = r else { return nil }
        guard let from = withUnsafePointer(to: &storage, { SockAddr.decode(UnsafeRawPointer($0)) }) else { return nil }
        return (n, from)
    }
}
