import CMbedTLS
import Wire

/// Which side of the DTLS handshake we play (RFC 5763 §5: `a=setup:active` is the
/// client, `passive` the server; an offer says `actpass` and the answer decides).
public enum DTLSRole: Sendable, Equatable {
    case client
    case server
}

/// A fingerprint from the peer's SDP (`a=fingerprint:sha-256 AB:CD:…`, RFC 8122 §5).
public struct CertificateFingerprint: Sendable, Equatable {
    public enum Algorithm: Sendable, Equatable {
        case sha256, sha384, sha512
    }
    public var algorithm: Algorithm
    public var bytes: [UInt8]

    public init(algorithm: Algorithm, bytes: [UInt8]) {
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// From SDP's hash name and hex value; nil for an algorithm weaker than SHA-256
    /// (RFC 8827 §6.5 requires SHA-256 or better) or malformed hex.
    public init?(hashName: String, hex: String) {
        // ASCII case folding: SDP hash names are ASCII tokens (RFC 8122 §5), and
        // String.lowercased() would link the stdlib's Unicode case tables.
        switch String(decoding: hashName.utf8.map { $0 >= 65 && $0 <= 90 ? $0 + 32 : $0 }, as: UTF8.self) {
        case "sha-256": algorithm = .sha256
        case "sha-384": algorithm = .sha384
        case "sha-512": algorithm = .sha512
        default: return nil
        }
        guard let b = Hex.decode(hex) else { return nil }
        let expected = algorithm == .sha256 ? 32 : (algorithm == .sha384 ? 48 : 64)
        guard b.count == expected else { return nil }
        bytes = b
    }

    var mdType: mbedtls_md_type_t {
        switch algorithm {
        case .sha256: return MBEDTLS_MD_SHA256
        case .sha384: return MBEDTLS_MD_SHA384
        case .sha512: return MBEDTLS_MD_SHA512
        }
    }

    /// Whether `der` hashes to this fingerprint.
    func matches(_ der: UnsafeRawBufferPointer) -> Bool {
        guard let info = mbedtls_md_info_from_type(mdType) else { return false }
        var out = [UInt8](repeating: 0, count: Int(mbedtls_md_get_size(info)))
        guard mbedtls_md(info, der.baseAddress?.assumingMemoryBound(to: UInt8.self), der.count, &out) == 0 else { return false }
        return out == bytes
    }
}

/// The SRTP master keys and salts exported after the handshake (RFC 5764 §4.2): 60
/// bytes of "EXTRACTOR-dtls_srtp" split as client key, server key, client salt, server
/// salt, then assigned by role.
public struct SRTPKeyMaterial: Sendable, Equatable {
    public var localKey: [UInt8]
    public var localSalt: [UInt8]
    public var remoteKey: [UInt8]
    public var remoteSalt: [UInt8]
}

/// What the connection reports.
public enum DTLSEvent: Sendable, Equatable {
    /// The handshake finished and the peer's certificate matched its fingerprint.
    case connected(SRTPKeyMaterial)
    /// Application data (SCTP packets, RFC 8261) arrived.
    case data([UInt8])
    /// The peer sent close_notify, or `close()` was called.
    case closed
    /// The connection failed; nothing more will happen on it.
    case failed(DTLSError)
}

/// The next thing the caller must do.
public enum DTLSOutput: Sendable, Equatable {
    /// Send this datagram to the peer.
    case transmit([UInt8])
    case event(DTLSEvent)
    /// Call `handleTimeout` at this instant (`Instant.distantFuture`: nothing pending).
    case timeout(Instant)
}

/// A DTLS 1.2 connection over mbedtls with in-memory I/O and the caller's clock.
///
/// Drive contract (ARCHITECTURE.md "Drive loop"): call `start(now:)` once, then
/// `handleInput(_:now:)` for each DTLS datagram (RFC 7983: first byte 20–63) and
/// `handleTimeout(now:)` at the deadline; after every call drain `pollOutput()` until it
/// returns `.timeout`. No socket, no blocking, no global state: mbedtls' BIO callbacks
/// read from and write to queues on this object, and its timer callbacks read the
/// `now` the caller last passed in.
///
/// Security decisions:
/// - The peer certificate is checked in mbedtls' verify callback against the SDP
///   fingerprints (any one may match; SHA-256 or better). A mismatch aborts the
///   handshake (`DTLSError.fingerprintMismatch`): no keys are exported, so no media can
///   flow. Chain validation does not apply: WebRTC certificates are self-signed and
///   authenticated by the fingerprint in the signalled SDP (RFC 8827 §6.5).
/// - So the peer may bring any certificate: mbedtls' own checks of it (trusted CA, key
///   size, curve, key usage) would refuse certificates WebRTC stacks really use, so
///   authentication is `OPTIONAL` in mbedtls' terms, and the fingerprint callback plus
///   the check that a certificate was seen at all (`noPeerCertificate`) are what decide.
///   No CA chain is configured, so the server's CertificateRequest names no
///   certificate authority: a client that picks its certificate by the CA list (pion,
///   Go's crypto/tls) would otherwise send none (RFC 5246 §7.4.4 lets an empty list
///   mean "any").
/// - The server always requests the client's certificate (same reason).
/// - Cipher suites: ECDHE with AES-GCM, ECDSA first (our own certificate is ECDSA
///   P-256, so as a server only those apply), RSA too, for a server whose certificate is
///   RSA (GStreamer's dtlssrtpenc makes an RSA 2048 one). SRTP profile:
///   SRTP_AES128_CM_HMAC_SHA1_80 only (all mbedtls 2.28 offers besides the weaker _32).
/// - No HelloVerifyRequest cookies: ICE has already verified the peer's address.
/// - The server reassembles a fragmented ClientHello (`ClientHelloAssembler`), which
///   mbedtls 2.28 alone refuses.
public final class DTLSConnection {
    public let role: DTLSRole
    let ssl: UnsafeMutablePointer<mbedtls_ssl_context>
    let config: UnsafeMutablePointer<mbedtls_ssl_config>
    let ownCertificate: UnsafeMutablePointer<mbedtls_x509_crt>
    /// The ECDHE groups in preference order; mbedtls keeps the pointer, so it lives as
    /// long as the configuration.
    let curves: UnsafeMutablePointer<mbedtls_ecp_group_id>
    let identity: Identity
    let random: CryptoRandom
    let remoteFingerprints: [CertificateFingerprint]

