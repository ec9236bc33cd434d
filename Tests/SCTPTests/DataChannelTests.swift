import Testing
import Wire
@testable import SCTP

extension DataChannels: Driven {
    mutating func input(_ bytes: [UInt8], now: Instant) { handleInput(bytes, now: now) }
    mutating func timeout(now: Instant) { handleTimeout(now: now) }
    mutating func poll() -> Step<DataChannelEvent> {
        switch pollOutput() {
        case .transmit(let b): return .transmit(b)
        case .event(let e): return .event(e)
        case .timeout(let t): return .timeout(t)
        }
    }
}

/// A is the DTLS client (even ids), B the server (odd ids); both send INIT.
func makeChannels(seed: UInt64, loss: UInt64 = 0, dup: UInt64 = 0, jitter: Duration = .zero,
                  sctp: SCTPConfig = SCTPConfig()) -> Pair<DataChannels> {
    var r = SeededRandom(seed: seed)
    var ca = DataChannelConfig(isDTLSClient: true)
    ca.sctp = sctp
    var cb = DataChannelConfig(isDTLSClient: false)
    cb.sctp = sctp
    var net = NetEm(seed: seed &* 31 &+ 7)
    net.lossPerMille = loss
    net.duplicatePerMille = dup
    net.jitter = jitter
    var p = Pair(a: DataChannels(config: ca, random: &r), b: DataChannels(config: cb, random: &r), net: net)
    p.a.connect(now: p.now)
    p.b.connect(now: p.now)
    return p
}

func bothConnected(_ p: inout Pair<DataChannels>) -> Bool {
    p.a.association.isEstablished && p.b.association.isEstablished
}

func messages(_ events: [DataChannelEvent], channel: UInt16) -> [(data: [UInt8], isText: Bool)] {
    events.compactMap { e in
        if case .message(let c, let d, let t) = e, c == channel { return (d, t) }
        return nil
    }
}

