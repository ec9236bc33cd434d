import Testing
import CMbedTLS
@testable import DTLS

/// What a person reads when DTLS fails: words for the common mbedtls codes, the code kept
/// in parentheses ("-0x7980" alone helps nobody).
@Suite struct DTLSErrorTextTests {
    @Test func commonHandshakeCodesAreWords() {
        #expect(DTLSError.crypto(call: "handshake", code: MBEDTLS_ERR_SSL_BAD_HS_SERVER_HELLO).description
                == "DTLS handshake: the peer's ServerHello was refused: it chose a version, cipher suite, SRTP profile or extension we did not offer (-0x7980)")
        #expect(DTLSError.crypto(call: "handshake", code: MBEDTLS_ERR_SSL_TIMEOUT).description
                == "DTLS handshake: timed out: the peer stopped answering (UDP blocked after ICE, or the peer gave up) (-0x6800)")
        #expect(DTLSError.crypto(call: "handshake", code: MBEDTLS_ERR_SSL_NO_USABLE_CIPHERSUITE).description
                == "DTLS handshake: no cipher suite in common with the peer (we offer ECDHE-ECDSA with AES-GCM) (-0x6980)")
        #expect(DTLSError.crypto(call: "handshake", code: MBEDTLS_ERR_X509_CERT_VERIFY_FAILED).description
                == "DTLS handshake: the peer's certificate did not verify (-0x2700)")
        #expect(DTLSError.crypto(call: "handshake", code: MBEDTLS_ERR_SSL_BAD_HS_CERTIFICATE).description
                == "DTLS handshake: the peer's certificate could not be parsed (bad certificate) (-0x7a00)")
        #expect(DTLSError.crypto(call: "mbedtls_ssl_read", code: MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE).description
                == "DTLS connection: the peer ended it with a fatal alert (-0x7780)")
    }

    /// A code without words keeps mbedtls' own text and the call.
    @Test func otherCodesKeepMbedtlsText() {
        let d = DTLSError.crypto(call: "mbedtls_ssl_write", code: MBEDTLS_ERR_SSL_BAD_INPUT_DATA).description
        #expect(d.hasPrefix("mbedtls_ssl_write: SSL - ") && d.hasSuffix("(-0x7100)"), "\(d)")
    }

    /// The side whose certificate was refused hears the peer's alert: it is named, with
    /// what it means here.
    @Test func theRefusedSideHearsTheAlertInWords() throws {
        let wrong = [CertificateFingerprint(algorithm: .sha256, bytes: [UInt8](repeating: 0xAB, count: 32))]
        let pair = try Pair(serverSees: wrong)
        pair.connect()
        #expect(pair.serverEvents.contains(.failed(.fingerprintMismatch)))
        let failures = pair.clientEvents.compactMap { e -> String? in
            if case .failed(let error) = e { return error.description }
            return nil
        }
        #expect(failures.count == 1)
        #expect(failures.first?.hasPrefix("DTLS handshake: the peer refused the handshake with alert ") == true, "\(failures)")
        #expect(failures.first?.contains("-0x") == false, "\(failures)")
        // mbedtls answers a refused certificate with access_denied (49).
        #expect(failures.first?.contains("alert access_denied (49): it does not accept our certificate") == true, "\(failures)")
    }
}
