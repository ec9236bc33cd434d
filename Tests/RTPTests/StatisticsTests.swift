// RFC 3550 appendix A worked by hand: sequence extension with wrap and probation
// (A.1), loss and fraction lost (A.3), jitter (A.8) against a double-precision
// reference, LSR/DLSR (§6.4.1); and the sender's timestamps and marker bits.
import Testing
import RTP
import Wire

func ms(_ v: Int64) -> Instant { Instant(nanoseconds: v * 1_000_000) }

@Test func sequenceWrapWithProbation() {
    var s = RTPReceiveStatistics(ssrc: 1)                   // MIN_SEQUENTIAL = 2
    #expect(s.received(sequence: 65533, timestamp: 0, arrival: ms(0)) == nil)   // probation
    #expect(s.received(sequence: 65534, timestamp: 960, arrival: ms(20)) == 65534) // valid: base = 65534
    #expect(s.received(sequence: 65535, timestamp: 1920, arrival: ms(40)) == 65535)
    #expect(s.received(sequence: 0, timestamp: 2880, arrival: ms(60)) == 65536)   // wrapped: cycles = 2^16
    #expect(s.received(sequence: 2, timestamp: 4800, arrival: ms(100)) == 65538)  // 1 is missing
    // 65535 again, from before the wrap: a duplicate, extended below the wrap.
    #expect(s.received(sequence: 65535, timestamp: 1920, arrival: ms(101)) == 65535)
    #expect(s.extendedHighestSequence == 65538)
    // expected = 65538 − 65534 + 1 = 5; received = 5 (incl. the duplicate): lost 0.
    #expect(s.expected == 5)
    #expect(s.received == 5)
    #expect(s.cumulativeLost == 0)
    // Late arrival of 1 makes the count negative (duplicates count, as in A.3).
    #expect(s.received(sequence: 1, timestamp: 3840, arrival: ms(102)) == 65537)
    #expect(s.cumulativeLost == -1)
}

@Test func probationResetsOnGap() {
    var s = RTPReceiveStatistics(ssrc: 1, minSequential: 2)
    #expect(s.received(sequence: 10, timestamp: 0, arrival: ms(0)) == nil)
    #expect(s.received(sequence: 12, timestamp: 0, arrival: ms(20)) == nil)      // not in sequence: start over
    #expect(s.received(sequence: 13, timestamp: 0, arrival: ms(40)) == 13)
    var one = RTPReceiveStatistics(ssrc: 1, minSequential: 1)
    #expect(one.received(sequence: 500, timestamp: 0, arrival: ms(0)) == 500)
}

@Test func largeJumpNeedsTwoPackets() {
    var s = RTPReceiveStatistics(ssrc: 1, minSequential: 1)
    _ = s.received(sequence: 100, timestamp: 0, arrival: ms(0))
    _ = s.received(sequence: 101, timestamp: 960, arrival: ms(20))
    // 101 → 20000 is beyond MAX_DROPOUT: ignored until the next one confirms a restart.
    #expect(s.received(sequence: 20_000, timestamp: 0, arrival: ms(40)) == nil)
    #expect(s.received(sequence: 20_001, timestamp: 960, arrival: ms(60)) == 20_001)
    #expect(s.expected == 1 && s.received == 1)
    // A jump within MAX_DROPOUT (2999) is a gap, not a restart.
    #expect(s.received(sequence: 23_000, timestamp: 0, arrival: ms(80)) == 23_000)
    #expect(s.expected == 3000)
}

@Test func lossAndFractionPerInterval() {
    var s = RTPReceiveStatistics(ssrc: 7, minSequential: 1)
    // Interval 1: 0…99 with 10 losses (every tenth packet).
    for seq in 0..<100 where seq % 10 != 5 {
        _ = s.received(sequence: UInt16(seq), timestamp: UInt32(seq * 960), arrival: ms(Int64(seq) * 20))
    }
    var b = s.reportBlock(now: ms(2000))
    // expected 99 − 0 + 1 = 100, received 90 → fraction = (10 << 8) / 100 = 25.
    #expect(b.cumulativeLost == 10 && b.fractionLost == 25 && b.extendedHighestSequence == 99)
    // Interval 2: the even numbers 100…148. 149 is never sent, so the highest is 148:
    // 49 expected, 25 received, 24 lost → (24 << 8) / 49 = 125; cumulative 10 + 24.
    for seq in 100..<150 where seq % 2 == 0 {
        _ = s.received(sequence: UInt16(seq), timestamp: UInt32(seq * 960), arrival: ms(Int64(seq) * 20))
    }
    b = s.reportBlock(now: ms(3000))
    #expect(b.cumulativeLost == 34 && b.fractionLost == 125)
    // Interval 3: nothing new → fraction 0.
    #expect(s.reportBlock(now: ms(4000)).fractionLost == 0)
}

