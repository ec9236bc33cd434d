import Wire

// One type per chunk of RFC 9260 §3.3 (plus FORWARD-TSN, RFC 3758 §3.2, and RE-CONFIG,
// RFC 6525 §3.1). Every chunk is
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |   Chunk Type  | Chunk  Flags  |        Chunk Length           |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   \                          Chunk Value                          \
//
// where Chunk Length counts the 4-byte header and the value but not the zero padding to a
// multiple of 4 (RFC 9260 §3.2). A type parses its value (`parse(flags:value:)`) and
// writes it (`writeValue`); `Chunk` adds the header and padding.

/// The body of one chunk type: its code, flags and value.
public protocol ChunkBody: Equatable, Sendable {
    /// The Chunk Type code (RFC 9260 §3.2 table, RFC 3758, RFC 6525).
    static var type: UInt8 { get }
    /// The Chunk Flags byte.
    var flags: UInt8 { get }
    /// Bytes of the value, without header and padding.
    var valueLength: Int { get }
    /// Writes the value (no header, no padding).
    func writeValue(to w: inout ByteWriter) throws(WireError)
    /// Parses the value of a chunk of this type.
    static func parse(flags: UInt8, value: inout ByteReader) throws(SCTPError) -> Self
}

@inline(__always) func padded4(_ n: Int) -> Int { (n &+ 3) & ~3 }

extension ByteReader {
    /// Copies the next `count` bytes out.
    mutating func readArray(_ count: Int) throws(WireError) -> [UInt8] {
        let b = try readBytes(count)
        return [UInt8](b)
    }

    /// Copies everything left.
    mutating func readRest() -> [UInt8] {
        // Exactly what is left: readArray has nothing to refuse.
        (try? readArray(remaining)) ?? []
    }
}

@inline(__always) func wire<T>(_ body: () throws(WireError) -> T) throws(SCTPError) -> T {
    do throws(WireError) { return try body() } catch { throw .truncated(error) }
}

// MARK: - TLV parameters (RFC 9260 §3.2.1) and error causes (§3.3.10)

/// A Type-Length-Value parameter or error cause as it stood on the wire.
public struct TLV: Equatable, Sendable {
    public var type: UInt16
    public var value: [UInt8]
    public init(type: UInt16, value: [UInt8]) {
        self.type = type
        self.value = value
    }

    /// The TLV's bytes with header, without trailing padding.
    public var bytes: [UInt8] {
        var out: [UInt8] = [UInt8(type >> 8), UInt8(type & 0xff)]
        let len = UInt16(truncatingIfNeeded: 4 &+ value.count)
        out.append(UInt8(len >> 8)); out.append(UInt8(len & 0xff))
        out.append(contentsOf: value)
        return out
    }

    var paddedLength: Int { padded4(4 &+ value.count) }

    func write(to w: inout ByteWriter, pad: Bool = true) throws(WireError) {
        try w.writeUInt16(type)
        try w.writeUInt16(UInt16(truncatingIfNeeded: 4 &+ value.count))
        try value.withBytes { (b) throws(WireError) in try w.writeBytes(b) }
        if pad { try w.writeZeros(paddedLength &- 4 &- value.count) }
    }

    /// Reads one TLV and its padding. The padding of the last one may be missing.
    static func read(_ r: inout ByteReader) throws(SCTPError) -> TLV {
        let type = try wire { () throws(WireError) in try r.readUInt16() }
        let length = Int(try wire { () throws(WireError) in try r.readUInt16() })
        guard length >= 4, length &- 4 <= r.remaining else { throw .badLength }
        let value = try wire { () throws(WireError) in try r.readArray(length &- 4) }
        let pad = min(padded4(length) &- length, r.remaining)
        try wire { () throws(WireError) in try r.skip(pad) }
        return TLV(type: type, value: value)
    }

    static func readAll(_ r: inout ByteReader) throws(SCTPError) -> [TLV] {
        var out: [TLV] = []
        while !r.isAtEnd { out.append(try read(&r)) }
        return out
    }
}

/// An error cause (RFC 9260 §3.3.10) carried in ABORT and ERROR chunks.
public struct ErrorCause: Equatable, Sendable {
    public var code: UInt16
    public var info: [UInt8]
    public init(code: UInt16, info: [UInt8] = []) {
        self.code = code
        self.info = info
    }