    var inbound: [[UInt8]] = []
    var outbound: [[UInt8]] = []
    var events: [DTLSEvent] = []
    var now = Instant.zero
    var timerIntermediate: Instant? = nil
    var timerFinal: Instant? = nil
    var exported: [UInt8]? = nil
    var fingerprintRejected = false
    /// The peer's end-entity certificate matched a fingerprint (the callback saw it).
    var peerVerified = false
    /// The server's first flight may be fragmented (RFC 6347 §4.2.3); nil for a client.
    var assembler: ClientHelloAssembler?
    var sawClientHello = false
    /// Server: datagrams dropped before the first ClientHello because they were not one.
    public private(set) var droppedBeforeHello = 0
    public private(set) var state: State = .new
    /// Datagrams mbedtls rejected after the handshake (bad MAC, replays): counted, dropped.
    public private(set) var droppedRecords = 0
    /// What the ClientHello reassembly did (server only; zeros for a client).
    public var clientHelloStats: ClientHelloAssembler.Stats { assembler?.stats ?? ClientHelloAssembler.Stats() }

    public enum State: Sendable, Equatable {
        case new, handshaking, connected, closed, failed
    }

    static let srtpProfiles: [UInt16] = [
        0x0001,  // MBEDTLS_TLS_SRTP_AES128_CM_HMAC_SHA1_80 (RFC 5764 §4.1.2)
        0x0000,  // MBEDTLS_TLS_SRTP_UNSET terminates the list
    ]
    static let cipherSuites: [Int32] = [
        0xC02B,  // TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (RFC 5289)
        0xC02C,  // TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        0xC02F,  // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        0xC030,  // TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        0,
    ]

