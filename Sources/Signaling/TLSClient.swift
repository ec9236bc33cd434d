/// TLS client: TLS 1.2 over mbedtls 2.28 with in-memory I/O and the caller's clocks, for
/// the signaling routes' HTTPS requests.
///
/// Design decisions:
/// - Sans-IO. mbedtls' BIO callbacks read from and append to byte queues on the client
///   object (reached through an `Unmanaged` context pointer, no global state); the IO
///   layer moves those bytes to and from the TCP socket. Nothing here blocks or reads a
///   clock: the monotonic `now` bounds the handshake, and certificate validity is judged
///   against a wall-clock time the caller passes in (`validationTime`), not mbedtls'
///   own `time()` call, so expiry is testable and the IO layer owns the clock.
/// - TLS 1.2 only, minimum and maximum. mbedtls 2.28 has no TLS 1.3 client (its TLS 1.3
///   work is an experimental prototype in 3.x), and TLS 1.0/1.1 are deprecated (RFC 8996).
///   Every provider endpoint Linnet talks to speaks TLS 1.2.
/// - Cipher suites: ECDHE (forward secrecy) with AEAD only, as RFC 9325 §4.2 recommends:
///   AES-GCM and ChaCha20-Poly1305, with ECDSA or RSA certificates.
/// - Verification can never be switched off: `MBEDTLS_SSL_VERIFY_REQUIRED` always, a
///   trust store that must hold at least one CA, and a hostname that is always checked
///   (SNI and the certificate's dNSName/CN, via `mbedtls_ssl_set_hostname`). Optional
///   SPKI pins (RFC 7469 `pin-sha256`) are checked in addition to the chain, never
///   instead of it.
/// - A refused certificate is reported as `TLSError.certificateRejected` with the
///   reasons decoded from mbedtls' verify flags (expired, not trusted, hostname
///   mismatch, pin mismatch, …), so a log says why in words.
/// - Parsing the system CA bundle (about 140 certificates) costs tens of milliseconds on
///   a Pi: `TLSTrustStore` parses it once and is shared by every connection.
import CMbedTLS
import Wire
import DTLS

// MARK: Errors

/// Why a certificate was refused; several may apply at once.
public enum CertificateProblem: Sendable, Equatable, CustomStringConvertible {
    /// A certificate's notAfter (Unix seconds, UTC) is before the validation time.
    case expired(notAfter: Int64)
    /// A certificate's notBefore (Unix seconds, UTC) is after the validation time
    /// (often a board whose clock has not been set yet).
    case notYetValid(notBefore: Int64)
    /// The chain does not lead to a CA in the trust store (self-signed, unknown CA, bad
    /// signature).
    case notTrusted
    /// The certificate names neither the host we asked for (RFC 6125 dNSName / CN).
    case hostnameMismatch
    /// The chain is valid but no certificate in it has a configured SPKI pin.
    case pinMismatch
    /// The certificate is on a CRL.
    case revoked
    /// The server sent no certificate.
    case missing
    /// keyUsage / extendedKeyUsage / nsCertType forbid use as a TLS server certificate.
    case badKeyUsage
    /// Signed with a hash mbedtls' default profile refuses (e.g. SHA-1).
    case weakSignatureHash
    /// Signed with an unacceptable algorithm or key (e.g. RSA shorter than 2048 bits).
    case weakKey
    /// Any other verify flag, raw.
    case other(flags: UInt32)

    public var description: String {
        switch self {
        case .expired(let t): return "expired on \(utcDate(t))"
        case .notYetValid(let t): return "not valid before \(utcDate(t))"
        case .notTrusted: return "not issued by a trusted CA"
        case .hostnameMismatch: return "issued for another hostname"
        case .pinMismatch: return "public key matches no configured pin"
        case .revoked: return "revoked"
        case .missing: return "no certificate sent"
        case .badKeyUsage: return "not usable for a TLS server (key usage)"
        case .weakSignatureHash: return "signed with an unacceptable hash"
        case .weakKey: return "unacceptable key or signature algorithm"
        case .other(let flags): return "verify flags 0x\(String(flags, radix: 16))"
        }
    }

