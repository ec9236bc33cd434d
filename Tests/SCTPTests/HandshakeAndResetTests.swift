import Testing
import Wire
@testable import SCTP

/// Our outgoing packets' chunks, flattened.
func chunks(_ packets: [SCTPPacket]) -> [Chunk] { packets.flatMap { $0.chunks } }

@Suite struct HandshakeTests {
    func freshServer(seed: UInt64) -> SCTPAssociation {
        var r = SeededRandom(seed: seed)
        return SCTPAssociation(random: &r)
    }

    func peerInit(tag: UInt32 = 0x0bad_cafe, extra: [UInt8]? = nil) -> [UInt8] {
        var fields = InitFields(initiateTag: tag, aRwnd: 100_000, outboundStreams: 16, inboundStreams: 16,
                                initialTSN: 1000, parameters: InitParameters(forwardTSNSupported: true,
                                                                             supportedExtensions: [0x82, 0xc0]))
        var chunk = Chunk.initiation(InitChunk(fields))
        if let extra {
            // Append a raw parameter the codec does not know.
            var value = [UInt8]()
            value.appendUInt32(fields.initiateTag); value.appendUInt32(fields.aRwnd)
            value.appendUInt16(fields.outboundStreams); value.appendUInt16(fields.inboundStreams)
            value.appendUInt32(fields.initialTSN)
            value += extra
            chunk = .unknown(UnknownChunk(type: 1, flags: 0, value: value))
            fields.parameters = InitParameters()
        }
        return SCTPPacket(sourcePort: 5000, destinationPort: 5000, verificationTag: 0, chunks: [chunk]).serialize()
    }

    @Test func statelessInitAckReportsUnknownParameters() {
        var s = freshServer(seed: 1)
        let now = Instant(nanoseconds: 5_000_000_000)
        // 0xC00F: "skip and report" (RFC 9260 §3.2.1).
        s.handleInput(peerInit(extra: [0xc0, 0x0f, 0x00, 0x05, 0xaa, 0, 0, 0]), now: now)
        let out = drainAll(&s)
        #expect(s.state == .closed)  // no state kept before COOKIE-ECHO
        #expect(out.packets.count == 1 && out.packets[0].verificationTag == 0x0bad_cafe)
        guard case .initAck(let ack) = out.packets[0].chunks[0] else { Issue.record("no INIT-ACK"); return }
        #expect(ack.fields.initiateTag == s.localTag)
        #expect(ack.fields.parameters.unrecognized == [[0xc0, 0x0f, 0x00, 0x05, 0xaa]])
        #expect(ack.fields.parameters.forwardTSNSupported)
        #expect(ack.fields.parameters.supportedExtensions == [ReconfigChunk.type, ForwardTSNChunk.type])
        #expect(ack.fields.parameters.stateCookie?.count == SCTPAssociation.cookieLength)
    }

    @Test func cookieIsVerified() {
        var s = freshServer(seed: 2)
        let now = Instant(nanoseconds: 5_000_000_000)
        s.handleInput(peerInit(), now: now)
        guard case .initAck(let ack) = drainAll(&s).packets[0].chunks[0],
              let cookie = ack.fields.parameters.stateCookie else { Issue.record("no cookie"); return }
        func echo(_ c: [UInt8]) -> [UInt8] {
            SCTPPacket(sourcePort: 5000, destinationPort: 5000, verificationTag: s.localTag,
                       chunks: [.cookieEcho(CookieEchoChunk(cookie: c))]).serialize()
        }
        // Any flipped bit (contents or MAC) is refused.
        for i in 0..<cookie.count {
            var forged = cookie
            forged[i] ^= 0x10
            var t = s
            t.handleInput(echo(forged), now: now)
            #expect(t.state == .closed && drainAll(&t).packets.isEmpty)
        }
        // A cookie older than Valid.Cookie.Life → ERROR "Stale Cookie" (§5.1.5), no association.
        var stale = s
        stale.handleInput(echo(cookie), now: now + .seconds(61))
        let out = drainAll(&stale)
        #expect(stale.state == .closed)
        guard case .error(let e) = out.packets.first?.chunks.first else { Issue.record("no ERROR"); return }
        #expect(e.causes.first?.code == ErrorCause.staleCookie)
        // The genuine one establishes the association and is acknowledged.
        s.handleInput(echo(cookie), now: now + .seconds(1))
        let ok = drainAll(&s)
        #expect(s.state == .established && ok.events == [.connected])
        #expect(chunks(ok.packets) == [.cookieAck(CookieAckChunk())])
        #expect(s.peerTag == 0x0bad_cafe && s.cumTSN == 999 && s.outgoingStreamCount == 16)
        // A second copy (case D of §5.2.4) is acknowledged again without a new event.
        s.handleInput(echo(cookie), now: now + .seconds(2))
        let again = drainAll(&s)
        #expect(again.events.isEmpty && chunks(again.packets) == [.cookieAck(CookieAckChunk())])
    }

