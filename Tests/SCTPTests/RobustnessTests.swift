import Testing
import Wire
@testable import SCTP

/// A packet addressed to `assoc` (with its tag unless told otherwise).
func craft(to assoc: SCTPAssociation, _ chunks: [Chunk], tag: UInt32? = nil) -> [UInt8] {
    SCTPPacket(sourcePort: 5000, destinationPort: 5000, verificationTag: tag ?? assoc.localTag, chunks: chunks).serialize()
}

/// Everything an association wants to say right now.
func drainAll(_ a: inout SCTPAssociation) -> (packets: [SCTPPacket], events: [SCTPEvent], deadline: Instant) {
    var packets: [SCTPPacket] = []
    var events: [SCTPEvent] = []
    while true {
        switch a.pollOutput() {
        case .transmit(let b): packets.append(try! SCTPPacket.parse(b))
        case .event(let e): events.append(e)
        case .timeout(let t): return (packets, events, t)
        }
    }
}

func establishedPair(seed: UInt64, config: SCTPConfig = SCTPConfig()) -> Pair<SCTPAssociation> {
    var p = makePair(seed: seed, config: config)
    p.a.connect(now: p.now)
    p.b.connect(now: p.now)
    p.run(for: .seconds(5), until: connected)
    p.eventsA.removeAll()
    p.eventsB.removeAll()
    return p
}

func dataChunk(_ tsn: UInt32, stream: UInt16 = 1, ssn: UInt16 = 0, b: Bool = true, e: Bool = true,
               size: Int = 10, ppid: UInt32 = 53) -> Chunk {
    .data(DataChunk(tsn: tsn, streamID: stream, ssn: ssn, ppid: ppid, beginning: b, ending: e,
                    userData: [UInt8](repeating: 0x5a, count: size)))
}

@Suite struct RobustnessTests {
    @Test func badPacketsAreDroppedAndCounted() {
        let p = establishedPair(seed: 21)
        var b = p.b
        let now = p.now
        let cum = b.cumTSN
        let good = craft(to: b, [dataChunk(cum &+ 1)])
        // Truncated at every length: dropped, never a trap.
        for n in 0..<good.count {
            b.handleInput(Array(good[0..<n]), now: now)
        }
        #expect(b.stats.droppedMalformed == good.count)
        // Bad CRC.
        var badCRC = good
        badCRC[20] ^= 0xff
        b.handleInput(badCRC, now: now)
        #expect(b.stats.droppedMalformed == good.count + 1)
        // Chunk length past the packet, with a checksum that matches the lie.
        var lying = good
        lying[15] = 0xff
        let crc = SCTPPacket.checksum(lying.withUnsafeBytes { $0 })
        lying[8] = UInt8(crc & 0xff); lying[9] = UInt8((crc >> 8) & 0xff)
        lying[10] = UInt8((crc >> 16) & 0xff); lying[11] = UInt8(crc >> 24)
        b.handleInput(lying, now: now)
        #expect(b.stats.droppedMalformed == good.count + 2)
        // Wrong verification tag.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 1)], tag: b.localTag &+ 1), now: now)
        #expect(b.stats.droppedBadTag == 1)
        // INIT bundled with another chunk (§6.10) and INIT with a non-zero tag.
        let initFields = InitFields(initiateTag: 9, aRwnd: 1000, outboundStreams: 1, inboundStreams: 1, initialTSN: 1,
                                    parameters: InitParameters())
        b.handleInput(craft(to: b, [.initiation(InitChunk(initFields)), .cookieAck(CookieAckChunk())], tag: 0), now: now)
        b.handleInput(craft(to: b, [.initiation(InitChunk(initFields))]), now: now)
        #expect(b.stats.droppedBadTag == 3)
        // None of it was delivered or changed the state; the real packet still works.
        var out = drainAll(&b)
        #expect(out.events.isEmpty && b.isEstablished && b.cumTSN == cum)
        b.handleInput(good, now: now)
        out = drainAll(&b)
        #expect(out.events.count == 1)
    }

