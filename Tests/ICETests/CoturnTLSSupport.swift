import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import ICE
import Signaling
import Wire

/// TURN over TLS (RFC 8656 §3.1, turns:) with the product's sans-IO TLS client
/// (Sources/Signaling/TLSClient.swift, mbedtls) on a TCP connection; the TURN messages
/// inside are cut by TURNStreamFramer as over plain TCP.
final class TLSLink: TURNLink {
    let fd: Int32
    let tls: TLSClient
    var framer = TURNStreamFramer()
    var connected = false
    var closed = false
    var failure: TLSError?
    var messages: [[UInt8]] = []
    var tlsDeadline = Instant.distantFuture

    init(server: SocketAddress, hostname: String, caPEM: [UInt8]) throws {
        fd = try Sock.tcpConnect(server)
        let trust = try TLSTrustStore(pem: caPEM)
        let config = TLSClientConfiguration(hostname: hostname, trust: trust, validationTime: Int64(time(nil)))
        tls = try TLSClient(configuration: config, random: try TLSRandom.tls())
    }

    var localAddress: SocketAddress { Sock.local(fd) }
    var deadline: Instant { tlsDeadline }

    func drainTLS() throws {
        while true {
            switch tls.pollOutput() {
            case .transmit(let b):
                // A write to a connection the server has reset (coturn closes a TLS
                // connection with its allocation) ends the link, like end of stream.
                do { try Sock.writeAll(fd, b) } catch { closed = true }
            case .event(.connected): connected = true
            case .event(.data(let d)): messages += try framer.feed(d)
            case .event(.closed): closed = true
            case .event(.failed(let e)): failure = e; closed = true
            case .timeout(let t): tlsDeadline = t; return
            }
        }
    }

    /// The TLS handshake, polled with a deadline; returns how long it took.
    func handshake() throws -> Duration {
        let start = monotonicNow()
        tls.start(now: start)
        try drainTLS()
        let end = start + .seconds(10)
        while !connected {
            if let failure { throw InteropError("TLS handshake failed: \(failure)") }
            let now = monotonicNow()
            guard now < end else { throw InteropError("TLS handshake timed out") }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, Int32(min(end, tlsDeadline) > now ? (min(end, tlsDeadline) - now).nanoseconds / 1_000_000 + 1 : 0))
            let t = monotonicNow()
            if p.revents != 0 { _ = try read(now: t) }
            if t >= tlsDeadline { tls.handleTimeout(now: t); try drainTLS() }
        }
        return monotonicNow() - start
    }

    func write(_ bytes: [UInt8], now: Instant) throws {
        try tls.send(bytes)
        try drainTLS()
    }

    func read(now: Instant) throws -> [[UInt8]]? {
        var buf = [UInt8](repeating: 0, count: 65_536)
        let n = recv(fd, &buf, buf.count, Int32(MSG_DONTWAIT))
        if n == 0 || (n < 0 && errno != EAGAIN) {
            // The server closed (coturn ends a TCP/TLS connection with its allocation):
            // our close_notify may find the socket reset, which is no error here.
            tls.handleEndOfStream(now: now)
            try? drainTLS()
            closed = true
        } else if n > 0 {
            tls.handleInput(Array(buf[0..<n]), now: now)
            try drainTLS()
        }
        defer { messages.removeAll() }
        if closed && messages.isEmpty { return nil }
        return messages
    }

    func handleTimeout(now: Instant) throws {
        tls.handleTimeout(now: now)
        try drainTLS()
    }

    func close() { Glibc.close(fd) }
}
