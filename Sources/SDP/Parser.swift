import Wire

// The parser: RFC 8866 §5 line syntax, read tolerantly (PROTOCOLS.md "Parser
// tolerance"). It checks what Linnet acts on and keeps what it does not understand.

/// Limits on untrusted input.
public enum SDPLimits {
    /// A whole description. Real WebRTC descriptions are 1–15 KB (a browser offer with
    /// video and many candidates); anything near this limit is not one.
    public static let maximumSize = 256 * 1024
    /// One line. The longest legitimate lines are video fmtp parameter sets and
    /// sha-512 fingerprints (~200 bytes).
    public static let maximumLineLength = 8 * 1024
}

extension SessionDescription {
    /// Parses SDP text. See `parse(bytes:)`.
    public static func parse(_ text: String) throws(SDPError) -> SessionDescription {
        try parse(bytes: Array(text.utf8))
    }

    /// Parses an SDP body as received (e.g. an HTTP body), in any of CRLF, LF or CR line
    /// ends. Fails with `.notSDP` when the first line is not `v=0`, so an HTML or JSON
    /// error page is recognised and reported readably.
    public static func parse(bytes: [UInt8]) throws(SDPError) -> SessionDescription {
        if bytes.count > SDPLimits.maximumSize {
            throw .tooLarge(size: bytes.count, limit: SDPLimits.maximumSize)
        }
        var parser = Parser()
        var lineNumber = 1
        var start = 0
        var i = 0
        var sawContent = false
        // Lines end at LF, CR or CRLF (RFC 8866 §5 asks for CRLF and allows LF alone).
        while i <= bytes.count {
            let atEnd = i == bytes.count
            if atEnd || bytes[i] == 0x0A || bytes[i] == 0x0D {
                let line = bytes[start..<i]
                if !trimSpaces(line).isEmpty {
                    if !sawContent {
                        sawContent = true
                        let t = trimSpaces(line)
                        if !(t.count >= 2 && t.first == UInt8(ascii: "v") && t[t.startIndex + 1] == UInt8(ascii: "=")) {
                            throw .notSDP(preview: preview(bytes[start...]))
                        }
                    }
                    try parser.line(line, number: lineNumber)
                }
                if atEnd { break }
                // CRLF counts as one line end.
                if bytes[i] == 0x0D, i + 1 < bytes.count, bytes[i + 1] == 0x0A { i += 1 }
                lineNumber += 1
                start = i + 1
            } else if i - start >= SDPLimits.maximumLineLength {
                // A huge first line (an HTML page on one line) is "not SDP", not "too long".
                let head = trimSpaces(bytes[start..<i])
                if !sawContent, !(head.count >= 2 && head.first == UInt8(ascii: "v") && head[head.startIndex + 1] == UInt8(ascii: "=")) {
                    throw .notSDP(preview: preview(head))
                }
                var end = i
                while end < bytes.count, bytes[end] != 0x0A, bytes[end] != 0x0D { end += 1 }
                throw .lineTooLong(line: lineNumber, length: end - start, limit: SDPLimits.maximumLineLength)
            }
            i += 1
        }
        if !sawContent { throw .empty }
        return parser.description
    }
}

/// Line-by-line state: session level until the first m-line, then the current section.
private struct Parser {
    var description = SessionDescription(origin: Origin(sessionID: "0", sessionVersion: "0"))
    var sawVersion = false

