/// SRTP: RTP and RTCP protection (RFC 3711) through libsrtp2, in caller buffers.
///
/// Design decisions:
/// - One `SRTPContext` per direction: outbound protects with our keys, inbound
///   unprotects with the peer's (RFC 5764 §4.2 gives each side its own key and salt).
/// - Only `SRTP_AES128_CM_HMAC_SHA1_80`: what mbedtls 2.28's `use_srtp` negotiates and
///   what every peer accepts (PROTOCOLS.md).
/// - Failures (authentication, replay) are errors the caller counts and drops; nothing
///   from an unauthenticated packet is ever used.
import CSRTP

/// What libsrtp refused.
public enum SRTPError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Master key or salt of the wrong length.
    case badKeyLength
    /// libsrtp could not set up (`srtp_init`, `srtp_create`).
    case setup(status: UInt32)
    /// The authentication tag did not verify: forged or corrupted.
    case authenticationFailed
    /// A packet index already seen (RFC 3711 §3.3.2).
    case replay
    /// The destination has no room for the tag (protect needs `length + 10` bytes
    /// for RTP, `+ 14` for RTCP).
    case noSpace
    /// Any other libsrtp status for a packet (too short, bad header…).
    case rejected(status: UInt32)

    public var description: String {
        switch self {
        case .badKeyLength: return "srtp: master key must be 16 bytes and salt 14"
        case .setup(let s): return "srtp: setup failed (status \(s))"
        case .authenticationFailed: return "srtp: authentication failed"
        case .replay: return "srtp: replayed packet"
        case .noSpace: return "srtp: buffer too small for the tag"
        case .rejected(let s): return "srtp: packet rejected (status \(s))"
        }
    }
}

/// The libsrtp version string, e.g. `libsrtp2 2.5.0`.
public var srtpVersion: String {
    guard let p = srtp_get_version_string() else { return "libsrtp2" }
    return String(cString: p)
}

/// libsrtp's one-time global set-up, done on first use.
let srtpLibraryStatus: UInt32 = srtp_init().rawValue

/// Which way a context protects.
public enum SRTPDirection: Sendable {
    /// Protects packets we send.
    case outbound
    /// Unprotects packets we receive.
    case inbound
}

/// One SRTP/SRTCP context (`srtp_t`) for one direction, keyed with one master key.
public final class SRTPContext {
    /// The auth tag length of `SRTP_AES128_CM_HMAC_SHA1_80` (RFC 3711 §5.2).
    public static let rtpOverhead = 10
    /// SRTCP adds the tag and the 4-byte E+index word (RFC 3711 §3.4).
    public static let rtcpOverhead = 14

    private var session: srtp_t?

    /// `masterKey` is 16 bytes, `masterSalt` 14 (RFC 3711 §8.2, AES_CM_128).
    public init(direction: SRTPDirection, masterKey: [UInt8], masterSalt: [UInt8]) throws(SRTPError) {
        guard masterKey.count == 16, masterSalt.count == 14 else { throw .badKeyLength }
        guard srtpLibraryStatus == srtp_err_status_ok.rawValue else { throw .setup(status: srtpLibraryStatus) }
        var policy = srtp_policy_t()
        // AES_CM_128_HMAC_SHA1_80 (the header names it as a macro for these).
        srtp_crypto_policy_set_rtp_default(&policy.rtp)
        srtp_crypto_policy_set_rtcp_default(&policy.rtcp)
        policy.ssrc.type = direction == .outbound ? ssrc_any_outbound : ssrc_any_inbound
        // RFC 3711 §3.3.2 asks for at least 64; a larger window tolerates the
        // reordering a jittery Wi-Fi link produces.
        policy.window_size = 1024
        policy.allow_repeat_tx = 0
        policy.next = nil
        var keyAndSalt = masterKey + masterSalt
        var created: srtp_t? = nil
        let status = keyAndSalt.withUnsafeMutableBufferPointer { key -> srtp_err_status_t in
            policy.key = key.baseAddress
            return srtp_create(&created, &policy)
        }
        guard status == srtp_err_status_ok, let created else { throw .setup(status: status.rawValue) }
        session = created
    }

    deinit {
        if let session { srtp_dealloc(session) }
    }

    /// Protects the RTP packet in `buffer[0..<length]` in place; returns the new length.
    public func protectRTP(_ buffer: UnsafeMutableRawBufferPointer, length: Int) throws(SRTPError) -> Int {
        guard length + SRTPContext.rtpOverhead <= buffer.count else { throw .noSpace }
        var n = Int32(length)
        let s = srtp_protect(session, buffer.baseAddress, &n)
        guard s == srtp_err_status_ok else { throw SRTPContext.map(s) }
        return Int(n)
    }

    /// Verifies and decrypts the SRTP packet in `buffer[0..<length]` in place; returns
    /// the plain RTP length.
    public func unprotectRTP(_ buffer: UnsafeMutableRawBufferPointer, length: Int) throws(SRTPError) -> Int {
        var n = Int32(length)
        let s = srtp_unprotect(session, buffer.baseAddress, &n)
        guard s == srtp_err_status_ok else { throw SRTPContext.map(s) }
        return Int(n)
    }

    public func protectRTCP(_ buffer: UnsafeMutableRawBufferPointer, length: Int) throws(SRTPError) -> Int {
        guard length + SRTPContext.rtcpOverhead <= buffer.count else { throw .noSpace }
        var n = Int32(length)
        let s = srtp_protect_rtcp(session, buffer.baseAddress, &n)
        guard s == srtp_err_status_ok else { throw SRTPContext.map(s) }
        return Int(n)
    }

    public func unprotectRTCP(_ buffer: UnsafeMutableRawBufferPointer, length: Int) throws(SRTPError) -> Int {
        var n = Int32(length)
        let s = srtp_unprotect_rtcp(session, buffer.baseAddress, &n)
        guard s == srtp_err_status_ok else { throw SRTPContext.map(s) }
        return Int(n)
    }

    static func map(_ s: srtp_err_status_t) -> SRTPError {
        if s == srtp_err_status_auth_fail { return .authenticationFailed }
        if s == srtp_err_status_replay_fail || s == srtp_err_status_replay_old { return .replay }
        return .rejected(status: s.rawValue)
    }
}
