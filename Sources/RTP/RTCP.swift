import Wire

/// A reception report block (RFC 3550 §6.4.1), 24 bytes:
///
/// ```
/// |                 SSRC_1 (SSRC of first source)                 |
/// | fraction lost |       cumulative number of packets lost       |
/// |           extended highest sequence number received           |
/// |                      interarrival jitter                      |
/// |                         last SR (LSR)                         |
/// |                   delay since last SR (DLSR)                  |
/// ```
public struct RTCPReportBlock: Equatable, Sendable {
    public var ssrc: UInt32
    /// Lost fraction since the previous report, as a fixed-point number ×256.
    public var fractionLost: UInt8
    /// Cumulative packets lost: a 24-bit signed field (duplicates can make it negative).
    public var cumulativeLost: Int32
    public var extendedHighestSequence: UInt32
    /// Interarrival jitter in timestamp units.
    public var jitter: UInt32
    /// Middle 32 bits of the NTP timestamp of the last SR received from this source.
    public var lastSenderReport: UInt32
    /// Delay since that SR, in units of 1/65536 s.
    public var delaySinceLastSenderReport: UInt32

    public init(ssrc: UInt32, fractionLost: UInt8, cumulativeLost: Int32, extendedHighestSequence: UInt32,
                jitter: UInt32, lastSenderReport: UInt32, delaySinceLastSenderReport: UInt32) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = cumulativeLost
        self.extendedHighestSequence = extendedHighestSequence
        self.jitter = jitter
        self.lastSenderReport = lastSenderReport
        self.delaySinceLastSenderReport = delaySinceLastSenderReport
    }

    static let length = 24

    static func read(_ r: inout ByteReader) throws(WireError) -> RTCPReportBlock {
        let ssrc = try r.readUInt32()
        let fraction = try r.readUInt8()
        let lost24 = try r.readUInt24()
        // Sign-extend the 24-bit two's-complement count.
        let lost = Int32(bitPattern: lost24 << 8) >> 8
        return RTCPReportBlock(ssrc: ssrc, fractionLost: fraction, cumulativeLost: lost,
                               extendedHighestSequence: try r.readUInt32(), jitter: try r.readUInt32(),
                               lastSenderReport: try r.readUInt32(), delaySinceLastSenderReport: try r.readUInt32())
    }

    func write(_ w: inout ByteWriter) throws(WireError) {
        try w.writeUInt32(ssrc)
        try w.writeUInt8(fractionLost)
        // Clamp to the field's range (A.3 does the same with its 0x7fffff / -0x800000).
        let clamped = min(max(cumulativeLost, -0x80_0000), 0x7F_FFFF)
        try w.writeUInt24(UInt32(bitPattern: clamped) & 0xFF_FFFF)
        try w.writeUInt32(extendedHighestSequence)
        try w.writeUInt32(jitter)
        try w.writeUInt32(lastSenderReport)
        try w.writeUInt32(delaySinceLastSenderReport)
    }
}

/// The sender info of an SR (RFC 3550 §6.4.1).
public struct RTCPSenderInfo: Equatable, Sendable {
    /// 64-bit NTP timestamp: seconds since 1900 in the high word, fraction in the low.
    public var ntpTimestamp: UInt64
    /// The same instant in RTP timestamp units.
    public var rtpTimestamp: UInt32
    public var packetCount: UInt32
    /// Payload octets sent (headers and padding not counted).
    public var octetCount: UInt32

    public init(ntpTimestamp: UInt64, rtpTimestamp: UInt32, packetCount: UInt32, octetCount: UInt32) {
        self.ntpTimestamp = ntpTimestamp
        self.rtpTimestamp = rtpTimestamp
        self.packetCount = packetCount
        self.octetCount = octetCount
    }
}

/// SR, PT 200 (RFC 3550 §6.4.1).
public struct RTCPSenderReport: Equatable, Sendable {
    public var ssrc: UInt32
    public var senderInfo: RTCPSenderInfo
    public var reports: [RTCPReportBlock]

    public init(ssrc: UInt32, senderInfo: RTCPSenderInfo, reports: [RTCPReportBlock] = []) {
        self.ssrc = ssrc
        self.senderInfo = senderInfo
        self.reports = reports
    }
}

/// RR, PT 201 (RFC 3550 §6.4.2).
public struct RTCPReceiverReport: Equatable, Sendable {
    public var ssrc: UInt32
    public var reports: [RTCPReportBlock]

    public init(ssrc: UInt32, reports: [RTCPReportBlock] = []) {
        self.ssrc = ssrc
        self.reports = reports
    }
}

