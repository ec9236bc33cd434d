// RTP and RTCP wire formats: bytes laid out by hand from RFC 3550 §5.1/§6.4 and
// RFC 8285 §4 field tables, compared byte-exact, parsed back, and malformed variants.
import Testing
import RTP
import Wire

func write(_ header: RTPHeader, ext: (UInt16, [UInt8])? = nil, payload: [UInt8], padding: Int = 0) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 1500)
    let n = try out.withMutableBytes { (buf) throws(RTPError) -> Int in
        try payload.withBytes { (p) throws(RTPError) -> Int in
            if let (profile, data) = ext {
                return try data.withBytes { (d) throws(RTPError) -> Int in
                    try header.write(extension: (profile, d), payload: p, padding: padding, into: buf)
                }
            }
            return try header.write(payload: p, padding: padding, into: buf)
        }
    }
    return Array(out[0..<n])
}

@Test func rtpHeaderByteLayout() throws {
    let h = RTPHeader(marker: true, payloadType: 111, sequenceNumber: 0x1234, timestamp: 0xDEAD_BEEF, ssrc: 0x0102_0304)
    let bytes = try write(h, payload: [0xAA, 0xBB])
    // V=2 P=0 X=0 CC=0 → 0x80; M=1 PT=111 → 0xEF.
    #expect(bytes == [0x80, 0xEF, 0x12, 0x34, 0xDE, 0xAD, 0xBE, 0xEF, 0x01, 0x02, 0x03, 0x04, 0xAA, 0xBB])
    let p = try RTPPacket.parse(bytes)
    #expect(p.header == h)
    #expect(p.payload == 12..<14 && p.paddingLength == 0 && p.headerExtension == nil)
}

@Test func rtpWithCSRCsExtensionAndPadding() throws {
    let h = RTPHeader(marker: false, payloadType: 0, sequenceNumber: 1, timestamp: 2, ssrc: 3, csrcs: [0x0A0B_0C0D, 5])
    // RFC 8285 §4.2 one-byte form: id 1 with 1 byte, id 2 with 2 bytes, a padding byte.
    let data = try RTPExtensionBuilder.oneByte([(1, [0x7F]), (2, [0x01, 0x02])])
    #expect(data == [0x10, 0x7F, 0x21, 0x01, 0x02, 0x00, 0x00, 0x00])
    let bytes = try write(h, ext: (0xBEDE, data), payload: [9, 9, 9], padding: 4)
    #expect(bytes == [0xB2, 0x00, 0x00, 0x01, 0, 0, 0, 2, 0, 0, 0, 3,
                      0x0A, 0x0B, 0x0C, 0x0D, 0, 0, 0, 5,
                      0xBE, 0xDE, 0x00, 0x02, 0x10, 0x7F, 0x21, 0x01, 0x02, 0x00, 0x00, 0x00,
                      9, 9, 9, 0, 0, 0, 4])
    let p = try RTPPacket.parse(bytes)
    #expect(p.header == h)
    #expect(p.headerExtension?.profile == 0xBEDE && p.headerExtension?.range == 24..<32)
    #expect(p.payload == 32..<35 && p.paddingLength == 4)
    let elements = try p.extensionElements(in: bytes)
    #expect(elements.map { $0.id } == [1, 2])
    #expect(elements.map { Array(bytes[$0.range]) } == [[0x7F], [0x01, 0x02]])
}

@Test func twoByteExtension() throws {
    // RFC 8285 §4.3: profile 0x100 + appbits, then id, length, data; a zero-length element.
    let data = try RTPExtensionBuilder.twoByte([(1, []), (200, [1, 2, 3, 4, 5])])
    #expect(data == [0x01, 0x00, 0xC8, 0x05, 1, 2, 3, 4, 5, 0, 0, 0])
    let bytes = try write(RTPHeader(payloadType: 111, sequenceNumber: 7, timestamp: 8, ssrc: 9), ext: (0x1000, data), payload: [1])
    let p = try RTPPacket.parse(bytes)
    #expect(p.headerExtension?.isTwoByte == true)
    let elements = try p.extensionElements(in: bytes)
    #expect(elements.map { $0.id } == [1, 200])
    #expect(elements[0].range.isEmpty && Array(bytes[elements[1].range]) == [1, 2, 3, 4, 5])
    // One-byte form: id 15 stops the parse.
    let stop = try write(RTPHeader(payloadType: 111, sequenceNumber: 7, timestamp: 8, ssrc: 9),
                         ext: (0xBEDE, [0x10, 0x01, 0xF0, 0x22]), payload: [])
    #expect(try RTPPacket.parse(stop).extensionElements(in: stop).map { $0.id } == [1])
}

