import Testing
import Wire
@testable import SCTP

/// Hex text to bytes; white space ignored.
func hex(_ s: String) -> [UInt8] { Hex.decode(s)! }

/// A bit-at-a-time CRC-32c (reflected polynomial 0x82F63B78), independent of Wire's table.
func referenceCRC32C(_ bytes: [UInt8]) -> UInt32 {
    var c: UInt32 = 0xffff_ffff
    for b in bytes {
        c ^= UInt32(b)
        for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
    }
    return ~c
}

func roundTrip(_ chunk: Chunk) throws -> Chunk {
    let packet = SCTPPacket(sourcePort: 5000, destinationPort: 5000, verificationTag: 0x1234_5678, chunks: [chunk])
    let bytes = packet.serialize()
    #expect(bytes.count % 4 == 0)
    let back = try SCTPPacket.parse(bytes)
    #expect(back.chunks.count == 1)
    return back.chunks[0]
}

/// The bytes of one chunk as it stands in a serialized packet (header stripped).
func chunkBytes(_ chunk: Chunk) -> [UInt8] {
    Array(SCTPPacket(sourcePort: 1, destinationPort: 2, verificationTag: 3, chunks: [chunk]).serialize()[12...])
}

@Suite struct ChecksumTests {
    @Test func crc32cKnownVectors() {
        // "123456789" → 0xE3069283 (the CRC catalogue's check value for CRC-32C).
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        // RFC 3720 §B.4: 32 bytes of zeros → bytes aa 36 91 8a on the wire.
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xff, count: 32)) == 0x62A8_AB43)
    }

    /// Packets captured from Chrome (an INIT and a DCEP OPEN in DATA) and a COOKIE-ACK:
    /// their checksums, computed our way, match the bytes on the wire.
    @Test func capturedPacketsVerify() throws {
        for h in [Captured.chromeInit, Captured.dcepOpen, Captured.cookieAck] {
            let bytes = hex(h)
            var zeroed = bytes
            zeroed[8] = 0; zeroed[9] = 0; zeroed[10] = 0; zeroed[11] = 0
            let crc = referenceCRC32C(zeroed)
            // Least significant byte first (RFC 9260 appendix A).
            #expect(Array(bytes[8..<12]) == [UInt8(crc & 0xff), UInt8((crc >> 8) & 0xff), UInt8((crc >> 16) & 0xff), UInt8(crc >> 24)])
            _ = try SCTPPacket.parse(bytes)
        }
    }

    @Test func serializedChecksumMatchesReference() {
        let p = SCTPPacket(sourcePort: 5000, destinationPort: 5000, verificationTag: 0xdead_beef,
                           chunks: [.cookieAck(CookieAckChunk())])
        let bytes = p.serialize()
        var zeroed = bytes
        for i in 8..<12 { zeroed[i] = 0 }
        let crc = referenceCRC32C(zeroed)
        #expect(bytes[8] == UInt8(crc & 0xff) && bytes[11] == UInt8(crc >> 24))
    }

    @Test func badChecksumRejected() {
        var bytes = hex(Captured.dcepOpen)
        bytes[30] ^= 0x01
        #expect(throws: SCTPError.badChecksum) { try SCTPPacket.parse(bytes) }
        var sum = hex(Captured.dcepOpen)
        sum[8] ^= 0x80
        #expect(throws: SCTPError.badChecksum) { try SCTPPacket.parse(sum) }
    }
}

enum Captured {
    /// Chrome's INIT: tag d2c0870e, a_rwnd 131072, 1024 out / 2048 in, TSN 18c11632,
    /// Forward-TSN-Supported, Supported Extensions (c0 0f c1 80 82), then AUTH parameters
    /// (RANDOM 0x8002, HMAC-ALGO 0x8004, CHUNKS 0x8003) that we skip (type bits 10).
    static let chromeInit = """
        13881388 00000000 fc364087 01000056 d2c0870e 00020000 04000800 18c11632
        c0000004 80080009 c00fc180 82000000 80020024 83520000 e3600000 f61a0000
        d4070000 e44f0000 e66b0000 bd1a0000 52270000 80040006 00010000 80030006 80c10000
        """
    /// DATA with a DCEP DATA_CHANNEL_OPEN: stream 0, PPID 50, label "aaaaaaaaaaaaaaaa".
    static let dcepOpen = """
        13881388 a15072dd 504d6303 0003002c 54b012b4 00000000 00000032 03000000
        00000000 00100000 61616161 61616161 61616161 61616161
        """
    static let cookieAck = "13881388 298f3221 4ddfef0b 0b000004"
}