    public static let invalidStreamIdentifier: UInt16 = 1
    public static let missingMandatoryParameter: UInt16 = 2
    public static let staleCookie: UInt16 = 3
    public static let outOfResource: UInt16 = 4
    public static let unrecognizedChunkType: UInt16 = 6
    public static let invalidMandatoryParameter: UInt16 = 7
    public static let unrecognizedParameters: UInt16 = 8
    public static let noUserData: UInt16 = 9
    public static let cookieReceivedWhileShuttingDown: UInt16 = 10
    public static let userInitiatedAbort: UInt16 = 12
    public static let protocolViolation: UInt16 = 13

    var tlv: TLV { TLV(type: code, value: info) }

    static func readAll(_ r: inout ByteReader) throws(SCTPError) -> [ErrorCause] {
        try TLV.readAll(&r).map { ErrorCause(code: $0.type, info: $0.value) }
    }
}

/// The length a list of TLVs adds to a chunk. RFC 9260 §3.2: the Chunk Length "does
/// include any padding of variable-length parameters other than the last parameter in the
/// chunk" — the last one's padding is chunk padding, outside the length.
func tlvListLength(_ tlvs: [TLV]) -> Int {
    var n = 0
    for t in tlvs { n &+= t.paddedLength }
    if let last = tlvs.last { n &-= last.paddedLength &- 4 &- last.value.count }
    return n
}

/// Writes TLVs padded, except the last (the chunk writer pads the chunk).
func writeTLVList(_ tlvs: [TLV], to w: inout ByteWriter) throws(WireError) {
    for (i, t) in tlvs.enumerated() { try t.write(to: &w, pad: i &+ 1 < tlvs.count) }
}

func causesLength(_ causes: [ErrorCause]) -> Int { tlvListLength(causes.map { $0.tlv }) }

func writeCauses(_ causes: [ErrorCause], to w: inout ByteWriter) throws(WireError) {
    try writeTLVList(causes.map { $0.tlv }, to: &w)
}

// MARK: - DATA (RFC 9260 §3.3.1)

/// DATA: one fragment of a user message.
///
///     | Type = 0 |  Reserved|I|U|B|E |           Length             |
///     |                              TSN                            |
///     |    Stream Identifier S       |  Stream Sequence Number n    |
///     |                  Payload Protocol Identifier                |
///     \                 User Data (seq n of Stream S)               \
public struct DataChunk: ChunkBody {
    public static let type: UInt8 = 0
    /// E: last fragment of a message.
    public static let endFlag: UInt8 = 0x01
    /// B: first fragment of a message.
    public static let beginFlag: UInt8 = 0x02
    /// U: unordered; the Stream Sequence Number is ignored.
    public static let unorderedFlag: UInt8 = 0x04
    /// I: the receiver should SACK at once (RFC 7053).
    public static let immediateFlag: UInt8 = 0x08

    public var tsn: UInt32
    public var streamID: UInt16
    public var ssn: UInt16
    public var ppid: UInt32
    public var unordered: Bool
    public var beginning: Bool
    public var ending: Bool
    public var immediate: Bool
    public var userData: [UInt8]

    public init(tsn: UInt32, streamID: UInt16, ssn: UInt16, ppid: UInt32, unordered: Bool = false,
                beginning: Bool = true, ending: Bool = true, immediate: Bool = false, userData: [UInt8]) {
        self.tsn = tsn; self.streamID = streamID; self.ssn = ssn; self.ppid = ppid
        self.unordered = unordered; self.beginning = beginning; self.ending = ending
        self.immediate = immediate; self.userData = userData
    }

    public var flags: UInt8 {
        (ending ? Self.endFlag : 0) | (beginning ? Self.beginFlag : 0)
            | (unordered ? Self.unorderedFlag : 0) | (immediate ? Self.immediateFlag : 0)
    }
    public var valueLength: Int { 12 &+ userData.count }