    /// - Parameters:
    ///   - remoteFingerprints: the peer's `a=fingerprint` values; at least one.
    ///   - mtu: the largest datagram to send. SCTP above sends packets of at most 1200
    ///     bytes (RFC 8831 §5); with the record's 37 bytes of header, nonce and tag that
    ///     needs 1237, so 1280 (the IPv6 minimum link MTU less headers still fits a
    ///     1500-byte Ethernet frame) leaves room.
    public init(role: DTLSRole, identity: Identity, random: CryptoRandom,
                remoteFingerprints: [CertificateFingerprint], mtu: UInt16 = 1280) throws(DTLSError) {
        guard !remoteFingerprints.isEmpty else { throw .noFingerprint }
        self.role = role
        self.identity = identity
        self.random = random
        self.remoteFingerprints = remoteFingerprints
        ssl = .allocate(capacity: 1)
        config = .allocate(capacity: 1)
        ownCertificate = .allocate(capacity: 1)
        curves = .allocate(capacity: 4)
        // X25519 first: several times cheaper than P-256 in mbedtls, and every peer in
        // PROTOCOLS.md offers it; P-256 for those that do not (RFC 8422 §5.1.1 lets the
        // server pick by its own preference). P-384 as well: mbedtls also holds a peer
        // certificate's EC key to this list.
        curves[0] = MBEDTLS_ECP_DP_CURVE25519
        curves[1] = MBEDTLS_ECP_DP_SECP256R1
        curves[2] = MBEDTLS_ECP_DP_SECP384R1
        curves[3] = MBEDTLS_ECP_DP_NONE
        assembler = role == .server ? ClientHelloAssembler() : nil
        mbedtls_ssl_init(ssl)
        mbedtls_ssl_config_init(config)
        mbedtls_x509_crt_init(ownCertificate)
        // Every stored property is set by now, so if setUp throws, deinit still runs and
        // releases the contexts: releasing them here as well would free them twice.
        try setUp(mtu: mtu)
    }

    private func setUp(mtu: UInt16) throws(DTLSError) {
        try check("mbedtls_ssl_config_defaults", mbedtls_ssl_config_defaults(
            config, role == .client ? MBEDTLS_SSL_IS_CLIENT : MBEDTLS_SSL_IS_SERVER,
            MBEDTLS_SSL_TRANSPORT_DATAGRAM, MBEDTLS_SSL_PRESET_DEFAULT))
        mbedtls_ssl_conf_rng(config, mbedtls_ctr_drbg_random, random.drbg)
        mbedtls_ssl_conf_min_version(config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3)
        mbedtls_ssl_conf_curves(config, curves)
        Self.cipherSuites.withUnsafeBufferPointer { mbedtls_ssl_conf_ciphersuites(config, $0.baseAddress) }
        try check("mbedtls_x509_crt_parse_der", mbedtls_x509_crt_parse_der(ownCertificate, identity.certificateDER, identity.certificateDER.count))
        try check("mbedtls_ssl_conf_own_cert", mbedtls_ssl_conf_own_cert(config, ownCertificate, identity.key))
        // OPTIONAL: mbedtls goes on past its own verdict on the certificate (no CA, key
        // size, curve, key usage); the callback below decides by fingerprint, failing
        // the handshake on a mismatch, and `advance` refuses a handshake in which no
        // certificate was seen. No CA chain: the CertificateRequest's
        // certificate_authorities stays empty (the explicit call says so in case a
        // chain is ever configured).
        mbedtls_ssl_conf_authmode(config, MBEDTLS_SSL_VERIFY_OPTIONAL)
        mbedtls_ssl_conf_cert_req_ca_list(config, CChar(MBEDTLS_SSL_CERT_REQ_CA_LIST_DISABLED))
        let context = Unmanaged.passUnretained(self).toOpaque()
        mbedtls_ssl_conf_verify(config, { context, certificate, depth, flags in
            guard let context, let certificate, let flags else { return -1 }
            let connection = Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue()
            return connection.verify(certificate, depth: depth, flags: flags)
        }, context)
        try check("mbedtls_ssl_conf_dtls_srtp_protection_profiles",
                  Self.srtpProfiles.withUnsafeBufferPointer { mbedtls_ssl_conf_dtls_srtp_protection_profiles(config, $0.baseAddress) })
        mbedtls_ssl_conf_export_keys_ext_cb(config, { context, master, _, _, _, _, clientRandom, serverRandom, prf in
            guard let context, let master, let clientRandom, let serverRandom else { return -1 }
            let connection = Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue()
            return connection.exportSRTPKeys(master: master, clientRandom: clientRandom, serverRandom: serverRandom, prf: prf)
        }, context)
        if role == .server {
            mbedtls_ssl_conf_dtls_cookies(config, nil, nil, nil)
        }
        // Retransmit the handshake flight after 0.5 s, doubling to 16 s (RFC 6347 §4.2.4.1
        // suggests 1 s; WebRTC peers commonly start lower for faster recovery).
        mbedtls_ssl_conf_handshake_timeout(config, 500, 16_000)
        try check("mbedtls_ssl_setup", mbedtls_ssl_setup(ssl, config))
        mbedtls_ssl_set_mtu(ssl, mtu)
        mbedtls_ssl_set_bio(ssl, context, { context, buffer, length in
            guard let context, let buffer else { return -1 }
            let connection = Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue()
            connection.outbound.append(Array(UnsafeBufferPointer(start: buffer, count: length)))
            return Int32(length)
        }, { context, buffer, length in
            guard let context, let buffer else { return -1 }
            let connection = Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue()
            return connection.readDatagram(into: buffer, capacity: length)
        }, nil)
        mbedtls_ssl_set_timer_cb(ssl, context, { context, intermediateMS, finalMS in
            guard let context else { return }
            let connection = Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue()
            connection.setTimer(intermediateMS: intermediateMS, finalMS: finalMS)
        }, { context in
            guard let context else { return -1 }
            return Unmanaged<DTLSConnection>.fromOpaque(context).takeUnretainedValue().timerStatus()
        })
    }

