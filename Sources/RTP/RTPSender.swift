import Wire

/// The sending side of one RTP stream (RFC 3550 §5.1, RFC 7587 §4.1–4.2).
///
/// - SSRC, first sequence number and first timestamp are random (§5.1: "SHOULD be
///   random … to make known-plaintext attacks on encryption more difficult"), drawn from
///   the caller's generator so tests are reproducible.
/// - The timestamp advances by every frame's samples at 48 kHz (RFC 7587 §4.1: the RTP
///   clock is 48 kHz whatever the codec's internal rate), whether the frame was sent or
///   not: muted or DTX frames move time on, so the receiver's playout stays aligned.
/// - The sequence number advances only for packets actually sent.
/// - The marker bit is set on the first packet of a talkspurt (RFC 3551 §4.1, RFC 7587
///   §4.2): the stream's first packet and the first packet after frames were skipped.
public struct RTPSender: Sendable {
    public let ssrc: UInt32
    public let payloadType: UInt8
    public let clockRate: Int64
    public private(set) var sequenceNumber: UInt16
    /// The timestamp the next frame will carry.
    public private(set) var timestamp: UInt32
    public private(set) var packetCount: UInt32 = 0
    public private(set) var octetCount: UInt32 = 0
    var startOfTalkspurt = true
    // The timestamp/instant pair of the last packet sent, for SR timestamps.
    var lastSentTimestamp: UInt32 = 0
    var lastSentInstant: Instant? = nil

    public init<R: RandomNumberGenerator>(payloadType: UInt8 = 111, clockRate: Int64 = 48_000, using rng: inout R) {
        self.payloadType = payloadType
        self.clockRate = clockRate
        ssrc = UInt32.random(in: 1...UInt32.max, using: &rng)  // 0 is avoided: some stacks treat it as unset
        sequenceNumber = UInt16.random(in: 0...UInt16.max, using: &rng)
        timestamp = UInt32.random(in: 0...UInt32.max, using: &rng)
    }

    /// Writes one packet for a frame of `samples` ticks (960 for 20 ms) with `payload`
    /// into `buffer`; returns its length. `now` is when the frame was captured.
    public mutating func packetize(payload: UnsafeRawBufferPointer, samples: UInt32, now: Instant,
                                   into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        let header = RTPHeader(marker: startOfTalkspurt, payloadType: payloadType, sequenceNumber: sequenceNumber,
                               timestamp: timestamp, ssrc: ssrc)
        let n = try header.write(payload: payload, into: buffer)
        sent(payloadLength: payload.count, samples: samples, now: now)
        return n
    }

    /// Writes the header of one packet whose payload (`payloadLength` bytes) the caller
    /// has already put right after it, at `buffer[12...]` (no CSRCs, no extension): the
    /// encoder writes straight into the packet, so the payload is never copied. Returns
    /// the packet length.
    public mutating func packetize(payloadLength: Int, samples: UInt32, now: Instant,
                                   into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        guard payloadLength >= 0, RTPPacket.fixedHeaderLength + payloadLength <= buffer.count else { throw .noSpace }
        let header = RTPHeader(marker: startOfTalkspurt, payloadType: payloadType, sequenceNumber: sequenceNumber,
                               timestamp: timestamp, ssrc: ssrc)
        let n = try header.write(payload: UnsafeRawBufferPointer(start: nil, count: 0), into: buffer)
        sent(payloadLength: payloadLength, samples: samples, now: now)
        return n + payloadLength
    }

    /// A packet went out: the next one follows it in sequence and time, and the figures
    /// for the sender report (RFC 3550 §6.4.1) count it.
    mutating func sent(payloadLength: Int, samples: UInt32, now: Instant) {
        startOfTalkspurt = false
        lastSentTimestamp = timestamp
        lastSentInstant = now
        sequenceNumber &+= 1
        timestamp &+= samples
        packetCount &+= 1
        octetCount &+= UInt32(truncatingIfNeeded: payloadLength)
    }

    /// A frame that is not sent (DTX silence or mute): time moves on, the sequence
    /// number does not, and the next packet sent starts a talkspurt (marker bit).
    public mutating func skip(samples: UInt32) {
        timestamp &+= samples
        startOfTalkspurt = true
    }

    /// Sender info for an SR at `now`: the RTP timestamp is the last packet's,
    /// extrapolated at the clock rate to `now` (§6.4.1: "the same time as the NTP
    /// timestamp").
    public func senderInfo(now: Instant, epochOffset: Duration = .zero) -> RTCPSenderInfo {
        var rtp = timestamp
        if let sent = lastSentInstant {
            let elapsed = (now - sent).nanoseconds
            let ticks = elapsed / 1_000_000_000 * clockRate + elapsed % 1_000_000_000 * clockRate / 1_000_000_000
            rtp = lastSentTimestamp &+ UInt32(truncatingIfNeeded: ticks)
        }
        return RTCPSenderInfo(ntpTimestamp: NTPTime.timestamp(now, epochOffset: epochOffset), rtpTimestamp: rtp,
                              packetCount: packetCount, octetCount: octetCount)
    }
}
