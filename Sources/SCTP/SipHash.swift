/// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012): the
/// keyed hash that signs our State Cookies.
///
/// Why SipHash and not HMAC-SHA-256: the SCTP module may depend on Wire only (no mbedtls),
/// and the cookie needs a MAC over ~40 bytes that an attacker who cannot read the secret
/// cannot forge (RFC 9260 §5.1.3). SipHash-2-4 is a PRF designed for exactly that — short
/// inputs, 128-bit key, 64-bit tag — in about forty lines that can be checked against the
/// paper's test vectors. A 64-bit tag is enough here: a forged cookie only lets someone
/// who already passed DTLS (which authenticates the peer) create an association, and each
/// guess costs a packet. The key is per association, drawn from the caller's generator.
public struct SipHash24: Sendable {
    private let k0: UInt64
    private let k1: UInt64

    /// The 16-byte key as two little-endian words, as the paper defines it.
    public init(k0: UInt64, k1: UInt64) {
        self.k0 = k0
        self.k1 = k1
    }

    /// The 64-bit tag of `message`.
    public func hash(_ message: [UInt8]) -> UInt64 {
        var v0: UInt64 = 0x736f_6d65_7073_6575 ^ k0
        var v1: UInt64 = 0x646f_7261_6e64_6f6d ^ k1
        var v2: UInt64 = 0x6c79_6765_6e65_7261 ^ k0
        var v3: UInt64 = 0x7465_6462_7974_6573 ^ k1

        @inline(__always) func rotl(_ x: UInt64, _ b: UInt64) -> UInt64 { (x << b) | (x >> (64 &- b)) }
        func round() {
            v0 = v0 &+ v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32)
            v2 = v2 &+ v3; v3 = rotl(v3, 16); v3 ^= v2
            v0 = v0 &+ v3; v3 = rotl(v3, 21); v3 ^= v0
            v2 = v2 &+ v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32)
        }

        let n = message.count
        let whole = n & ~7
        var i = 0
        while i < whole {
            var m: UInt64 = 0
            for j in 0..<8 { m |= UInt64(message[i &+ j]) << UInt64(8 &* j) }
            v3 ^= m
            round(); round()
            v0 ^= m
            i &+= 8
        }
        // Last block: the remaining bytes, then the length's low byte in the top byte.
        var last = UInt64(truncatingIfNeeded: n) << 56
        for j in 0..<(n &- whole) { last |= UInt64(message[whole &+ j]) << UInt64(8 &* j) }
        v3 ^= last
        round(); round()
        v0 ^= last
        v2 ^= 0xff
        round(); round(); round(); round()
        return v0 ^ v1 ^ v2 ^ v3
    }
}