    /// The reasons in mbedtls verify `flags` (x509.h `MBEDTLS_X509_BADCERT_*`), in a
    /// fixed order. Validity dates come separately (the caller's clock decides them).
    static func decode(_ flags: UInt32, pinMismatch: Bool) -> [CertificateProblem] {
        var out: [CertificateProblem] = []
        var rest = flags
        func take(_ bit: Int32, _ problem: CertificateProblem?) {
            let b = UInt32(bit)
            guard rest & b != 0 else { return }
            rest &= ~b
            if let problem, !out.contains(problem) { out.append(problem) }
        }
        take(MBEDTLS_X509_BADCERT_MISSING, .missing)
        take(MBEDTLS_X509_BADCERT_NOT_TRUSTED, .notTrusted)
        take(MBEDTLS_X509_BADCERT_CN_MISMATCH, .hostnameMismatch)
        take(MBEDTLS_X509_BADCERT_REVOKED, .revoked)
        take(MBEDTLS_X509_BADCERT_KEY_USAGE, .badKeyUsage)
        take(MBEDTLS_X509_BADCERT_EXT_KEY_USAGE, .badKeyUsage)
        take(MBEDTLS_X509_BADCERT_NS_CERT_TYPE, .badKeyUsage)
        take(MBEDTLS_X509_BADCERT_BAD_MD, .weakSignatureHash)
        take(MBEDTLS_X509_BADCERT_BAD_PK, .weakKey)
        take(MBEDTLS_X509_BADCERT_BAD_KEY, .weakKey)
        // Our verify callback marks a pin mismatch with BADCERT_OTHER.
        take(MBEDTLS_X509_BADCERT_OTHER, pinMismatch ? .pinMismatch : .other(flags: UInt32(MBEDTLS_X509_BADCERT_OTHER)))
        // Date flags are ours (see `TLSClient.verify`); the details are added by the caller.
        take(MBEDTLS_X509_BADCERT_EXPIRED, nil)
        take(MBEDTLS_X509_BADCERT_FUTURE, nil)
        if rest != 0 { out.append(.other(flags: rest)) }
        return out
    }
}

/// What went wrong on a TLS connection, as a user should read it in a log.
public enum TLSError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The server's certificate was refused; `host` is the name we asked for.
    case certificateRejected(host: String, problems: [CertificateProblem])
    /// The server sent a fatal alert (RFC 5246 §7.2) during the handshake or after.
    case peerAlert(UInt8)
    /// The handshake did not finish before the configured deadline.
    case handshakeTimedOut
    /// The TCP stream ended without close_notify (RFC 5246 §7.2.1): a truncation, or a
    /// server that closes abruptly. An HTTP layer whose message framing already ended
    /// may ignore it.
    case truncated
    /// mbedtls refused the peer's bytes or the exchange (bad record, bad MAC, no shared
    /// cipher suite, …): the call and its negative error code.
    case protocolError(call: String, code: Int32)
    /// Setting up mbedtls failed (out of memory, bad parameters): call and code.
    case setup(call: String, code: Int32)
    /// The CA bundle held no certificate mbedtls could parse.
    case noTrustAnchors
    /// A CA file was not PEM/DER that mbedtls could parse: its (negative) error code.
    case badTrustStore(code: Int32)
    /// The hostname is empty or has bytes a DNS name cannot have.
    case invalidHostname(String)
    /// A pin is not base64 of 32 bytes (RFC 7469 §2.4 pin-sha256).
    case invalidPin(String)
    /// `send` before the handshake finished or after the connection ended.
    case notConnected

    public var description: String {
        switch self {
        case .certificateRejected(let host, let problems):
            var text = "TLS: certificate for '\(host)' refused: "
            for (i, p) in problems.enumerated() { text += (i == 0 ? "" : "; ") + p.description }
            return text
        case .peerAlert(let code): return describeAlert(code)
        case .handshakeTimedOut: return "TLS: handshake timed out"
        case .truncated: return "TLS: connection closed without close_notify"
        case .protocolError(let call, let code): return describeProtocolError(call: call, code: code)
        case .setup(let call, let code): return "TLS setup: \(call): \(mbedtlsText(code)) (-0x\(String(UInt32(bitPattern: -code), radix: 16)))"
        case .noTrustAnchors: return "TLS: the CA bundle holds no usable certificate"
        case .badTrustStore(let code): return "TLS: cannot parse the CA bundle: \(mbedtlsText(code))"
        case .invalidHostname(let h): return "TLS: '\(h)' is not a hostname"
        case .invalidPin(let p): return "TLS: '\(p)' is not a pin-sha256 (base64 of a 32-byte SHA-256)"
        case .notConnected: return "TLS: not connected"
        }
    }
}

