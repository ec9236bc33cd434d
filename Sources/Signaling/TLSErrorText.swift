// What a person reads when the signaling TLS fails: mbedtls' codes and the
// server's alerts in words that say what happened and what to look at, the code kept
// in parentheses. Codes without words keep mbedtls' own text. Certificates that do not
// verify are `TLSError.certificateRejected`, which names its reasons already.
import CMbedTLS
import DTLS
import Wire

extension TLSError {
    /// "TLS handshake: <words> (-0x7200)", or "TLS: <call>: <mbedtls text> (-0x…)".
    func describeProtocolError(call: String, code: Int32) -> String {
        let hex = "-0x" + String(UInt32(bitPattern: 0 &- code), radix: 16)
        guard let words = TLSError.words(code) else { return "TLS: \(call): \(mbedtlsText(code)) (\(hex))" }
        return (call.bytesEqual("mbedtls_ssl_handshake") ? "TLS handshake: " : "TLS connection: ") + words + " (\(hex))"
    }

    /// The common codes (mbedtls 2.28 `ssl.h`, `x509.h`). We offer TLS 1.2 only, ECDHE
    /// with AES-GCM or ChaCha20-Poly1305 (TLSClient's design notes).
    static func words(_ code: Int32) -> String? {
        switch code {
        case MBEDTLS_ERR_SSL_INVALID_RECORD:
            return "the server's answer is not TLS (is it a plain http:// port?)"
        case MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION:
            return "the server does not speak TLS 1.2"
        case MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO:
            return "the server's ServerHello was refused: it chose a version, cipher suite or extension we did not offer"
        case MBEDTLS_ERR_SSL_NO_USABLE_CIPHERSUITE, MBEDTLS_ERR_SSL_NO_CIPHER_CHOSEN:
            return "no cipher suite in common with the server (we offer ECDHE with AES-GCM or ChaCha20)"
        case MBEDTLS_ERR_SSL_INVALID_MAC:
            return "a record failed its integrity check (corrupted on the way, or altered by a middlebox)"
        case MBEDTLS_ERR_SSL_UNEXPECTED_MESSAGE:
            return "the server sent a handshake message out of order"
        case MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE:
            return "the server's certificate could not be parsed (bad certificate)"
        case MBEDTLS_ERR_SSL_BAD_HS_SERVER_KEY_EXCHANGE, MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE_VERIFY:
            return "the server's key exchange did not verify against its certificate"
        case MBEDTLS_ERR_SSL_BAD_HS_FINISHED:
            return "the handshake's Finished check failed (altered on the way, e.g. by a proxy)"
        case MBEDTLS_ERR_SSL_CONN_EOF:
            return "the server closed the connection during the handshake"
        case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE:
            return "the server ended it with a fatal alert"
        case MBEDTLS_ERR_SSL_TIMEOUT:
            return "timed out: the server stopped answering"
        case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED, MBEDTLS_ERR_SSL_PEER_VERIFY_FAILED:
            return "the server's certificate did not verify"
        case MBEDTLS_ERR_X509_INVALID_FORMAT, MBEDTLS_ERR_X509_INVALID_VERSION, MBEDTLS_ERR_X509_INVALID_SERIAL,
             MBEDTLS_ERR_X509_INVALID_ALG, MBEDTLS_ERR_X509_INVALID_NAME, MBEDTLS_ERR_X509_INVALID_DATE,
             MBEDTLS_ERR_X509_INVALID_SIGNATURE, MBEDTLS_ERR_X509_INVALID_EXTENSIONS:
            return "the server's certificate is malformed"
        case MBEDTLS_ERR_SSL_ALLOC_FAILED:
            return "out of memory"
        default:
            return nil
        }
    }

    /// The alerts a server refuses a handshake with, in words; others by name.
    func describeAlert(_ code: UInt8) -> String {
        let alert = "(alert \(alertName(code)), \(code))"
        let why: String
        switch code {
        case 40: why = "no cipher suite or version in common (we offer TLS 1.2 with ECDHE and AES-GCM or ChaCha20)"
        case 70: why = "it does not speak TLS 1.2"
        case 71: why = "it wants stronger cipher suites than ours"
        case 112: why = "it does not serve this host name"
        case 120: why = "no application protocol (ALPN) in common"
        case 47, 50: why = "it could not parse our handshake"
        case 42, 43, 46, 48, 49: why = "it refused a certificate"
        default: return "TLS: the server sent the fatal alert \(alertName(code)) (\(code))"
        }
        return "TLS: the server refused the handshake: \(why) \(alert)"
    }
}