/// SDES, PT 202 (RFC 3550 §6.5): chunks of items per source.
public struct RTCPSourceDescription: Equatable, Sendable {
    public struct Item: Equatable, Sendable {
        /// 1 CNAME, 2 NAME, 3 EMAIL, 4 PHONE, 5 LOC, 6 TOOL, 7 NOTE, 8 PRIV.
        public var type: UInt8
        public var text: [UInt8]
        public init(type: UInt8, text: [UInt8]) { self.type = type; self.text = text }
    }
    public struct Chunk: Equatable, Sendable {
        public var ssrc: UInt32
        public var items: [Item]
        public init(ssrc: UInt32, items: [Item]) { self.ssrc = ssrc; self.items = items }
        /// The CNAME item's text (§6.5.1), if present.
        public var cname: String? {
            items.first { $0.type == RTCPSourceDescription.cnameType }.map { String(decoding: $0.text, as: UTF8.self) }
        }
    }
    public static let cnameType: UInt8 = 1
    public var chunks: [Chunk]
    public init(chunks: [Chunk]) { self.chunks = chunks }
}

/// BYE, PT 203 (RFC 3550 §6.6).
public struct RTCPGoodbye: Equatable, Sendable {
    public var ssrcs: [UInt32]
    public var reason: String?
    public init(ssrcs: [UInt32], reason: String? = nil) { self.ssrcs = ssrcs; self.reason = reason }
}

/// One packet of an RTCP compound (or reduced-size, RFC 5506) datagram.
public enum RTCPPacket: Equatable, Sendable {
    case senderReport(RTCPSenderReport)
    case receiverReport(RTCPReceiverReport)
    case sourceDescription(RTCPSourceDescription)
    case goodbye(RTCPGoodbye)
    /// Any other type (APP 204, RTPFB 205, PSFB 206, XR 207, …), skipped over: its type,
    /// the 5-bit count/format field and where its body (after the 4-byte header) lies.
    case other(packetType: UInt8, count: UInt8, body: Range<Int>)
}

/// RTCP compound parsing and building (RFC 3550 §6, appendix A.2; RFC 5506).
public enum RTCP {
    public static let senderReportType: UInt8 = 200
    public static let receiverReportType: UInt8 = 201
    public static let sourceDescriptionType: UInt8 = 202
    public static let goodbyeType: UInt8 = 203