func mbedtlsText(_ code: Int32) -> String {
    var buf = [CChar](repeating: 0, count: 160)
    mbedtls_strerror(code, &buf, buf.count)
    return stringFromCBuffer(buf)
}

// MARK: Dates (certificate validity against the caller's wall clock)

/// Days since 1970-01-01 of a proleptic Gregorian date: eras of 400 years (146,097
/// days) with the year starting in March, so the leap day falls at the end.
func daysSinceEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = (y >= 0 ? y : y - 399) / 400
    let yearOfEra = y - era * 400
    let monthFromMarch = month > 2 ? month - 3 : month + 9
    let dayOfYear = (153 * monthFromMarch + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
}

/// The inverse of `daysSinceEpoch`: (year, month, day).
func civilDate(daysSinceEpoch days: Int64) -> (year: Int64, month: Int64, day: Int64) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthFromMarch = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
    let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
    return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
}

/// Unix seconds of an X.509 time (RFC 5280 §4.1.2.5: UTC).
func unixTime(_ t: mbedtls_x509_time) -> Int64 {
    daysSinceEpoch(year: Int64(t.year), month: Int64(t.mon), day: Int64(t.day)) * 86_400
        + Int64(t.hour) * 3600 + Int64(t.min) * 60 + Int64(t.sec)
}

/// `2045-01-01 00:00:00 UTC` for log messages.
func utcDate(_ seconds: Int64) -> String {
    let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
    let rest = seconds - days * 86_400
    let d = civilDate(daysSinceEpoch: days)
    func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
    return "\(d.year)-\(two(d.month))-\(two(d.day)) \(two(rest / 3600)):\(two(rest / 60 % 60)):\(two(rest % 60)) UTC"
}

// MARK: Pins, trust, randomness

/// An RFC 7469 `pin-sha256`: SHA-256 of a certificate's SubjectPublicKeyInfo DER.
public struct SPKIPin: Sendable, Equatable, CustomStringConvertible {
    public let sha256: [UInt8]

    /// From the base64 form (`pin-sha256="…"`'s value, or what
    /// `openssl x509 -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64` prints).
    public init(base64 text: String) throws(TLSError) {
        guard let bytes = Base64.decode(text), bytes.count == 32 else { throw .invalidPin(text) }
        sha256 = bytes
    }

    public init(sha256: [UInt8]) {
        self.sha256 = sha256
    }

    /// The pin of a SubjectPublicKeyInfo DER.
    public init(subjectPublicKeyInfo der: UnsafeRawBufferPointer) {
        var out = [UInt8](repeating: 0, count: 32)
        _ = mbedtls_sha256_ret(der.baseAddress?.assumingMemoryBound(to: UInt8.self), der.count, &out, 0)
        sha256 = out
    }

    public var description: String { Base64.encode(sha256) }
}


/// The CAs a client trusts, parsed once: the system bundle
/// (`/etc/ssl/certs/ca-certificates.crt`, read by the IO layer) and/or a custom CA file.
public final class TLSTrustStore {
    let chain: UnsafeMutablePointer<mbedtls_x509_crt>
    /// How many CA certificates were parsed.
    public private(set) var count = 0
    /// Certificates in the input mbedtls could not parse (skipped, e.g. unusual curves).
    public private(set) var skipped = 0

    /// Parses PEM (one or many `BEGIN CERTIFICATE` blocks) or a single DER certificate.
    /// Throws `.noTrustAnchors` when nothing usable came out of it.
    public init(pem: [UInt8]) throws(TLSError) {
        chain = .allocate(capacity: 1)
        mbedtls_x509_crt_init(chain)
        // Every stored property is initialized now, so a throw below runs deinit,
        // which frees the chain.
        try add(pem)
        guard count > 0 else { throw .noTrustAnchors }
    }