@Test func jitterMatchesDoubleReference() {
    // 20 ms frames; arrival = send time + a known network delay pattern.
    let delays: [Double] = [30, 32, 29, 45, 31, 30, 60, 33, 30, 30, 31, 29, 80, 30, 30, 35, 30, 30, 31, 30]
    var s = RTPReceiveStatistics(ssrc: 3, minSequential: 1)
    var reference = 0.0
    var previousTransit: Double? = nil
    for i in 0..<400 {
        let delayMs = delays[i % delays.count]
        let sendTicks = UInt32(1_000_000 + i * 960)
        let arrivalMs = Double(i) * 20 + delayMs
        _ = s.received(sequence: UInt16(i), timestamp: sendTicks,
                       arrival: Instant(nanoseconds: Int64(arrivalMs * 1_000_000)))
        // Independent A.8 in double: transit in ticks, J += (|D| − J) / 16.
        let transit = arrivalMs * 48 - Double(sendTicks)
        if let p = previousTransit { reference += (abs(transit - p) - reference) / 16 }
        previousTransit = transit
    }
    #expect(reference > 100)                                  // the pattern does jitter
    #expect(abs(Double(s.jitter) - reference) <= 1.0, "jitter \(s.jitter) vs \(reference)")
    // Perfectly periodic arrivals: jitter decays towards 0.
    var steady = RTPReceiveStatistics(ssrc: 3, minSequential: 1)
    for i in 0..<200 { _ = steady.received(sequence: UInt16(i), timestamp: UInt32(i * 960), arrival: ms(Int64(i) * 20 + 7)) }
    #expect(steady.jitter == 0)
}

@Test func lsrAndDlsr() {
    var s = RTPReceiveStatistics(ssrc: 9, minSequential: 1)
    _ = s.received(sequence: 1, timestamp: 0, arrival: ms(0))
    #expect(s.reportBlock(now: ms(10)).lastSenderReport == 0)
    // SR with NTP 0x0000B705_20000000 arrives at t = 1 s; report at t = 2.5 s.
    s.senderReportReceived(ntpTimestamp: 0x0000_B705_2000_0000, arrival: ms(1000))
    let b = s.reportBlock(now: ms(2500))
    #expect(b.lastSenderReport == 0xB705_2000)
    #expect(b.delaySinceLastSenderReport == 98_304)          // 1.5 s × 65536
    // The sender's view: its NTP clock at arrival of this RR is LSR + DLSR + RTT.
    let arrival = b.lastSenderReport &+ b.delaySinceLastSenderReport &+ 0x0000_2000 // + 125 ms
    #expect(NTPTime.roundTripTime(lastSenderReport: b.lastSenderReport, delaySinceLastSenderReport: b.delaySinceLastSenderReport,
                                  arrival: arrival) == .milliseconds(125))
}

@Test func senderTimestampsAndMarker() throws {
    var rng = SeededRandom(seed: 11)
    var sender = RTPSender(using: &rng)
    var rng2 = SeededRandom(seed: 11)
    let again = RTPSender(using: &rng2)
    var rng3 = SeededRandom(seed: 12)
    let other = RTPSender(using: &rng3)
    #expect(sender.ssrc == again.ssrc && sender.sequenceNumber == again.sequenceNumber && sender.timestamp == again.timestamp)
    #expect(sender.ssrc != other.ssrc && sender.ssrc != 0)
    let seq0 = sender.sequenceNumber, ts0 = sender.timestamp
    var packets: [RTPPacket] = []
    func send(_ i: Int) throws {
        var buf = [UInt8](repeating: 0, count: 100)
        let n = try buf.withMutableBytes { (b) throws(RTPError) -> Int in
            try [UInt8](repeating: UInt8(i), count: 3).withBytes { (p) throws(RTPError) -> Int in
                try sender.packetize(payload: p, samples: 960, now: ms(Int64(i) * 20), into: b)
            }
        }
        packets.append(try RTPPacket.parse(Array(buf[0..<n])))
    }
    // Frames 0–2 sent, 3–5 silent (DTX), 6–7 sent.
    for i in 0..<3 { try send(i) }
    for _ in 3..<6 { sender.skip(samples: 960) }
    for i in 6..<8 { try send(i) }
    #expect(packets.map { $0.header.marker } == [true, false, false, true, false])
    #expect(packets.map { $0.header.sequenceNumber &- seq0 } == [0, 1, 2, 3, 4])
    #expect(packets.map { $0.header.timestamp &- ts0 } == [0, 960, 1920, 5760, 6720])
    #expect(packets.allSatisfy { $0.header.payloadType == 111 && $0.header.ssrc == sender.ssrc })
    #expect(sender.packetCount == 5 && sender.octetCount == 15)
    // SR at 10 ms after the last packet (sent at 140 ms): its timestamp + 480.
    let info = sender.senderInfo(now: ms(150))
    #expect(info.rtpTimestamp == ts0 &+ 6720 &+ 480)
    #expect(info.ntpTimestamp == NTPTime.timestamp(ms(150)))
}
