import Foundation
import Testing
import Wire
@testable import SDP

/// Every fixture in Fixtures/ (see its README for where each came from). Expected values
/// were read off the fixture text by eye; the generic tests cross-check the parser
/// against a plain line scan of the same text.
private let allFixtures = [
    "linnet-offer.sdp", "aiortc-answer.sdp", "aiortc-offer.sdp", "gstreamer-answer.sdp", "pion-answer.sdp",
    "chrome-audio-offer.sdp", "chrome-datachannel-answer.sdp", "firefox-audio-offer.sdp",
    "firefox-datachannel-offer.sdp", "freeswitch-pcma-answer.sdp", "openai-shaped-answer.sdp",
]

/// Lines of each m-section as plain text (Foundation), for independent counts.
private func sectionLines(_ text: String) -> [[String]] {
    var sections: [[String]] = []
    // "\r\n" is one Character in Swift: normalise before splitting.
    for raw in text.replacingOccurrences(of: "\r\n", with: "\n").components(separatedBy: "\n") {
        let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("m=") { sections.append([]) }
        if !sections.isEmpty { sections[sections.count - 1].append(line) }
    }
    return sections
}

@Suite("SDP fixtures from real stacks")
struct FixtureTests {
    @Test("every fixture parses, re-serialises stably, and matches a plain line scan", arguments: allFixtures)
    func parsesAndRoundTrips(name: String) throws {
        let text = try Fixtures.text(name)
        let d = try Fixtures.parse(name)
        #expect(try SessionDescription.parse(d.text) == d)
        let sections = sectionLines(text)
        #expect(d.media.count == sections.count)
        for (m, lines) in zip(d.media, sections) {
            #expect(m.candidates.count == lines.filter { $0.hasPrefix("a=candidate:") }.count)
            #expect(m.fingerprints.count == lines.filter { $0.hasPrefix("a=fingerprint:") }.count)
            #expect(m.rtpMaps.count == lines.filter { $0.hasPrefix("a=rtpmap:") }.count)
            #expect(m.ssrcs.count == lines.filter { $0.hasPrefix("a=ssrc:") }.count)
            #expect(m.endOfCandidates == lines.contains("a=end-of-candidates"))
        }
    }

    private func linnetOffer() throws -> SessionDescription { try SessionDescription.offer(fixtureLocal()) }