    /// Adds more CAs (e.g. a custom CA file on top of the system bundle).
    public func add(_ pem: [UInt8]) throws(TLSError) {
        // mbedtls treats input as PEM only when it is NUL-terminated and the length
        // counts the NUL.
        var input = pem
        if Self.containsPEMMarker(pem) && pem.last != 0 { input.append(0) }
        let before = countCertificates()
        let r = mbedtls_x509_crt_parse(chain, input, input.count)
        if r < 0 && countCertificates() == before { throw .badTrustStore(code: r) }
        if r > 0 { skipped += Int(r) }
        count = countCertificates()
    }

    static func containsPEMMarker(_ bytes: [UInt8]) -> Bool {
        let marker = Array("-----BEGIN ".utf8)
        guard bytes.count >= marker.count else { return false }
        for start in 0...(bytes.count - marker.count) where bytes[start] == marker[0] {
            if bytes[start..<(start + marker.count)].elementsEqual(marker) { return true }
        }
        return false
    }

    private func countCertificates() -> Int {
        var n = 0
        var p: UnsafeMutablePointer<mbedtls_x509_crt>? = chain
        while let c = p, c.pointee.raw.len > 0 {
            n += 1
            p = c.pointee.next
        }
        return n
    }

    deinit {
        mbedtls_x509_crt_free(chain)
        chain.deallocate()
    }
}

/// The TLS client's random source: the DTLS module's CTR-DRBG (the same mbedtls
/// entropy + CTR-DRBG pair; there used to be a copy of the class here). One per loop is
/// enough; connections share it (they all run on the loop thread).
public typealias TLSRandom = CryptoRandom

extension CryptoRandom {
    /// A DRBG for TLS, seeded as the client's own used to be ("linnet-tls"
    /// personalization), its failure in the TLS error vocabulary.
    public static func tls() throws(TLSError) -> CryptoRandom {
        do throws(DTLSError) {
            return try CryptoRandom(personalization: "linnet-tls")
        } catch {
            if case .crypto(let call, let code) = error { throw .setup(call: call, code: code) }
            throw .setup(call: "mbedtls_ctr_drbg_seed", code: 0)
        }
    }
}

// MARK: The client

/// How to connect and what to accept.
public struct TLSClientConfiguration {
    /// The server's DNS name: sent as SNI (RFC 6066 §3) and matched against the
    /// certificate. mbedtls 2.28 matches names only (dNSName, then CN): an IP literal is
    /// sent as SNI too (RFC 6066 §3 says not to) and matches only a certificate that
    /// carries it as a name, so use DNS names for HTTPS endpoints.
    public var hostname: String
    public var trust: TLSTrustStore
    /// When non-empty, some certificate of the verified chain must have one of these
    /// SPKI pins (RFC 7469 §2.6 semantics: leaf, intermediate or root). Keep a backup
    /// pin for key rotation (RFC 7469 §4.3).
    public var pins: [SPKIPin]
    /// The wall-clock time (Unix seconds, UTC) certificates must be valid at: the IO
    /// layer reads CLOCK_REALTIME when it creates the connection.
    public var validationTime: Int64
    /// How long the handshake may take after `start`.
    public var handshakeTimeout: Duration

    public init(hostname: String, trust: TLSTrustStore, pins: [SPKIPin] = [], validationTime: Int64,
                handshakeTimeout: Duration = .seconds(15)) {
        self.hostname = hostname
        self.trust = trust
        self.pins = pins
        self.validationTime = validationTime
        self.handshakeTimeout = handshakeTimeout
    }
}

/// What the client reports.
public enum TLSEvent: Sendable, Equatable {
    /// The handshake finished and the server's certificate was accepted.
    case connected
    /// Application bytes arrived (a piece of the stream; boundaries mean nothing).
    case data([UInt8])
    /// The server sent close_notify (we answered with ours), or `close()` was called.
    case closed
    /// The connection failed; nothing more will happen on it.
    case failed(TLSError)
}

