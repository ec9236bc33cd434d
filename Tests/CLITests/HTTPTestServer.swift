import CMbedTLS
import CSystem
import Platform
@testable import Signaling
import Wire
@testable import linnet
@testable import Runtime

/// The server side of one TLS connection, on mbedtls with in-memory byte queues (the
/// pattern of SignalingTests' TestTLSServer): the loopback server moves its bytes to
/// and from a real TCP socket.
final class ServerTLS {
    let ssl = UnsafeMutablePointer<mbedtls_ssl_context>.allocate(capacity: 1)
    let conf = UnsafeMutablePointer<mbedtls_ssl_config>.allocate(capacity: 1)
    let chain = UnsafeMutablePointer<mbedtls_x509_crt>.allocate(capacity: 1)
    let key = UnsafeMutablePointer<mbedtls_pk_context>.allocate(capacity: 1)
    let random: TLSRandom
    var inbound: [UInt8] = []
    var inboundOffset = 0
    var outbound: [UInt8] = []
    /// Nil while handshaking, 0 once done, the mbedtls error when it failed.
    var handshakeResult: Int32? = nil
    var peerClosed = false
    var failed = false

    struct Failure: Error { let code: Int32 }

    init(certificate: String, key keyPEM: String) throws {
        random = try TLSRandom()
        mbedtls_ssl_init(ssl)
        mbedtls_ssl_config_init(conf)
        mbedtls_x509_crt_init(chain)
        mbedtls_pk_init(key)
        let cert = Array(certificate.utf8) + [0]
        try Self.check(mbedtls_x509_crt_parse(chain, cert, cert.count))
        let keyBytes = Array(keyPEM.utf8) + [0]
        try Self.check(mbedtls_pk_parse_key(key, keyBytes, keyBytes.count, nil, 0))
        try Self.check(mbedtls_ssl_config_defaults(conf, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT))
        mbedtls_ssl_conf_rng(conf, mbedtls_ctr_drbg_random, random.drbg)
        try Self.check(mbedtls_ssl_conf_own_cert(conf, chain, key))
        try Self.check(mbedtls_ssl_setup(ssl, conf))
        let context = Unmanaged.passUnretained(self).toOpaque()
        mbedtls_ssl_set_bio(ssl, context, { context, buffer, length in
            let server = Unmanaged<ServerTLS>.fromOpaque(context!).takeUnretainedValue()
            server.outbound.append(contentsOf: UnsafeBufferPointer(start: buffer, count: length))
            return Int32(length)
        }, { context, buffer, length in
            let server = Unmanaged<ServerTLS>.fromOpaque(context!).takeUnretainedValue()
            let available = server.inbound.count - server.inboundOffset
            guard available > 0 else { return MBEDTLS_ERR_SSL_WANT_READ }
            let n = min(available, length)
            for i in 0..<n { buffer![i] = server.inbound[server.inboundOffset + i] }
            server.inboundOffset += n
            return Int32(n)
        }, nil)
    }

    static func check(_ r: Int32) throws {
        if r < 0 { throw Failure(code: r) }
    }

    deinit {
        mbedtls_ssl_free(ssl)
        mbedtls_ssl_config_free(conf)
        mbedtls_x509_crt_free(chain)
        mbedtls_pk_free(key)
        ssl.deallocate(); conf.deallocate(); chain.deallocate(); key.deallocate()
    }

    /// Feeds received bytes; returns decrypted application data.
    func feed(_ bytes: [UInt8]) -> [UInt8] {
        inbound += bytes
        if handshakeResult == nil {
            let r = mbedtls_ssl_handshake(ssl)
            if r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE { return [] }
            handshakeResult = r
            if r != 0 { failed = true }
        }
        guard handshakeResult == 0, !failed, !peerClosed else { return [] }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = mbedtls_ssl_read(ssl, &buffer, buffer.count)
            if n > 0 { out += buffer[0..<Int(n)]; continue }
            if n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY { peerClosed = true }
            else if n != MBEDTLS_ERR_SSL_WANT_READ { failed = true }
            return out
        }
    }

    func write(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let r = bytes.withUnsafeBufferPointer { mbedtls_ssl_write(ssl, $0.baseAddress! + offset, $0.count - offset) }
            guard r > 0 else { failed = true; return }
            offset += Int(r)
        }
    }

    func closeNotify() { _ = mbedtls_ssl_close_notify(ssl) }

    func takeOutput() -> [UInt8] {
        defer { outbound = [] }
        return outbound
    }
}

