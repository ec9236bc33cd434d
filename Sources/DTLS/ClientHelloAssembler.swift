/// Puts a fragmented ClientHello back together before mbedtls sees it.
///
/// RFC 6347 §4.2.3 lets a handshake message travel in fragments, in any order, repeated
/// and overlapping; the receiver must reassemble. mbedtls 2.28 does that for every
/// message but the first: `ssl_parse_client_hello` reads the ClientHello record by hand
/// and refuses anything but one record holding one whole message ("ClientHello
/// fragmentation not supported", `MBEDTLS_ERR_SSL_FEATURE_UNAVAILABLE`, or "bad client
/// hello message" when the fragment is shorter than its length). Real clients fragment:
/// GStreamer's OpenSSL sends 277 bytes as 0–230 and 230–277, a browser with a
/// post-quantum key share sends 1,413 bytes in two datagrams. So the server side of
/// `DTLSConnection` passes every datagram through here while it handshakes.
///
/// What comes out is the one record mbedtls accepts:
/// - record: content type 22, the fragments' record version, epoch 0, the lowest record
///   sequence number among the fragments that made it, length 12 + message length. The
///   lowest, because every fragment's number is one the client has used up, and the
///   replay window (RFC 6347 §4.1.2.6) must not be moved past numbers the client has
///   not used yet: a client that sent its ClientHello whole as record 0 and sends its
///   next flight from record 1 on (mbedtls does) still gets that flight through when an
///   intermediary split the hello;
/// - handshake header: type 1, length, the fragments' message_seq, fragment_offset 0,
///   fragment_length = length. That is exactly the form RFC 6347 §4.2.6 hashes into the
///   handshake transcript ("as if it were a single fragment"), so both Finished messages
///   still agree.
///
/// A datagram without ClientHello fragments goes through untouched (no copy). In one
/// with fragments, the fragment records are taken out, the other records stay in order,
/// and a completed message takes the place of the record that completed it.
///
/// Bounds: one message at a time, at most `maxLength` bytes (4 KiB: the largest
/// ClientHello seen here is 1,413 bytes, and a second post-quantum share would still
/// fit), so the state is two buffers of that size at most. Fragments that disagree with
/// what is held (another length, other bytes where they overlap, past the end) or that
/// are larger than the bound are dropped and counted; a newer message_seq replaces the
/// message being assembled (a retransmission after HelloVerifyRequest would do that).
/// After a message completes, the state is cleared: a retransmitted ClientHello is
/// assembled again and handed over again, and mbedtls answers it by resending its
/// flight (RFC 6347 §4.2.4).
public struct ClientHelloAssembler: Sendable {
    /// What became of one datagram.
    public enum Result: Equatable, Sendable {
        /// Give these bytes to mbedtls (the datagram itself when it held no fragment).
        case forward([UInt8])
        /// Nothing for mbedtls yet: every record was a fragment being held, or dropped.
        case hold
    }

    public struct Stats: Equatable, Sendable {
        /// ClientHello fragments taken in (duplicates included).
        public var fragments = 0
        /// Whole ClientHellos made from fragments and handed over.
        public var reassembled = 0
        /// Fragments dropped: too large, inconsistent with the message held, stale, or a
        /// non-ClientHello message sharing a record with one.
        public var dropped = 0
    }

    public static let maxLength = 4096

    public private(set) var stats = Stats()
    public let maxLength: Int

    struct Pending {
        var messageSeq: UInt16
        var length: Int
        var version: (UInt8, UInt8)
        var recordSeq: UInt64
        var body: [UInt8]
        var have: [Bool]
        var covered = 0
    }

    var pending: Pending?

    public init(maxLength: Int = ClientHelloAssembler.maxLength) {
        self.maxLength = maxLength
    }

    /// Whether a message is partly assembled (for tests and diagnostics).
    public var isHolding: Bool { pending != nil }
    /// The length of the message being assembled (0 when none): the state's size bound.
    public var heldBytes: Int { pending?.length ?? 0 }