    @Test func garbageWithValidChecksumNeverTraps() {
        let p = establishedPair(seed: 22)
        var rng = SeededRandom(seed: 5)
        let types: [UInt8] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 130, 192, 0x3f, 0x7f, 0xbf, 0xff]
        for round in 0..<3000 {
            var b = p.b
            var chunks: [Chunk] = []
            for _ in 0..<Int(rng.next() % 3 + 1) {
                let t = types[Int(rng.next() % UInt64(types.count))]
                var v = [UInt8](repeating: 0, count: Int(rng.next() % 40))
                for i in v.indices { v[i] = UInt8(truncatingIfNeeded: rng.next()) }
                chunks.append(.unknown(UnknownChunk(type: t, flags: UInt8(truncatingIfNeeded: rng.next()), value: v)))
            }
            b.handleInput(craft(to: b, chunks, tag: round % 5 == 0 ? 0 : b.localTag), now: p.now)
            _ = drainAll(&b)
            b.handleTimeout(now: p.now + .seconds(1))
            _ = drainAll(&b)
        }
    }

    /// A message larger than the receiver can ever hold (RFC 8831 §6.6: far past the
    /// SDP's max-message-size): its fragments fill the buffer, the next one in line has
    /// no room, and nothing can be delivered to make any. The receiver aborts with a
    /// reason instead of staying "connected" with the stream stuck. A message that fits
    /// is reassembled as before.
    @Test func aMessageLargerThanTheReceiveBufferAbortsWithAReason() {
        var sender = SCTPConfig()
        sender.maxMessageSize = 4 << 20
        sender.sendBufferLimit = 8 << 20
        var p = establishedPair(seed: 31, config: sender)
        let fits = [UInt8](repeating: 0x41, count: 900 * 1024)
        #expect((try? p.a.send(stream: 1, ppid: 53, data: fits, now: p.now)) != nil)
        _ = p.run(for: .seconds(20)) { !$0.eventsB.isEmpty }
        #expect(p.eventsB == [.message(SCTPMessage(streamID: 1, ppid: 53, unordered: false, data: fits))])
        p.eventsB.removeAll()
        let huge = [UInt8](repeating: 0x42, count: 3 << 20)
        #expect((try? p.a.send(stream: 1, ppid: 53, data: huge, now: p.now)) != nil)
        _ = p.run(for: .seconds(60)) { !$0.eventsB.isEmpty }
        #expect(p.eventsB == [.closed(.messageTooLarge(limit: SCTPConfig().receiveBufferSize))])
        _ = p.run(for: .seconds(1))  // the ABORT reaches the sender
        #expect(p.eventsA.contains(.closed(.abortedByPeer(cause: ErrorCause.protocolViolation))), "\(p.eventsA)")
    }

    @Test func dataWithoutUserDataIsAborted() {
        var p = establishedPair(seed: 23)
        var b = p.b
        b.handleInput(craft(to: b, [dataChunk(b.cumTSN &+ 1, size: 0)]), now: p.now)
        let out = drainAll(&b)
        #expect(out.events == [.closed(.abortedLocally)])
        guard case .abort(let abort) = out.packets.last?.chunks.first else { Issue.record("no ABORT"); return }
        #expect(abort.causes.first?.code == ErrorCause.noUserData)
        #expect(out.packets.last?.verificationTag == b.peerTag)
        // The peer takes the ABORT and closes.
        for pkt in out.packets { p.a.handleInput(pkt.serialize(), now: p.now) }
        #expect(drainAll(&p.a).events.contains(.closed(.abortedByPeer(cause: ErrorCause.noUserData))))
    }

    @Test func unknownChunksFollowTheirTypeBits() {
        let p = establishedPair(seed: 24)
        var b = p.b
        let cum = b.cumTSN
        // 0xbf (10): skipped silently; the DATA after it is processed.
        b.handleInput(craft(to: b, [.unknown(UnknownChunk(type: 0xbf, flags: 0, value: [1])), dataChunk(cum &+ 1, e: true)]), now: p.now)
        var out = drainAll(&b)
        #expect(out.events.count == 1, "\(b.stats) \(b.cumTSN &- cum)")
        // 0xff (11): skipped and reported with cause 6 "Unrecognized Chunk Type".
        b.handleInput(craft(to: b, [.unknown(UnknownChunk(type: 0xff, flags: 0, value: [1, 2])), dataChunk(cum &+ 2, ssn: 1)]), now: p.now)
        out = drainAll(&b)
        #expect(out.events.count == 1)
        let errors = out.packets.flatMap { $0.chunks }.compactMap { c -> ErrorChunk? in
            if case .error(let e) = c { return e }
            return nil
        }
        #expect(errors.first?.causes.first?.code == ErrorCause.unrecognizedChunkType)
        #expect(errors.first?.causes.first?.info == [0xff, 0, 0, 6, 1, 2])
        // 0x3f (00): the rest of the packet is not processed, nothing reported.
        b.handleInput(craft(to: b, [.unknown(UnknownChunk(type: 0x3f, flags: 0, value: [])), dataChunk(cum &+ 3, ssn: 2)]), now: p.now)
        out = drainAll(&b)
        #expect(out.events.isEmpty && b.cumTSN == cum &+ 2)
    }

    @Test func sackReportsGapsAndDelaysWhenInOrder() {
        let p = establishedPair(seed: 25)
        var b = p.b
        let cum = b.cumTSN
        // One in-order packet: no SACK yet, but a deadline within 200 ms.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 1)]), now: p.now)
        var out = drainAll(&b)
        #expect(out.packets.isEmpty)
        #expect(out.deadline <= p.now + .milliseconds(200))
        b.handleTimeout(now: out.deadline)
        out = drainAll(&b)
        guard case .sack(let s1) = out.packets.first?.chunks.first else { Issue.record("no delayed SACK"); return }
        #expect(s1.cumulativeTSNAck == cum &+ 1 && s1.gapBlocks.isEmpty)
        // A gap: TSNs cum+3 and cum+4, cum+6 arrive → SACK at once with blocks 2-3 and 5-5.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 3, ssn: 2), dataChunk(cum &+ 4, ssn: 3)]), now: p.now)
        b.handleInput(craft(to: b, [dataChunk(cum &+ 6, ssn: 5)]), now: p.now)
        out = drainAll(&b)
        guard case .sack(let s2) = out.packets.last?.chunks.first else { Issue.record("no SACK"); return }
        #expect(s2.cumulativeTSNAck == cum &+ 1)
        #expect(s2.gapBlocks == [GapAckBlock(start: 2, end: 3), GapAckBlock(start: 5, end: 5)])
        // The window shrank by what is buffered (3 chunks of 10 bytes + overhead).
        #expect(Int(s2.aRwnd) == b.config.receiveBufferSize - 3 * (10 + SCTPAssociation.chunkOverhead))
        // A duplicate is reported.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 3, ssn: 2)]), now: p.now)
        out = drainAll(&b)
        guard case .sack(let s3) = out.packets.last?.chunks.first else { Issue.record("no SACK"); return }
        #expect(s3.duplicateTSNs == [cum &+ 3])
        // Ordered delivery waited for SSN 1: nothing delivered past SSN 0.
        #expect(out.events.isEmpty)
    }

    @Test func forwardTSNSkipsAbandonedMessages() {
        let p = establishedPair(seed: 26)
        var b = p.b
        let cum = b.cumTSN
        // SSN 0 (TSN cum+1) is abandoned by the peer; SSN 1 (cum+2) arrived and waits.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 2, stream: 3, ssn: 1, size: 4)]), now: p.now)
        // Also a lone first fragment of an abandoned unordered message at cum+3… no: an
        // abandoned fragment below the new cumulative TSN (cum+1 B only) is dropped.
        var out = drainAll(&b)
        #expect(out.events.isEmpty)
        b.handleInput(craft(to: b, [.forwardTSN(ForwardTSNChunk(newCumulativeTSN: cum &+ 1,
                                                                skipped: [.init(streamID: 3, ssn: 0)]))]), now: p.now)
        out = drainAll(&b)
        #expect(out.events == [.message(SCTPMessage(streamID: 3, ppid: 53, unordered: false, data: [0x5a, 0x5a, 0x5a, 0x5a]))])
        #expect(b.cumTSN == cum &+ 2)
        guard case .sack(let s) = out.packets.last?.chunks.first else { Issue.record("no SACK"); return }
        #expect(s.cumulativeTSNAck == cum &+ 2 && s.gapBlocks.isEmpty)
        #expect(b.receiveBuffered == 0)
    }

    @Test func retransmissionBacksOffAndGivesUp() throws {
        let p = establishedPair(seed: 27)
        var a = p.a  // from here on, nothing reaches the peer
        var now = p.now
        try a.send(stream: 1, ppid: 53, data: [1, 2, 3], now: now)
        var out = drainAll(&a)
        #expect(out.packets.count == 1)
        var sends: [Instant] = [now]
        var closedBy: [SCTPEvent] = []
        while closedBy.isEmpty && now < p.now + .seconds(600) {
            now = out.deadline
            a.handleTimeout(now: now)
            out = drainAll(&a)
            if out.packets.contains(where: { $0.chunks.contains { if case .data = $0 { return true }; return false } }) {
                sends.append(now)
                #expect(a.congestionWindow == a.config.mtu)  // §7.2.3: cwnd = 1 MTU after T3
            }
            closedBy = out.events
        }
        let gaps = zip(sends.dropFirst(), sends).map { ($0 - $1).milliseconds }
        // RTO.Initial 1 s, doubling, capped at RTO.Max 10 s; after Association.Max.Retrans
        // (10) retransmissions the 11th expiry gives up.
        #expect(gaps == [1000, 2000, 4000, 8000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000])
        #expect(closedBy == [.closed(.peerUnreachable)])
        #expect(out.packets.last.map { if case .abort = $0.chunks[0] { return true }; return false } == true)
    }

    @Test func rtoFollowsMeasuredRTT() throws {
        var p = makePair(seed: 28)
        p.net.baseDelay = .milliseconds(50)
        p.a.connect(now: p.now)
        p.run(for: .seconds(5), until: connected)
        for i in 0..<200 {
            try p.a.send(stream: 1, ppid: 53, data: payload(i, size: 3000), now: p.now)
            p.run(for: .milliseconds(50))
        }
        p.run(for: .seconds(5))
        // RTT is 100 ms plus up to 200 ms of delayed SACK; SRTT must land in there and
        // RTO = SRTT + 4 RTTVAR (§6.3.1) above it.
        let srtt = p.a.srtt!.milliseconds
        #expect(srtt >= 100 && srtt <= 300)
        let expected = min(p.a.config.rtoMax, max(p.a.config.rtoMin, p.a.srtt! + p.a.rttvar * 4))
        #expect(p.a.rto == expected)
        #expect(p.a.stats.t3Expirations == 0)
        // Without loss slow start opened the window beyond its initial 4380 bytes.
        #expect(p.a.congestionWindow > 4380)
    }
}

