import Testing
import CMbedTLS
@testable import Signaling

/// What a person reads when the signaling TLS fails: words for the common codes and
/// alerts, the code kept in parentheses.
@Suite struct TLSErrorTextTests {
    @Test func alertsSayWhatTheServerRefused() {
        #expect(TLSError.peerAlert(40).description
                == "TLS: the server refused the handshake: no cipher suite or version in common (we offer TLS 1.2 with ECDHE and AES-GCM or ChaCha20) (alert handshake_failure, 40)")
        #expect(TLSError.peerAlert(112).description
                == "TLS: the server refused the handshake: it does not serve this host name (alert unrecognized_name, 112)")
        #expect(TLSError.peerAlert(70).description
                == "TLS: the server refused the handshake: it does not speak TLS 1.2 (alert protocol_version, 70)")
    }

    @Test func commonCodesAreWords() {
        #expect(TLSError.protocolError(call: "mbedtls_ssl_handshake", code: MBEDTLS_ERR_SSL_INVALID_RECORD).description
                == "TLS handshake: the server's answer is not TLS (is it a plain http:// port?) (-0x7200)")
        #expect(TLSError.protocolError(call: "mbedtls_ssl_handshake", code: MBEDTLS_ERR_SSL_BAD_HS_PROTOCOL_VERSION).description
                == "TLS handshake: the server does not speak TLS 1.2 (-0x6e80)")
        #expect(TLSError.protocolError(call: "mbedtls_ssl_handshake", code: MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO).description
                == "TLS handshake: the server's ServerHello was refused: it chose a version, cipher suite or extension we did not offer (-0x7980)")
        #expect(TLSError.protocolError(call: "mbedtls_ssl_read", code: MBEDTLS_ERR_SSL_INVALID_MAC).description
                == "TLS connection: a record failed its integrity check (corrupted on the way, or altered by a middlebox) (-0x7180)")
    }

    @Test func otherCodesKeepMbedtlsText() {
        let d = TLSError.protocolError(call: "mbedtls_ssl_write", code: MBEDTLS_ERR_SSL_BAD_INPUT_DATA).description
        #expect(d.hasPrefix("TLS: mbedtls_ssl_write: SSL - ") && d.hasSuffix("(-0x7100)"), "\(d)")
    }
}