    public func writeValue(to w: inout ByteWriter) throws(WireError) {
        try w.writeUInt32(tsn)
        try w.writeUInt16(streamID)
        try w.writeUInt16(ssn)
        try w.writeUInt32(ppid)
        try userData.withBytes { (b) throws(WireError) in try w.writeBytes(b) }
    }

    /// A DATA chunk with no user data parses (the association answers it with an ABORT,
    /// RFC 9260 §6.2); one shorter than its 16-byte header does not.
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> DataChunk {
        guard r.remaining >= 12 else { throw .badLength }
        return try wire { () throws(WireError) in
            DataChunk(tsn: try r.readUInt32(), streamID: try r.readUInt16(), ssn: try r.readUInt16(),
                      ppid: try r.readUInt32(), unordered: flags & unorderedFlag != 0,
                      beginning: flags & beginFlag != 0, ending: flags & endFlag != 0,
                      immediate: flags & immediateFlag != 0, userData: r.readRest())
        }
    }
}

// MARK: - INIT / INIT-ACK (RFC 9260 §3.3.2, §3.3.3)

/// The optional and variable-length parameters of INIT and INIT-ACK that Linnet uses.
public struct InitParameters: Equatable, Sendable {
    /// State Cookie (type 7): mandatory in INIT-ACK.
    public var stateCookie: [UInt8]?
    /// Forward-TSN-Supported (0xC000, RFC 3758 §3.1).
    public var forwardTSNSupported: Bool
    /// Supported Extensions (0x8008, RFC 5061 §4.2.7): chunk types beyond RFC 9260.
    public var supportedExtensions: [UInt8]
    /// Parameters to report back (INIT: unknown ones whose type asks for a report; INIT-ACK:
    /// the contents of its Unrecognized Parameter (8) parameters), each a whole TLV.
    public var unrecognized: [[UInt8]]

    public init(stateCookie: [UInt8]? = nil, forwardTSNSupported: Bool = false,
                supportedExtensions: [UInt8] = [], unrecognized: [[UInt8]] = []) {
        self.stateCookie = stateCookie
        self.forwardTSNSupported = forwardTSNSupported
        self.supportedExtensions = supportedExtensions
        self.unrecognized = unrecognized
    }

    static let stateCookieType: UInt16 = 7
    static let unrecognizedParameterType: UInt16 = 8
    static let forwardTSNType: UInt16 = 0xC000
    static let supportedExtensionsType: UInt16 = 0x8008
    /// Parameters we understand and ignore: IPv4/IPv6 address (5, 6), Cookie Preservative
    /// (9), Host Name (11), Supported Address Types (12). Over DTLS there is one path.
    static let ignoredTypes: [UInt16] = [5, 6, 9, 11, 12]

    func tlvs(isAck: Bool) -> [TLV] {
        var out: [TLV] = []
        if let c = stateCookie { out.append(TLV(type: Self.stateCookieType, value: c)) }
        if forwardTSNSupported { out.append(TLV(type: Self.forwardTSNType, value: [])) }
        if !supportedExtensions.isEmpty { out.append(TLV(type: Self.supportedExtensionsType, value: supportedExtensions)) }
        if isAck {
            for u in unrecognized { out.append(TLV(type: Self.unrecognizedParameterType, value: u)) }
        }
        return out
    }

    /// Parses the parameter list; unknown types follow their upper two bits (RFC 9260
    /// §3.2.1): 00 stop, 01 stop and report, 10 skip, 11 skip and report.
    static func parse(_ r: inout ByteReader, isAck: Bool) throws(SCTPError) -> InitParameters {
        var p = InitParameters()
        while !r.isAtEnd {
            let tlv = try TLV.read(&r)
            switch tlv.type {
            case stateCookieType: p.stateCookie = tlv.value
            case forwardTSNType: p.forwardTSNSupported = true
            case supportedExtensionsType: p.supportedExtensions = tlv.value
            case unrecognizedParameterType where isAck: p.unrecognized.append(tlv.value)
            default:
                if ignoredTypes.contains(tlv.type) { continue }
                let action = tlv.type >> 14
                if action & 1 != 0 { p.unrecognized.append(tlv.bytes) }
                if action & 2 == 0 { return p }
            }
        }
        return p
    }
}