@Suite struct FloodTests {
    @Test func senderBufferIsBounded() throws {
        var p = establishedPair(seed: 31)
        var refused = false
        var sent = 0
        for i in 0..<10_000 {
            do throws(SCTPError) {
                try p.a.send(stream: 1, ppid: 53, data: payload(i, size: 1024), now: p.now)
                sent += 1
            } catch {
                #expect(error == .sendBufferFull)
                refused = true
                break
            }
        }
        #expect(refused)
        #expect(p.a.bufferedAmount <= p.a.config.sendBufferLimit)
        #expect(sent == p.a.config.sendBufferLimit / 1024)
        let ok = p.run(for: .seconds(60)) { q in q.eventsA.contains(.sendBufferLow) }
        #expect(ok)
        #expect(p.a.bufferedAmount <= p.a.config.sendBufferLimit / 2)
    }

    @Test func receiverMemoryIsBoundedAgainstAPeerIgnoringTheWindow() {
        let p = establishedPair(seed: 32)
        var b = p.b
        let cum = b.cumTSN
        let limit = b.config.receiveBufferSize
        // 3 MB of first fragments that never complete, above a hole at cum+1.
        var tsn = cum &+ 2
        for _ in 0..<3000 {
            b.handleInput(craft(to: b, [dataChunk(tsn, b: true, e: false, size: 1000)]), now: p.now)
            tsn &+= 1
            _ = drainAll(&b)
        }
        #expect(b.receiveBuffered <= limit)
        #expect(b.stats.droppedDataForWindow > 0)
        #expect(b.advertisedWindow < 1100)
        // 30,000 one-byte chunks: the per-chunk overhead keeps their count bounded too.
        var c = b
        for i in 0..<30_000 {
            c.handleInput(craft(to: c, [dataChunk(cum &+ 5000 &+ UInt32(i), b: true, e: false, size: 1)]), now: p.now)
            if i % 100 == 0 { _ = drainAll(&c) }
        }
        #expect(c.receiveBuffered <= limit)
        #expect(c.fragments.count <= limit / (1 + SCTPAssociation.chunkOverhead))
        // TSNs far beyond the window are refused outright.
        var d = p.b
        d.handleInput(craft(to: d, [dataChunk(cum &+ 1_000_000)]), now: p.now)
        #expect(d.stats.droppedDataForWindow == 1 && d.receiveBuffered == 0)
    }