    mutating func line(_ raw: ArraySlice<UInt8>, number: Int) throws(SDPError) {
        let line = trimSpaces(raw)
        // `<type>=<value>`, the type one lowercase letter (RFC 8866 §5).
        guard line.count >= 2, let type = line.first,
              type >= UInt8(ascii: "a"), type <= UInt8(ascii: "z"),
              line[line.startIndex + 1] == UInt8(ascii: "=")
        else {
            throw .invalidLine(number: number, "expected <letter>=<value>, found \"\(preview(line))\"")
        }
        for b in line where (b < 0x20 && b != 0x09) || b == 0x7F {
            throw .invalidLine(number: number, "it contains a control character")
        }
        let value = trimSpaces(line[(line.startIndex + 2)...])
        if !sawVersion {
            guard type == UInt8(ascii: "v"), value.elementsEqual("0".utf8) else {
                throw .invalidLine(number: number, "the version must be v=0, found \"\(preview(line))\"")
            }
            sawVersion = true
            return
        }
        switch type {
        case UInt8(ascii: "m"):
            description.media.append(try mediaLine(value, number: number))
        case UInt8(ascii: "a"):
            try attribute(value, number: number)
        case UInt8(ascii: "c"):
            let f = fields(value)
            let connection = Connection(networkType: f.count > 0 ? string(f[0]) : "",
                                        addressType: f.count > 1 ? string(f[1]) : "",
                                        address: f.count > 2 ? string(f[2]) : "")
            if description.media.isEmpty {
                description.connection = connection
            } else {
                description.media[description.media.count - 1].connection = connection
            }
        case UInt8(ascii: "o") where description.media.isEmpty:
            // Nothing is derived from o=, so a short one is kept as far as it goes.
            let f = fields(value)
            func field(_ i: Int) -> String { i < f.count ? string(f[i]) : "" }
            description.origin = Origin(username: field(0), sessionID: field(1), sessionVersion: field(2),
                                        networkType: field(3), addressType: field(4), address: field(5))
        case UInt8(ascii: "s") where description.media.isEmpty:
            description.sessionName = string(value)
        case UInt8(ascii: "t") where description.media.isEmpty:
            description.timing = string(value)
        case UInt8(ascii: "v"):
            throw .invalidLine(number: number, "a second v= line")
        default:
            let other = SDPLine(type: Unicode.Scalar(type), value: string(value))
            if description.media.isEmpty {
                description.otherLines.append(other)
            } else {
                description.media[description.media.count - 1].otherLines.append(other)
            }
        }
    }

    /// `m=<media> <port>[/<count>] <proto> <fmt> …` (RFC 8866 §5.14).
    func mediaLine(_ value: ArraySlice<UInt8>, number: Int) throws(SDPError) -> MediaSection {
        let f = fields(value)
        guard f.count >= 3 else {
            throw .invalidLine(number: number, "an m= line needs media, port and protocol")
        }
        let portParts = splitBytes(Array(f[1]), on: UInt8(ascii: "/"))
        guard portParts.count <= 2, let port = parseUInt(portParts[0], max: 65535) else {
            throw .invalidLine(number: number, "the m= port \"\(preview(f[1]))\" is not a number from 0 to 65535")
        }
        var section = MediaSection(kind: MediaKind(string(f[0])), port: UInt16(port), proto: string(f[2]),
                                   formats: f.dropFirst(3).map { string($0) })
        if portParts.count == 2 {
            guard let count = parseUInt(portParts[1], max: 65535) else {
                throw .invalidLine(number: number, "the m= port count is not a number")
            }
            section.portCount = UInt16(count)
        }
        return section
    }

    mutating func attribute(_ value: ArraySlice<UInt8>, number: Int) throws(SDPError) {
        let colon = value.firstIndex(of: UInt8(ascii: ":"))
        let name = colon.map { string(value[value.startIndex..<$0]) } ?? string(value)
        let argument: ArraySlice<UInt8>? = colon.map { trimSpaces(value[($0 + 1)...]) }
        if description.media.isEmpty {
            try sessionAttribute(name, argument, number: number)
        } else {
            try mediaAttribute(name, argument, number: number, into: &description.media[description.media.count - 1])
        }
    }

    mutating func sessionAttribute(_ name: String, _ arg: ArraySlice<UInt8>?, number: Int) throws(SDPError) {
        switch name {
        case "group":
            let f = fields(arg ?? ArraySlice<UInt8>())
            guard let semantics = f.first else {
                throw .invalidLine(number: number, "a=group without semantics")
            }
            description.groups.append(MediaGroup(semantics: string(semantics), mids: f.dropFirst().map { string($0) }))
        case "msid-semantic":
            description.msidSemantic = string(arg ?? ArraySlice<UInt8>())
        case "ice-lite":
            description.iceLite = true
        case "ice-ufrag":
            description.iceUfrag = try token(arg, "a=ice-ufrag", number: number)
        case "ice-pwd":
            description.icePwd = try token(arg, "a=ice-pwd", number: number)
        case "ice-options":
            description.iceOptions = fields(arg ?? ArraySlice<UInt8>()).map { string($0) }
        case "fingerprint":
            description.fingerprints.append(try fingerprint(arg, number: number))
        case "setup":
            description.setup = try setup(arg, number: number)
        default:
            description.otherAttributes.append(SDPAttribute(name: name, value: arg.map { string($0) }))
        }
    }

