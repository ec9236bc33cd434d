// Offer + answer → the values the transport and media layers need (RFC 3264 §6–7,
// RFC 8829 §5.10–5.11), checked for everything that would make the call unusable.

import Wire

/// The negotiated data channel (RFC 8841).
public struct NegotiatedDataChannel: Equatable, Sendable {
    public var mid: String?
    /// The remote SCTP port (`a=sctp-port`, or the legacy `a=sctpmap` / m-line format).
    public var remoteSCTPPort: UInt16
    /// The largest message the remote accepts: its `a=max-message-size`, 65536 when
    /// absent (RFC 8841 §6.1), 0 meaning no limit.
    public var remoteMaxMessageSize: UInt64

    /// The mid byte for byte (RFC 5888 §4 token), not with the derived `==`'s Unicode
    /// string comparison.
    public static func == (a: NegotiatedDataChannel, b: NegotiatedDataChannel) -> Bool {
        bytesEqual(a.mid, b.mid) && a.remoteSCTPPort == b.remoteSCTPPort && a.remoteMaxMessageSize == b.remoteMaxMessageSize
    }
}

/// The candidates one remote section carried, verbatim.
public struct SectionCandidates: Equatable, Sendable {
    public var mid: String?
    public var index: Int
    public var candidates: [String]

    /// Mid and candidate values byte for byte (RFC 8866 §5 text is octets).
    public static func == (a: SectionCandidates, b: SectionCandidates) -> Bool {
        bytesEqual(a.mid, b.mid) && a.index == b.index && bytesEqual(a.candidates, b.candidates)
    }
}

/// What an offer/answer exchange agreed on, seen from our side.
public struct NegotiatedSession: Equatable, Sendable {
    /// Opus's payload type in the answer (RFC 3264 §6.1: the answerer should keep the
    /// offer's; we send and expect what the answer says).
    public var opusPayloadType: UInt8
    /// The remote's fmtp for Opus, e.g. `minptime=10;useinbandfec=1`, if any.
    public var remoteOpusParameters: String?
    /// The remote audio section's mid.
    public var audioMid: String?
    /// Our audio direction after negotiation (what we may do).
    public var audioDirection: MediaDirection
    /// The first SSRC the remote announces for audio (`a=ssrc`), nil when it announces
    /// none (then the first SSRC seen on the transport is the remote's).
    public var remoteSSRC: UInt32?
    /// The remote ICE credentials that apply to the audio (BUNDLE) transport.
    public var remoteICEUfrag: String
    public var remoteICEPwd: String
    /// `a=ice-lite` from the remote.
    public var remoteICELite: Bool
    /// Every fingerprint that applies (aiortc sends sha-256, sha-384 and sha-512).
    public var remoteFingerprints: [Fingerprint]
    /// The remote's `a=setup` and the DTLS role it leaves us.
    public var remoteSetup: SetupRole
    public var localDTLSRole: DTLSRole
    /// The remote candidates for the audio (BUNDLE) transport: every bundled section's,
    /// duplicates removed (GStreamer writes them in the first m-line only, pion in each).
    public var remoteCandidates: [String]
    /// The candidates as each remote section carried them.
    public var remoteCandidatesBySection: [SectionCandidates]
    /// The remote sent `a=end-of-candidates` on the transport.
    public var remoteEndOfCandidates: Bool
    /// Both sides agreed to RTCP reduced size (RFC 5506).
    public var rtcpReducedSize: Bool
    /// The audio and data sections share one transport (RFC 8843).
    public var bundled: Bool
    /// nil when no data channel was offered or the answer rejected it (port 0).
    public var dataChannel: NegotiatedDataChannel?

    /// Whether the answer accepted the data channel.
    public var dataChannelAccepted: Bool { dataChannel != nil }