@Test func malformedRTP() throws {
    let good = try write(RTPHeader(payloadType: 111, sequenceNumber: 1, timestamp: 2, ssrc: 3), payload: [1, 2, 3, 4])
    #expect(throws: RTPError.truncated) { try RTPPacket.parse(Array(good[0..<11])) }
    #expect(throws: RTPError.truncated) { try RTPPacket.parse([UInt8]()) }
    var v1 = good; v1[0] = 0x40
    #expect(throws: RTPError.badVersion(1)) { try RTPPacket.parse(v1) }
    var cc = good; cc[0] = 0x82                       // two CSRCs declared, 4 bytes left
    #expect(throws: RTPError.truncated) { try RTPPacket.parse(cc) }
    var ext = good; ext[0] = 0x90                     // extension header in the payload: BEDE?
    ext.replaceSubrange(12..<16, with: [0xBE, 0xDE, 0x00, 0x05])
    #expect(throws: RTPError.truncated) { try RTPPacket.parse(ext) }
    var pad = good; pad[0] = 0xA0; pad[15] = 5        // padding of 5 > 4 payload bytes
    #expect(throws: RTPError.badPadding) { try RTPPacket.parse(pad) }
    var pad0 = good; pad0[0] = 0xA0; pad0[15] = 0     // a count of 0 cannot include itself
    #expect(throws: RTPError.badPadding) { try RTPPacket.parse(pad0) }
    var padAll = good; padAll[0] = 0xA0; padAll[15] = 4
    #expect(try RTPPacket.parse(padAll).payload.isEmpty)
    // An element running past its block.
    let bad = try write(RTPHeader(payloadType: 111, sequenceNumber: 7, timestamp: 8, ssrc: 9),
                        ext: (0xBEDE, [0x10, 0x01, 0x23, 0x00]), payload: [])
    let p = try RTPPacket.parse(bad)
    #expect(throws: RTPError.badExtension) { try p.extensionElements(in: bad) }
    #expect(throws: RTPError.invalidValue) { try RTPExtensionBuilder.oneByte([(15, [1])]) }
    #expect(throws: RTPError.invalidValue) { try RTPExtensionBuilder.oneByte([(1, [UInt8](repeating: 0, count: 17))]) }
    var small = [UInt8](repeating: 0, count: 13)
    #expect(throws: RTPError.noSpace) {
        try small.withMutableBytes { (b) throws(RTPError) -> Int in
            try [UInt8](repeating: 1, count: 2).withBytes { (p) throws(RTPError) -> Int in
                try RTPHeader(payloadType: 1, sequenceNumber: 1, timestamp: 1, ssrc: 1).write(payload: p, into: b)
            }
        }
    }
}

func build(_ body: (UnsafeMutableRawBufferPointer) throws(RTPError) -> Int) throws -> [UInt8] {
    var out = [UInt8](repeating: 0, count: 1500)
    let n = try out.withMutableBytes { (b) throws(RTPError) -> Int in try body(b) }
    return Array(out[0..<n])
}

let block1 = RTCPReportBlock(ssrc: 0x1111_1111, fractionLost: 0x40, cumulativeLost: -2, extendedHighestSequence: 0x0001_0005,
                             jitter: 0x20, lastSenderReport: 0xB705_2000, delaySinceLastSenderReport: 0x0005_4000)

