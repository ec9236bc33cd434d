import Wire

/// What a receiver knows about one remote source (RFC 3550 appendix A):
/// sequence-number extension with probation (A.1), loss counts (A.3), interarrival
/// jitter (A.8), and the last SR for LSR/DLSR (§6.4.1).
///
/// Call `received(…)` for every RTP packet of the source (after SRTP), then
/// `reportBlock(now:)` when building an RR or SR; `senderReportReceived` for each SR.
public struct RTPReceiveStatistics: Sendable {
    // A.1 constants.
    public static let maxDropout: UInt16 = 3000
    public static let maxMisorder: UInt16 = 100
    static let sequenceModulus: UInt32 = 1 << 16

    public let ssrc: UInt32
    public let clockRate: Int64
    let minSequential: Int

    // A.1 state: max_seq, cycles (count of wraps × 2^16), base_seq, bad_seq, probation.
    var maxSeq: UInt16 = 0
    var cycles: UInt32 = 0
    var baseSeq: UInt32 = 0
    var badSeq: UInt32 = sequenceModulus + 1
    var probation: Int
    var started = false
    /// Packets counted (A.1 `received`), including duplicates, as the RFC does.
    public private(set) var received: UInt32 = 0
    var expectedPrior: UInt32 = 0
    var receivedPrior: UInt32 = 0

    // A.8: transit of the previous packet and jitter ×16 (the RFC's integer form).
    var lastTransit: Int32 = 0
    var haveTransit = false
    var jitterQ4: UInt32 = 0

    // §6.4.1: the last SR from this source, for LSR and DLSR.
    var lastSenderReport: UInt32 = 0
    var lastSenderReportArrival: Instant = .zero

    /// `minSequential` is A.1's MIN_SEQUENTIAL: how many packets in sequence make a new
    /// source valid (2 in the RFC; 1 accepts the first packet, which is reasonable when
    /// SRTP authentication already vouches for it).
    public init(ssrc: UInt32, clockRate: Int64 = 48_000, minSequential: Int = 2) {
        self.ssrc = ssrc
        self.clockRate = clockRate
        self.minSequential = max(1, minSequential)
        self.probation = max(1, minSequential)
    }

    /// A.1 init_seq.
    mutating func initSequence(_ seq: UInt16) {
        baseSeq = UInt32(seq)
        maxSeq = seq
        badSeq = RTPReceiveStatistics.sequenceModulus + 1
        cycles = 0
        received = 0
        receivedPrior = 0
        expectedPrior = 0
    }

    /// Registers one packet (A.1 update_seq, then A.8 for valid packets). Returns the
    /// packet's extended sequence number (cycles + seq, wrap-aware also for late
    /// packets from before a wrap) when the packet counts, nil when it does not: still
    /// in probation, or a large jump not (yet) confirmed by a second packet.
    public mutating func received(sequence seq: UInt16, timestamp: UInt32, arrival: Instant) -> Int64? {
        if !started {
            // "the source is newly heard": init_seq(seq); max_seq = seq - 1; probation.
            started = true
            initSequence(seq)
            maxSeq = seq &- 1
            probation = minSequential
        }
        let udelta = seq &- maxSeq
        var extended: Int64
        if probation > 0 {
            // A packet is in sequence if it is the successor of the previous one.
            if seq == maxSeq &+ 1 {
                probation -= 1
                maxSeq = seq
                if probation == 0 {
                    initSequence(seq)
                    received &+= 1
                    updateJitter(timestamp: timestamp, arrival: arrival)
                    return Int64(seq)
                }
            } else {
                probation = minSequential - 1
                maxSeq = seq
            }
            return nil
        } else if udelta < RTPReceiveStatistics.maxDropout {
            // In order, with a permissible gap.
            if seq < maxSeq { cycles &+= RTPReceiveStatistics.sequenceModulus }  // wrapped
            maxSeq = seq
            extended = Int64(cycles) + Int64(seq)
        } else if UInt32(udelta) <= RTPReceiveStatistics.sequenceModulus - UInt32(RTPReceiveStatistics.maxMisorder) {
            // The sequence number made a very large jump.
            if UInt32(seq) == badSeq {
                // Two sequential packets: assume the other side restarted without telling us.
                initSequence(seq)
                extended = Int64(seq)
                haveTransit = false
            } else {
                badSeq = (UInt32(seq) + 1) & (RTPReceiveStatistics.sequenceModulus - 1)
                return nil
            }
        } else {
            // Duplicate or reordered packet: it belongs to the current cycle unless it is
            // numerically above max_seq, i.e. from before the last wrap.
            extended = Int64(cycles) + Int64(seq) - (seq > maxSeq ? Int64(RTPReceiveStatistics.sequenceModulus) : 0)
        }
        received &+= 1
        updateJitter(timestamp: timestamp, arrival: arrival)
        return extended
    }