/// The fixed fields INIT and INIT-ACK share.
///
///     |                         Initiate Tag                          |
///     |           Advertised Receiver Window Credit (a_rwnd)          |
///     |  Number of Outbound Streams   |  Number of Inbound Streams    |
///     |                          Initial TSN                          |
///     \              Optional/Variable-Length Parameters              \
public struct InitFields: Equatable, Sendable {
    public var initiateTag: UInt32
    public var aRwnd: UInt32
    public var outboundStreams: UInt16
    public var inboundStreams: UInt16
    public var initialTSN: UInt32
    public var parameters: InitParameters

    public init(initiateTag: UInt32, aRwnd: UInt32, outboundStreams: UInt16, inboundStreams: UInt16,
                initialTSN: UInt32, parameters: InitParameters) {
        self.initiateTag = initiateTag; self.aRwnd = aRwnd; self.outboundStreams = outboundStreams
        self.inboundStreams = inboundStreams; self.initialTSN = initialTSN; self.parameters = parameters
    }

    func valueLength(isAck: Bool) -> Int { 16 &+ tlvListLength(parameters.tlvs(isAck: isAck)) }

    func write(to w: inout ByteWriter, isAck: Bool) throws(WireError) {
        try w.writeUInt32(initiateTag)
        try w.writeUInt32(aRwnd)
        try w.writeUInt16(outboundStreams)
        try w.writeUInt16(inboundStreams)
        try w.writeUInt32(initialTSN)
        try writeTLVList(parameters.tlvs(isAck: isAck), to: &w)
    }

    /// RFC 9260 §3.3.2: a zero Initiate Tag or zero stream counts make the INIT invalid
    /// (the receiver aborts); we report them as `invalidField`.
    static func parse(_ r: inout ByteReader, isAck: Bool) throws(SCTPError) -> InitFields {
        let (tag, rwnd, os, mis, tsn) = try wire { () throws(WireError) in
            (try r.readUInt32(), try r.readUInt32(), try r.readUInt16(), try r.readUInt16(), try r.readUInt32())
        }
        guard tag != 0, os != 0, mis != 0 else { throw .invalidField }
        let params = try InitParameters.parse(&r, isAck: isAck)
        if isAck, params.stateCookie == nil { throw .missingParameter }
        return InitFields(initiateTag: tag, aRwnd: rwnd, outboundStreams: os, inboundStreams: mis,
                          initialTSN: tsn, parameters: params)
    }
}

/// INIT (type 1): opens an association.
public struct InitChunk: ChunkBody {
    public static let type: UInt8 = 1
    public var fields: InitFields
    public init(_ fields: InitFields) { self.fields = fields }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { fields.valueLength(isAck: false) }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try fields.write(to: &w, isAck: false) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> InitChunk {
        InitChunk(try InitFields.parse(&r, isAck: false))
    }
}

/// INIT-ACK (type 2): answers INIT; carries the State Cookie.
public struct InitAckChunk: ChunkBody {
    public static let type: UInt8 = 2
    public var fields: InitFields
    public init(_ fields: InitFields) { self.fields = fields }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { fields.valueLength(isAck: true) }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try fields.write(to: &w, isAck: true) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> InitAckChunk {
        InitAckChunk(try InitFields.parse(&r, isAck: true))
    }
}

// MARK: - SACK (RFC 9260 §3.3.4)

/// A Gap Ack Block: TSNs `cumulativeTSNAck + start ... cumulativeTSNAck + end` arrived.
public struct GapAckBlock: Equatable, Sendable {
    public var start: UInt16
    public var end: UInt16
    public init(start: UInt16, end: UInt16) {
        self.start = start
        self.end = end
    }
}

/// SACK (type 3).
///
///     |                      Cumulative TSN Ack                       |
///     |          Advertised Receiver Window Credit (a_rwnd)           |
///     | Number of Gap Ack Blocks = N  |  Number of Duplicate TSNs = M |
///     |  Gap Ack Block #1 Start       |   Gap Ack Block #1 End        |  …
///     |                       Duplicate TSN 1                         |  …
public struct SackChunk: ChunkBody {
    public static let type: UInt8 = 3
    public var cumulativeTSNAck: UInt32
    public var aRwnd: UInt32
    public var gapBlocks: [GapAckBlock]
    public var duplicateTSNs: [UInt32]

