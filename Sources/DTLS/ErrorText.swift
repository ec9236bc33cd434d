// What a person reads when DTLS fails: mbedtls' codes and the peer's alerts
// in words that say what happened and what to look at, the code kept in parentheses
// for a search or a bug report. Codes without words keep mbedtls' own text.
import CMbedTLS
import Wire

extension DTLSError {
    /// "DTLS handshake: <words> (-0x7980)", or "<call>: <mbedtls text> (-0x…)".
    static func describe(call: String, code: Int32) -> String {
        let hex = "-0x" + String(UInt32(bitPattern: 0 &- code), radix: 16)
        // `call` is one of our own ASCII labels: matched as bytes (Wire/Text.swift).
        let handshake = call.bytesEqual("handshake")
        guard let words = words(code, handshake: handshake) else { return "\(call): \(text(code)) (\(hex))" }
        return (handshake ? "DTLS handshake: " : "DTLS connection: ") + words + " (\(hex))"
    }

    /// The common codes (mbedtls 2.28 `ssl.h`, `x509.h`). "The peer" is the provider's
    /// media endpoint; we offer DTLS 1.2, ECDHE-ECDSA with AES-GCM, and SRTP
    /// AES128_CM_HMAC_SHA1_80 (RFC 5764).
    static func words(_ code: Int32, handshake: Bool) -> String? {
        switch code {
        case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE:
            return handshake ? "the peer refused the handshake with a fatal alert" : "the peer ended it with a fatal alert"
        case MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO:
            return "the peer's ServerHello was refused: it chose a version, cipher suite, SRTP profile or extension we did not offer"
        case MBEDTLS_ERR_SSL_BAD_HS_CLIENT_HELLO:
            return "the peer's ClientHello was refused: it offers no version, cipher suite or SRTP profile we take"
        case MBEDTLS_ERR_SSL_NO_USABLE_CIPHERSUITE, MBEDTLS_ERR_SSL_NO_CIPHER_CHOSEN:
            return "no cipher suite in common with the peer (we offer ECDHE-ECDSA with AES-GCM)"
        case MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION:
            return "the peer does not speak DTLS 1.2"
        case MBEDTLS_ERR_SSL_TIMEOUT:
            return "timed out: the peer stopped answering (UDP blocked after ICE, or the peer gave up)"
        case MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE:
            return "the peer's certificate could not be parsed (bad certificate)"
        case MBEDTLS_ERR_X509_CERT_VERIFY_FAILED, MBEDTLS_ERR_SSL_PEER_VERIFY_FAILED:
            return "the peer's certificate did not verify"
        case MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE_VERIFY, MBEDTLS_ERR_SSL_BAD_HS_SERVER_KEY_EXCHANGE,
             MBEDTLS_ERR_SSL_BAD_HS_CLIENT_KEY_EXCHANGE:
            return "the peer's key exchange did not verify against its certificate"
        case MBEDTLS_ERR_SSL_BAD_HS_FINISHED:
            return "the handshake's Finished check failed (the handshake was altered on the way)"
        case MBEDTLS_ERR_SSL_INVALID_MAC:
            return "a record failed its integrity check (corrupted on the way)"
        case MBEDTLS_ERR_SSL_UNEXPECTED_MESSAGE:
            return "the peer sent a handshake message out of order"
        case MBEDTLS_ERR_SSL_CONN_EOF, MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY:
            return "the peer closed the connection"
        case MBEDTLS_ERR_SSL_ALLOC_FAILED:
            return "out of memory"
        case MBEDTLS_ERR_X509_INVALID_FORMAT, MBEDTLS_ERR_X509_INVALID_VERSION, MBEDTLS_ERR_X509_INVALID_SERIAL,
             MBEDTLS_ERR_X509_INVALID_ALG, MBEDTLS_ERR_X509_INVALID_NAME, MBEDTLS_ERR_X509_INVALID_DATE,
             MBEDTLS_ERR_X509_INVALID_SIGNATURE, MBEDTLS_ERR_X509_INVALID_EXTENSIONS:
            return "the peer's certificate is malformed"
        default:
            return nil
        }
    }

    /// "DTLS handshake: the peer refused the handshake with alert bad_certificate (42):
    /// <what it means here>".
    static func describeAlert(_ code: UInt8, handshake: Bool) -> String {
        let alert = "alert \(alertName(code)) (\(code))"
        guard handshake else { return "DTLS connection: the peer ended it with \(alert)" }
        let meaning: String
        switch code {
        case 40: meaning = ": no cipher suite, SRTP profile or extension in common"
        case 42, 43, 46, 48, 49: meaning = ": it does not accept our certificate (a fingerprint that does not match the offer it saw?)"
        case 45: meaning = ": it finds our certificate expired (is its clock right?)"
        case 47, 50: meaning = ": it could not parse our handshake"
        case 10: meaning = ": our handshake message came out of order for it"
        case 20, 51: meaning = ": a handshake message failed its integrity check"
        case 70: meaning = ": it does not speak DTLS 1.2"
        case 71: meaning = ": it wants stronger cipher suites than ours"
        case 80: meaning = ": it failed internally"
        default: meaning = ""
        }
        return "DTLS handshake: the peer refused the handshake with \(alert)\(meaning)"
    }
}

/// The name of a TLS/DTLS alert (RFC 5246 §7.2, RFC 6066 §3, RFC 7301 §3.2): one table
/// for the DTLS connection's messages and the TLS client's (Signaling).
public func alertName(_ code: UInt8) -> String {
    switch code {
    case 0: return "close_notify"
    case 10: return "unexpected_message"
    case 20: return "bad_record_mac"
    case 22: return "record_overflow"
    case 40: return "handshake_failure"
    case 42: return "bad_certificate"
    case 43: return "unsupported_certificate"
    case 44: return "certificate_revoked"
    case 45: return "certificate_expired"
    case 46: return "certificate_unknown"
    case 47: return "illegal_parameter"
    case 48: return "unknown_ca"
    case 49: return "access_denied"
    case 50: return "decode_error"
    case 51: return "decrypt_error"
    case 70: return "protocol_version"
    case 71: return "insufficient_security"
    case 80: return "internal_error"
    case 90: return "user_canceled"
    case 100: return "no_renegotiation"
    case 110: return "unsupported_extension"
    case 112: return "unrecognized_name"
    case 120: return "no_application_protocol"
    default: return "alert"
    }
}

