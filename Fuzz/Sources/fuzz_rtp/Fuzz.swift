import FuzzSupport

// RTP (RFC 3550, RFC 8285) as the receive path sees it after SRTP: each input piece is one
// datagram, parsed, its header extension elements read, then fed through the receive
// statistics and the jitter buffer the way Peer and the media loop do (one piece every
// 20 ms of manual time, a pop after each). Invariants:
// - payload and extension ranges lie inside the datagram;
// - writing the parsed header, extension, payload and padding gives back the input
//   (padding octets other than the count are written as zero, RFC 3550 §5.1 leaves
//   their value open, so they are compared as zero).

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var stats: RTPReceiveStatistics? = nil
    var jitter = JitterBuffer()
    var now = Instant(nanoseconds: 1_000_000_000)
    var output = [UInt8](repeating: 0, count: 70_000)
    for datagram in Pieces(inputBytes(data, size)) {
        now = now + .milliseconds(20)
        _ = jitter.pop(now: now)
        let packet: RTPPacket
        do throws(RTPError) { packet = try RTPPacket.parse(datagram) } catch { continue }
        invariant(packet.payload.lowerBound >= RTPPacket.fixedHeaderLength && packet.payload.upperBound <= datagram.count,
                  "payload \(packet.payload) outside \(datagram.count) bytes")
        if let ext = packet.headerExtension {
            invariant(ext.range.upperBound <= packet.payload.lowerBound, "extension \(ext.range) overlaps the payload")
        }
        do throws(RTPError) {
            for element in try packet.extensionElements(in: datagram) {
                invariant(element.range.lowerBound >= 0 && element.range.upperBound <= datagram.count,
                          "extension element \(element.range) outside the datagram")
            }
        } catch {}

        // Round trip through the writer.
        let written: Int
        do throws(RTPError) {
            written = try datagram.withBytes { (raw) throws(RTPError) -> Int in
                try output.withMutableBytes { (out) throws(RTPError) -> Int in
                    let ext = packet.headerExtension.map { e in
                        (profile: e.profile, data: UnsafeRawBufferPointer(rebasing: raw[e.range]))
                    }
                    return try packet.header.write(extension: ext, payload: UnsafeRawBufferPointer(rebasing: raw[packet.payload]),
                                                   padding: packet.paddingLength, into: out)
                }
            }
        } catch {
            invariant(false, "a parsed packet cannot be written: \(error)")
            return 0
        }
        var expected = datagram
        if packet.paddingLength > 1 {
            for i in (datagram.count - packet.paddingLength)..<(datagram.count - 1) { expected[i] = 0 }
        }
        invariant(Array(output[0..<written]) == expected, "written packet differs from the input")

        // The receive pipeline.
        if stats == nil || stats?.ssrc != packet.header.ssrc {
            stats = RTPReceiveStatistics(ssrc: packet.header.ssrc, minSequential: 1)
        }
        if let extended = stats?.received(sequence: packet.header.sequenceNumber, timestamp: packet.header.timestamp, arrival: now) {
            jitter.insert(sequence: extended, timestamp: packet.header.timestamp,
                          payload: Array(datagram[packet.payload]), arrival: now)
        }
        if let report = stats?.reportBlock(now: now) {
            invariant(report.ssrc == packet.header.ssrc, "report for another source")
        }
    }
    return 0
}