    @Test func hugeDCEPLabelIsRefusedByStreamReset() {
        var r = SeededRandom(seed: 33)
        var p = Pair(a: DataChannels(config: DataChannelConfig(isDTLSClient: true), random: &r),
                     b: DataChannels(config: DataChannelConfig(isDTLSClient: false), random: &r), net: NetEm(seed: 1))
        p.a.connect(now: p.now)
        p.b.connect(now: p.now)
        p.run(for: .seconds(5), until: bothConnected)
        var a = p.a
        let assoc = a.association
        // The peer (odd ids) opens stream 1 with a 60,000-byte label.
        let open = DataChannelOpen(label: String(repeating: "x", count: 60_000)).serialize()
        a.handleInput(craft(to: assoc, [.data(DataChunk(tsn: assoc.cumTSN &+ 1, streamID: 1, ssn: 0, ppid: 50, userData: open))]), now: p.now)
        var events: [DataChannelEvent] = []
        var packets: [SCTPPacket] = []
        loop: while true {
            switch a.pollOutput() {
            case .transmit(let b): packets.append(try! SCTPPacket.parse(b))
            case .event(let e): events.append(e)
            case .timeout: break loop
            }
        }
        #expect(events.isEmpty)
        #expect(a.droppedMessages == 1)
        let resets = packets.flatMap { $0.chunks }.compactMap { c -> [UInt16]? in
            if case .reconfig(let r) = c, case .outgoingReset(let o) = r.parameters.first { return o.streams }
            return nil
        }
        #expect(resets == [[1]])
    }
}