    static let recordHeader = 13
    static let handshakeHeader = 12
    static let handshakeType: UInt8 = 22
    static let clientHello: UInt8 = 1

    public mutating func feed(_ datagram: [UInt8]) -> Result {
        // A first pass finds out whether there is anything to do: most datagrams (every
        // one after the first flight) have no ClientHello fragment and go through as they are.
        guard Self.hasFragment(datagram) else {
            if pending != nil, let end = Self.recordEnd(datagram, at: 0), Self.isWholeClientHello(datagram, at: 0, end: end) {
                pending = nil  // superseded, as below
            }
            return .forward(datagram)
        }
        var out: [UInt8] = []
        out.reserveCapacity(datagram.count)
        var o = 0
        while o < datagram.count {
            guard let end = Self.recordEnd(datagram, at: o) else {
                // A truncated record: leave what is left to mbedtls, which drops it.
                out.append(contentsOf: datagram[o...])
                break
            }
            if Self.isFragmentRecord(datagram, at: o, end: end) {
                if let record = take(datagram, record: o, end: end) { out.append(contentsOf: record) }
            } else {
                // A whole ClientHello supersedes any copy being pieced together.
                if Self.isWholeClientHello(datagram, at: o, end: end) { pending = nil }
                out.append(contentsOf: datagram[o..<end])
            }
            o = end
        }
        return out.isEmpty ? .hold : .forward(out)
    }

    // MARK: Records

    /// The end of the record starting at `o`, or nil when its header or body is cut short.
    static func recordEnd(_ d: [UInt8], at o: Int) -> Int? {
        guard d.count - o >= recordHeader else { return nil }
        let length = Int(d[o + 11]) << 8 | Int(d[o + 12])
        let end = o + recordHeader + length
        return end <= d.count ? end : nil
    }

    static func uint24(_ d: [UInt8], _ i: Int) -> Int { Int(d[i]) << 16 | Int(d[i + 1]) << 8 | Int(d[i + 2]) }

    /// An epoch-0 handshake record whose first message is a ClientHello that is not
    /// whole in this record (a fragment, or more than one fragment in one record).
    static func isFragmentRecord(_ d: [UInt8], at o: Int, end: Int) -> Bool {
        guard d[o] == handshakeType, d[o + 3] == 0, d[o + 4] == 0 else { return false }
        let h = o + recordHeader
        guard end - h >= handshakeHeader, d[h] == clientHello else { return false }
        let length = uint24(d, h + 1), offset = uint24(d, h + 6), fragment = uint24(d, h + 9)
        let whole = offset == 0 && fragment == length && end - h == handshakeHeader + length
        return !whole
    }

    /// Whether the datagram starts with a whole ClientHello record: the only thing a
    /// server can take before its first one (mbedtls fails the handshake on anything else).
    public static func startsWithClientHello(_ d: [UInt8]) -> Bool {
        guard let end = recordEnd(d, at: 0) else { return false }
        return isWholeClientHello(d, at: 0, end: end)
    }

    static func isWholeClientHello(_ d: [UInt8], at o: Int, end: Int) -> Bool {
        d[o] == handshakeType && d[o + 3] == 0 && d[o + 4] == 0 && end - o - recordHeader >= handshakeHeader
            && d[o + recordHeader] == clientHello && !isFragmentRecord(d, at: o, end: end)
    }

    static func hasFragment(_ d: [UInt8]) -> Bool {
        var o = 0
        while o < d.count, let end = recordEnd(d, at: o) {
            if isFragmentRecord(d, at: o, end: end) { return true }
            o = end
        }
        return false
    }

