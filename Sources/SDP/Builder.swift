// Our own offers and answers: one audio section (Opus) and optionally one data-channel
// section, bundled, in the shape PROTOCOLS.md says real peers need.

import Wire

/// Our audio section's parameters.
public struct LocalAudio: Equatable, Sendable {
    /// The dynamic payload type for Opus (RFC 3551 §6: 96–127). 111 is what browsers
    /// use and what every measured peer keeps.
    public var payloadType: UInt8
    /// The SSRC we send with (RFC 3550 §8: random).
    public var ssrc: UInt32
    /// RTCP CNAME (RFC 7022: random per session).
    public var cname: String
    /// `a=msid` stream and track ids (RFC 8830 §2: 1–64 token characters).
    public var streamID: String
    public var trackID: String
    public var mid: String
    /// What we want to do with audio; an answer narrows it to what the offer allows.
    public var direction: MediaDirection

    public init(payloadType: UInt8 = 111, ssrc: UInt32, cname: String, streamID: String, trackID: String,
                mid: String = "0", direction: MediaDirection = .sendrecv) {
        self.payloadType = payloadType
        self.ssrc = ssrc
        self.cname = cname
        self.streamID = streamID
        self.trackID = trackID
        self.mid = mid
        self.direction = direction
    }

    /// RFC 7587 §7: a 10 ms minimum packet time and in-band FEC, which Linnet decodes.
    public static let opusFormatParameters = "minptime=10;useinbandfec=1"
}

/// Our data-channel section's parameters (RFC 8841, RFC 8831).
public struct LocalDataChannel: Equatable, Sendable {
    public var mid: String
    /// The SCTP port inside DTLS; 5000 by convention (RFC 8841 §5).
    public var sctpPort: UInt16
    /// The largest message we accept (RFC 8841 §6).
    public var maxMessageSize: UInt64

    public init(mid: String = "1", sctpPort: UInt16 = 5000, maxMessageSize: UInt64 = 65536) {
        self.mid = mid
        self.sctpPort = sctpPort
        self.maxMessageSize = maxMessageSize
    }
}

/// Everything our side puts in a description.
public struct LocalDescription: Equatable, Sendable {
    /// `o=` session id: a random number below 2^63 (RFC 8829 §5.2.1).
    public var sessionID: UInt64
    /// `o=` version; increment on each new description of the same session.
    public var sessionVersion: UInt64
    /// ICE credentials (RFC 8839 §5.4: ufrag 4–256, pwd 22–256 `ice-char`s).
    public var iceUfrag: String
    public var icePwd: String
    /// Our certificate's fingerprint(s); sha-256 for Linnet (RFC 8827 §6.5).
    public var fingerprints: [Fingerprint]
    /// Candidate values as the ICE module writes them (`<foundation> <component> udp …`).
    /// A leading `a=` or `candidate:` is removed. All of them: we do not trickle over HTTP.
    public var candidates: [String]
    public var audio: LocalAudio
    /// nil: no data channel.
    public var dataChannel: LocalDataChannel?

    public init(sessionID: UInt64, sessionVersion: UInt64 = 1, iceUfrag: String, icePwd: String,
                fingerprints: [Fingerprint], candidates: [String], audio: LocalAudio,
                dataChannel: LocalDataChannel? = LocalDataChannel()) {
        self.sessionID = sessionID
        self.sessionVersion = sessionVersion
        self.iceUfrag = iceUfrag
        self.icePwd = icePwd
        self.fingerprints = fingerprints
        self.candidates = candidates
        self.audio = audio
        self.dataChannel = dataChannel
    }
}

/// The RTP profile of WebRTC audio (RFC 8829 §5.1.2).
public let webRTCAudioProfile = "UDP/TLS/RTP/SAVPF"
/// The data-channel profile (RFC 8841 §4.1).
public let webRTCDataProfile = "UDP/DTLS/SCTP"

extension SessionDescription {
    /// Our offer: BUNDLE of audio and (optionally) the data channel, rtcp-mux and
    /// rtcp-rsize, `a=setup:actpass`, `a=ssrc` with cname plus `a=msid` (pion and Janus
    /// need them, PROTOCOLS.md), no `a=ice-options:trickle` (the candidates are all
    /// here), the same transport attributes in each section (RFC 8843 §7.2.1) and
    /// `a=end-of-candidates`.
    public static func offer(_ local: LocalDescription) throws(SDPError) -> SessionDescription {
        try local.validate()
        var d = SessionDescription(origin: local.origin)
        var mids = [local.audio.mid]
        if let dc = local.dataChannel { mids.append(dc.mid) }
        d.groups = [MediaGroup(semantics: "BUNDLE", mids: mids)]
        d.msidSemantic = "WMS " + local.audio.streamID
        var audio = local.audioSection(proto: webRTCAudioProfile, direction: local.audio.direction,
                                       rtcpReducedSize: true)
        local.addTransport(to: &audio, setup: .actpass)
        d.media.append(audio)
        if let dc = local.dataChannel {
            var data = MediaSection(kind: .application, port: 9, proto: webRTCDataProfile,
                                    formats: ["webrtc-datachannel"])
            data.connection = .unspecified
            data.mid = dc.mid
            data.sctpPort = dc.sctpPort
            data.maxMessageSize = dc.maxMessageSize
            local.addTransport(to: &data, setup: .actpass)
            d.media.append(data)
        }
        return d
    }

