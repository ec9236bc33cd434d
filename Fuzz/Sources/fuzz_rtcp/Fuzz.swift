import FuzzSupport

// RTCP compound packets (RFC 3550 §6, A.2; RFC 5506) as Peer receives them after SRTCP:
// RTCP.parseCompound, the receive statistics' SR bookkeeping and the RTT arithmetic on
// each report block. Invariants:
// - `.other` bodies lie inside the datagram;
// - a parsed SR, RR or BYE written with the module's own writers parses back equal.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    let packets: [RTCPPacket]
    do throws(RTPError) { packets = try RTCP.parseCompound(bytes) } catch { return 0 }
    var stats = RTPReceiveStatistics(ssrc: 1)
    let now = Instant(nanoseconds: 5_000_000_000)
    var buffer = [UInt8](repeating: 0, count: 4096)
    for p in packets {
        var reports: [RTCPReportBlock] = []
        var written: Int? = nil
        switch p {
        case .senderReport(let sr):
            stats.senderReportReceived(ntpTimestamp: sr.senderInfo.ntpTimestamp, arrival: now)
            reports = sr.reports
            written = try? buffer.withMutableBytes { (raw) throws(RTPError) in try RTCP.writeSenderReport(sr, cname: "c", into: raw) }
        case .receiverReport(let rr):
            reports = rr.reports
            written = try? buffer.withMutableBytes { (raw) throws(RTPError) in try RTCP.writeReceiverReport(rr, cname: "c", into: raw) }
        case .goodbye(let bye):
            written = try? buffer.withMutableBytes { (raw) throws(RTPError) in try RTCP.writeGoodbye(bye, into: raw) }
        case .sourceDescription(let sdes):
            for chunk in sdes.chunks { _ = chunk.cname }
        case .other(_, _, let body):
            invariant(body.lowerBound >= 4 && body.upperBound <= bytes.count, "body \(body) outside \(bytes.count) bytes")
        }
        for b in reports {
            _ = NTPTime.roundTripTime(lastSenderReport: b.lastSenderReport, delaySinceLastSenderReport: b.delaySinceLastSenderReport,
                                      arrival: NTPTime.middle32(NTPTime.timestamp(now)))
        }
        if let n = written {
            do throws(RTPError) {
                let again = try RTCP.parseCompound(Array(buffer[0..<n]))
                invariant(again.first == p, "\(p) changed in a round trip: \(again)")
            } catch {
                invariant(false, "written \(p) does not parse: \(error)")
            }
        }
    }
    _ = stats.reportBlock(now: now + .seconds(1))
    return 0
}