    /// Parses every packet of a datagram. Checks per appendix A.2: version 2 everywhere,
    /// each length within the datagram and the lengths summing to it exactly. The
    /// "first packet is SR or RR" rule is not enforced because RFC 5506 (rtcp-rsize,
    /// which OpenAI's answer carries) allows reduced-size packets such as a lone
    /// feedback message. Padding is honoured on whichever packet declares it.
    public static func parseCompound(_ bytes: UnsafeRawBufferPointer) throws(RTPError) -> [RTCPPacket] {
        var out: [RTCPPacket] = []
        var offset = 0
        guard bytes.count >= 4 else { throw .truncated }
        while offset < bytes.count {
            guard bytes.count - offset >= 4 else { throw .truncated }
            let b0 = bytes[offset]
            guard b0 >> 6 == 2 else { throw .badVersion(b0 >> 6) }
            let count = b0 & 0x1F
            let type = bytes[offset + 1]
            let words = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            let end = offset + 4 + 4 * words
            guard end <= bytes.count else { throw .badLength }
            var bodyEnd = end
            if b0 & 0x20 != 0 {
                guard words > 0 else { throw .badPadding }
                let padding = Int(bytes[end - 1])
                guard padding >= 1, padding <= 4 * words else { throw .badPadding }
                bodyEnd = end - padding
            }
            let body = UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<bodyEnd])
            out.append(try parseOne(type: type, count: count, body: body, bodyStart: offset + 4))
            offset = end
        }
        return out
    }

    public static func parseCompound(_ bytes: [UInt8]) throws(RTPError) -> [RTCPPacket] {
        try bytes.withBytes { (raw) throws(RTPError) -> [RTCPPacket] in try parseCompound(raw) }
    }

    static func parseOne(type: UInt8, count: UInt8, body: UnsafeRawBufferPointer, bodyStart: Int) throws(RTPError) -> RTCPPacket {
        var r = ByteReader(body)
        // A short body is a length field too small for what the header's count declares.
        func need(_ n: Int) throws(RTPError) { if body.count < n { throw .badLength } }
        switch type {
        case senderReportType:
            try need(24 + RTCPReportBlock.length * Int(count))
            return try wire { () throws(WireError) -> RTCPPacket in
                let ssrc = try r.readUInt32()
                let info = RTCPSenderInfo(ntpTimestamp: try r.readUInt64(), rtpTimestamp: try r.readUInt32(),
                                          packetCount: try r.readUInt32(), octetCount: try r.readUInt32())
                var blocks: [RTCPReportBlock] = []
                for _ in 0..<count { blocks.append(try RTCPReportBlock.read(&r)) }
                // Anything left is a profile-specific extension (§6.4.1): ignored.
                return .senderReport(RTCPSenderReport(ssrc: ssrc, senderInfo: info, reports: blocks))
            }
        case receiverReportType:
            try need(4 + RTCPReportBlock.length * Int(count))
            return try wire { () throws(WireError) -> RTCPPacket in
                let ssrc = try r.readUInt32()
                var blocks: [RTCPReportBlock] = []
                for _ in 0..<count { blocks.append(try RTCPReportBlock.read(&r)) }
                return .receiverReport(RTCPReceiverReport(ssrc: ssrc, reports: blocks))
            }
        case sourceDescriptionType:
            var chunks: [RTCPSourceDescription.Chunk] = []
            for _ in 0..<count {
                // Chunks start on 32-bit boundaries (§6.5).
                let ssrc = try wire { () throws(WireError) in try r.readUInt32() }
                var items: [RTCPSourceDescription.Item] = []
                while true {
                    let itemType = try wire { () throws(WireError) in try r.readUInt8() }
                    if itemType == 0 {
                        // End of list: null octet(s) up to the next boundary.
                        let pad = (4 - r.offset % 4) % 4
                        try wire { () throws(WireError) in try r.skip(pad) }
                        break
                    }
                    let length = Int(try wire { () throws(WireError) in try r.readUInt8() })
                    let text = try wire { () throws(WireError) in try r.readBytes(length) }
                    items.append(.init(type: itemType, text: Array(text)))
                }
                chunks.append(.init(ssrc: ssrc, items: items))
            }
            return .sourceDescription(RTCPSourceDescription(chunks: chunks))
        case goodbyeType:
            try need(4 * Int(count))
            var ssrcs: [UInt32] = []
            for _ in 0..<count { ssrcs.append(try wire { () throws(WireError) in try r.readUInt32() }) }
            var reason: String? = nil
            if r.remaining > 0 {
                let length = Int(try wire { () throws(WireError) in try r.readUInt8() })
                let text = try wire { () throws(WireError) in try r.readBytes(length) }
                reason = String(decoding: text, as: UTF8.self)
            }
            return .goodbye(RTCPGoodbye(ssrcs: ssrcs, reason: reason))
        default:
            return .other(packetType: type, count: count, body: bodyStart..<(bodyStart + body.count))
        }
    }

    // MARK: Building

    /// SR followed by SDES with our CNAME: the compound a sender sends (§6.1).
    public static func writeSenderReport(_ sr: RTCPSenderReport, cname: String,
                                         into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        var w = ByteWriter(buffer)
        try write(sr, to: &w)
        try writeSDES(ssrc: sr.ssrc, cname: cname, to: &w)
        return w.count
    }

    /// RR followed by SDES with our CNAME: the compound a receiver-only endpoint sends.
    public static func writeReceiverReport(_ rr: RTCPReceiverReport, cname: String,
                                           into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        var w = ByteWriter(buffer)
        try write(rr, to: &w)
        try writeSDES(ssrc: rr.ssrc, cname: cname, to: &w)
        return w.count
    }

    /// A BYE packet, to append to a report compound when leaving (§6.6).
    public static func writeGoodbye(_ bye: RTCPGoodbye, into buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int {
        var w = ByteWriter(buffer)
        try write(bye, to: &w)
        return w.count
    }

    static func writeHeader(count: Int, type: UInt8, words: Int, to w: inout ByteWriter) throws(RTPError) {
        guard count <= 31, words >= 1, words - 1 <= 0xFFFF else { throw .invalidValue }
        try wire { () throws(WireError) in
            try w.writeUInt8(0x80 | UInt8(count))
            try w.writeUInt8(type)
            try w.writeUInt16(UInt16(words - 1))   // length in 32-bit words minus one
        }
    }

    static func write(_ sr: RTCPSenderReport, to w: inout ByteWriter) throws(RTPError) {
        try writeHeader(count: sr.reports.count, type: senderReportType, words: 7 + 6 * sr.reports.count, to: &w)
        try wire { () throws(WireError) in
            try w.writeUInt32(sr.ssrc)
            try w.writeUInt64(sr.senderInfo.ntpTimestamp)
            try w.writeUInt32(sr.senderInfo.rtpTimestamp)
            try w.writeUInt32(sr.senderInfo.packetCount)
            try w.writeUInt32(sr.senderInfo.octetCount)
            for b in sr.reports { try b.write(&w) }
        }
    }

    static func write(_ rr: RTCPReceiverReport, to w: inout ByteWriter) throws(RTPError) {
        try writeHeader(count: rr.reports.count, type: receiverReportType, words: 2 + 6 * rr.reports.count, to: &w)
        try wire { () throws(WireError) in
            try w.writeUInt32(rr.ssrc)
            for b in rr.reports { try b.write(&w) }
        }
    }

    /// One chunk, one CNAME item, then the null terminator padded to 32 bits.
    static func writeSDES(ssrc: UInt32, cname: String, to w: inout ByteWriter) throws(RTPError) {
        let length = cname.utf8.count
        guard length <= 255 else { throw .invalidValue }
        // ssrc(4) + type(1) + length(1) + text, then at least one null octet, to 4n.
        let chunkBytes = (4 + 2 + length + 1 + 3) / 4 * 4
        try writeHeader(count: 1, type: sourceDescriptionType, words: 1 + chunkBytes / 4, to: &w)
        try wire { () throws(WireError) in
            try w.writeUInt32(ssrc)
            try w.writeUInt8(RTCPSourceDescription.cnameType)
            try w.writeUInt8(UInt8(length))
            try w.writeString(cname)
            try w.writeZeros(chunkBytes - 6 - length)
        }
    }

    static func write(_ bye: RTCPGoodbye, to w: inout ByteWriter) throws(RTPError) {
        let reasonLength = bye.reason?.utf8.count ?? 0
        guard reasonLength <= 255 else { throw .invalidValue }
        let reasonBytes = bye.reason == nil ? 0 : (1 + reasonLength + 3) / 4 * 4
        try writeHeader(count: bye.ssrcs.count, type: goodbyeType, words: 1 + bye.ssrcs.count + reasonBytes / 4, to: &w)
        try wire { () throws(WireError) in
            for s in bye.ssrcs { try w.writeUInt32(s) }
            if let reason = bye.reason {
                try w.writeUInt8(UInt8(reasonLength))
                try w.writeString(reason)
                try w.writeZeros(reasonBytes - 1 - reasonLength)
            }
        }
    }
}