    public init(cumulativeTSNAck: UInt32, aRwnd: UInt32, gapBlocks: [GapAckBlock] = [], duplicateTSNs: [UInt32] = []) {
        self.cumulativeTSNAck = cumulativeTSNAck; self.aRwnd = aRwnd
        self.gapBlocks = gapBlocks; self.duplicateTSNs = duplicateTSNs
    }

    public var flags: UInt8 { 0 }
    public var valueLength: Int { 12 &+ 4 &* gapBlocks.count &+ 4 &* duplicateTSNs.count }

    public func writeValue(to w: inout ByteWriter) throws(WireError) {
        try w.writeUInt32(cumulativeTSNAck)
        try w.writeUInt32(aRwnd)
        try w.writeUInt16(UInt16(truncatingIfNeeded: gapBlocks.count))
        try w.writeUInt16(UInt16(truncatingIfNeeded: duplicateTSNs.count))
        for g in gapBlocks {
            try w.writeUInt16(g.start)
            try w.writeUInt16(g.end)
        }
        for d in duplicateTSNs { try w.writeUInt32(d) }
    }

    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> SackChunk {
        try wire { () throws(WireError) in
            let cum = try r.readUInt32()
            let rwnd = try r.readUInt32()
            let n = Int(try r.readUInt16())
            let m = Int(try r.readUInt16())
            // Check the counts against the length before reserving anything.
            guard 4 &* (n &+ m) <= r.remaining else { throw WireError.truncated(needed: 4 &* (n &+ m), available: r.remaining) }
            var gaps: [GapAckBlock] = []
            gaps.reserveCapacity(n)
            for _ in 0..<n { gaps.append(GapAckBlock(start: try r.readUInt16(), end: try r.readUInt16())) }
            var dups: [UInt32] = []
            dups.reserveCapacity(m)
            for _ in 0..<m { dups.append(try r.readUInt32()) }
            return SackChunk(cumulativeTSNAck: cum, aRwnd: rwnd, gapBlocks: gaps, duplicateTSNs: dups)
        }
    }
}

// MARK: - HEARTBEAT / HEARTBEAT-ACK (RFC 9260 §3.3.5, §3.3.6)

/// HEARTBEAT (type 4): one Heartbeat Info parameter (type 1) the peer echoes unchanged.
public struct HeartbeatChunk: ChunkBody {
    public static let type: UInt8 = 4
    public var info: [UInt8]
    public init(info: [UInt8]) { self.info = info }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 4 &+ info.count }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try TLV(type: 1, value: info).write(to: &w, pad: false) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> HeartbeatChunk {
        let tlv = try TLV.read(&r)
        guard tlv.type == 1 else { throw .missingParameter }
        return HeartbeatChunk(info: tlv.value)
    }
}

/// HEARTBEAT-ACK (type 5): the Heartbeat Info of a HEARTBEAT, echoed.
public struct HeartbeatAckChunk: ChunkBody {
    public static let type: UInt8 = 5
    public var info: [UInt8]
    public init(info: [UInt8]) { self.info = info }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 4 &+ info.count }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try TLV(type: 1, value: info).write(to: &w, pad: false) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> HeartbeatAckChunk {
        let tlv = try TLV.read(&r)
        guard tlv.type == 1 else { throw .missingParameter }
        return HeartbeatAckChunk(info: tlv.value)
    }
}

// MARK: - ABORT, ERROR (RFC 9260 §3.3.7, §3.3.10)

/// ABORT (type 6). T set: the verification tag is the sender's own (reflected), used when
/// the sender has no association (RFC 9260 §8.4, §8.5.1).
public struct AbortChunk: ChunkBody {
    public static let type: UInt8 = 6
    public var reflectedTag: Bool
    public var causes: [ErrorCause]
    public init(reflectedTag: Bool = false, causes: [ErrorCause] = []) {
        self.reflectedTag = reflectedTag
        self.causes = causes
    }
    public var flags: UInt8 { reflectedTag ? 1 : 0 }
    public var valueLength: Int { causesLength(causes) }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try writeCauses(causes, to: &w) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> AbortChunk {
        AbortChunk(reflectedTag: flags & 1 != 0, causes: try ErrorCause.readAll(&r))
    }
}

