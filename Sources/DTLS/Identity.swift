/// DTLS: DTLS 1.2 over mbedtls with in-memory I/O, and the local identity it
/// presents: an ECDSA P-256 key and a self-signed certificate whose SHA-256 fingerprint
/// goes into SDP (RFC 8827 §6.5, RFC 8122).
///
/// Design decisions:
/// - ECDSA P-256, not RSA: cheap to generate on a Pi at every start, and what browsers
///   and PROTOCOLS.md's peers expect.
/// - Randomness comes from mbedtls' CTR-DRBG seeded by its entropy collector
///   (getrandom on Linux); one `CryptoRandom` per identity, no global state.
import CMbedTLS
import Wire

/// What mbedtls refused, with the call and its (negative) error code.
public enum DTLSError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An mbedtls call failed: the call and its (negative) error code.
    case crypto(call: String, code: Int32)
    /// The peer's certificate does not match any `a=fingerprint` of its SDP.
    case fingerprintMismatch
    /// The peer's SDP carried no usable fingerprint (SHA-256 or better).
    case noFingerprint
    /// The handshake finished without agreeing SRTP_AES128_CM_HMAC_SHA1_80 (RFC 5764).
    case srtpNotNegotiated
    /// Data was sent before the handshake finished or after the connection ended.
    case notConnected
    /// The handshake ended without the peer presenting a certificate (a client may
    /// leave it out in TLS; WebRTC authenticates by it, RFC 8827 §6.5).
    case noPeerCertificate
    /// The peer sent a fatal alert (RFC 5246 §7.2, RFC 6347 §4.1.2.7): its description
    /// code, and whether it came during the handshake (a refusal) or after.
    case peerAlert(code: UInt8, handshake: Bool)

    public var description: String {
        switch self {
        case .crypto(let call, let code): return DTLSError.describe(call: call, code: code)
        case .peerAlert(let code, let handshake): return DTLSError.describeAlert(code, handshake: handshake)
        case .fingerprintMismatch: return "dtls: peer certificate does not match the SDP fingerprint"
        case .noFingerprint: return "dtls: the peer's SDP has no sha-256 (or better) fingerprint"
        case .srtpNotNegotiated: return "dtls: the peer did not agree SRTP_AES128_CM_HMAC_SHA1_80"
        case .notConnected: return "dtls: not connected"
        case .noPeerCertificate: return "dtls: the peer presented no certificate"
        }
    }

    static func text(_ code: Int32) -> String {
        var buf = [CChar](repeating: 0, count: 160)
        mbedtls_strerror(code, &buf, buf.count)
        return stringFromCBuffer(buf)
    }
}

@inline(__always)
func check(_ call: String, _ code: Int32) throws(DTLSError) {
    if code != 0 { throw .crypto(call: call, code: code) }
}

/// The mbedtls version, e.g. `mbed TLS 2.28.3`.
public var mbedtlsVersion: String {
    var buf = [CChar](repeating: 0, count: 32)
    mbedtls_version_get_string_full(&buf)
    return stringFromCBuffer(buf)
}

/// A CTR-DRBG seeded from the system's entropy, for key generation and handshakes: the
/// program's one DRBG class (DTLS, the certificate, ICE credentials, and the TLS client
/// in Signaling, which calls it `TLSRandom`).
public final class CryptoRandom {
    let entropy: UnsafeMutablePointer<mbedtls_entropy_context>
    /// The context mbedtls' RNG callbacks take (`mbedtls_ssl_conf_rng(conf,
    /// mbedtls_ctr_drbg_random, random.drbg)`), public for the TLS client in Signaling.
    public let drbg: UnsafeMutablePointer<mbedtls_ctr_drbg_context>

    public init(personalization: String = "linnet") throws(DTLSError) {
        entropy = .allocate(capacity: 1)
        drbg = .allocate(capacity: 1)
        mbedtls_entropy_init(entropy)
        mbedtls_ctr_drbg_init(drbg)
        let custom = Array(personalization.utf8)
        let r = mbedtls_ctr_drbg_seed(drbg, mbedtls_entropy_func, entropy, custom, custom.count)
        // All stored properties are set: a throw here still runs deinit, which frees them.
        if r != 0 { throw .crypto(call: "mbedtls_ctr_drbg_seed", code: r) }
    }

    deinit {
        mbedtls_ctr_drbg_free(drbg)
        mbedtls_entropy_free(entropy)
        drbg.deallocate()
        entropy.deallocate()
    }