    deinit { release() }

    private func release() {
        mbedtls_ssl_free(ssl)
        mbedtls_ssl_config_free(config)
        mbedtls_x509_crt_free(ownCertificate)
        ssl.deallocate()
        config.deallocate()
        ownCertificate.deallocate()
        curves.deallocate()
    }

    // MARK: Drive

    /// Begins the handshake (the client sends its ClientHello; the server waits).
    public func start(now: Instant) {
        guard state == .new else { return }
        self.now = now
        state = .handshaking
        advance()
    }

    /// A DTLS datagram from the peer.
    public func handleInput(_ datagram: [UInt8], now: Instant) {
        self.now = now
        // An empty datagram would read as end-of-stream to mbedtls: drop it.
        guard state == .handshaking || state == .connected, !datagram.isEmpty else { return }
        if state == .handshaking, assembler != nil {
            switch assembler!.feed(datagram) {
            case .hold: return
            case .forward(let bytes):
                // Before its first ClientHello a server can take nothing else: mbedtls
                // would end the handshake on it ("bad client hello message"), so a stray
                // or stale record (an alert, application data from an earlier
                // association) would cost the call. Dropped and counted instead.
                if !sawClientHello {
                    guard ClientHelloAssembler.startsWithClientHello(bytes) else {
                        droppedBeforeHello += 1
                        return
                    }
                    sawClientHello = true
                }
                inbound.append(bytes)
            }
        } else {
            inbound.append(datagram)
        }
        advance()
    }

    public func handleTimeout(now: Instant) {
        self.now = now
        guard state == .handshaking else { return }
        advance()
    }

    public func pollOutput() -> DTLSOutput {
        if !outbound.isEmpty { return .transmit(outbound.removeFirst()) }
        if !events.isEmpty { return .event(events.removeFirst()) }
        if state == .handshaking, let deadline = timerFinal {
            // mbedtls retransmits on the final delay; the intermediate one only matters
            // for reads that block, which ours never do.
            return .timeout(deadline)
        }
        return .timeout(.distantFuture)
    }

    /// Sends application data (one SCTP packet) in one record.
    public func send(_ data: [UInt8]) throws(DTLSError) {
        guard state == .connected else { throw .notConnected }
        let r = data.withUnsafeBufferPointer { mbedtls_ssl_write(ssl, $0.baseAddress, $0.count) }
        if r < 0 { throw .crypto(call: "mbedtls_ssl_write", code: r) }
    }

    /// Sends close_notify (RFC 5246 §7.2.1) and closes.
    public func close() {
        guard state == .connected || state == .handshaking else { return }
        _ = mbedtls_ssl_close_notify(ssl)
        state = .closed
        events.append(.closed)
    }

    // MARK: mbedtls callbacks