    @Test("an answer shaped like OpenAI's: session-level fingerprint, ufrag with '/', UDP 3478 and TCP passive 443, setup active")
    func openAIShapedAnswer() throws {
        let d = try Fixtures.parse("openai-shaped-answer.sdp")
        #expect(d.media.allSatisfy { $0.fingerprints.isEmpty }, "the fingerprint is at session level only")
        let n = try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: d)
        #expect(n.remoteFingerprints.map(\.algorithm) == ["sha-256"])
        #expect(n.remoteFingerprints[0].bytes.prefix(3) == [0x3C, 0x1F, 0x88])
        #expect(n.remoteSetup == .active && n.localDTLSRole == .server)
        #expect(n.remoteICEUfrag == "Xk4tQ9mVb2cE/7hJpW1sLa" && n.remoteICEPwd == "R8nW3vYq0zLd5cTf7hKm2xPj")
        #expect(n.opusPayloadType == 111)
        #expect(n.remoteCandidates.contains { $0.contains("udp 2130706431 203.0.113.80 3478 typ host") })
        #expect(n.remoteCandidates.contains { $0.contains("tcp 1671430143 203.0.113.80 443 typ host tcptype passive") })
        #expect(n.remoteSSRC == 2_874_915_306)
    }

    @Test("aiortc 1.16 answering our offer: three fingerprints, setup active, no rtcp-rsize")
    func aiortcAnswer() throws {
        let n = try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: Fixtures.parse("aiortc-answer.sdp"))
        #expect(n.opusPayloadType == 111)
        #expect(n.remoteOpusParameters == nil)
        #expect(n.remoteFingerprints.map(\.algorithm) == ["sha-256", "sha-384", "sha-512"])
        #expect(n.remoteFingerprints.map(\.bytes.count) == [32, 48, 64])
        #expect(n.remoteFingerprints[0].bytes.prefix(4) == [0xFF, 0xD2, 0x66, 0xC7])
        #expect(n.remoteSetup == .active && n.localDTLSRole == .server)
        #expect(n.remoteICEUfrag == "m7UK" && n.remoteICEPwd == "7tE0dRhgjc2XUzJapwNl7A")
        #expect(n.remoteSSRC == 3_180_990_263)
        #expect(n.remoteCandidates.count == 2)
        #expect(n.remoteCandidates[1].contains("fd00::2 47116 typ host"))
        #expect(n.remoteCandidatesBySection.map(\.index) == [0, 1])
        #expect(n.remoteEndOfCandidates)
        #expect(!n.rtcpReducedSize)
        #expect(n.bundled)
        #expect(n.audioDirection == .sendrecv)
        #expect(n.dataChannel == NegotiatedDataChannel(mid: "1", remoteSCTPPort: 5000, remoteMaxMessageSize: 262_144))
    }

    @Test("GStreamer 1.22 webrtcbin answering our offer: candidates only in the first m-line")
    func gstreamerAnswer() throws {
        let answer = try Fixtures.parse("gstreamer-answer.sdp")
        #expect(answer.media[1].candidates.isEmpty)
        let n = try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: answer)
        #expect(n.opusPayloadType == 111)  // written `OPUS/48000/2`
        #expect(n.remoteOpusParameters == "minptime=10;useinbandfec=1;sprop-stereo=0;sprop-maxcapturerate=48000")
        #expect(n.remoteFingerprints.map(\.algorithm) == ["sha-256"])
        #expect(n.remoteSetup == .active && n.localDTLSRole == .server)
        #expect(n.remoteICEUfrag == "s0y0v6tLYwCpPibdX5VFuRxa9Oyogs51")
        #expect(n.remoteSSRC == 1_396_212_397)
        #expect(n.remoteCandidates.count == 9)
        #expect(n.remoteCandidates.filter { $0.contains(" TCP ") }.count == 6)
        #expect(n.remoteCandidatesBySection.map(\.index) == [0])
        #expect(!n.remoteEndOfCandidates)
        #expect(!n.rtcpReducedSize)
        // The data section borrows the tag's transport and has no max-message-size.
        #expect(answer.transport(for: 1).candidates.count == 9)
        #expect(answer.transport(for: 1).fingerprints == n.remoteFingerprints)
        #expect(n.dataChannel == NegotiatedDataChannel(mid: "1", remoteSCTPPort: 5000, remoteMaxMessageSize: 65536))
    }

    @Test("pion (pion/ice#34): session-level fingerprint, PCMU listed before Opus, LF line ends")
    func pionAnswer() throws {
        let answer = try Fixtures.parse("pion-answer.sdp")
        #expect(answer.fingerprints.count == 1 && answer.media[0].fingerprints.isEmpty)
        let n = try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: answer)
        #expect(n.opusPayloadType == 111)
        #expect(n.remoteFingerprints.map(\.algorithm) == ["sha-256"])
        #expect(n.remoteFingerprints[0].bytes.prefix(2) == [0x62, 0x18])
        #expect(n.remoteSetup == .active && n.localDTLSRole == .server)
        #expect(n.remoteICEUfrag == "hMuWFSvrvuStGQIF")
        #expect(n.remoteSSRC == 920_256_325)
        // Component-2 candidates are kept raw; filtering them is ICE's job.
        #expect(n.remoteCandidates.count == 8)
        #expect(n.remoteEndOfCandidates)
        #expect(n.rtcpReducedSize)
        // The excerpt ends before pion's second m-line: no data channel in this answer.
        #expect(n.dataChannel == nil)
    }

    @Test("FreeSWITCH (aiortc tests): PCMA only is not an answer we can use")
    func freeswitchAnswer() throws {
        #expect(throws: SDPError.opusNotAccepted(codecs: "PCMA/8000, telephone-event/8000")) {
            try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: Fixtures.parse("freeswitch-pcma-answer.sdp"))
        }
        let error = SDPError.opusNotAccepted(codecs: "PCMA/8000, telephone-event/8000")
        #expect(error.description == "SDP: the answer does not accept Opus for audio (it answered: PCMA/8000, telephone-event/8000)")
    }

    @Test("Chrome data-channel-only answer (simple-peer#424): no audio")
    func chromeDataOnlyAnswer() throws {
        let answer = try Fixtures.parse("chrome-datachannel-answer.sdp")
        #expect(answer.media[0].sctpMap == SCTPMap(port: 5000, protocolName: "webrtc-datachannel", streams: 1024))
        #expect(answer.media[0].otherLines == [SDPLine(type: "b", value: "AS:30")])
        #expect(throws: SDPError.noAudio) {
            try NegotiatedSession.negotiate(localOffer: linnetOffer(), remoteAnswer: answer)
        }
    }

    @Test("answering aiortc's offer: its Opus payload type 96, its BUNDLE-tag candidates")
    func answerAiortcOffer() throws {
        let offer = try Fixtures.parse("aiortc-offer.sdp")
        let answer = try SessionDescription.answer(to: offer, fixtureLocal())
        #expect(answer.text.contains("m=audio 9 UDP/TLS/RTP/SAVPF 96\r\n"))
        #expect(answer.text.contains("a=rtpmap:96 opus/48000/2\r\n"))
        #expect(answer.text.contains("a=setup:active\r\n"))
        #expect(answer.bundleGroup?.mids == ["0", "1"])
        let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
        #expect(n.opusPayloadType == 96)
        #expect(n.remoteFingerprints.count == 3)
        #expect(n.remoteSetup == .actpass && n.localDTLSRole == .client)
        #expect(n.remoteICEUfrag == "3HNM")
        #expect(n.remoteSSRC == 3_812_977_120)
        // The data section's own candidates (ports 33106, 38460) are for a transport
        // BUNDLE drops; only the tag section's are ours to check.
        #expect(n.remoteCandidates.count == 2)
        #expect(n.remoteCandidates.allSatisfy { $0.contains(" 45476 ") || $0.contains(" 59654 ") })
        #expect(n.remoteCandidatesBySection.map(\.candidates.count) == [2, 2])
        #expect(!n.rtcpReducedSize)
        #expect(n.dataChannel == NegotiatedDataChannel(mid: "1", remoteSCTPPort: 5000, remoteMaxMessageSize: 262_144))
    }

    @Test("answering Chrome's audio offer (aiortc tests): Opus 111, mid 'audio', TCP candidates kept raw")
    func answerChromeOffer() throws {
        let offer = try Fixtures.parse("chrome-audio-offer.sdp")
        let answer = try SessionDescription.answer(to: offer, fixtureLocal())
        #expect(answer.media.count == 1 && answer.media[0].mid == "audio")
        #expect(answer.bundleGroup?.mids == ["audio"])
        let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
        #expect(n.opusPayloadType == 111)
        #expect(n.remoteOpusParameters == "minptime=10;useinbandfec=1")
        #expect(n.remoteICEUfrag == "5+Ix" && n.remoteICEPwd == "uK8IlylxzDMUhrkVzdmj0M+v")
        #expect(n.remoteCandidates.count == 4)
        #expect(!n.remoteEndOfCandidates)
        #expect(n.remoteSSRC == 1_944_796_561)
        #expect(n.localDTLSRole == .client)
        #expect(n.dataChannel == nil)
    }

    @Test("answering Firefox's audio offer (aiortc tests): session-level fingerprint, Opus 109")
    func answerFirefoxOffer() throws {
        let offer = try Fixtures.parse("firefox-audio-offer.sdp")
        #expect(offer.media[0].extensionMaps.first == ExtensionMap(id: 1, direction: .sendonly,
                                                                   uri: "urn:ietf:params:rtp-hdrext:ssrc-audio-level"))
        let answer = try SessionDescription.answer(to: offer, fixtureLocal())
        #expect(answer.text.contains("m=audio 9 UDP/TLS/RTP/SAVPF 109\r\n"))
        #expect(answer.media[0].mid == "sdparta_0")
        let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
        #expect(n.opusPayloadType == 109)
        #expect(n.remoteFingerprints.count == 1 && n.remoteFingerprints[0].bytes.first == 0xEB)
        #expect(n.remoteICEUfrag == "403a81e1")
        #expect(n.remoteCandidates.count == 8)
        #expect(n.remoteEndOfCandidates)
        #expect(n.remoteSSRC == 882_128_807)
    }

    @Test("Firefox's legacy data-channel offer (aiortc tests): parsed, but no audio to answer")
    func firefoxDataOffer() throws {
        let offer = try Fixtures.parse("firefox-datachannel-offer.sdp")
        #expect(offer.media[0].proto == "DTLS/SCTP" && offer.media[0].formats == ["5000"])
        #expect(offer.media[0].sctpMap == SCTPMap(port: 5000, protocolName: "webrtc-datachannel", streams: 256))
        #expect(offer.media[0].maxMessageSize == 1_073_741_823)
        #expect(offer.transport(for: 0).fingerprints.count == 1)
        #expect(throws: SDPError.noAudio) { try SessionDescription.answer(to: offer, fixtureLocal()) }
    }
}