@Suite struct ChunkCodecTests {
    @Test func capturedInitParses() throws {
        let p = try SCTPPacket.parse(hex(Captured.chromeInit))
        #expect(p.sourcePort == 5000 && p.destinationPort == 5000 && p.verificationTag == 0)
        guard case .initiation(let i) = p.chunks.first else { Issue.record("not INIT"); return }
        #expect(i.fields.initiateTag == 0xd2c0_870e)
        #expect(i.fields.aRwnd == 131_072)
        #expect(i.fields.outboundStreams == 1024 && i.fields.inboundStreams == 2048)
        #expect(i.fields.initialTSN == 0x18c1_1632)
        #expect(i.fields.parameters.forwardTSNSupported)
        #expect(i.fields.parameters.supportedExtensions == [0xc0, 0x0f, 0xc1, 0x80, 0x82])
        #expect(i.fields.parameters.unrecognized.isEmpty)
    }

    @Test func capturedDataParses() throws {
        let p = try SCTPPacket.parse(hex(Captured.dcepOpen))
        guard case .data(let d) = p.chunks.first else { Issue.record("not DATA"); return }
        #expect(d.tsn == 0x54b0_12b4 && d.streamID == 0 && d.ssn == 0 && d.ppid == 50)
        #expect(d.beginning && d.ending && !d.unordered)
        #expect(d.userData.count == 28 && d.userData[0] == 3)
        // Re-serialized, the packet is byte-identical to the capture.
        #expect(p.serialize() == hex(Captured.dcepOpen))
    }

    @Test func dataKnownBytes() throws {
        let d = DataChunk(tsn: 0x0102_0304, streamID: 7, ssn: 9, ppid: 51, unordered: true,
                          beginning: true, ending: false, userData: [0x41, 0x42, 0x43])
        // Type 0, flags U|B = 06, length 16+3 = 0x13, one byte of padding.
        #expect(chunkBytes(.data(d)) == hex("00060013 01020304 00070009 00000033 41424300"))
        #expect(try roundTrip(.data(d)) == .data(d))
    }