    /// `count` random bytes.
    public func bytes(_ count: Int) throws(DTLSError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        try check("mbedtls_ctr_drbg_random", mbedtls_ctr_drbg_random(drbg, &out, count))
        return out
    }
}

/// SHA-256 of `bytes`.
public func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 32)
    _ = mbedtls_sha256_ret(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, &out, 0)
    return out
}

/// Our DTLS identity: a P-256 key pair and a self-signed X.509 certificate for it.
public final class Identity {
    let key: UnsafeMutablePointer<mbedtls_pk_context>
    /// The certificate, DER-encoded.
    public let certificateDER: [UInt8]
    /// SHA-256 of `certificateDER`: what `a=fingerprint:sha-256` carries.
    public let fingerprint: [UInt8]

    /// Generates a fresh key and certificate (`CN=linnet`, serial random, valid
    /// 2025–2035: WebRTC peers check the fingerprint, not the dates).
    public init(random: CryptoRandom, commonName: String = "linnet") throws(DTLSError) {
        key = .allocate(capacity: 1)
        mbedtls_pk_init(key)
        var crt = mbedtls_x509write_cert()
        mbedtls_x509write_crt_init(&crt)
        var serial = mbedtls_mpi()
        mbedtls_mpi_init(&serial)
        defer {
            mbedtls_x509write_crt_free(&crt)
            mbedtls_mpi_free(&serial)
        }
        do throws(DTLSError) {
            try check("mbedtls_pk_setup", mbedtls_pk_setup(key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)))
            try check("mbedtls_ecp_gen_key", mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key.pointee), mbedtls_ctr_drbg_random, random.drbg))
            var serialBytes = try random.bytes(8)
            serialBytes[0] &= 0x7F  // a positive INTEGER (RFC 5280 §4.1.2.2)
            try check("mbedtls_mpi_read_binary", mbedtls_mpi_read_binary(&serial, serialBytes, serialBytes.count))
            mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3)
            mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256)
            mbedtls_x509write_crt_set_subject_key(&crt, key)
            mbedtls_x509write_crt_set_issuer_key(&crt, key)
            let name = "CN=" + commonName
            try check("mbedtls_x509write_crt_set_subject_name", mbedtls_x509write_crt_set_subject_name(&crt, name))
            try check("mbedtls_x509write_crt_set_issuer_name", mbedtls_x509write_crt_set_issuer_name(&crt, name))
            try check("mbedtls_x509write_crt_set_serial", mbedtls_x509write_crt_set_serial(&crt, &serial))
            try check("mbedtls_x509write_crt_set_validity", mbedtls_x509write_crt_set_validity(&crt, "20250101000000", "20351231235959"))
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = mbedtls_x509write_crt_der(&crt, &buffer, buffer.count, mbedtls_ctr_drbg_random, random.drbg)
            guard n > 0 else { throw DTLSError.crypto(call: "mbedtls_x509write_crt_der", code: n) }
            // mbedtls writes the DER at the end of the buffer.
            certificateDER = try Identity.repairedCertificate(Array(buffer[(buffer.count - Int(n))...]), key: key, random: random)
            fingerprint = certificateDER.withUnsafeBytes { sha256($0) }
        } catch {
            mbedtls_pk_free(key)
            key.deallocate()
            throw error
        }
    }

    deinit {
        mbedtls_pk_free(key)
        key.deallocate()
    }

    /// `AB:CD:…`, as in `a=fingerprint:sha-256 AB:CD:…`.
    public var fingerprintText: String { Hex.fingerprint(fingerprint) }
}

/// Checks that `der` is a well-formed X.509 certificate whose signature verifies with
/// its own public key (what a self-signed certificate must satisfy). Returns the SHA-256
/// fingerprint of the DER on success.
public func verifySelfSigned(_ der: [UInt8]) throws(DTLSError) -> [UInt8] {
    var crt = mbedtls_x509_crt()
    mbedtls_x509_crt_init(&crt)
    defer { mbedtls_x509_crt_free(&crt) }
    try check("mbedtls_x509_crt_parse_der", mbedtls_x509_crt_parse_der(&crt, der, der.count))
    guard let info = mbedtls_md_info_from_type(crt.sig_md) else {
        throw .crypto(call: "mbedtls_md_info_from_type", code: MBEDTLS_ERR_X509_UNKNOWN_SIG_ALG)
    }
    var hash = [UInt8](repeating: 0, count: Int(mbedtls_md_get_size(info)))
    try check("mbedtls_md", mbedtls_md(info, crt.tbs.p, crt.tbs.len, &hash))
    try check("mbedtls_pk_verify", mbedtls_pk_verify(&crt.pk, crt.sig_md, hash, hash.count, crt.sig.p, crt.sig.len))
    return der.withUnsafeBytes { sha256($0) }
}