@Test func senderReportCompoundBytes() throws {
    let sr = RTCPSenderReport(ssrc: 0xAABB_CCDD,
                              senderInfo: RTCPSenderInfo(ntpTimestamp: 0x0102_0304_0506_0708, rtpTimestamp: 0x0A0B_0C0D,
                                                         packetCount: 100, octetCount: 16_000),
                              reports: [block1])
    let bytes = try build { (b) throws(RTPError) -> Int in try RTCP.writeSenderReport(sr, cname: "linnet", into: b) }
    // RFC 3550 §6.4.1: V=2 P=0 RC=1 → 0x81, PT=200, length = 13 words − 1 = 12.
    let srBytes: [UInt8] = [0x81, 200, 0x00, 0x0C, 0xAA, 0xBB, 0xCC, 0xDD,
                            0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x0A, 0x0B, 0x0C, 0x0D,
                            0x00, 0x00, 0x00, 100, 0x00, 0x00, 0x3E, 0x80,
                            0x11, 0x11, 0x11, 0x11, 0x40, 0xFF, 0xFF, 0xFE, 0x00, 0x01, 0x00, 0x05,
                            0x00, 0x00, 0x00, 0x20, 0xB7, 0x05, 0x20, 0x00, 0x00, 0x05, 0x40, 0x00]
    // §6.5: SC=1 → 0x81, PT=202; chunk = SSRC, CNAME(1) len 6 "linnet", null, pad → 16 bytes.
    let sdesBytes: [UInt8] = [0x81, 202, 0x00, 0x04, 0xAA, 0xBB, 0xCC, 0xDD,
                              0x01, 0x06, 0x6C, 0x69, 0x6E, 0x6E, 0x65, 0x74, 0x00, 0x00, 0x00, 0x00]
    #expect(bytes == srBytes + sdesBytes)
    let packets = try RTCP.parseCompound(bytes)
    #expect(packets.count == 2)
    #expect(packets[0] == .senderReport(sr))
    guard case .sourceDescription(let sdes) = packets[1] else { Issue.record("no SDES"); return }
    #expect(sdes.chunks.count == 1 && sdes.chunks[0].ssrc == 0xAABB_CCDD && sdes.chunks[0].cname == "linnet")
}

@Test func receiverReportCompoundAndFeedbackSkipped() throws {
    let rr = RTCPReceiverReport(ssrc: 0x0000_0001, reports: [block1])
    let bytes = try build { (b) throws(RTPError) -> Int in try RTCP.writeReceiverReport(rr, cname: "ab", into: b) }
    #expect(Array(bytes[0..<8]) == [0x81, 201, 0x00, 0x07, 0, 0, 0, 1])
    // CNAME "ab": 4 + 2 + 2 + 1 null = 9 → 12 bytes, 3 words + header = length 3.
    #expect(Array(bytes[32...]) == [0x81, 202, 0x00, 0x03, 0, 0, 0, 1, 0x01, 0x02, 0x61, 0x62, 0, 0, 0, 0])
    // Append a PLI (PSFB 206, FMT 1: sender SSRC, media SSRC) and a generic NACK
    // (RTPFB 205, FMT 1, one FCI word): both kept as `.other` and skipped.
    let pli: [UInt8] = [0x81, 206, 0x00, 0x02, 0, 0, 0, 1, 0xAA, 0xBB, 0xCC, 0xDD]
    let nack: [UInt8] = [0x81, 205, 0x00, 0x03, 0, 0, 0, 1, 0xAA, 0xBB, 0xCC, 0xDD, 0x00, 0x10, 0x00, 0x03]
    let packets = try RTCP.parseCompound(bytes + pli + nack)
    #expect(packets.count == 4)
    #expect(packets[0] == .receiverReport(rr))
    #expect(packets[2] == .other(packetType: 206, count: 1, body: 52..<60))
    #expect(packets[3] == .other(packetType: 205, count: 1, body: 64..<76))
    // rtcp-rsize (RFC 5506): a lone feedback packet is a valid datagram.
    #expect(try RTCP.parseCompound(nack) == [.other(packetType: 205, count: 1, body: 4..<16)])
}