    func mediaAttribute(_ name: String, _ arg: ArraySlice<UInt8>?, number: Int,
                        into m: inout MediaSection) throws(SDPError) {
        let a = arg ?? ArraySlice<UInt8>()
        switch name {
        case "mid":
            m.mid = string(a)
        case "sendrecv", "sendonly", "recvonly", "inactive":
            m.direction = MediaDirection.allCases.first { $0.rawValue.bytesEqual(name) }
        case "rtcp-mux":
            m.rtcpMux = true
        case "rtcp-rsize":
            m.rtcpReducedSize = true
        case "rtpmap":
            m.rtpMaps.append(try rtpMap(a, number: number))
        case "fmtp":
            let (format, parameters) = splitFirstField(a)
            guard !format.isEmpty else { throw .invalidLine(number: number, "a=fmtp without a format") }
            m.formatParameters.append(FormatParameters(format: string(format), parameters: string(parameters)))
        case "rtcp-fb":
            let (format, feedback) = splitFirstField(a)
            guard !format.isEmpty else { throw .invalidLine(number: number, "a=rtcp-fb without a format") }
            m.rtcpFeedback.append(RTCPFeedback(format: string(format), feedback: string(feedback)))
        case "extmap":
            if let map = extensionMap(a) {
                m.extensionMaps.append(map)
            } else {
                // Header extensions are optional for us: a strange one is kept, not fatal.
                m.otherAttributes.append(SDPAttribute(name: name, value: string(a)))
            }
        case "ssrc":
            m.ssrcs.append(try ssrc(a, number: number))
        case "msid":
            let f = fields(a)
            guard let stream = f.first else { throw .invalidLine(number: number, "a=msid without an id") }
            m.msids.append(MediaStreamID(stream: string(stream), track: f.count > 1 ? string(f[1]) : nil))
        case "ice-ufrag":
            m.iceUfrag = try token(arg, "a=ice-ufrag", number: number)
        case "ice-pwd":
            m.icePwd = try token(arg, "a=ice-pwd", number: number)
        case "ice-options":
            m.iceOptions = fields(a).map { string($0) }
        case "fingerprint":
            m.fingerprints.append(try fingerprint(arg, number: number))
        case "setup":
            m.setup = try setup(arg, number: number)
        case "candidate":
            guard !a.isEmpty else { throw .invalidLine(number: number, "an empty a=candidate") }
            m.candidates.append(string(a))
        case "end-of-candidates":
            m.endOfCandidates = true
        case "sctp-port":
            guard let port = parseUInt(a, max: 65535) else {
                throw .invalidLine(number: number, "a=sctp-port \"\(preview(a))\" is not a port number")
            }
            m.sctpPort = UInt16(port)
        case "max-message-size":
            guard let size = parseUInt(a, max: UInt64.max) else {
                throw .invalidLine(number: number, "a=max-message-size \"\(preview(a))\" is not a number")
            }
            m.maxMessageSize = size
        case "sctpmap":
            let f = fields(a)
            guard f.count >= 2, let port = parseUInt(f[0], max: 65535) else {
                throw .invalidLine(number: number, "a=sctpmap needs a port number and a protocol")
            }
            let streams = f.count > 2 ? parseUInt(f[2], max: UInt64(UInt32.max)).map { UInt32($0) } : nil
            m.sctpMap = SCTPMap(port: UInt16(port), protocolName: string(f[1]), streams: streams)
        default:
            m.otherAttributes.append(SDPAttribute(name: name, value: arg.map { string($0) }))
        }
    }

    /// A single non-empty token (ICE ufrag/pwd, RFC 8839 §5.4). Characters beyond
    /// `ice-char` (e.g. `/`, `+` are allowed; some peers use `-` or `_`) are accepted:
    /// the value is only compared and copied into STUN USERNAME.
    func token(_ arg: ArraySlice<UInt8>?, _ what: String, number: Int) throws(SDPError) -> String {
        let f = fields(arg ?? ArraySlice<UInt8>())
        guard f.count == 1 else { throw .invalidLine(number: number, "\(what) must hold one non-empty value") }
        return string(f[0])
    }