/// Minimal DER (X.690) reading and writing, for the one repair Identity needs.
enum DER {
    /// The tag, header length and content length of the TLV at `offset`, or nil.
    static func element(_ b: [UInt8], at offset: Int) -> (tag: UInt8, header: Int, length: Int)? {
        guard offset + 2 <= b.count else { return nil }
        let tag = b[offset]
        let first = Int(b[offset + 1])
        if first < 0x80 {
            return offset + 2 + first <= b.count ? (tag, 2, first) : nil
        }
        let count = first & 0x7F
        guard count >= 1, count <= 3, offset + 2 + count <= b.count else { return nil }
        var length = 0
        for i in 0..<count { length = length << 8 | Int(b[offset + 2 + i]) }
        return offset + 2 + count + length <= b.count ? (tag, 2 + count, length) : nil
    }

    static func encode(tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        let n = content.count
        if n < 0x80 { return [tag, UInt8(n)] + content }
        if n < 0x100 { return [tag, 0x81, UInt8(n)] + content }
        if n < 0x10000 { return [tag, 0x82, UInt8(n >> 8), UInt8(n & 0xFF)] + content }
        return [tag, 0x83, UInt8(n >> 16), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)] + content
    }

    /// The contents of a SEQUENCE split into its elements (each whole TLV).
    static func children(_ b: [UInt8]) -> [[UInt8]]? {
        var out: [[UInt8]] = []
        var i = 0
        while i < b.count {
            guard let e = element(b, at: i) else { return nil }
            out.append(Array(b[i..<(i + e.header + e.length)]))
            i += e.header + e.length
        }
        return out
    }

    static func contents(_ tlv: [UInt8]) -> [UInt8]? {
        guard let e = element(tlv, at: 0), e.header + e.length == tlv.count else { return nil }
        return Array(tlv[e.header...])
    }
}

extension Identity {
    /// `ecdsa-with-SHA256` AlgorithmIdentifier with its parameters absent, as RFC 5758
    /// §3.2 requires: 1.2.840.10045.4.3.2.
    static let ecdsaWithSHA256: [UInt8] = [0x30, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02]

    /// mbedtls 2.28 writes the signature AlgorithmIdentifiers of an ECDSA certificate
    /// with a NULL parameter, which RFC 5758 §3.2 forbids and strict parsers refuse (the
    /// Python `cryptography` package under aiortc rejects the handshake). Rebuilds the
    /// certificate with the parameters absent and signs the corrected TBSCertificate.
    static func repairedCertificate(_ der: [UInt8], key: UnsafeMutablePointer<mbedtls_pk_context>,
                                    random: CryptoRandom) throws(DTLSError) -> [UInt8] {
        let malformed = DTLSError.crypto(call: "certificate repair", code: MBEDTLS_ERR_X509_INVALID_FORMAT)
        guard let outer = DER.contents(der), let parts = DER.children(outer), parts.count == 3,
              let tbsContent = DER.contents(parts[0]), var tbs = DER.children(tbsContent), tbs.count >= 3 else { throw malformed }
        // TBSCertificate: [0] version, serialNumber, signature AlgorithmIdentifier, ...
        let signatureIndex = tbs[0].first == 0xA0 ? 2 : 1
        tbs[signatureIndex] = ecdsaWithSHA256
        let newTBS = DER.encode(tag: 0x30, tbs.flatMap { $0 })
        var hash = [UInt8](repeating: 0, count: 32)
        _ = mbedtls_sha256_ret(newTBS, newTBS.count, &hash, 0)
        var signature = [UInt8](repeating: 0, count: 80)  // MBEDTLS_ECDSA_MAX_LEN for P-256 is 72
        var signatureLength = 0
        try check("mbedtls_pk_sign", mbedtls_pk_sign(key, MBEDTLS_MD_SHA256, hash, hash.count, &signature, &signatureLength,
                                                     mbedtls_ctr_drbg_random, random.drbg))
        let bitString = DER.encode(tag: 0x03, [0] + signature[0..<signatureLength])
        return DER.encode(tag: 0x30, newTBS + ecdsaWithSHA256 + bitString)
    }
}