@Suite struct CongestionTests {
    @Test func fastRetransmitAfterThreeMissReports() throws {
        let p = establishedPair(seed: 51)
        var a = p.a
        let t0 = a.nextTSN
        for i in 0..<6 { try a.send(stream: 1, ppid: 53, data: payload(i, size: 100), now: p.now) }
        let first = drainAll(&a)
        let sentTSNs = chunks(first.packets).compactMap { c -> UInt32? in if case .data(let d) = c { return d.tsn }; return nil }
        #expect(sentTSNs == (0..<6).map { t0 &+ UInt32($0) })
        let cwndBefore = a.congestionWindow
        func sack(_ gapEnd: UInt16) -> [UInt8] {
            craft(to: a, [.sack(SackChunk(cumulativeTSNAck: t0 &- 1, aRwnd: 100_000,
                                          gapBlocks: [GapAckBlock(start: 2, end: gapEnd)]))])
        }
        func dataTSNs(_ packets: [SCTPPacket]) -> [UInt32] {
            chunks(packets).compactMap { c -> UInt32? in if case .data(let d) = c { return d.tsn }; return nil }
        }
        // Two miss reports: nothing yet.
        a.handleInput(sack(2), now: p.now + .milliseconds(50))
        #expect(dataTSNs(drainAll(&a).packets).isEmpty)
        a.handleInput(sack(3), now: p.now + .milliseconds(60))
        #expect(dataTSNs(drainAll(&a).packets).isEmpty)
        // The third (each reporting a newly acknowledged higher TSN, HTNA): retransmit t0 now.
        a.handleInput(sack(4), now: p.now + .milliseconds(70))
        #expect(dataTSNs(drainAll(&a).packets) == [t0])
        #expect(a.stats.fastRetransmits == 1 && a.stats.t3Expirations == 0)
        // §7.2.3: ssthresh = max(cwnd/2, 4 MTU), cwnd = ssthresh.
        #expect(a.congestionWindow == max(cwndBefore / 2, 4 * a.config.mtu))
        // Further reports do not retransmit it again (only T3 may).
        a.handleInput(sack(5), now: p.now + .milliseconds(80))
        a.handleInput(sack(6), now: p.now + .milliseconds(90))
        #expect(dataTSNs(drainAll(&a).packets).isEmpty)
        // The cumulative ack for everything empties the flight and stops T3.
        a.handleInput(craft(to: a, [.sack(SackChunk(cumulativeTSNAck: t0 &+ 5, aRwnd: 100_000))]), now: p.now + .milliseconds(200))
        #expect(a.bufferedAmount == 0 && a.t3Deadline == nil)
    }