/// ERROR (type 9): reports conditions that do not end the association.
public struct ErrorChunk: ChunkBody {
    public static let type: UInt8 = 9
    public var causes: [ErrorCause]
    public init(causes: [ErrorCause]) { self.causes = causes }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { causesLength(causes) }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try writeCauses(causes, to: &w) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ErrorChunk {
        ErrorChunk(causes: try ErrorCause.readAll(&r))
    }
}

// MARK: - SHUTDOWN family (RFC 9260 §3.3.8, §3.3.9, §3.3.13)

/// SHUTDOWN (type 7): no more data from the sender; carries its Cumulative TSN Ack.
public struct ShutdownChunk: ChunkBody {
    public static let type: UInt8 = 7
    public var cumulativeTSNAck: UInt32
    public init(cumulativeTSNAck: UInt32) { self.cumulativeTSNAck = cumulativeTSNAck }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 4 }
    public func writeValue(to w: inout ByteWriter) throws(WireError) { try w.writeUInt32(cumulativeTSNAck) }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ShutdownChunk {
        guard r.remaining == 4 else { throw .badLength }
        return ShutdownChunk(cumulativeTSNAck: try wire { () throws(WireError) in try r.readUInt32() })
    }
}

/// SHUTDOWN-ACK (type 8): no value.
public struct ShutdownAckChunk: ChunkBody {
    public static let type: UInt8 = 8
    public init() {}
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 0 }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {}
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ShutdownAckChunk {
        ShutdownAckChunk()
    }
}

/// SHUTDOWN-COMPLETE (type 14); T as in ABORT.
public struct ShutdownCompleteChunk: ChunkBody {
    public static let type: UInt8 = 14
    public var reflectedTag: Bool
    public init(reflectedTag: Bool = false) { self.reflectedTag = reflectedTag }
    public var flags: UInt8 { reflectedTag ? 1 : 0 }
    public var valueLength: Int { 0 }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {}
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ShutdownCompleteChunk {
        ShutdownCompleteChunk(reflectedTag: flags & 1 != 0)
    }
}

// MARK: - COOKIE-ECHO / COOKIE-ACK (RFC 9260 §3.3.11, §3.3.12)

/// COOKIE-ECHO (type 10): the State Cookie of the INIT-ACK, returned.
public struct CookieEchoChunk: ChunkBody {
    public static let type: UInt8 = 10
    public var cookie: [UInt8]
    public init(cookie: [UInt8]) { self.cookie = cookie }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { cookie.count }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {
        try cookie.withBytes { (b) throws(WireError) in try w.writeBytes(b) }
    }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> CookieEchoChunk {
        CookieEchoChunk(cookie: r.readRest())
    }
}

/// COOKIE-ACK (type 11): no value.
public struct CookieAckChunk: ChunkBody {
    public static let type: UInt8 = 11
    public init() {}
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 0 }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {}
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> CookieAckChunk {
        CookieAckChunk()
    }
}

// MARK: - FORWARD-TSN (RFC 3758 §3.2)

/// FORWARD-TSN (type 192): the receiver moves its cumulative TSN to `newCumulativeTSN`,
/// abandoning what was skipped; each (stream, ssn) pair says which ordered messages of a
/// stream were skipped up to and including `ssn`.
public struct ForwardTSNChunk: ChunkBody {
    public static let type: UInt8 = 192
    public struct Skipped: Equatable, Sendable {
        public var streamID: UInt16
        public var ssn: UInt16
        public init(streamID: UInt16, ssn: UInt16) {
            self.streamID = streamID
            self.ssn = ssn
        }
    }
    public var newCumulativeTSN: UInt32
    public var skipped: [Skipped]
    public init(newCumulativeTSN: UInt32, skipped: [Skipped] = []) {
        self.newCumulativeTSN = newCumulativeTSN
        self.skipped = skipped
    }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { 4 &+ 4 &* skipped.count }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {
        try w.writeUInt32(newCumulativeTSN)
        for s in skipped {
            try w.writeUInt16(s.streamID)
            try w.writeUInt16(s.ssn)
        }
    }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ForwardTSNChunk {
        guard r.remaining >= 4, r.remaining % 4 == 0 else { throw .badLength }
        return try wire { () throws(WireError) in
            var c = ForwardTSNChunk(newCumulativeTSN: try r.readUInt32())
            while !r.isAtEnd { c.skipped.append(Skipped(streamID: try r.readUInt16(), ssn: try r.readUInt16())) }
            return c
        }
    }
}