/// The next thing the caller must do.
public enum TLSOutput: Sendable, Equatable {
    /// Write these bytes to the TCP connection.
    case transmit([UInt8])
    case event(TLSEvent)
    /// Call `handleTimeout` at this instant (`Instant.distantFuture`: nothing pending).
    case timeout(Instant)
}

/// A TLS 1.2 client over mbedtls with in-memory I/O.
///
/// Drive contract (ARCHITECTURE.md "Drive loop"): call `start(now:)` once after TCP
/// connects, `handleInput(_:now:)` with whatever the socket read (any split),
/// `handleEndOfStream(now:)` when the socket reports EOF, `handleTimeout(now:)` at the
/// deadline; after every call drain `pollOutput()` until it returns `.timeout`.
/// `send` and `close` queue records the same way. After `.closed` or `.failed` the
/// caller closes the socket once the last `.transmit` has been written.
public final class TLSClient {
    public let configuration: TLSClientConfiguration
    let random: TLSRandom
    let ssl: UnsafeMutablePointer<mbedtls_ssl_context>
    let config: UnsafeMutablePointer<mbedtls_ssl_config>

    var inbound: [UInt8] = []
    var inboundOffset = 0
    var outbound: [UInt8] = []
    var events: [TLSEvent] = []
    /// One record's plaintext at most (RFC 5246 §6.2.1: 2^14 bytes), reused.
    var readBuffer = [UInt8](repeating: 0, count: 16_384)
    var deadline = Instant.distantFuture
    /// What our verify callback saw: flags merged over the chain, pin outcome, dates.
    var verifyFlags: UInt32 = 0
    var pinMatched = false
    var pinMismatch = false
    var expiredAt: Int64? = nil
    var notYetValidUntil: Int64? = nil

    public private(set) var state: State = .new

    public enum State: Sendable, Equatable {
        case new, handshaking, connected, closed, failed
    }

    /// ECDHE + AEAD only (RFC 9325 §4.2), strongest first; numbers from the IANA
    /// TLS Cipher Suites registry (RFC 5289, RFC 7905).
    static let cipherSuites: [Int32] = [
        0xC02B,  // TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        0xC02C,  // TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        0xCCA9,  // TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        0xC02F,  // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        0xC030,  // TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        0xCCA8,  // TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        0,
    ]

    public init(configuration: TLSClientConfiguration, random: TLSRandom) throws(TLSError) {
        guard Self.isHostname(configuration.hostname) else { throw .invalidHostname(configuration.hostname) }
        guard configuration.trust.count > 0 else { throw .noTrustAnchors }
        self.configuration = configuration
        self.random = random
        ssl = .allocate(capacity: 1)
        config = .allocate(capacity: 1)
        mbedtls_ssl_init(ssl)
        mbedtls_ssl_config_init(config)
        // A throw from here on runs deinit (the object is fully initialized), which
        // frees the contexts: no cleanup of our own, or it would happen twice.
        try setUp()
    }