    @Test func senderRespectsASmallReceiveWindow() throws {
        var cfg = SCTPConfig()
        cfg.receiveBufferSize = 32 * 1024
        cfg.maxMessageSize = 8 * 1024
        var p = makePair(seed: 52, config: cfg, loss: 100, jitter: .milliseconds(20))
        p.a.connect(now: p.now)
        p.run(for: .seconds(30), until: connected)
        var next = 0
        var got = 0
        var maxBuffered = 0
        let sizes = (0..<300).map { 1 + ($0 * 977) % (8 * 1024) }
        let ok = p.run(for: .seconds(3600)) { q in
            while next < sizes.count, q.a.bufferedAmount + sizes[next] <= q.a.config.sendBufferLimit {
                try? q.a.send(stream: 2, ppid: 53, data: payload(next, size: sizes[next]), now: q.now)
                next += 1
            }
            maxBuffered = max(maxBuffered, q.b.receiveBuffered)
            // Outstanding bytes never exceed what the peer last offered by more than a packet.
            if q.a.outstandingBytes > cfg.receiveBufferSize + cfg.mtu { Issue.record("window overrun") }
            for e in q.eventsB { if case .message(let m) = e, got < sizes.count, m.data == payload(got, size: sizes[got]) { got += 1 } }
            q.eventsB.removeAll()
            return got == sizes.count
        }
        #expect(ok)
        #expect(maxBuffered <= 2 * cfg.receiveBufferSize)
    }
}