// MARK: - RE-CONFIG (RFC 6525 §3.1, §4)

/// Outgoing SSN Reset Request (parameter 13, RFC 6525 §4.1).
public struct OutgoingResetRequest: Equatable, Sendable {
    public var requestSequence: UInt32
    /// The peer's last request we answer implicitly, or our next expected one minus 1.
    public var responseSequence: UInt32
    /// The last TSN the sender assigned before the reset.
    public var senderLastTSN: UInt32
    /// Streams to reset; empty means all.
    public var streams: [UInt16]
    public init(requestSequence: UInt32, responseSequence: UInt32, senderLastTSN: UInt32, streams: [UInt16]) {
        self.requestSequence = requestSequence; self.responseSequence = responseSequence
        self.senderLastTSN = senderLastTSN; self.streams = streams
    }
}

/// Incoming SSN Reset Request (parameter 14, RFC 6525 §4.2).
public struct IncomingResetRequest: Equatable, Sendable {
    public var requestSequence: UInt32
    public var streams: [UInt16]
    public init(requestSequence: UInt32, streams: [UInt16]) {
        self.requestSequence = requestSequence
        self.streams = streams
    }
}

/// Re-configuration Response (parameter 16, RFC 6525 §4.4).
public struct ReconfigResponse: Equatable, Sendable {
    public enum Result: UInt32, Sendable {
        case successNothingToDo = 0
        case successPerformed = 1
        case denied = 2
        case errorWrongSSN = 3
        case errorRequestAlreadyInProgress = 4
        case errorBadSequenceNumber = 5
        case inProgress = 6
    }
    public var responseSequence: UInt32
    /// The raw result (values past 6 are kept as numbers).
    public var result: UInt32
    /// Sender's and receiver's next TSN: present together or not at all.
    public var nextTSNs: (sender: UInt32, receiver: UInt32)?
    public init(responseSequence: UInt32, result: Result, nextTSNs: (sender: UInt32, receiver: UInt32)? = nil) {
        self.responseSequence = responseSequence
        self.result = result.rawValue
        self.nextTSNs = nextTSNs
    }
    public static func == (a: ReconfigResponse, b: ReconfigResponse) -> Bool {
        a.responseSequence == b.responseSequence && a.result == b.result
            && a.nextTSNs?.sender == b.nextTSNs?.sender && a.nextTSNs?.receiver == b.nextTSNs?.receiver
    }
}

/// One parameter of a RE-CONFIG chunk.
public enum ReconfigParameter: Equatable, Sendable {
    case outgoingReset(OutgoingResetRequest)
    case incomingReset(IncomingResetRequest)
    case response(ReconfigResponse)
    /// SSN/TSN reset (15), add streams (17, 18) and anything newer: we answer "denied".
    case other(TLV)

    static let outgoingType: UInt16 = 13
    static let incomingType: UInt16 = 14
    static let responseType: UInt16 = 16

    var tlv: TLV {
        switch self {
        case .outgoingReset(let o):
            var v: [UInt8] = []
            v.appendUInt32(o.requestSequence); v.appendUInt32(o.responseSequence); v.appendUInt32(o.senderLastTSN)
            for s in o.streams { v.appendUInt16(s) }
            return TLV(type: Self.outgoingType, value: v)
        case .incomingReset(let i):
            var v: [UInt8] = []
            v.appendUInt32(i.requestSequence)
            for s in i.streams { v.appendUInt16(s) }
            return TLV(type: Self.incomingType, value: v)
        case .response(let r):
            var v: [UInt8] = []
            v.appendUInt32(r.responseSequence); v.appendUInt32(r.result)
            if let n = r.nextTSNs { v.appendUInt32(n.sender); v.appendUInt32(n.receiver) }
            return TLV(type: Self.responseType, value: v)
        case .other(let t):
            return t
        }
    }