    @Test func initIsRetransmittedThenGivesUp() {
        var a = freshServer(seed: 3)
        var now = Instant(nanoseconds: 0)
        a.connect(now: now)
        var out = drainAll(&a)
        var inits = 1
        while out.events.isEmpty {
            now = out.deadline
            a.handleTimeout(now: now)
            out = drainAll(&a)
            inits += chunks(out.packets).filter { if case .initiation = $0 { return true }; return false }.count
        }
        // The first INIT and Max.Init.Retransmits (8) more, then the peer is unreachable.
        #expect(inits == 1 + a.config.maxInitRetransmissions)
        #expect(out.events == [.closed(.peerUnreachable)])
    }
}

@Suite struct StreamResetTests {
    @Test func resetWaitsForDataThenPerforms() {
        let p = establishedPair(seed: 41)
        var b = p.b
        let cum = b.cumTSN
        let seq = b.peerNextRequestSeq
        // Stream 1 delivered SSN 0 and 1; the peer then resets stream 1 with last TSN cum+3,
        // of which cum+3 is still missing.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 1, ssn: 0), dataChunk(cum &+ 2, ssn: 1)]), now: p.now)
        _ = drainAll(&b)
        let req = OutgoingResetRequest(requestSequence: seq, responseSequence: b.myNextRequestSeq &- 1,
                                       senderLastTSN: cum &+ 3, streams: [1])
        b.handleInput(craft(to: b, [.reconfig(ReconfigChunk(parameters: [.outgoingReset(req)]))]), now: p.now)
        var out = drainAll(&b)
        #expect(chunks(out.packets).contains(.reconfig(ReconfigChunk(parameters: [
            .response(ReconfigResponse(responseSequence: seq, result: .inProgress))]))))
        #expect(out.events.isEmpty)
        // The missing DATA arrives; the retransmitted request is performed.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 3, ssn: 2)]), now: p.now)
        b.handleInput(craft(to: b, [.reconfig(ReconfigChunk(parameters: [.outgoingReset(req)]))]), now: p.now)
        out = drainAll(&b)
        #expect(out.events.contains(.incomingStreamsReset([1])))
        #expect(chunks(out.packets).contains(.reconfig(ReconfigChunk(parameters: [
            .response(ReconfigResponse(responseSequence: seq, result: .successPerformed))]))))
        // Sequence numbers restart: SSN 0 on stream 1 is delivered at once.
        b.handleInput(craft(to: b, [dataChunk(cum &+ 4, ssn: 0, size: 3)]), now: p.now)
        out = drainAll(&b)
        #expect(out.events == [.message(SCTPMessage(streamID: 1, ppid: 53, unordered: false, data: [0x5a, 0x5a, 0x5a]))])
        // The same request again gets the same answer; a wrong sequence number an error.
        b.handleInput(craft(to: b, [.reconfig(ReconfigChunk(parameters: [.outgoingReset(req)]))]), now: p.now)
        #expect(chunks(drainAll(&b).packets).contains(.reconfig(ReconfigChunk(parameters: [
            .response(ReconfigResponse(responseSequence: seq, result: .successPerformed))]))))
        var bad = req
        bad.requestSequence = seq &+ 7
        b.handleInput(craft(to: b, [.reconfig(ReconfigChunk(parameters: [.outgoingReset(bad)]))]), now: p.now)
        #expect(chunks(drainAll(&b).packets).contains(.reconfig(ReconfigChunk(parameters: [
            .response(ReconfigResponse(responseSequence: seq &+ 7, result: .errorBadSequenceNumber))]))))
        // Requests we do not implement are denied, not ignored.
        b.handleInput(craft(to: b, [.reconfig(ReconfigChunk(parameters: [
            .incomingReset(IncomingResetRequest(requestSequence: seq &+ 1, streams: [2]))]))]), now: p.now)
        #expect(chunks(drainAll(&b).packets).contains(.reconfig(ReconfigChunk(parameters: [
            .response(ReconfigResponse(responseSequence: seq &+ 1, result: .denied))]))))
    }

    @Test func outgoingResetRestartsOurSequenceNumbers() throws {
        var p = establishedPair(seed: 42)
        try p.a.send(stream: 4, ppid: 53, data: [1], now: p.now)
        try p.a.send(stream: 4, ppid: 53, data: [2], now: p.now)
        try p.a.resetStreams([4], now: p.now)
        #expect(throws: SCTPError.streamClosing) { try p.a.send(stream: 4, ppid: 53, data: [3], now: p.now) }
        let ok = p.run(for: .seconds(10)) { q in q.eventsA.contains(.outgoingStreamsReset([4])) }
        #expect(ok)
        #expect(p.eventsB.contains(.incomingStreamsReset([4])))
        try p.a.send(stream: 4, ppid: 53, data: [9], now: p.now)
        p.run(for: .seconds(2))
        let msgs = p.eventsB.compactMap { e -> [UInt8]? in if case .message(let m) = e { return m.data }; return nil }
        #expect(msgs == [[1], [2], [9]])
        #expect(p.a.nextSSN[4] == 1)  // SSN 0 went out after the reset
    }
}

