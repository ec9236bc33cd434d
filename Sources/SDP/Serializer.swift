// Writing a model back to text, CRLF line ends (RFC 8866 §5), lines in the order
// RFC 8866 §5 requires (v o s i u e p c b t r z k a) and attributes in the order
// browsers write them, which is also what older parsers were tested against.

extension SessionDescription {
    /// The SDP text of this description.
    public var text: String {
        var w = LineWriter()
        w.line("v", "0")
        w.line("o", joined([origin.username, origin.sessionID, origin.sessionVersion,
                            origin.networkType, origin.addressType, origin.address], " "))
        w.line("s", sessionName)
        w.others(otherLines, types: "iuep")
        if let connection { w.line("c", connection.text) }
        w.others(otherLines, types: "b")
        w.line("t", timing)
        w.others(otherLines, types: "rz")
        w.others(otherLines, types: "k")
        // Anything with a type RFC 8866 does not list for the session level.
        w.others(otherLines, notTypes: "iuepbrzk")
        for group in groups {
            w.attribute("group", joined([group.semantics] + group.mids, " "))
        }
        if iceLite { w.attribute("ice-lite") }
        if let iceUfrag { w.attribute("ice-ufrag", iceUfrag) }
        if let icePwd { w.attribute("ice-pwd", icePwd) }
        if !iceOptions.isEmpty { w.attribute("ice-options", joined(iceOptions, " ")) }
        for f in fingerprints { w.attribute("fingerprint", f.description) }
        if let setup { w.attribute("setup", setup.rawValue) }
        // Browsers write "a=msid-semantic: WMS …" with a space; parsers accept both.
        if let msidSemantic { w.attribute("msid-semantic", " " + msidSemantic) }
        for a in otherAttributes { w.attribute(a.name, a.value) }
        for m in media { m.write(to: &w) }
        return w.text
    }
}

extension Connection {
    var text: String { joined([networkType, addressType, address], " ") }
}

extension MediaSection {
    fileprivate func write(to w: inout LineWriter) {
        var port = String(self.port)
        if let portCount { port += "/" + String(portCount) }
        w.line("m", joined([kind.description, port, proto] + formats, " "))
        w.others(otherLines, types: "i")
        if let connection { w.line("c", connection.text) }
        w.others(otherLines, types: "b")
        w.others(otherLines, types: "k")
        w.others(otherLines, notTypes: "ibk")
        for c in candidates { w.attribute("candidate", c) }
        if endOfCandidates { w.attribute("end-of-candidates") }
        if let iceUfrag { w.attribute("ice-ufrag", iceUfrag) }
        if let icePwd { w.attribute("ice-pwd", icePwd) }
        if !iceOptions.isEmpty { w.attribute("ice-options", joined(iceOptions, " ")) }
        for f in fingerprints { w.attribute("fingerprint", f.description) }
        if let setup { w.attribute("setup", setup.rawValue) }
        if let mid { w.attribute("mid", mid) }
        for e in extensionMaps {
            var head = String(e.id)
            if let d = e.direction { head += "/" + d.rawValue }
            var value = head + " " + e.uri
            if let attributes = e.attributes { value += " " + attributes }
            w.attribute("extmap", value)
        }
        if let direction { w.attribute(direction.rawValue) }
        for msid in msids {
            w.attribute("msid", msid.track.map { msid.stream + " " + $0 } ?? msid.stream)
        }
        if rtcpMux { w.attribute("rtcp-mux") }
        if rtcpReducedSize { w.attribute("rtcp-rsize") }
        for map in rtpMaps { w.attribute("rtpmap", map.description) }
        for fb in rtcpFeedback { w.attribute("rtcp-fb", fb.format + " " + fb.feedback) }
        for p in formatParameters { w.attribute("fmtp", p.format + " " + p.parameters) }
        for s in ssrcs {
            w.attribute("ssrc", String(s.ssrc) + " " + (s.value.map { s.attribute + ":" + $0 } ?? s.attribute))
        }
        if let sctpPort { w.attribute("sctp-port", String(sctpPort)) }
        if let maxMessageSize { w.attribute("max-message-size", String(maxMessageSize)) }
        if let sctpMap {
            var value = String(sctpMap.port) + " " + sctpMap.protocolName
            if let streams = sctpMap.streams { value += " " + String(streams) }
            w.attribute("sctpmap", value)
        }
        for a in otherAttributes { w.attribute(a.name, a.value) }
    }
}

/// Accumulates CRLF-terminated lines.
struct LineWriter {
    var text = ""

    mutating func line(_ type: String, _ value: String) {
        text += type
        text += "="
        text += value
        text += "\r\n"
    }

    mutating func attribute(_ name: String, _ value: String? = nil) {
        if let value {
            line("a", name + ":" + value)
        } else {
            line("a", name)
        }
    }

    mutating func others(_ lines: [SDPLine], types: String) {
        for l in lines where types.unicodeScalars.contains(l.type) { line(String(l.type), l.value) }
    }

    mutating func others(_ lines: [SDPLine], notTypes: String) {
        for l in lines where !notTypes.unicodeScalars.contains(l.type) { line(String(l.type), l.value) }
    }
}