    static func from(_ tlv: TLV) throws(SCTPError) -> ReconfigParameter {
        var result: ReconfigParameter = .other(tlv)
        let bad: Bool = tlv.value.withUnsafeBytes { raw in
            var r = ByteReader(raw)
            do throws(WireError) {
                switch tlv.type {
                case outgoingType:
                    guard raw.count >= 12, raw.count % 2 == 0 else { return true }
                    var o = OutgoingResetRequest(requestSequence: try r.readUInt32(), responseSequence: try r.readUInt32(),
                                                 senderLastTSN: try r.readUInt32(), streams: [])
                    while !r.isAtEnd { o.streams.append(try r.readUInt16()) }
                    result = .outgoingReset(o)
                case incomingType:
                    guard raw.count >= 4, raw.count % 2 == 0 else { return true }
                    var i = IncomingResetRequest(requestSequence: try r.readUInt32(), streams: [])
                    while !r.isAtEnd { i.streams.append(try r.readUInt16()) }
                    result = .incomingReset(i)
                case responseType:
                    guard raw.count == 8 || raw.count == 16 else { return true }
                    var resp = ReconfigResponse(responseSequence: try r.readUInt32(), result: .denied)
                    resp.result = try r.readUInt32()
                    if raw.count == 16 { resp.nextTSNs = (try r.readUInt32(), try r.readUInt32()) }
                    result = .response(resp)
                default:
                    break
                }
                return false
            } catch {
                return true
            }
        }
        if bad { throw .badLength }
        return result
    }
}

/// RE-CONFIG (type 130, RFC 6525 §3.1): one or two re-configuration parameters.
public struct ReconfigChunk: ChunkBody {
    public static let type: UInt8 = 130
    public var parameters: [ReconfigParameter]
    public init(parameters: [ReconfigParameter]) { self.parameters = parameters }
    public var flags: UInt8 { 0 }
    public var valueLength: Int { tlvListLength(parameters.map { $0.tlv }) }
    public func writeValue(to w: inout ByteWriter) throws(WireError) {
        try writeTLVList(parameters.map { $0.tlv }, to: &w)
    }
    public static func parse(flags: UInt8, value r: inout ByteReader) throws(SCTPError) -> ReconfigChunk {
        var c = ReconfigChunk(parameters: [])
        for t in try TLV.readAll(&r) { c.parameters.append(try ReconfigParameter.from(t)) }
        guard !c.parameters.isEmpty else { throw .missingParameter }
        return c
    }
}

// MARK: - Unknown chunks (RFC 9260 §3.2)

/// A chunk type we do not implement, kept whole so it can be reported.
public struct UnknownChunk: Equatable, Sendable {
    public var type: UInt8
    public var flags: UInt8
    public var value: [UInt8]
    public init(type: UInt8, flags: UInt8, value: [UInt8]) {
        self.type = type
        self.flags = flags
        self.value = value
    }
    /// Upper bit 0: stop processing the packet (RFC 9260 §3.2, actions 00 and 01).
    public var stopsProcessing: Bool { type & 0x80 == 0 }
    /// Second bit set: report it in an ERROR with "Unrecognized Chunk Type" (01 and 11).
    public var reportsError: Bool { type & 0x40 != 0 }

    /// The chunk's bytes as they arrived (header included), for the error cause.
    public var bytes: [UInt8] {
        let len = UInt16(truncatingIfNeeded: 4 &+ value.count)
        return [type, flags, UInt8(len >> 8), UInt8(len & 0xff)] + value
    }
}

extension Array where Element == UInt8 {
    mutating func appendUInt16(_ v: UInt16) {
        append(UInt8(v >> 8)); append(UInt8(v & 0xff))
    }
    mutating func appendUInt32(_ v: UInt32) {
        append(UInt8(v >> 24)); append(UInt8((v >> 16) & 0xff)); append(UInt8((v >> 8) & 0xff)); append(UInt8(v & 0xff))
    }
    mutating func appendUInt64(_ v: UInt64) {
        appendUInt32(UInt32(truncatingIfNeeded: v >> 32)); appendUInt32(UInt32(truncatingIfNeeded: v))
    }
}