@Test func byeAndPadding() throws {
    let bye = RTCPGoodbye(ssrcs: [0x0102_0304], reason: "done")
    let bytes = try build { (b) throws(RTPError) -> Int in try RTCP.writeGoodbye(bye, into: b) }
    // §6.6: SC=1, PT=203, SSRC, length 4, "done", padded to 32 bits → 4 words.
    #expect(bytes == [0x81, 203, 0x00, 0x03, 0x01, 0x02, 0x03, 0x04, 0x04, 0x64, 0x6F, 0x6E, 0x65, 0, 0, 0])
    #expect(try RTCP.parseCompound(bytes) == [.goodbye(bye)])
    // An RR with the P bit and 4 padding octets (last one = 4) is accepted.
    let padded: [UInt8] = [0xA0, 201, 0x00, 0x02, 0, 0, 0, 9, 0, 0, 0, 4]
    #expect(try RTCP.parseCompound(padded) == [.receiverReport(RTCPReceiverReport(ssrc: 9))])
}

@Test func malformedRTCP() throws {
    let rr: [UInt8] = [0x80, 201, 0x00, 0x01, 0, 0, 0, 9]
    #expect(try RTCP.parseCompound(rr) == [.receiverReport(RTCPReceiverReport(ssrc: 9))])
    #expect(throws: RTPError.truncated) { try RTCP.parseCompound(Array(rr[0..<3])) }
    #expect(throws: RTPError.truncated) { try RTCP.parseCompound(rr + [0x80, 201]) }  // trailing bytes
    var long = rr; long[3] = 0x05                                                     // length past the end
    #expect(throws: RTPError.badLength) { try RTCP.parseCompound(long) }
    var v1 = rr; v1[0] = 0x40
    #expect(throws: RTPError.badVersion(1)) { try RTCP.parseCompound(v1) }
    var rc = rr; rc[0] = 0x82                                                         // 2 blocks declared, none there
    #expect(throws: RTPError.badLength) { try RTCP.parseCompound(rc) }
    var pad = rr; pad[0] = 0xA0; pad[7] = 9                                           // padding 9 > 4 body bytes
    #expect(throws: RTPError.badPadding) { try RTCP.parseCompound(pad) }
    let sr: [UInt8] = [0x80, 200, 0x00, 0x02, 0, 0, 0, 1, 0, 0, 0, 0]                 // SR too short for sender info
    #expect(throws: RTPError.badLength) { try RTCP.parseCompound(sr) }
    let sdes: [UInt8] = [0x81, 202, 0x00, 0x02, 0, 0, 0, 1, 0x01, 0x09, 0x61, 0x62]  // item length past the end
    #expect(throws: RTPError.truncated) { try RTCP.parseCompound(sdes) }
    let bye: [UInt8] = [0x82, 203, 0x00, 0x01, 0, 0, 0, 1]                            // 2 SSRCs declared, 1 there
    #expect(throws: RTPError.badLength) { try RTCP.parseCompound(bye) }
    // Random garbage never traps.
    var rng = SeededRandom(seed: 5)
    for _ in 0..<2000 {
        let junk = (0..<Int.random(in: 0..<80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        _ = try? RTCP.parseCompound(junk)
        if let p = try? RTPPacket.parse(junk) { _ = try? p.extensionElements(in: junk) }
    }
}

@Test func roundTripTimeRFC3550Example() {
    // §6.4.1's example: A = 0xb710:8000 (46864.500 s), LSR = 0xb705:2000 (46853.125 s),
    // DLSR = 0x0005:4000 (5.250 s) → RTT 0x0006:2000 = 6.125 s.
    let rtt = NTPTime.roundTripTime(lastSenderReport: 0xB705_2000, delaySinceLastSenderReport: 0x0005_4000, arrival: 0xB710_8000)
    #expect(rtt == .milliseconds(6125))
    #expect(NTPTime.roundTripTime(lastSenderReport: 0, delaySinceLastSenderReport: 0, arrival: 5) == nil)
    // NTP format: 1.5 s → 0x00000001_80000000; middle 32 bits 0x0001_8000.
    let ntp = NTPTime.timestamp(Instant(nanoseconds: 1_500_000_000))
    #expect(ntp == 0x0000_0001_8000_0000)
    #expect(NTPTime.middle32(ntp) == 0x0001_8000)
    #expect(NTPTime.units65536(.milliseconds(5250)) == 0x0005_4000)
}