    /// Our answer to a remote offer (RFC 3264 §6, RFC 8829 §5.3.1): the first audio
    /// section is accepted with the offer's Opus payload type and the direction narrowed
    /// to what both sides allow; the first data-channel section is accepted when we
    /// have one; every other section is rejected (port 0, mid kept). `role` is the DTLS
    /// role we take when the offer says `actpass`; the client role by default (RFC 5763 §5
    /// recommends `active` in answers: the handshake then starts with ICE).
    public static func answer(to offer: SessionDescription, _ local: LocalDescription,
                              role: DTLSRole = .client) throws(SDPError) -> SessionDescription {
        try local.validate()
        try offer.checkUniqueMids()
        guard let audioIndex = offer.media.firstIndex(where: { $0.kind == .audio && !$0.isRejected }) else {
            throw .noAudio
        }
        let offeredAudio = offer.media[audioIndex]
        guard let opus = offeredAudio.opusPayloadType else {
            throw .opusNotOffered(codecs: offeredAudio.codecSummary)
        }
        guard offeredAudio.rtcpMux else { throw .rtcpMuxRequired }
        let remote = offer.transport(for: audioIndex)
        let label = offeredAudio.label(index: audioIndex)
        guard remote.iceUfrag != nil, remote.icePwd != nil else { throw .noICECredentials(section: label) }
        guard !remote.fingerprints.isEmpty else { throw .noFingerprint(section: label) }
        let setup: SetupRole
        switch remote.setup ?? .actpass {
        case .actpass: setup = role == .client ? .active : .passive
        case .active: setup = .passive
        case .passive: setup = .active
        case .holdconn: throw .invalidSetup(reason: "the offer says a=setup:holdconn")
        }

        var d = SessionDescription(origin: local.origin)
        d.msidSemantic = "WMS " + local.audio.streamID
        let dataIndex: Int? = local.dataChannel == nil ? nil
            : offer.media.firstIndex(where: { $0.kind == .application && $0.isSCTP && !$0.isRejected })
        for (i, m) in offer.media.enumerated() {
            if i == audioIndex {
                let offered = m.direction ?? .sendrecv
                let wanted = local.audio.direction
                let direction = MediaDirection(sends: wanted.sends && offered.receives,
                                               receives: wanted.receives && offered.sends)
                var audio = local.audioSection(proto: m.proto, direction: direction,
                                               rtcpReducedSize: m.rtcpReducedSize, payloadType: opus)
                audio.mid = m.mid
                local.addTransport(to: &audio, setup: setup)
                d.media.append(audio)
            } else if i == dataIndex, let dc = local.dataChannel {
                var data = MediaSection(kind: .application, port: 9, proto: m.proto, formats: m.formats)
                data.connection = .unspecified
                data.mid = m.mid
                if let map = m.sctpMap {
                    // Legacy form (`DTLS/SCTP 5000` + `a=sctpmap`): answer in kind.
                    data.sctpMap = SCTPMap(port: dc.sctpPort, protocolName: map.protocolName, streams: map.streams)
                    data.formats = [String(dc.sctpPort)]
                } else {
                    data.formats = ["webrtc-datachannel"]
                    data.sctpPort = dc.sctpPort
                    data.maxMessageSize = dc.maxMessageSize
                }
                local.addTransport(to: &data, setup: setup)
                d.media.append(data)
            } else {
                // RFC 8829 §5.3.1: a rejected section keeps kind, proto, formats and mid.
                var rejected = MediaSection(kind: m.kind, port: 0, proto: m.proto,
                                            formats: m.formats.isEmpty ? ["0"] : m.formats)
                rejected.mid = m.mid
                d.media.append(rejected)
            }
        }
        // Accept the offer's BUNDLE group with the sections we accepted, in its order;
        // its first accepted mid becomes the answerer BUNDLE tag (RFC 8843 §7.3).
        if let group = offer.bundleGroup {
            var mids: [String] = []
            for mid in group.mids {
                if let i = d.index(ofMid: mid), !d.media[i].isRejected { mids.append(mid) }
            }
            if !mids.isEmpty { d.groups = [MediaGroup(semantics: group.semantics, mids: mids)] }
        }
        return d
    }
}

extension MediaDirection {
    init(sends: Bool, receives: Bool) {
        switch (sends, receives) {
        case (true, true): self = .sendrecv
        case (true, false): self = .sendonly
        case (false, true): self = .recvonly
        case (false, false): self = .inactive
        }
    }
}

extension LocalDescription {
    var origin: Origin {
        Origin(username: "-", sessionID: String(sessionID), sessionVersion: String(sessionVersion),
               networkType: "IN", addressType: "IP4", address: "127.0.0.1")
    }

