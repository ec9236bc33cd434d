import Wire

/// ChannelData (RFC 8656 §12.4): what a bound channel carries instead of a Send or Data
/// indication, 4 bytes of header instead of 36 or more.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |         Channel Number        |            Length             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// /                       Application Data                        /
/// ```
/// Over UDP the datagram may end after `Length` bytes or carry padding; over TCP and
/// TLS the message is padded to a multiple of four (§12.5), which the length does not
/// count.
public struct ChannelData: Hashable, Sendable {
    public var channel: UInt16
    public var data: [UInt8]

    public init(channel: UInt16, data: [UInt8]) {
        self.channel = channel
        self.data = data
    }

    /// RFC 7983 §7: first byte 64–79 is TURN channel data (channels 0x4000–0x4FFF).
    @inlinable public static func isChannelData(firstByte: UInt8) -> Bool { firstByte >= 64 && firstByte <= 79 }

    /// Parses one datagram (or one deframed stream message).
    public static func parse(_ bytes: [UInt8]) throws(ICEError) -> ChannelData {
        guard bytes.count >= 4 else { throw .truncatedHeader }
        let channel = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        let length = Int(UInt16(bytes[2]) << 8 | UInt16(bytes[3]))
        guard ChannelNumber.range.contains(channel) else { throw .badChannel(channel) }
        guard 4 + length <= bytes.count else { throw .lengthMismatch(declared: length, available: bytes.count - 4) }
        return ChannelData(channel: channel, data: Array(bytes[4..<(4 + length)]))
    }

    /// The message; `padded` for TCP and TLS (RFC 8656 §12.5).
    public func serialized(padded: Bool) -> [UInt8] {
        var out: [UInt8] = []
        let pad = padded ? (4 - data.count % 4) % 4 : 0
        out.reserveCapacity(4 + data.count + pad)
        out.append(UInt8(truncatingIfNeeded: channel >> 8))
        out.append(UInt8(truncatingIfNeeded: channel))
        out.append(UInt8(truncatingIfNeeded: data.count >> 8))
        out.append(UInt8(truncatingIfNeeded: data.count))
        out += data
        for _ in 0..<pad { out.append(0) }
        return out
    }
}

/// Cuts the byte stream of a TURN connection over TCP or TLS into messages (RFC 8656
/// §12.5, RFC 8489 §6.2.2): a STUN message is its 20-byte header plus the header's
/// length; ChannelData is 4 bytes plus its length, padded to four. Anything else is not
/// TURN and ends the connection (there is no way to find the next message boundary).
/// Only the tail of one message waits for its end, so at most `maxBuffered` bytes are
/// held: the largest message is a STUN header with length 0xFFFC (a STUN length is a
/// whole number of words, RFC 8489 §5); ChannelData tops out at 4 + 65535 + 1.
public struct TURNStreamFramer: Sendable {
    public static let maxBuffered = STUNHeader.size + 0xFFFC
    var buffer: [UInt8] = []
    var head = 0

    public init() {}

    /// Appends `bytes` and returns every whole message now available.
    public mutating func feed(_ bytes: [UInt8]) throws(ICEError) -> [[UInt8]] {
        buffer += bytes
        var out: [[UInt8]] = []
        while buffer.count - head >= 4 {
            let first = buffer[head]
            let length = Int(UInt16(buffer[head + 2]) << 8 | UInt16(buffer[head + 3]))
            let total: Int
            if first & 0xC0 == 0 {
                // A STUN length that is not a multiple of four is not STUN: the stream
                // is out of step and cannot be resynchronised.
                guard length % 4 == 0 else { throw .lengthMismatch(declared: length, available: buffer.count - head - 4) }
                total = STUNHeader.size + length
            } else if ChannelData.isChannelData(firstByte: first) {
                total = 4 + length + (4 - length % 4) % 4
            } else {
                throw .notSTUN
            }
            guard buffer.count - head >= total else { break }
            out.append(Array(buffer[head..<(head + total)]))
            head += total
        }
        if head > 0 {
            buffer.removeFirst(head)
            head = 0
        }
        guard buffer.count <= Self.maxBuffered else { throw .lengthMismatch(declared: buffer.count, available: Self.maxBuffered) }
        return out
    }

    /// Bytes waiting for the rest of their message.
    public var buffered: Int { buffer.count - head }
}

/// RFC 4571 §2 framing, what ICE-TCP (RFC 6544 §3) sends STUN, DTLS and SRTP in: each
/// packet is preceded by its length in 16 bits.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// -----------------------------------------------------------------
/// |             LENGTH            |  RTP or RTCP packet ...       |
/// -----------------------------------------------------------------
/// ```
public struct RFC4571Framer: Sendable {
    var buffer: [UInt8] = []

    public init() {}

    /// One packet with its length in front; nil when it is longer than 65535 bytes.
    public static func frame(_ packet: [UInt8]) -> [UInt8]? {
        guard packet.count <= 0xFFFF else { return nil }
        var out: [UInt8] = [UInt8(truncatingIfNeeded: packet.count >> 8), UInt8(truncatingIfNeeded: packet.count)]
        out.reserveCapacity(packet.count + 2)
        out += packet
        return out
    }

    /// Appends stream bytes; returns the whole packets now available, in order. A zero
    /// length is a valid (empty) frame and is skipped. Never holds more than one
    /// partial frame (at most 65537 bytes).
    public mutating func feed(_ bytes: [UInt8]) -> [[UInt8]] {
        buffer += bytes
        var out: [[UInt8]] = []
        var i = 0
        while buffer.count - i >= 2 {
            let length = Int(UInt16(buffer[i]) << 8 | UInt16(buffer[i + 1]))
            guard buffer.count - i - 2 >= length else { break }
            if length > 0 { out.append(Array(buffer[(i + 2)..<(i + 2 + length)])) }
            i += 2 + length
        }
        if i > 0 { buffer.removeFirst(i) }
        return out
    }

    /// Bytes waiting for the rest of their frame.
    public var pending: Int { buffer.count }
}

/// What one read of a stream socket gave.
public enum StreamRead: Sendable, Equatable {
    /// This many bytes, now in the caller's buffer.
    case bytes(Int)
    /// Nothing more for now (EAGAIN).
    case wouldBlock
    /// The peer closed its side (a read of 0).
    case closed
    /// The read failed; the words say why.
    case failed(String)
}

/// Why a turn of reading ended.
public enum StreamTurnEnd: Sendable, Equatable {
    /// The socket has nothing more for now.
    case drained
    /// The turn's budget is spent with data perhaps still waiting: the loop calls again
    /// at its next turn, after its timers and other descriptors (level-triggered poll).
    case budgetSpent
    case closed
    case failed(String)
    /// The consumer ended the path (it found the stream out of step, or closed it).
    case stopped
}

/// One turn of reading a stream socket (TURN over TCP/TLS, ICE-TCP): `read` until the
/// socket would block, the peer closes, or `budget` bytes have been read, handing each
/// read to `consume` (false: stop). A peer that keeps the socket full (empty RFC 4571
/// frames, empty ChannelData, without end) costs a turn at most `budget` bytes plus one
/// read, never the loop: the reason for a budget at all (Platform's `ReadBudget`).
public func readStreamTurn(budget: Int, read: () -> StreamRead, consume: (Int) -> Bool) -> StreamTurnEnd {
    var left = budget
    while left > 0 {
        switch read() {
        case .bytes(let n):
            left -= max(n, 1)
            if !consume(n) { return .stopped }
        case .wouldBlock: return .drained
        case .closed: return .closed
        case .failed(let why): return .failed(why)
        }
    }
    return .budgetSpent
}