    /// Field by field, the SDP text byte for byte (RFC 8866 §5: octets), instead of the
    /// derived `==`'s Unicode string comparison.
    public static func == (a: NegotiatedSession, b: NegotiatedSession) -> Bool {
        a.opusPayloadType == b.opusPayloadType && bytesEqual(a.remoteOpusParameters, b.remoteOpusParameters)
            && bytesEqual(a.audioMid, b.audioMid) && a.audioDirection == b.audioDirection && a.remoteSSRC == b.remoteSSRC
            && a.remoteICEUfrag.bytesEqual(b.remoteICEUfrag) && a.remoteICEPwd.bytesEqual(b.remoteICEPwd)
            && a.remoteICELite == b.remoteICELite && a.remoteFingerprints == b.remoteFingerprints
            && a.remoteSetup == b.remoteSetup && a.localDTLSRole == b.localDTLSRole
            && bytesEqual(a.remoteCandidates, b.remoteCandidates) && a.remoteCandidatesBySection == b.remoteCandidatesBySection
            && a.remoteEndOfCandidates == b.remoteEndOfCandidates && a.rtcpReducedSize == b.rtcpReducedSize
            && a.bundled == b.bundled && a.dataChannel == b.dataChannel
    }
}

extension NegotiatedSession {
    /// We offered, the remote answered.
    public static func negotiate(localOffer offer: SessionDescription,
                                 remoteAnswer answer: SessionDescription) throws(SDPError) -> NegotiatedSession {
        try negotiate(offer: offer, answer: answer, localIsOfferer: true)
    }

    /// The remote offered, we answered (`SessionDescription.answer(to:_:role:)`).
    public static func negotiate(remoteOffer offer: SessionDescription,
                                 localAnswer answer: SessionDescription) throws(SDPError) -> NegotiatedSession {
        try negotiate(offer: offer, answer: answer, localIsOfferer: false)
    }