    /// `a=fingerprint:<hash-func> <hex:hex:…>` (RFC 8122 §5). The byte count must fit
    /// the algorithm when we know it; the algorithm is lowercased (it is
    /// case-insensitive, and peers write `SHA-256`).
    func fingerprint(_ arg: ArraySlice<UInt8>?, number: Int) throws(SDPError) -> Fingerprint {
        let (algo, hex) = splitFirstField(arg ?? ArraySlice<UInt8>())
        guard !algo.isEmpty, !hex.isEmpty, let bytes = Hex.decode(string(hex)), !bytes.isEmpty else {
            throw .invalidLine(number: number, "a=fingerprint needs a hash function and hexadecimal bytes")
        }
        let algorithm = asciiLowercased(algo)
        if let expected = Fingerprint.digestLength(of: algorithm), expected != bytes.count {
            throw .invalidLine(number: number, "a=fingerprint has \(bytes.count) bytes, \(algorithm) has \(expected)")
        }
        return Fingerprint(algorithm: algorithm, bytes: bytes)
    }

    func setup(_ arg: ArraySlice<UInt8>?, number: Int) throws(SDPError) -> SetupRole {
        let value = asciiLowercased(arg ?? ArraySlice<UInt8>())
        // Matched as bytes (RFC 4145 §4 tokens), after ASCII case folding.
        guard let role = SetupRole.allCases.first(where: { $0.rawValue.bytesEqual(value) }) else {
            throw .invalidLine(number: number, "a=setup must be actpass, active, passive or holdconn, found \"\(preview(Array(value.utf8)[...]))\"")
        }
        return role
    }

    /// `<pt> <encoding>/<clock>[/<channels>]` (RFC 8866 §6.6).
    func rtpMap(_ a: ArraySlice<UInt8>, number: Int) throws(SDPError) -> RTPMap {
        let (ptText, rest) = splitFirstField(a)
        let parts = splitBytes(Array(rest), on: UInt8(ascii: "/"))
        guard let pt = parseUInt(ptText, max: 127), parts.count >= 2, parts.count <= 3, !parts[0].isEmpty,
              let clock = parseUInt(parts[1], max: UInt64(UInt32.max))
        else {
            throw .invalidLine(number: number, "a=rtpmap must be <payload type> <encoding>/<clock rate>[/<channels>], found \"\(preview(a))\"")
        }
        var channels: UInt8? = nil
        if parts.count == 3 {
            guard let c = parseUInt(parts[2], max: 255) else {
                throw .invalidLine(number: number, "a=rtpmap channel count is not a number")
            }
            channels = UInt8(c)
        }
        return RTPMap(payloadType: UInt8(pt), encoding: string(parts[0]), clockRate: UInt32(clock), channels: channels)
    }

    /// `<id>[/<direction>] <uri> [<attributes>]` (RFC 8285 §8); nil when malformed.
    func extensionMap(_ a: ArraySlice<UInt8>) -> ExtensionMap? {
        let (head, rest) = splitFirstField(a)
        let idParts = splitBytes(Array(head), on: UInt8(ascii: "/"))
        guard idParts.count <= 2, let id = parseUInt(idParts[0], max: 4095) else { return nil }
        var direction: MediaDirection? = nil
        if idParts.count == 2 {
            guard let d = MediaDirection.allCases.first(where: { $0.rawValue.utf8.elementsEqual(idParts[1]) }) else { return nil }
            direction = d
        }
        let (uri, attributes) = splitFirstField(rest)
        guard !uri.isEmpty else { return nil }
        return ExtensionMap(id: UInt16(id), direction: direction, uri: string(uri),
                            attributes: attributes.isEmpty ? nil : string(attributes))
    }

    /// `<ssrc-id> <attribute>[:<value>]` (RFC 5576 §4.1).
    func ssrc(_ a: ArraySlice<UInt8>, number: Int) throws(SDPError) -> SSRCAttribute {
        let (idText, rest) = splitFirstField(a)
        guard let id = parseUInt(idText, max: UInt64(UInt32.max)), !rest.isEmpty else {
            throw .invalidLine(number: number, "a=ssrc must be <32-bit ssrc> <attribute>, found \"\(preview(a))\"")
        }
        if let colon = rest.firstIndex(of: UInt8(ascii: ":")) {
            return SSRCAttribute(ssrc: UInt32(id), attribute: string(rest[rest.startIndex..<colon]),
                                 value: string(rest[(colon + 1)...]))
        }
        return SSRCAttribute(ssrc: UInt32(id), attribute: string(rest))
    }
}

extension SDPError {
    fileprivate static func invalidLine(number: Int, _ reason: String) -> SDPError {
        .invalidLine(line: number, reason: reason)
    }
}