    func readDatagram(into buffer: UnsafeMutablePointer<UInt8>, capacity: Int) -> Int32 {
        guard !inbound.isEmpty else { return MBEDTLS_ERR_SSL_WANT_READ }
        let datagram = inbound.removeFirst()
        let n = min(datagram.count, capacity)
        datagram.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress!, count: n) }
        return Int32(n)
    }

    func setTimer(intermediateMS: UInt32, finalMS: UInt32) {
        if finalMS == 0 {
            timerIntermediate = nil
            timerFinal = nil
        } else {
            timerIntermediate = now + .milliseconds(Int64(intermediateMS))
            timerFinal = now + .milliseconds(Int64(finalMS))
        }
    }

    /// mbedtls' get_timer contract: -1 cancelled, 0 none expired, 1 intermediate passed,
    /// 2 final passed.
    func timerStatus() -> Int32 {
        guard let final = timerFinal, let intermediate = timerIntermediate else { return -1 }
        if now >= final { return 2 }
        if now >= intermediate { return 1 }
        return 0
    }

    func verify(_ certificate: UnsafeMutablePointer<mbedtls_x509_crt>, depth: Int32, flags: UnsafeMutablePointer<UInt32>) -> Int32 {
        // Only the peer's own certificate (depth 0) is authenticated, by fingerprint.
        guard depth == 0 else {
            flags.pointee = 0
            return 0
        }
        let raw = UnsafeRawBufferPointer(start: certificate.pointee.raw.p, count: certificate.pointee.raw.len)
        guard remoteFingerprints.contains(where: { $0.matches(raw) }) else {
            // A non-zero return is fatal even in OPTIONAL mode (x509_crt.c says so).
            fingerprintRejected = true
            return MBEDTLS_ERR_X509_FATAL_ERROR
        }
        flags.pointee = 0
        peerVerified = true
        return 0
    }

    func exportSRTPKeys(master: UnsafePointer<UInt8>, clientRandom: UnsafePointer<UInt8>,
                        serverRandom: UnsafePointer<UInt8>, prf: mbedtls_tls_prf_types) -> Int32 {
        // RFC 5705 exporter with the RFC 5764 §4.2 label and no context:
        // PRF(master_secret, "EXTRACTOR-dtls_srtp", client_random + server_random).
        var seed = [UInt8](repeating: 0, count: 64)
        for i in 0..<32 {
            seed[i] = clientRandom[i]
            seed[32 + i] = serverRandom[i]
        }
        var out = [UInt8](repeating: 0, count: 60)
        let r = mbedtls_ssl_tls_prf(prf, master, 48, "EXTRACTOR-dtls_srtp", seed, seed.count, &out, out.count)
        if r == 0 { exported = out }
        return r
    }

    // MARK: State machine

    private func advance() {
        if state == .handshaking {
            let r = mbedtls_ssl_handshake(ssl)
            if r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE {
                return
            }
            if r != 0 {
                if fingerprintRejected {
                    fail(.fingerprintMismatch)
                } else if r == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE, let alert = lastAlert() {
                    fail(.peerAlert(code: alert, handshake: true))
                } else {
                    fail(.crypto(call: "handshake", code: r))
                }
                return
            }
            // OPTIONAL lets a client that sends no certificate through; WebRTC does not.
            guard peerVerified else {
                fail(.noPeerCertificate)
                return
            }
            guard let material = exported else {
                fail(.srtpNotNegotiated)
                return
            }
            var srtp = mbedtls_dtls_srtp_info()
            mbedtls_ssl_get_dtls_srtp_negotiation_result(ssl, &srtp)
            guard srtp.chosen_dtls_srtp_profile == Self.srtpProfiles[0] else {
                fail(.srtpNotNegotiated)
                return
            }
            let clientKey = Array(material[0..<16]), serverKey = Array(material[16..<32])
            let clientSalt = Array(material[32..<46]), serverSalt = Array(material[46..<60])
            let keys = role == .client
                ? SRTPKeyMaterial(localKey: clientKey, localSalt: clientSalt, remoteKey: serverKey, remoteSalt: serverSalt)
                : SRTPKeyMaterial(localKey: serverKey, localSalt: serverSalt, remoteKey: clientKey, remoteSalt: clientSalt)
            state = .connected
            timerFinal = nil
            timerIntermediate = nil
            events.append(.connected(keys))
        }
        guard state == .connected else { return }
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBufferPointer { mbedtls_ssl_read(ssl, $0.baseAddress, $0.count) }
            if n > 0 {
                events.append(.data(Array(buffer[0..<Int(n)])))
                continue
            }
            if n == MBEDTLS_ERR_SSL_WANT_READ || n == MBEDTLS_ERR_SSL_WANT_WRITE || n == 0 { return }
            if n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY {
                state = .closed
                events.append(.closed)
                return
            }
            // A record that fails authentication is dropped by mbedtls itself (DTLS
            // ignores bad records, RFC 6347 §4.1.2.7); anything surfacing here is fatal.
            droppedRecords += 1
            if n == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE, let alert = lastAlert() {
                fail(.peerAlert(code: alert, handshake: false))
            } else {
                fail(.crypto(call: "mbedtls_ssl_read", code: n))
            }
            return
        }
    }

    /// The description byte of the alert record mbedtls just read (RFC 5246 §7.2: level,
    /// description); mbedtls 2.28 keeps it in `in_msg` and offers no getter.
    private func lastAlert() -> UInt8? {
        guard let msg = ssl.pointee.in_msg, ssl.pointee.in_msglen >= 2 else { return nil }
        return msg[1]
    }

    private func fail(_ error: DTLSError) {
        state = .failed
        timerFinal = nil
        timerIntermediate = nil
        events.append(.failed(error))
    }
}
