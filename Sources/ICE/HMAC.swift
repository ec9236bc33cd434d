import CMbedTLS
import Wire

/// HMAC-SHA1 (RFC 2104) through mbedtls, over a 20-byte STUN header given separately
/// followed by the rest of the covered bytes. Splitting the input lets verification use a
/// header copy with the adjusted length (RFC 8489 §14.5) without copying the message.
enum HMACSHA1 {
    static let size = 20

    static func compute(key: [UInt8], header: [UInt8], body: UnsafeRawBufferPointer) throws(ICEError) -> [UInt8] {
        guard let info = mbedtls_md_info_from_type(MBEDTLS_MD_SHA1) else { throw .crypto(code: -1) }
        var ctx = mbedtls_md_context_t()
        mbedtls_md_init(&ctx)
        defer { mbedtls_md_free(&ctx) }
        var out = [UInt8](repeating: 0, count: size)
        var rc = mbedtls_md_setup(&ctx, info, 1)
        if rc == 0 { rc = mbedtls_md_hmac_starts(&ctx, key, key.count) }
        if rc == 0 { rc = mbedtls_md_hmac_update(&ctx, header, header.count) }
        if rc == 0, body.count > 0, let base = body.baseAddress {
            rc = mbedtls_md_hmac_update(&ctx, base.assumingMemoryBound(to: UInt8.self), body.count)
        }
        if rc == 0 { rc = mbedtls_md_hmac_finish(&ctx, &out) }
        guard rc == 0 else { throw .crypto(code: rc) }
        return out
    }

    /// One-shot `mbedtls_md_hmac` over contiguous bytes (used where the caller owns the
    /// buffer and has already written the adjusted length).
    static func compute(key: [UInt8], _ bytes: UnsafeRawBufferPointer) throws(ICEError) -> [UInt8] {
        guard let info = mbedtls_md_info_from_type(MBEDTLS_MD_SHA1) else { throw .crypto(code: -1) }
        var out = [UInt8](repeating: 0, count: size)
        let input = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self)
        let rc = mbedtls_md_hmac(info, key, key.count, input, bytes.count, &out)
        guard rc == 0 else { throw .crypto(code: rc) }
        return out
    }

    /// Compares without an early exit, so timing does not reveal how many bytes matched.
    static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var diff: UInt8 = 0
        for i in 0..<a.count { diff |= a[i] ^ b[i] }
        return diff == 0
    }
}

/// MD5 (RFC 1321) through mbedtls: only for the RFC 8489 §9.2.2 long-term credential
/// key, which the protocol fixes (no choice of hash without PASSWORD-ALGORITHMS).
enum MD5 {
    static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        guard let info = mbedtls_md_info_from_type(MBEDTLS_MD_MD5) else { return out }
        _ = mbedtls_md(info, bytes, bytes.count, &out)
        return out
    }
}