/// A scripted HTTP(S) server on a loopback TCP port, driven by the test's own loop:
/// reads one request per connection and answers with the bytes `reply` gives (raw, so
/// tests can send chunked, oversized or garbage responses), or never answers.
final class LoopbackHTTPServer {
    enum Reply {
        /// Send these bytes (through TLS when the server has an identity), then close.
        case bytes([UInt8])
        /// Say nothing and keep the connection open.
        case silent
    }

    final class Connection {
        let socket: TCPSocket
        var source: EventLoop.SourceID?
        var tls: ServerTLS?
        var parser = HTTPRequestParser()
        var pending: [UInt8] = []
        var closeWhenFlushed = false
        init(socket: TCPSocket) { self.socket = socket }
    }

    let loop: EventLoop
    let listener: TCPListener
    let identity: (certificate: String, key: String)?
    let reply: (HTTPServerRequest) -> Reply
    var connections: [Connection] = []
    var listenerSource: EventLoop.SourceID?
    /// What the server saw.
    var accepted = 0
    var requests: [HTTPServerRequest] = []
    /// Connections the client closed (end of stream read before we closed).
    var closedByClient = 0
    /// Connections whose TLS handshake failed on our side (the client refused us).
    var handshakeFailures = 0

    var port: UInt16 { listener.localAddress.port }
    var address: SocketAddress { listener.localAddress }

    init(loop: EventLoop, tls identity: (certificate: String, key: String)? = nil,
         reply: @escaping (HTTPServerRequest) -> Reply) throws {
        self.loop = loop
        self.identity = identity
        self.reply = reply
        listener = try TCPListener(bind: SocketAddress(ip: .loopbackV4, port: 0))
        listenerSource = loop.watch(fd: listener.fd) { [unowned self] _ in self.acceptAll() }
    }

    deinit {
        stop()
        if let listenerSource { loop.unwatch(listenerSource) }
    }

    convenience init(loop: EventLoop, tls identity: (certificate: String, key: String)? = nil, response: String) throws {
        try self.init(loop: loop, tls: identity) { _ in .bytes(Array(response.utf8)) }
    }

    func acceptAll() {
        while let socket = try? listener.accept() {
            accepted += 1
            let c = Connection(socket: socket)
            if let identity { c.tls = try? ServerTLS(certificate: identity.certificate, key: identity.key) }
            connections.append(c)
            c.source = loop.watch(fd: socket.fd) { [unowned self] revents in self.ready(c, revents) }
        }
    }

    func ready(_ c: Connection, _ revents: Int16) {
        if revents & Int16(POLLOUT) != 0 { flush(c) }
        guard revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let got: Int?
            do {
                got = try buffer.withMutableBytes { (raw: UnsafeMutableRawBufferPointer) throws(SystemError) in try c.socket.receive(into: raw) }
            } catch {
                return close(c)  // reset
            }
            guard let n = got else { return }
            if n == 0 {
                closedByClient += 1
                return close(c)
            }
            var plain = Array(buffer[0..<n])
            if let tls = c.tls {
                plain = tls.feed(plain)
                c.pending += tls.takeOutput()
                if tls.failed && tls.handshakeResult != 0 {
                    handshakeFailures += 1
                    c.closeWhenFlushed = true
                }
            }
            if !plain.isEmpty, let request = try? c.parser.feed(plain) {
                requests.append(request)
                if case .bytes(let bytes) = reply(request) {
                    if let tls = c.tls {
                        tls.write(bytes)
                        tls.closeNotify()
                        c.pending += tls.takeOutput()
                    } else {
                        c.pending += bytes
                    }
                    c.closeWhenFlushed = true
                }
            }
            flush(c)
            if c.source == nil { return }
        }
    }

    func flush(_ c: Connection) {
        while !c.pending.isEmpty {
            guard let n = try? c.pending.withBytes({ (raw: UnsafeRawBufferPointer) throws(SystemError) in try c.socket.send(raw) }) else {
                return close(c)
            }
            if n == 0 { break }
            c.pending.removeFirst(n)
        }
        if c.pending.isEmpty && c.closeWhenFlushed { return close(c) }
        if let s = c.source { loop.update(s, events: Int16(POLLIN) | (c.pending.isEmpty ? 0 : Int16(POLLOUT))) }
    }

    func close(_ c: Connection) {
        if let s = c.source { loop.unwatch(s) }
        c.source = nil
        connections.removeAll { $0 === c }
    }

    /// Stops listening and drops every connection.
    func stop() {
        for c in connections { close(c) }
    }
}