    /// Candidates without an `a=` / `candidate:` prefix.
    var candidateValues: [String] {
        candidates.map { c in
            var bytes = Array(c.utf8)[...]
            if bytes.starts(with: "a=".utf8) { bytes = bytes.dropFirst(2) }
            if bytes.starts(with: "candidate:".utf8) { bytes = bytes.dropFirst(10) }
            return string(trimSpaces(bytes))
        }
    }

    func audioSection(proto: String, direction: MediaDirection, rtcpReducedSize: Bool,
                      payloadType: UInt8? = nil) -> MediaSection {
        let pt = payloadType ?? audio.payloadType
        var m = MediaSection(kind: .audio, port: 9, proto: proto, formats: [String(pt)])
        m.connection = .unspecified
        m.mid = audio.mid
        m.direction = direction
        m.rtcpMux = true
        m.rtcpReducedSize = rtcpReducedSize
        m.rtpMaps = [RTPMap(payloadType: pt, encoding: "opus", clockRate: 48000, channels: 2)]
        m.formatParameters = [FormatParameters(format: String(pt), parameters: LocalAudio.opusFormatParameters)]
        if direction.sends {
            // The msid appears twice on purpose: `a=msid` (RFC 8830) for current
            // parsers and `a=ssrc … msid:` for those that predate it.
            m.msids = [MediaStreamID(stream: audio.streamID, track: audio.trackID)]
            m.ssrcs = [SSRCAttribute(ssrc: audio.ssrc, attribute: "cname", value: audio.cname),
                       SSRCAttribute(ssrc: audio.ssrc, attribute: "msid", value: audio.streamID + " " + audio.trackID)]
        }
        return m
    }

    func addTransport(to m: inout MediaSection, setup: SetupRole) {
        m.candidates = candidateValues
        m.endOfCandidates = true
        m.iceUfrag = iceUfrag
        m.icePwd = icePwd
        m.fingerprints = fingerprints
        m.setup = setup
    }

    /// Refuses values that would produce broken or injected SDP text.
    func validate() throws(SDPError) {
        guard sessionID < 1 << 63 else { throw .invalidValue(field: "the session id (below 2^63)") }
        guard isICEChars(iceUfrag, min: 4) else { throw .invalidValue(field: "ice-ufrag") }
        guard isICEChars(icePwd, min: 22) else { throw .invalidValue(field: "ice-pwd") }
        guard !fingerprints.isEmpty else { throw .invalidValue(field: "fingerprint (none given)") }
        for f in fingerprints {
            guard isToken(f.algorithm, max: 32), !f.bytes.isEmpty,
                  Fingerprint.digestLength(of: f.algorithm).map({ $0 == f.bytes.count }) ?? true
            else { throw .invalidValue(field: "fingerprint " + f.algorithm) }
        }
        for c in candidateValues {
            guard !c.isEmpty, isPrintable(c, max: 1024) else { throw .invalidValue(field: "a candidate") }
        }
        guard audio.payloadType >= 96, audio.payloadType <= 127 else {
            throw .invalidValue(field: "the Opus payload type (96-127)")
        }
        guard isToken(audio.cname, max: 255) else { throw .invalidValue(field: "cname") }
        guard isToken(audio.streamID, max: 64) else { throw .invalidValue(field: "the msid stream id") }
        guard isToken(audio.trackID, max: 64) else { throw .invalidValue(field: "the msid track id") }
        guard isToken(audio.mid, max: 32) else { throw .invalidValue(field: "the audio mid") }
        if let dc = dataChannel {
            guard isToken(dc.mid, max: 32), !dc.mid.bytesEqual(audio.mid) else { throw .invalidValue(field: "the data channel mid") }
            guard dc.sctpPort != 0 else { throw .invalidValue(field: "sctp-port") }
        }
    }
}

/// `ice-char = ALPHA / DIGIT / "+" / "/"`, `min`…256 of them (RFC 8839 §5.4).
private func isICEChars(_ s: String, min: Int) -> Bool {
    let u = s.utf8
    guard u.count >= min, u.count <= 256 else { return false }
    for b in u {
        let ok = (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z"))
            || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")) || b == UInt8(ascii: "+") || b == UInt8(ascii: "/")
        if !ok { return false }
    }
    return true
}

/// Visible ASCII, no spaces (RFC 8866 §9 `token`, loosely), 1…`max` bytes.
private func isToken(_ s: String, max: Int) -> Bool {
    let u = s.utf8
    guard !u.isEmpty, u.count <= max else { return false }
    for b in u where b <= 0x20 || b >= 0x7F { return false }
    return true
}

/// Visible ASCII and single spaces inside, 1…`max` bytes.
private func isPrintable(_ s: String, max: Int) -> Bool {
    let u = s.utf8
    guard !u.isEmpty, u.count <= max else { return false }
    for b in u where b < 0x20 || b >= 0x7F { return false }
    return true
}
