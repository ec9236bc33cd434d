import Testing
import CMbedTLS
import Wire
@testable import DTLS

@Suite struct IdentityTests {
    /// The certificate is X.509 v3, self-signed with ECDSA P-256 / SHA-256, its signature
    /// verifies with its own key, and the SDP fingerprint is the SHA-256 of its DER.
    @Test func selfSignedP256Certificate() throws {
        let random = try CryptoRandom()
        let identity = try Identity(random: random)
        #expect(try verifySelfSigned(identity.certificateDER) == identity.fingerprint)

        var crt = mbedtls_x509_crt()
        mbedtls_x509_crt_init(&crt)
        defer { mbedtls_x509_crt_free(&crt) }
        #expect(mbedtls_x509_crt_parse_der(&crt, identity.certificateDER, identity.certificateDER.count) == 0)
        #expect(crt.version == 3)
        #expect(crt.sig_md == MBEDTLS_MD_SHA256)
        #expect(crt.sig_pk == MBEDTLS_PK_ECDSA)
        #expect(mbedtls_pk_get_type(&crt.pk) == MBEDTLS_PK_ECKEY)
        #expect(mbedtls_pk_ec(crt.pk)!.pointee.grp.id == MBEDTLS_ECP_DP_SECP256R1)
        var name = [CChar](repeating: 0, count: 128)
        _ = mbedtls_x509_dn_gets(&name, name.count, &crt.subject)
        #expect(stringFromCBuffer(name) == "CN=linnet")

        // SHA-256 itself against FIPS 180-2's "abc" vector.
        let abc = Array("abc".utf8).withUnsafeBytes { sha256($0) }
        #expect(Hex.encode(abc) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(identity.fingerprint == identity.certificateDER.withUnsafeBytes { sha256($0) })
        #expect(identity.fingerprintText.count == 32 * 3 - 1)
    }

    @Test func eachIdentityIsFresh() throws {
        let random = try CryptoRandom()
        let a = try Identity(random: random), b = try Identity(random: random)
        #expect(a.fingerprint != b.fingerprint)
    }

    @Test func corruptCertificatesAreRefused() throws {
        let identity = try Identity(random: try CryptoRandom())
        var tampered = identity.certificateDER
        tampered[tampered.count / 2] ^= 0x01
        #expect(throws: DTLSError.self) { _ = try verifySelfSigned(tampered) }
        #expect(throws: DTLSError.self) { _ = try verifySelfSigned([0x30, 0x03, 0x02, 0x01]) }
        #expect(throws: DTLSError.self) { _ = try verifySelfSigned([]) }
    }
}