    private static func negotiate(offer: SessionDescription, answer: SessionDescription,
                                  localIsOfferer: Bool) throws(SDPError) -> NegotiatedSession {
        try offer.checkUniqueMids()
        try answer.checkUniqueMids()
        guard let offerAudio = offer.audioIndex, answer.audioIndex != nil else { throw .noAudio }
        guard offer.media[offerAudio].opusPayloadType != nil else {
            throw .opusNotOffered(codecs: offer.media[offerAudio].codecSummary)
        }
        // RFC 3264 §6: the answer has the offer's m-lines in the same order. Peers that
        // drop trailing rejected sections exist, so match by mid first, then by index.
        let answerAudio = try matching(offerAudio, offer: offer, answer: answer)
        let a = answer.media[answerAudio]
        guard a.kind == .audio else {
            throw .mediaMismatch(reason: "the offer's audio section is answered by a " + a.kind.description + " section")
        }
        guard !a.isRejected else { throw .audioRejected }
        guard let opus = a.opusPayloadType else { throw .opusNotAccepted(codecs: a.codecSummary) }

        let remote = localIsOfferer ? answer : offer
        let local = localIsOfferer ? offer : answer
        let remoteAudio = localIsOfferer ? answerAudio : offerAudio
        let localAudio = localIsOfferer ? offerAudio : answerAudio
        let label = remote.media[remoteAudio].label(index: remoteAudio)
        let transport = remote.transport(for: remoteAudio)
        guard let ufrag = transport.iceUfrag, let pwd = transport.icePwd else {
            throw .noICECredentials(section: label)
        }
        guard !transport.fingerprints.isEmpty else { throw .noFingerprint(section: label) }

        // DTLS roles (RFC 8842 §5.2–5.3, RFC 4145 §4).
        let localSetup = local.transport(for: localAudio).setup
        let remoteSetup: SetupRole
        let role: DTLSRole
        if localIsOfferer {
            // An answer without a=setup gets RFC 4145's default, active; actpass is
            // not an answer.
            remoteSetup = transport.setup ?? .active
            switch remoteSetup {
            case .active: role = .server
            case .passive: role = .client
            case .actpass: throw .invalidSetup(reason: "the answer says actpass, which only an offer may say")
            case .holdconn: throw .invalidSetup(reason: "the answer says holdconn")
            }
            if (localSetup == .active && remoteSetup == .active) || (localSetup == .passive && remoteSetup == .passive) {
                throw .invalidSetup(reason: "the answer takes the same DTLS role as our offer")
            }
        } else {
            remoteSetup = transport.setup ?? .actpass
            guard let mine = localSetup, mine == .active || mine == .passive else {
                throw .invalidSetup(reason: "our answer must say active or passive")
            }
            role = mine == .active ? .client : .server
            if (remoteSetup == .active && mine == .active) || (remoteSetup == .passive && mine == .passive) {
                throw .invalidSetup(reason: "both sides take the same DTLS role")
            }
            if remoteSetup == .holdconn { throw .invalidSetup(reason: "the offer says holdconn") }
        }

        // Our direction: what our own description says (the answer's direction is the
        // answerer's view, RFC 3264 §6.1).
        let ourAudio = local.media[localAudio]
        let theirAudio = remote.media[remoteAudio]
        let ourDirection = ourAudio.direction ?? .sendrecv
        let theirDirection = theirAudio.direction ?? .sendrecv
        let direction = MediaDirection(sends: ourDirection.sends && theirDirection.receives,
                                       receives: ourDirection.receives && theirDirection.sends)

        var bySection: [SectionCandidates] = []
        for (i, m) in remote.media.enumerated() where !m.candidates.isEmpty {
            bySection.append(SectionCandidates(mid: m.mid, index: i, candidates: m.candidates))
        }

        // The data channel: offered, and accepted with a non-zero port.
        var dataChannel: NegotiatedDataChannel? = nil
        var bundled = answer.bundleTagIndex(for: answerAudio) != nil
        if let offerData = offer.dataChannelIndex {
            // An answer with no section for it (against RFC 3264 §6: one m-line per
            // offered one) is read as declining it: the call goes on with audio only.
            if let answerData = try? matching(offerData, offer: offer, answer: answer),
               answer.media[answerData].kind == .application, !answer.media[answerData].isRejected {
                let remoteData = remote.media[localIsOfferer ? answerData : offerData]
                var port: UInt16 = 5000
                if let p = remoteData.sctpPort {
                    port = p
                } else if let map = remoteData.sctpMap {
                    port = map.port
                } else if let f = remoteData.formats.first, let p = parseUInt(Array(f.utf8)[...], max: 65535) {
                    port = UInt16(p)
                }
                dataChannel = NegotiatedDataChannel(mid: remoteData.mid, remoteSCTPPort: port,
                                                    remoteMaxMessageSize: remoteData.maxMessageSize ?? 65536)
                if answer.bundleTagIndex(for: answerData) != answer.bundleTagIndex(for: answerAudio) {
                    bundled = false
                }
            }
        }

        return NegotiatedSession(
            opusPayloadType: opus,
            remoteOpusParameters: theirAudio.formatParameters(for: opus),
            audioMid: a.mid,
            audioDirection: direction,
            remoteSSRC: theirAudio.announcedSSRCs.first,
            remoteICEUfrag: ufrag,
            remoteICEPwd: pwd,
            remoteICELite: remote.iceLite,
            remoteFingerprints: transport.fingerprints,
            remoteSetup: remoteSetup,
            localDTLSRole: role,
            remoteCandidates: transport.candidates,
            remoteCandidatesBySection: bySection,
            remoteEndOfCandidates: transport.endOfCandidates,
            rtcpReducedSize: offer.media[offerAudio].rtcpReducedSize && a.rtcpReducedSize,
            bundled: bundled,
            dataChannel: dataChannel)
    }

    /// The answer section that answers offer section `index`: same mid, else same index.
    private static func matching(_ index: Int, offer: SessionDescription,
                                 answer: SessionDescription) throws(SDPError) -> Int {
        if let mid = offer.media[index].mid, let i = answer.index(ofMid: mid) { return i }
        guard answer.media.indices.contains(index) else {
            throw .mediaMismatch(reason: "the offer has \(offer.media.count) m-lines, the answer \(answer.media.count)")
        }
        return index
    }
}

extension SessionDescription {
    /// Sections are matched by mid (RFC 8843, RFC 3264 §6 by position only as a fallback),
    /// so a repeated mid would pair the offer's audio with some other section; refused
    /// before building or checking an answer (found by the fuzz_sdp target: an offer with
    /// two `a=mid:0` got an answer that its own negotiation then rejected).
    func checkUniqueMids() throws(SDPError) {
        // Mids are tokens compared as bytes (RFC 5888 §4; Wire/Text.swift).
        var seen = Set<TextKey>()
        for section in media {
            guard let mid = section.mid else { continue }
            if !seen.insert(TextKey(mid)).inserted { throw .duplicateMid(mid) }
        }
    }
}