    /// Letters, digits, `-`, `.` (and `_`, seen in the wild), 1–253 bytes.
    static func isHostname(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= 253 else { return false }
        return b.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 46 || $0 == 95 }
    }

    private func setUp() throws(TLSError) {
        func check(_ call: String, _ code: Int32) throws(TLSError) {
            if code != 0 { throw .setup(call: call, code: code) }
        }
        try check("mbedtls_ssl_config_defaults", mbedtls_ssl_config_defaults(
            config, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT))
        mbedtls_ssl_conf_rng(config, mbedtls_ctr_drbg_random, random.drbg)
        // TLS 1.2 (version 3.3) only: see the module notes.
        mbedtls_ssl_conf_min_version(config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3)
        mbedtls_ssl_conf_max_version(config, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3)
        Self.cipherSuites.withUnsafeBufferPointer { mbedtls_ssl_conf_ciphersuites(config, $0.baseAddress) }
        mbedtls_ssl_conf_ca_chain(config, configuration.trust.chain, nil)
        mbedtls_ssl_conf_authmode(config, MBEDTLS_SSL_VERIFY_REQUIRED)
        let context = Unmanaged.passUnretained(self).toOpaque()
        mbedtls_ssl_conf_verify(config, { context, certificate, depth, flags in
            guard let context, let certificate, let flags else { return -1 }
            let client = Unmanaged<TLSClient>.fromOpaque(context).takeUnretainedValue()
            client.verify(certificate, depth: depth, flags: flags)
            return 0
        }, context)
        try check("mbedtls_ssl_setup", mbedtls_ssl_setup(ssl, config))
        // Sets SNI and the name the certificate must carry (checked in x509 verify).
        try check("mbedtls_ssl_set_hostname", mbedtls_ssl_set_hostname(ssl, configuration.hostname))
        mbedtls_ssl_set_bio(ssl, context, { context, buffer, length in
            guard let context, let buffer else { return -1 }
            let client = Unmanaged<TLSClient>.fromOpaque(context).takeUnretainedValue()
            client.outbound.append(contentsOf: UnsafeBufferPointer(start: buffer, count: length))
            return Int32(length)
        }, { context, buffer, length in
            guard let context, let buffer else { return -1 }
            let client = Unmanaged<TLSClient>.fromOpaque(context).takeUnretainedValue()
            return client.read(into: buffer, capacity: length)
        }, nil)
    }

    deinit {
        mbedtls_ssl_free(ssl)
        mbedtls_ssl_config_free(config)
        ssl.deallocate()
        config.deallocate()
    }

    /// The negotiated cipher suite (e.g. `TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256`), once connected.
    public var cipherSuite: String? {
        guard state == .connected, let name = mbedtls_ssl_get_ciphersuite(ssl) else { return nil }
        return String(cString: name)
    }

    // MARK: Drive

    /// Sends the ClientHello; the handshake must finish by `now + handshakeTimeout`.
    public func start(now: Instant) {
        guard state == .new else { return }
        state = .handshaking
        deadline = now + configuration.handshakeTimeout
        advance()
    }

    /// Bytes read from the TCP connection, split anywhere.
    public func handleInput(_ bytes: [UInt8], now: Instant) {
        guard state == .handshaking || state == .connected, !bytes.isEmpty else { return }
        if inboundOffset > 0 && inboundOffset * 2 >= inbound.count {
            inbound.removeFirst(inboundOffset)
            inboundOffset = 0
        }
        inbound.append(contentsOf: bytes)
        advance()
    }

    /// The TCP connection reported end of stream.
    public func handleEndOfStream(now: Instant) {
        guard state == .handshaking || state == .connected else { return }
        fail(.truncated)
    }

    public func handleTimeout(now: Instant) {
        guard state == .handshaking, now >= deadline else { return }
        fail(.handshakeTimedOut)
    }

    public func pollOutput() -> TLSOutput {
        if !outbound.isEmpty {
            let bytes = outbound
            outbound.removeAll(keepingCapacity: true)
            return .transmit(bytes)
        }
        if !events.isEmpty { return .event(events.removeFirst()) }
        return .timeout(state == .handshaking ? deadline : .distantFuture)
    }

    /// Encrypts application bytes (in records of at most 16 KiB) for `.transmit`.
    public func send(_ data: [UInt8]) throws(TLSError) {
        guard state == .connected else { throw .notConnected }
        var offset = 0
        while offset < data.count {
            let r = data.withUnsafeBufferPointer { mbedtls_ssl_write(ssl, $0.baseAddress! + offset, $0.count - offset) }
            if r < 0 {
                // Our BIO never blocks, so any error is fatal.
                let error = TLSError.protocolError(call: "mbedtls_ssl_write", code: r)
                fail(error)
                throw error
            }
            offset += Int(r)
        }
    }

    /// Sends close_notify (RFC 5246 §7.2.1) and closes.
    public func close() {
        guard state == .connected || state == .handshaking else { return }
        if state == .connected { _ = mbedtls_ssl_close_notify(ssl) }
        state = .closed
        events.append(.closed)
    }

    // MARK: mbedtls callbacks

    func read(into buffer: UnsafeMutablePointer<UInt8>, capacity: Int) -> Int32 {
        let available = inbound.count - inboundOffset
        guard available > 0 else { return MBEDTLS_ERR_SSL_WANT_READ }
        let n = min(available, capacity)
        inbound.withUnsafeBufferPointer { buffer.update(from: $0.baseAddress! + inboundOffset, count: n) }
        inboundOffset += n
        return Int32(n)
    }

    /// mbedtls calls this for each certificate of the chain it built, from the trust
    /// anchor down to the server's own (depth 0); whatever stays in `flags` fails the
    /// handshake (VERIFY_REQUIRED). We replace mbedtls' date checks (which read the
    /// system clock) with the caller's time, and add the pin check.
    func verify(_ certificate: UnsafeMutablePointer<mbedtls_x509_crt>, depth: Int32, flags: UnsafeMutablePointer<UInt32>) {
        let dateFlags = UInt32(MBEDTLS_X509_BADCERT_EXPIRED) | UInt32(MBEDTLS_X509_BADCERT_FUTURE)
        var f = flags.pointee & ~dateFlags
        // RFC 5280 §4.1.2.5: valid from notBefore through notAfter, both inclusive.
        let notBefore = unixTime(certificate.pointee.valid_from)
        let notAfter = unixTime(certificate.pointee.valid_to)
        let now = configuration.validationTime
        if now > notAfter {
            f |= UInt32(MBEDTLS_X509_BADCERT_EXPIRED)
            expiredAt = notAfter
        }
        if now < notBefore {
            f |= UInt32(MBEDTLS_X509_BADCERT_FUTURE)
            notYetValidUntil = notBefore
        }
        if !configuration.pins.isEmpty {
            let spki = UnsafeRawBufferPointer(start: certificate.pointee.pk_raw.p, count: certificate.pointee.pk_raw.len)
            if configuration.pins.contains(SPKIPin(subjectPublicKeyInfo: spki)) { pinMatched = true }
            // The chain is walked top-down, so at depth 0 every certificate has been seen.
            if depth == 0 && !pinMatched {
                pinMismatch = true
                f |= UInt32(MBEDTLS_X509_BADCERT_OTHER)
            }
        }
        flags.pointee = f
        verifyFlags |= f
    }

    // MARK: State machine

    private func advance() {
        if state == .handshaking {
            let r = mbedtls_ssl_handshake(ssl)
            if r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE { return }
            if r != 0 {
                fail(handshakeError(r))
                return
            }
            state = .connected
            events.append(.connected)
        }
        guard state == .connected else { return }
        while true {
            let n = readBuffer.withUnsafeMutableBufferPointer { mbedtls_ssl_read(ssl, $0.baseAddress, $0.count) }
            if n > 0 {
                events.append(.data(Array(readBuffer[0..<Int(n)])))
                continue
            }
            if n == MBEDTLS_ERR_SSL_WANT_READ || n == MBEDTLS_ERR_SSL_WANT_WRITE || n == 0 { return }
            if n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY {
                // RFC 5246 §7.2.1: answer with our own close_notify, then close.
                _ = mbedtls_ssl_close_notify(ssl)
                state = .closed
                events.append(.closed)
                return
            }
            if n == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE {
                fail(.peerAlert(lastAlert()))
            } else {
                fail(.protocolError(call: "mbedtls_ssl_read", code: n))
            }
            return
        }
    }

    private func handshakeError(_ code: Int32) -> TLSError {
        if code == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED {
            let flags = verifyFlags | mbedtls_ssl_get_verify_result(ssl)
            var problems = CertificateProblem.decode(flags, pinMismatch: pinMismatch)
            if let t = expiredAt { problems.append(.expired(notAfter: t)) }
            if let t = notYetValidUntil { problems.append(.notYetValid(notBefore: t)) }
            if problems.isEmpty { problems.append(.other(flags: flags)) }
            return .certificateRejected(host: configuration.hostname, problems: problems)
        }
        if code == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE { return .peerAlert(lastAlert()) }
        return .protocolError(call: "mbedtls_ssl_handshake", code: code)
    }

    /// The description byte of the alert record mbedtls just read (RFC 5246 §7.2:
    /// level, description). mbedtls 2.28 keeps it in `in_msg` and offers no getter.
    private func lastAlert() -> UInt8 {
        guard let msg = ssl.pointee.in_msg, ssl.pointee.in_msglen >= 2 else { return 0 }
        return msg[1]
    }

    private func fail(_ error: TLSError) {
        state = .failed
        events.append(.failed(error))
    }
}
