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

    /// RFC 5758 §3.2: the ecdsa-with-SHA256 AlgorithmIdentifier has no parameters, in
    /// the TBSCertificate and in the outer signatureAlgorithm (mbedtls 2.28 writes a NULL
    /// there, which Python's `cryptography` refuses).
    @Test func signatureAlgorithmHasNoParameters() throws {
        let der = try Identity(random: try CryptoRandom()).certificateDER
        let oid: [UInt8] = [0x30, 0x0A, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02]
        var occurrences = 0
        for i in 0...(der.count - oid.count) where Array(der[i..<(i + oid.count)]) == oid { occurrences += 1 }
        #expect(occurrences == 2)
        let withNull: [UInt8] = [0x30, 0x0C, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02, 0x05, 0x00]
        #expect(!(0...(der.count - withNull.count)).contains { Array(der[$0..<($0 + withNull.count)]) == withNull })
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