    /// The arrival time in RTP timestamp units (wraps like the timestamps do).
    func arrivalTicks(_ t: Instant) -> UInt32 {
        let ns = t.nanoseconds
        let ticks = ns / 1_000_000_000 * clockRate + (ns % 1_000_000_000) * clockRate / 1_000_000_000
        return UInt32(truncatingIfNeeded: ticks)
    }

    /// A.8: D = (Rj − Ri) − (Sj − Si); J += (|D| − J)/16, kept ×16 in an integer.
    mutating func updateJitter(timestamp: UInt32, arrival: Instant) {
        let transit = Int32(bitPattern: arrivalTicks(arrival) &- timestamp)
        if haveTransit {
            let d = transit &- lastTransit
            let magnitude = d.magnitude
            // jitter += d - ((jitter + 8) >> 4), the RFC's rounding form.
            jitterQ4 = jitterQ4 &+ magnitude &- ((jitterQ4 &+ 8) >> 4)
        }
        lastTransit = transit
        haveTransit = true
    }

    /// Interarrival jitter in timestamp units (what goes in a report block).
    public var jitter: UInt32 { jitterQ4 >> 4 }

    /// A.3: the highest sequence number seen, extended with the wrap count.
    public var extendedHighestSequence: UInt32 { cycles &+ UInt32(maxSeq) }

    /// A.3: packets expected since the base sequence number.
    public var expected: Int64 { Int64(extendedHighestSequence) - Int64(baseSeq) + 1 }

    /// A.3: cumulative loss, clamped to the report field's 24-bit signed range.
    public var cumulativeLost: Int32 {
        let lost = expected - Int64(received)
        return Int32(min(max(lost, -0x80_0000), 0x7F_FFFF))
    }

    /// §6.4.1: remembers an SR from this source for LSR/DLSR.
    public mutating func senderReportReceived(ntpTimestamp: UInt64, arrival: Instant) {
        lastSenderReport = NTPTime.middle32(ntpTimestamp)
        lastSenderReportArrival = arrival
    }

    /// A report block about this source; updates A.3's interval counters, so call it
    /// once per report sent. DLSR is the time since the last SR arrived, in 1/65536 s.
    public mutating func reportBlock(now: Instant) -> RTCPReportBlock {
        let expectedNow = UInt32(truncatingIfNeeded: expected)
        let expectedInterval = expectedNow &- expectedPrior
        expectedPrior = expectedNow
        let receivedInterval = received &- receivedPrior
        receivedPrior = received
        let lostInterval = Int64(Int32(bitPattern: expectedInterval)) - Int64(Int32(bitPattern: receivedInterval))
        let fraction: UInt8
        if expectedInterval == 0 || lostInterval <= 0 {
            fraction = 0
        } else {
            fraction = UInt8(min(255, (lostInterval << 8) / Int64(expectedInterval)))
        }
        let dlsr = lastSenderReport == 0 ? 0 : NTPTime.units65536(now - lastSenderReportArrival)
        return RTCPReportBlock(ssrc: ssrc, fractionLost: fraction, cumulativeLost: cumulativeLost,
                               extendedHighestSequence: extendedHighestSequence, jitter: jitter,
                               lastSenderReport: lastSenderReport, delaySinceLastSenderReport: dlsr)
    }
}