    /// Takes every handshake fragment of one record; returns the whole message's record
    /// when one of them completed it.
    mutating func take(_ d: [UInt8], record o: Int, end: Int) -> [UInt8]? {
        var recordSeq: UInt64 = 0
        for i in 5..<11 { recordSeq = recordSeq << 8 | UInt64(d[o + i]) }
        let version = (d[o + 1], d[o + 2])
        var completed: [UInt8]? = nil
        var h = o + Self.recordHeader
        while h < end {
            guard end - h >= Self.handshakeHeader else {
                stats.dropped += 1
                break
            }
            let length = Self.uint24(d, h + 1), offset = Self.uint24(d, h + 6), count = Self.uint24(d, h + 9)
            let messageSeq = UInt16(d[h + 4]) << 8 | UInt16(d[h + 5])
            let body = h + Self.handshakeHeader
            guard count <= end - body else {
                stats.dropped += 1
                break
            }
            if d[h] == Self.clientHello {
                stats.fragments += 1
                if let record = add(d, from: body, count: count, offset: offset, length: length, messageSeq: messageSeq,
                                    version: version, recordSeq: recordSeq) {
                    completed = record
                }
            } else {
                // Only a ClientHello travels in the client's first flight (RFC 6347 §4.2.4).
                stats.dropped += 1
            }
            h = body + count
        }
        return completed
    }

    /// One fragment: `count` bytes at `offset` of a `length`-byte message.
    mutating func add(_ d: [UInt8], from start: Int, count: Int, offset: Int, length: Int, messageSeq: UInt16,
                      version: (UInt8, UInt8), recordSeq: UInt64) -> [UInt8]? {
        guard length > 0, length <= maxLength, count > 0, offset + count <= length else {
            stats.dropped += 1
            return nil
        }
        if let p = pending, p.messageSeq > messageSeq {
            stats.dropped += 1
            return nil
        }
        if pending == nil || pending!.messageSeq < messageSeq {
            pending = Pending(messageSeq: messageSeq, length: length, version: version, recordSeq: recordSeq,
                              body: [UInt8](repeating: 0, count: length), have: [Bool](repeating: false, count: length))
        }
        guard var p = pending, p.length == length else {
            stats.dropped += 1
            return nil
        }
        // Overlapping bytes must agree (RFC 6347 §4.2.3 fragments are slices of one message).
        for i in 0..<count where p.have[offset + i] && p.body[offset + i] != d[start + i] {
            stats.dropped += 1
            return nil
        }
        for i in 0..<count where !p.have[offset + i] {
            p.body[offset + i] = d[start + i]
            p.have[offset + i] = true
            p.covered += 1
        }
        if recordSeq < p.recordSeq { p.recordSeq = recordSeq }
        guard p.covered == p.length else {
            pending = p
            return nil
        }
        pending = nil
        stats.reassembled += 1
        return Self.record(p)
    }

    /// The whole message as one record (see the type's comment for each field).
    static func record(_ p: Pending) -> [UInt8] {
        var r: [UInt8] = []
        r.reserveCapacity(recordHeader + handshakeHeader + p.length)
        let content = handshakeHeader + p.length
        r.append(handshakeType)
        r.append(p.version.0)
        r.append(p.version.1)
        r.append(0)
        r.append(0)
        for shift in stride(from: 40, through: 0, by: -8) { r.append(UInt8(truncatingIfNeeded: p.recordSeq >> UInt64(shift))) }
        r.append(UInt8(truncatingIfNeeded: content >> 8))
        r.append(UInt8(truncatingIfNeeded: content))
        r.append(clientHello)
        appendUInt24(&r, p.length)
        r.append(UInt8(truncatingIfNeeded: p.messageSeq >> 8))
        r.append(UInt8(truncatingIfNeeded: p.messageSeq))
        appendUInt24(&r, 0)
        appendUInt24(&r, p.length)
        r.append(contentsOf: p.body)
        return r
    }

    static func appendUInt24(_ r: inout [UInt8], _ v: Int) {
        r.append(UInt8(truncatingIfNeeded: v >> 16))
        r.append(UInt8(truncatingIfNeeded: v >> 8))
        r.append(UInt8(truncatingIfNeeded: v))
    }
}