@Suite struct DataChannelTests {
    @Test func dcepOpenCodec() throws {
        // The OPEN Chrome sent in the captured packet (ChunkTests): reliable, ordered,
        // priority 0, label "aaaaaaaaaaaaaaaa", no protocol.
        let packet = try SCTPPacket.parse(hex(Captured.dcepOpen))
        guard case .data(let d) = packet.chunks[0] else { Issue.record("no DATA"); return }
        let open = try DataChannelOpen.parse(d.userData, maxStringLength: 1024)
        #expect(open == DataChannelOpen(ordered: true, reliability: .reliable, priority: 0,
                                        label: "aaaaaaaaaaaaaaaa", protocolName: ""))
        #expect(open.serialize() == d.userData)
        // Unordered, partially reliable (3 retransmits), priority 256, label "chat", protocol "json".
        let pr = DataChannelOpen(ordered: false, reliability: .maxRetransmits(3), priority: 256, label: "chat", protocolName: "json")
        #expect(pr.serialize() == hex("03810100 00000003 00040004 63686174 6a736f6e"))
        #expect(try DataChannelOpen.parse(pr.serialize(), maxStringLength: 1024) == pr)
        let timed = DataChannelOpen(ordered: true, reliability: .maxLifetime(milliseconds: 500), label: "t")
        #expect(try DataChannelOpen.parse(timed.serialize(), maxStringLength: 16) == timed)
        // Malformed: lengths that do not match, unknown channel type, oversize label.
        #expect(throws: SCTPError.malformedDCEP) { try DataChannelOpen.parse(hex("03000000 00000000 00050000 6162"), maxStringLength: 64) }
        #expect(throws: SCTPError.malformedDCEP) { try DataChannelOpen.parse(hex("03070000 00000000 00000000"), maxStringLength: 64) }
        #expect(throws: SCTPError.labelTooLong) { try DataChannelOpen.parse(hex("03000000 00000000 ffff0000"), maxStringLength: 1024) }
        for n in 0..<12 {
            #expect(throws: SCTPError.self) { try DataChannelOpen.parse(Array(pr.serialize()[0..<n]), maxStringLength: 64) }
        }
    }

    @Test func openSendReceiveBothWays() throws {
        var p = makeChannels(seed: 3)
        var ok = p.run(for: .seconds(5), until: bothConnected)
        #expect(ok)
        let ca = try p.a.open(label: "oai-events", protocolName: "json", now: p.now)
        let cb = try p.b.open(label: "from-b", now: p.now)
        #expect(ca % 2 == 0 && cb % 2 == 1)
        ok = p.run(for: .seconds(5)) { q in
            q.eventsA.contains(.opened(channel: ca, label: "oai-events", protocolName: "json"))
                && q.eventsB.contains(.opened(channel: ca, label: "oai-events", protocolName: "json"))
                && q.eventsA.contains(.opened(channel: cb, label: "from-b", protocolName: ""))
        }
        #expect(ok)
        try p.a.send(ca, text: "hello", now: p.now)
        try p.a.send(ca, text: "", now: p.now)
        try p.a.send(ca, binary: [], now: p.now)
        try p.a.send(ca, binary: [0, 1, 2], now: p.now)
        try p.b.send(cb, text: "¡hola!", now: p.now)
        p.run(for: .seconds(2))
        let atB = messages(p.eventsB, channel: ca)
        #expect(atB.map { $0.data } == [Array("hello".utf8), [], [], [0, 1, 2]])
        #expect(atB.map { $0.isText } == [true, true, false, false])
        let atA = messages(p.eventsA, channel: cb)
        #expect(atA.map { $0.data } == [Array("¡hola!".utf8)] && atA.first?.isText == true)
        // Too large for the configured maximum message size.
        #expect(throws: SCTPError.messageTooLarge(size: 256 * 1024 + 1, limit: 256 * 1024)) {
            try p.a.send(ca, binary: [UInt8](repeating: 1, count: 256 * 1024 + 1), now: p.now)
        }
    }

    /// The headline test: 1,000 messages of 1 byte to 256 KiB through 20 % loss,
    /// duplication and reordering arrive exactly once, in order and intact.
    @Test func thousandMessagesThroughLossyNetwork() throws {
        var p = makeChannels(seed: 42, loss: 200, dup: 50, jitter: .milliseconds(40))
        var ok = p.run(for: .seconds(120), until: bothConnected)
        #expect(ok)
        let ch = try p.a.open(label: "bulk", now: p.now)
        let sizes = messageSizes(count: 1000, seed: 8)
        var next = 0
        var received: [[UInt8]] = []
        var maxBuffered = 0
        var maxReceiveBuffered = 0
        ok = p.run(for: .seconds(24 * 3600)) { q in
            while next < sizes.count, q.a.bufferedAmount + sizes[next] <= q.a.association.config.sendBufferLimit {
                do throws(SCTPError) {
                    try q.a.send(ch, binary: payload(next, size: sizes[next]), now: q.now)
                    next += 1
                } catch {
                    Issue.record("send failed: \(error)")
                    return true
                }
            }
            maxBuffered = max(maxBuffered, q.a.bufferedAmount)
            maxReceiveBuffered = max(maxReceiveBuffered, q.b.association.receiveBuffered)
            for e in q.eventsB { if case .message(let c, let d, _) = e, c == ch { received.append(d) } }
            q.eventsB.removeAll()
            return received.count >= sizes.count
        }
        #expect(ok)
        #expect(received.count == sizes.count)
        var firstBad: Int?
        for (i, m) in received.enumerated() where m != payload(i, size: sizes[i]) {
            firstBad = i
            break
        }
        #expect(firstBad == nil)
        // The network really was hostile, and memory stayed within the configured bounds.
        #expect(p.net.lost > p.net.sent / 10 && p.net.duplicated > 0)
        #expect(p.a.association.stats.retransmissions > 0 && p.a.association.stats.fastRetransmits > 0)
        #expect(maxBuffered <= p.a.association.config.sendBufferLimit)
        #expect(maxReceiveBuffered <= 2 * p.b.association.config.receiveBufferSize)
        #expect(p.b.association.stats.duplicateTSNs > 0)
        print("1000 messages, \(sizes.reduce(0, +)) bytes, receiver \(p.b.association.stats), maxRecv \(maxReceiveBuffered): \(p.net.sent) packets, \(p.net.lost) lost, \(p.net.duplicated) duplicated, simulated \(p.now), sender \(p.a.association.stats)")
    }

    @Test func unorderedChannelDeliversAll() throws {
        var p = makeChannels(seed: 9, loss: 200, dup: 50, jitter: .milliseconds(40))
        var ok = p.run(for: .seconds(60), until: bothConnected)
        #expect(ok)
        let ch = try p.a.open(label: "u", ordered: false, now: p.now)
        ok = p.run(for: .seconds(60)) { q in q.eventsA.contains(.opened(channel: ch, label: "u", protocolName: "")) }
        #expect(ok)
        let sizes = messageSizes(count: 200, seed: 4).map { min($0, 20_000) }
        var next = 0
        ok = p.run(for: .seconds(3600)) { q in
            // Respect the send buffer: `send` refuses beyond it (tested in the flood test).
            while next < sizes.count, q.a.bufferedAmount + sizes[next] <= q.a.association.config.sendBufferLimit {
                try? q.a.send(ch, binary: payload(next, size: sizes[next]), now: q.now)
                next += 1
            }
            return messages(q.eventsB, channel: ch).count >= sizes.count
        }
        #expect(ok)
        let got = messages(p.eventsB, channel: ch).map { $0.data }
        #expect(got.count == sizes.count)
        var expected = Set<[UInt8]>()
        for (i, s) in sizes.enumerated() { expected.insert(payload(i, size: s)) }
        #expect(Set(got) == expected)
        // Unordered delivery under reordering really did deliver out of order.
        let indices = got.map { Int($0[0]) | (($0.count > 1 ? Int($0[1]) : 0) << 8) }
        #expect(indices != indices.sorted())
    }

    @Test func closeByStreamResetBothWays() throws {
        var p = makeChannels(seed: 5, loss: 100, jitter: .milliseconds(10))
        var ok = p.run(for: .seconds(60), until: bothConnected)
        #expect(ok)
        let c1 = try p.a.open(label: "one", now: p.now)
        let c2 = try p.b.open(label: "two", now: p.now)
        ok = p.run(for: .seconds(60)) { q in
            q.eventsA.contains(.opened(channel: c1, label: "one", protocolName: ""))
                && q.eventsB.contains(.opened(channel: c2, label: "two", protocolName: ""))
        }
        #expect(ok)
        // Messages queued before the close still arrive; then both sides see `closed`.
        try p.a.send(c1, text: "last words", now: p.now)
        try p.a.close(c1, now: p.now)
        try p.b.close(c2, now: p.now)
        #expect(throws: SCTPError.unknownChannel) { try p.a.send(c1, text: "too late", now: p.now) }
        ok = p.run(for: .seconds(120)) { q in
            q.eventsA.contains(.closed(channel: c1)) && q.eventsB.contains(.closed(channel: c1))
                && q.eventsA.contains(.closed(channel: c2)) && q.eventsB.contains(.closed(channel: c2))
        }
        #expect(ok)
        #expect(messages(p.eventsB, channel: c1).map { $0.data } == [Array("last words".utf8)])
        // The stream ids are free again and sequence numbers restart: reopen and talk.
        let again = try p.a.open(label: "again", now: p.now)
        #expect(again == c1)
        try p.a.send(again, text: "new", now: p.now)
        ok = p.run(for: .seconds(60)) { q in messages(q.eventsB, channel: again).count >= 2 }
        #expect(ok)
        #expect(messages(p.eventsB, channel: again).last?.data == Array("new".utf8))
    }

    @Test func idleAssociationSurvivesHoursWithHeartbeats() throws {
        var p = makeChannels(seed: 77, loss: 100, jitter: .milliseconds(10))
        var ok = p.run(for: .seconds(60), until: bothConnected)
        #expect(ok)
        let ch = try p.a.open(label: "idle", now: p.now)
        p.run(for: .seconds(10))
        let start = p.now
        p.run(for: .seconds(4 * 3600))
        #expect(p.now - start >= .seconds(4 * 3600))
        #expect(p.a.association.isEstablished && p.b.association.isEstablished)
        // About one heartbeat per 30 s + RTO each way, and most were answered.
        let hb = p.a.association.stats.heartbeatsSent
        #expect(hb > 4 * 3600 / 40 && hb < 4 * 3600 / 30 + 10)
        #expect(p.a.association.stats.heartbeatAcksReceived > hb / 2)
        #expect(p.b.association.stats.heartbeatsSent > 4 * 3600 / 40)
        try p.a.send(ch, text: "still here", now: p.now)
        ok = p.run(for: .seconds(60)) { q in messages(q.eventsB, channel: ch).count == 1 }
        #expect(ok)
    }

    @Test func gracefulShutdown() throws {
        var p = makeChannels(seed: 12, loss: 100)
        var ok = p.run(for: .seconds(60), until: bothConnected)
        #expect(ok)
        let ch = try p.a.open(label: "x", now: p.now)
        try p.a.send(ch, binary: [UInt8](repeating: 7, count: 50_000), now: p.now)
        p.a.shutdown(now: p.now)
        ok = p.run(for: .seconds(120)) { q in
            q.eventsA.contains(.associationClosed(.shutdown)) && q.eventsB.contains(.associationClosed(.shutdown))
        }
        #expect(ok)
        #expect(messages(p.eventsB, channel: ch).first?.data.count == 50_000)
    }
}