@Suite struct TSNRangesTests {
    /// Against a plain set, with random inserts around a moving base.
    @Test func matchesASetReference() {
        var rng = SeededRandom(seed: 17)
        var base: UInt32 = 0xffff_ff00  // wraps during the test
        var ranges = TSNRanges()
        var set = Set<UInt32>()
        for _ in 0..<5000 {
            let tsn = base &+ 1 &+ UInt32(rng.next() % 300)
            if tsn == base &+ 1 {
                // The reference advances one TSN at a time; the ranges in one step.
                var refBase = tsn
                while set.remove(refBase &+ 1) != nil { refBase &+= 1 }
                base = tsn
                if let end = ranges.popContiguous(after: base) { base = end }
                #expect(base == refBase)
            } else if !set.contains(tsn) {
                #expect(!ranges.contains(tsn, base: base))
                ranges.insert(tsn, base: base)
                set.insert(tsn)
            } else {
                #expect(ranges.contains(tsn, base: base))
            }
            if rng.next() % 500 == 0 {
                let cut = base &+ UInt32(rng.next() % 100)
                ranges.removeThrough(cut, base: base)
                set = set.filter { $0 &- cut < 0x8000_0000 && $0 != cut }
                ranges.removeThrough(cut, base: base)  // idempotent
                var refBase = cut
                while set.remove(refBase &+ 1) != nil { refBase &+= 1 }
                base = cut
                if let end = ranges.popContiguous(after: base) { base = end }
                #expect(base == refBase)
            }
            // Same members, as disjoint sorted non-adjacent ranges.
            var members = Set<UInt32>()
            var previousLast: UInt32?
            for r in ranges.ranges {
                #expect(r.first &- base <= r.last &- base)
                if let pl = previousLast { #expect(r.first &- base > (pl &- base) &+ 1) }
                var t = r.first
                while true { members.insert(t); if t == r.last { break }; t &+= 1 }
                previousLast = r.last
            }
            if members != set { Issue.record("ranges diverged at base \(base)"); return }
        }
    }
}

final class Counter: @unchecked Sendable { var value = 0 }

@Suite struct ShutdownTests {
    @Test func lostShutdownCompleteIsRecovered() throws {
        var p = establishedPair(seed: 61)
        try p.a.send(stream: 0, ppid: 51, data: Array("bye".utf8), now: p.now)
        let dropped = Counter()
        p.net.tap = { _, bytes in
            // Chunk type 14 (SHUTDOWN-COMPLETE) right after the common header: drop the first.
            if bytes.count > 12, bytes[12] == 14, dropped.value == 0 {
                dropped.value += 1
                return nil
            }
            return bytes
        }
        p.a.shutdown(now: p.now)
        #expect(throws: SCTPError.notEstablished) { try p.a.send(stream: 0, ppid: 51, data: [1], now: p.now) }
        let ok = p.run(for: .seconds(30)) { q in
            q.eventsA.contains(.closed(.shutdown)) && q.eventsB.contains(.closed(.shutdown))
        }
        #expect(ok)
        #expect(dropped.value == 1)
        #expect(p.eventsB.contains(.message(SCTPMessage(streamID: 0, ppid: 51, unordered: false, data: Array("bye".utf8)))))
        #expect(p.a.state == .closed && p.b.state == .closed)
    }

    @Test func abortEndsBothSides() {
        var p = establishedPair(seed: 62)
        p.b.abort(now: p.now)
        p.run(for: .seconds(1))
        #expect(p.eventsB == [.closed(.abortedLocally)])
        #expect(p.eventsA == [.closed(.abortedByPeer(cause: ErrorCause.userInitiatedAbort))])
    }
}
