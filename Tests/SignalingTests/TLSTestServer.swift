import CMbedTLS
import Wire
@testable import Signaling

/// A TLS server for tests, built directly on mbedtls with in-memory byte queues: the
/// other end of a `TLSClient` with nothing but memory in between.
final class TestTLSServer {
    let ssl = UnsafeMutablePointer<mbedtls_ssl_context>.allocate(capacity: 1)
    let conf = UnsafeMutablePointer<mbedtls_ssl_config>.allocate(capacity: 1)
    let chain = UnsafeMutablePointer<mbedtls_x509_crt>.allocate(capacity: 1)
    let key = UnsafeMutablePointer<mbedtls_pk_context>.allocate(capacity: 1)
    let random: TLSRandom
    var suites: [Int32]

    var inbound: [UInt8] = []
    var inboundOffset = 0
    var outbound: [UInt8] = []
    /// Nil while handshaking, 0 once done, the mbedtls error when it failed.
    var handshakeResult: Int32? = nil
    var received: [UInt8] = []
    var readError: Int32? = nil
    var peerClosed = false

    /// - Parameters:
    ///   - certificates: PEM of the server certificate followed by its intermediates.
    ///   - maxMinorVersion: 3 for TLS 1.2, 2 to play a TLS 1.1-only server.
    ///   - cipherSuites: IANA numbers to offer (nil: mbedtls' defaults).
    init(certificates: [String], key keyPEM: String, maxMinorVersion: Int32 = MBEDTLS_SSL_MINOR_VERSION_3,
         cipherSuites: [Int32]? = nil) throws {
        random = try TLSRandom()
        suites = (cipherSuites ?? []) + [0]
        mbedtls_ssl_init(ssl)
        mbedtls_ssl_config_init(conf)
        mbedtls_x509_crt_init(chain)
        mbedtls_pk_init(key)
        for pem in certificates {
            let bytes = Array(pem.utf8) + [0]
            try Self.check(mbedtls_x509_crt_parse(chain, bytes, bytes.count))
        }
        let keyBytes = Array(keyPEM.utf8) + [0]
        try Self.check(mbedtls_pk_parse_key(key, keyBytes, keyBytes.count, nil, 0))
        try Self.check(mbedtls_ssl_config_defaults(conf, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT))
        mbedtls_ssl_conf_rng(conf, mbedtls_ctr_drbg_random, random.drbg)
        mbedtls_ssl_conf_max_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, maxMinorVersion)
        mbedtls_ssl_conf_min_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, min(maxMinorVersion, MBEDTLS_SSL_MINOR_VERSION_2))
        if cipherSuites != nil {
            suites.withUnsafeBufferPointer { mbedtls_ssl_conf_ciphersuites(conf, $0.baseAddress) }
        }
        try Self.check(mbedtls_ssl_conf_own_cert(conf, chain, key))
        try Self.check(mbedtls_ssl_setup(ssl, conf))
        let context = Unmanaged.passUnretained(self).toOpaque()
        mbedtls_ssl_set_bio(ssl, context, { context, buffer, length in
            let server = Unmanaged<TestTLSServer>.fromOpaque(context!).takeUnretainedValue()
            server.outbound.append(contentsOf: UnsafeBufferPointer(start: buffer, count: length))
            return Int32(length)
        }, { context, buffer, length in
            let server = Unmanaged<TestTLSServer>.fromOpaque(context!).takeUnretainedValue()
            let available = server.inbound.count - server.inboundOffset
            guard available > 0 else { return MBEDTLS_ERR_SSL_WANT_READ }
            let n = min(available, length)
            for i in 0..<n { buffer![i] = server.inbound[server.inboundOffset + i] }
            server.inboundOffset += n
            return Int32(n)
        }, nil)
    }

    struct Failure: Error { let code: Int32 }

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

    var cipherSuite: String { String(cString: mbedtls_ssl_get_ciphersuite(ssl)) }

    func feed(_ bytes: [UInt8]) {
        inbound += bytes
        step()
    }

    func step() {
        if handshakeResult == nil {
            let r = mbedtls_ssl_handshake(ssl)
            if r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE { return }
            handshakeResult = r
        }
        guard handshakeResult == 0, readError == nil, !peerClosed else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = mbedtls_ssl_read(ssl, &buffer, buffer.count)
            if n > 0 { received += buffer[0..<Int(n)]; continue }
            if n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY { peerClosed = true; return }
            if n != MBEDTLS_ERR_SSL_WANT_READ { readError = n }
            return
        }
    }

    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let r = bytes.withUnsafeBufferPointer { mbedtls_ssl_write(ssl, $0.baseAddress! + offset, $0.count - offset) }
            try Self.check(r)
            offset += Int(r)
        }
    }

    func closeNotify() {
        _ = mbedtls_ssl_close_notify(ssl)
    }

    func takeOutput() -> [UInt8] {
        defer { outbound = [] }
        return outbound
    }
}

/// Moves bytes between a client and a server until neither has anything to say,
/// `chunk` bytes at a time (TCP may split the stream anywhere). Returns the client's
/// events in order.
@discardableResult
func exchange(_ client: TLSClient, _ server: TestTLSServer, now: Instant = .zero, chunk: Int = .max) -> [TLSEvent] {
    var events: [TLSEvent] = []
    var progress = true
    while progress {
        progress = false
        drain: while true {
            switch client.pollOutput() {
            case .transmit(let bytes):
                var i = 0
                while i < bytes.count {
                    server.feed(Array(bytes[i..<min(bytes.count, i + chunk)]))
                    i += chunk
                }
                progress = true
            case .event(let e):
                events.append(e)
            case .timeout:
                break drain
            }
        }
        let out = server.takeOutput()
        var i = 0
        while i < out.count {
            client.handleInput(Array(out[i..<min(out.count, i + chunk)]), now: now)
            i += chunk
            progress = true
        }
    }
    return events
}