/// NTP-format timestamps (RFC 3550 §4) from monotonic `Instant`s.
///
/// The SR's NTP field only has to be consistent for the round-trip computation
/// (§6.4.1) when one stream is sent; `epochOffset` maps the monotonic origin to a wall
/// clock when the IO layer knows one (seconds since 1900 at `Instant.zero`).
public enum NTPTime {
    /// 32.32 fixed-point seconds.
    public static func timestamp(_ t: Instant, epochOffset: Duration = .zero) -> UInt64 {
        let ns = max(0, t.nanoseconds &+ epochOffset.nanoseconds)
        let seconds = UInt64(ns / 1_000_000_000)
        let fraction = (UInt64(ns % 1_000_000_000) << 32) / 1_000_000_000
        return seconds << 32 | fraction
    }

    /// The middle 32 bits (16.16 seconds), the form of LSR and RTT arithmetic.
    public static func middle32(_ ntp: UInt64) -> UInt32 { UInt32(truncatingIfNeeded: ntp >> 16) }

    /// A duration in units of 1/65536 s (DLSR), clamped to the 32-bit field.
    public static func units65536(_ d: Duration) -> UInt32 {
        guard d.nanoseconds > 0 else { return 0 }
        let units = d.nanoseconds / 1_000_000_000 * 65_536 + (d.nanoseconds % 1_000_000_000) * 65_536 / 1_000_000_000
        return units > Int64(UInt32.max) ? UInt32.max : UInt32(units)
    }

    /// Round-trip time from a report block about our stream (§6.4.1): A − LSR − DLSR,
    /// with A the middle 32 bits of our NTP time at arrival. Nil when the peer has not
    /// seen an SR yet (LSR 0) or the result is negative (clock or report error).
    public static func roundTripTime(lastSenderReport lsr: UInt32, delaySinceLastSenderReport dlsr: UInt32,
                                     arrival: UInt32) -> Duration? {
        guard lsr != 0 else { return nil }
        let rtt = arrival &- lsr &- dlsr
        guard rtt < 1 << 31 else { return nil }
        return Duration(nanoseconds: Int64(rtt) * 1_000_000_000 / 65_536)
    }
}