    @Test func initAndInitAckRoundTrip() throws {
        let fields = InitFields(initiateTag: 0xa1b2_c3d4, aRwnd: 0x0008_0000, outboundStreams: 65535,
                                inboundStreams: 65535, initialTSN: 42,
                                parameters: InitParameters(forwardTSNSupported: true, supportedExtensions: [0x82, 0xc0]))
        // INIT: 4 + 16 fixed bytes, c000 0004, 8008 0006 82c0: length 30, the last
        // parameter's padding outside the length.
        #expect(chunkBytes(.initiation(InitChunk(fields))) ==
                hex("0100001e a1b2c3d4 00080000 ffffffff 0000002a c0000004 80080006 82c00000"))
        #expect(try roundTrip(.initiation(InitChunk(fields))) == .initiation(InitChunk(fields)))
        var ack = fields
        ack.parameters.stateCookie = [1, 2, 3, 4, 5]
        ack.parameters.unrecognized = [hex("80aa0005 ee")]
        #expect(try roundTrip(.initAck(InitAckChunk(ack))) == .initAck(InitAckChunk(ack)))
    }

    @Test func initRules() throws {
        // Zero initiate tag: invalid (RFC 9260 §3.3.2).
        #expect(throws: SCTPError.invalidField) {
            try SCTPPacket.parse(SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 0, chunks: [
                .unknown(UnknownChunk(type: 1, flags: 0, value: hex("00000000 00010000 00010001 00000001")))]).serialize())
        }
        // INIT-ACK without a cookie.
        #expect(throws: SCTPError.missingParameter) {
            try SCTPPacket.parse(SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 5, chunks: [
                .unknown(UnknownChunk(type: 2, flags: 0, value: hex("00000009 00010000 00010001 00000001")))]).serialize())
        }
        // Unknown parameters by their upper bits: 0x4001 (01: stop, report) stops before 0xC000.
        let stop = try SCTPPacket.parse(SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 0, chunks: [
            .unknown(UnknownChunk(type: 1, flags: 0, value: hex("00000009 00010000 00010001 00000001 40010005 aa000000 c0000004")))]).serialize())
        guard case .initiation(let i) = stop.chunks[0] else { Issue.record("not INIT"); return }
        #expect(i.fields.parameters.unrecognized == [hex("40010005 aa")])
        #expect(!i.fields.parameters.forwardTSNSupported)
        // 0xC001 (11: skip, report) and 0x8001 (10: skip silently) both let 0xC000 through.
        let skip = try SCTPPacket.parse(SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 0, chunks: [
            .unknown(UnknownChunk(type: 1, flags: 0, value: hex("00000009 00010000 00010001 00000001 c0010004 80010004 c0000004")))]).serialize())
        guard case .initiation(let j) = skip.chunks[0] else { Issue.record("not INIT"); return }
        #expect(j.fields.parameters.unrecognized == [hex("c0010004")])
        #expect(j.fields.parameters.forwardTSNSupported)
    }

    @Test func sackKnownBytes() throws {
        let s = SackChunk(cumulativeTSNAck: 0x0102_0304, aRwnd: 0x10000,
                          gapBlocks: [GapAckBlock(start: 2, end: 3)], duplicateTSNs: [0x0a0b_0c0d])
        #expect(chunkBytes(.sack(s)) == hex("03000018 01020304 00010000 00010001 00020003 0a0b0c0d"))
        #expect(try roundTrip(.sack(s)) == .sack(s))
        // Counts that claim more blocks than the chunk holds.
        let lying = SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 1, chunks: [
            .unknown(UnknownChunk(type: 3, flags: 0, value: hex("00000001 00010000 ffff0000")))]).serialize()
        #expect(throws: SCTPError.self) { try SCTPPacket.parse(lying) }
    }

    @Test func heartbeatKnownBytes() throws {
        let h = HeartbeatChunk(info: [1, 2, 3, 4, 5])
        // Heartbeat Info parameter (type 1, length 9), chunk length 13, 3 bytes padding.
        #expect(chunkBytes(.heartbeat(h)) == hex("0400000d 00010009 01020304 05000000"))
        #expect(try roundTrip(.heartbeat(h)) == .heartbeat(h))
        let a = HeartbeatAckChunk(info: [9, 9, 9, 9])
        #expect(chunkBytes(.heartbeatAck(a)) == hex("0500000c 00010008 09090909"))
        #expect(try roundTrip(.heartbeatAck(a)) == .heartbeatAck(a))
    }

    @Test func abortErrorShutdownCookie() throws {
        let abort = AbortChunk(reflectedTag: true, causes: [ErrorCause(code: ErrorCause.userInitiatedAbort, info: [0x61])])
        #expect(chunkBytes(.abort(abort)) == hex("06010009 000c0005 61000000"))
        #expect(try roundTrip(.abort(abort)) == .abort(abort))
        let err = ErrorChunk(causes: [ErrorCause(code: 1, info: [0, 5, 0, 0]), ErrorCause(code: 9, info: [0, 0, 0, 7])])
        #expect(chunkBytes(.error(err)) == hex("09000014 00010008 00050000 00090008 00000007"))
        #expect(try roundTrip(.error(err)) == .error(err))
        #expect(chunkBytes(.shutdown(ShutdownChunk(cumulativeTSNAck: 0x11223344))) == hex("07000008 11223344"))
        #expect(try roundTrip(.shutdown(ShutdownChunk(cumulativeTSNAck: 7))) == .shutdown(ShutdownChunk(cumulativeTSNAck: 7)))
        #expect(chunkBytes(.shutdownAck(ShutdownAckChunk())) == hex("08000004"))
        #expect(chunkBytes(.shutdownComplete(ShutdownCompleteChunk(reflectedTag: true))) == hex("0e010004"))
        #expect(try roundTrip(.shutdownComplete(ShutdownCompleteChunk(reflectedTag: true))) == .shutdownComplete(ShutdownCompleteChunk(reflectedTag: true)))
        #expect(chunkBytes(.cookieEcho(CookieEchoChunk(cookie: [1, 2, 3]))) == hex("0a000007 01020300"))
        #expect(try roundTrip(.cookieEcho(CookieEchoChunk(cookie: [1, 2, 3]))) == .cookieEcho(CookieEchoChunk(cookie: [1, 2, 3])))
        #expect(chunkBytes(.cookieAck(CookieAckChunk())) == hex("0b000004"))
    }

    @Test func forwardTSNKnownBytes() throws {
        let f = ForwardTSNChunk(newCumulativeTSN: 100, skipped: [.init(streamID: 1, ssn: 2), .init(streamID: 3, ssn: 4)])
        #expect(chunkBytes(.forwardTSN(f)) == hex("c0000010 00000064 00010002 00030004"))
        #expect(try roundTrip(.forwardTSN(f)) == .forwardTSN(f))
    }

    @Test func reconfigKnownBytes() throws {
        let req = ReconfigChunk(parameters: [.outgoingReset(OutgoingResetRequest(
            requestSequence: 1, responseSequence: 0xffff_ffff, senderLastTSN: 0x10, streams: [2]))])
        // Parameter 13, length 18 (last parameter: its padding is chunk padding).
        #expect(chunkBytes(.reconfig(req)) == hex("82000016 000d0012 00000001 ffffffff 00000010 00020000"))
        #expect(try roundTrip(.reconfig(req)) == .reconfig(req))
        let resp = ReconfigChunk(parameters: [.response(ReconfigResponse(responseSequence: 1, result: .successPerformed))])
        #expect(chunkBytes(.reconfig(resp)) == hex("82000010 0010000c 00000001 00000001"))
        #expect(try roundTrip(.reconfig(resp)) == .reconfig(resp))
        let both = ReconfigChunk(parameters: [
            .outgoingReset(OutgoingResetRequest(requestSequence: 5, responseSequence: 4, senderLastTSN: 9, streams: [1, 3, 5])),
            .incomingReset(IncomingResetRequest(requestSequence: 6, streams: [])),
            .response(ReconfigResponse(responseSequence: 2, result: .inProgress, nextTSNs: (7, 8)))])
        #expect(try roundTrip(.reconfig(both)) == .reconfig(both))
    }

    @Test func unknownChunkKeepsBytesAndStopBits() throws {
        // 0x7f (01: stop and report) ends parsing; the COOKIE-ACK after it is not read.
        let p = SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 1, chunks: [
            .unknown(UnknownChunk(type: 0x7f, flags: 3, value: [1, 2])), .cookieAck(CookieAckChunk())])
        let back = try SCTPPacket.parse(p.serialize())
        #expect(back.chunks == [.unknown(UnknownChunk(type: 0x7f, flags: 3, value: [1, 2]))])
        // 0xbf (10: skip) lets the next chunk through.
        let q = SCTPPacket(sourcePort: 1, destinationPort: 1, verificationTag: 1, chunks: [
            .unknown(UnknownChunk(type: 0xbf, flags: 0, value: [])), .cookieAck(CookieAckChunk())])
        #expect(try SCTPPacket.parse(q.serialize()).chunks.count == 2)
    }

    @Test func malformedPacketsThrow() {
        let good = hex(Captured.dcepOpen)
        // Every truncation of a valid packet is an error, never a trap. (The checksum is
        // skipped so the structural checks are what is exercised.)
        for n in 0..<good.count where n != 12 {  // 12 bytes: a header alone is a valid packet
            #expect(throws: SCTPError.self) { try SCTPPacket.parse(Array(good[0..<n]), verifyChecksum: false) }
        }
        // Chunk length past the packet.
        var long = good
        long[15] = 0x40
        #expect(throws: SCTPError.badLength) { try SCTPPacket.parse(long, verifyChecksum: false) }
        // Chunk length below 4 (a zero-length chunk would loop forever if accepted).
        var zero = good
        zero[14] = 0; zero[15] = 0
        #expect(throws: SCTPError.badLength) { try SCTPPacket.parse(zero, verifyChecksum: false) }
        // DATA shorter than its header.
        let shortData = hex("13881388 00000001 00000000 00030008 00000001")
        #expect(throws: SCTPError.badLength) { try SCTPPacket.parse(shortData, verifyChecksum: false) }
        // Random garbage with a valid checksum never traps.
        var rng = SeededRandom(seed: 7)
        for _ in 0..<2000 {
            var g = [UInt8](repeating: 0, count: Int(rng.next() % 64) + 16)
            for i in g.indices { g[i] = UInt8(truncatingIfNeeded: rng.next()) }
            if rng.next() % 2 == 0 { g[13] = UInt8(rng.next() % 16); g[12] = UInt8(rng.next() % 4) == 0 ? 130 : g[12] % 16 }
            _ = try? SCTPPacket.parse(g, verifyChecksum: false)
        }
    }
}

@Suite struct SipHashTests {
    /// Test vectors of the SipHash paper (appendix A) and the reference implementation:
    /// key 00 01 … 0f.
    @Test func referenceVectors() {
        let k = SipHash24(k0: 0x0706_0504_0302_0100, k1: 0x0f0e_0d0c_0b0a_0908)
        #expect(k.hash([]) == 0x726f_db47_dd0e_0e31)
        #expect(k.hash(Array(0..<15)) == 0xa129_ca61_49be_45e5)
    }
}
