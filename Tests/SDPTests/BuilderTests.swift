import Testing
import Wire
@testable import SDP

@Suite("SDP builder and negotiation")
struct BuilderTests {
    @Test("our offer is exactly the hand-written Fixtures/linnet-offer.sdp")
    func offerText() throws {
        let offer = try SessionDescription.offer(fixtureLocal())
        let expected = try Fixtures.text("linnet-offer.sdp")
        #expect(offer.text == expected)
    }

    @Test("offer: build → text → parse gives the same model")
    func offerRoundTrip() throws {
        let offer = try SessionDescription.offer(fixtureLocal())
        #expect(try SessionDescription.parse(offer.text) == offer)
        var noData = fixtureLocal()
        noData.dataChannel = nil
        noData.audio.payloadType = 109
        let audioOnly = try SessionDescription.offer(noData)
        #expect(try SessionDescription.parse(audioOnly.text) == audioOnly)
        #expect(audioOnly.media.count == 1)
        #expect(audioOnly.bundleGroup?.mids == ["0"])
        #expect(audioOnly.media[0].opusPayloadType == 109)
        #expect(audioOnly.text.contains("a=fmtp:109 minptime=10;useinbandfec=1\r\n"))
    }

    @Test("the offer claims what PROTOCOLS.md requires and not trickle")
    func offerContents() throws {
        let text = try SessionDescription.offer(fixtureLocal()).text
        for line in ["a=group:BUNDLE 0 1", "a=rtcp-mux", "a=rtcp-rsize", "a=setup:actpass",
                     "a=ssrc:305419896 cname:linnet-cname", "a=msid:linnet mic", "a=end-of-candidates",
                     "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "a=sctp-port:5000",
                     "a=max-message-size:65536", "a=rtpmap:111 opus/48000/2"] {
            #expect(text.contains(line + "\r\n"), "missing \(line)")
        }
        #expect(!text.contains("trickle"))
        #expect(!text.contains("ice-lite"))
    }

    @Test("builder input that would break the text is refused")
    func validation() {
        func refuses(_ change: (inout LocalDescription) -> Void) -> SDPError? {
            var l = fixtureLocal()
            change(&l)
            do {
                _ = try SessionDescription.offer(l)
                return nil
            } catch {
                return error
            }
        }
        #expect(refuses { $0.iceUfrag = "ab c" } == .invalidValue(field: "ice-ufrag"))
        #expect(refuses { $0.iceUfrag = "abc" } == .invalidValue(field: "ice-ufrag"))
        #expect(refuses { $0.icePwd = "tooshort" } == .invalidValue(field: "ice-pwd"))
        #expect(refuses { $0.candidates.append("1 1 udp 1 192.0.2.1 9 typ host\r\na=ice-lite") }
            == .invalidValue(field: "a candidate"))
        #expect(refuses { $0.fingerprints = [] } == .invalidValue(field: "fingerprint (none given)"))
        #expect(refuses { $0.fingerprints = [Fingerprint(algorithm: "sha-256", bytes: [1, 2, 3])] }
            == .invalidValue(field: "fingerprint sha-256"))
        #expect(refuses { $0.audio.payloadType = 0 } == .invalidValue(field: "the Opus payload type (96-127)"))
        #expect(refuses { $0.audio.cname = "has space" } == .invalidValue(field: "cname"))
        #expect(refuses { $0.audio.streamID = String(repeating: "s", count: 65) }
            == .invalidValue(field: "the msid stream id"))
        #expect(refuses { $0.dataChannel?.mid = "0" } == .invalidValue(field: "the data channel mid"))
        #expect(refuses { $0.sessionID = 1 << 63 } == .invalidValue(field: "the session id (below 2^63)"))
        #expect(refuses { _ in } == nil)
    }

    /// A remote answer written for these tests from the offer above, as a peer that
    /// keeps Opus 111, answers `active` and writes everything once in the first section.
    private func sampleAnswer(setup: String = "active", dataPort: Int = 9, audioFormats: String = "111",
                              rtpmap: String = "a=rtpmap:111 opus/48000/2") -> String {
        """
        v=0
        o=- 99 1 IN IP4 0.0.0.0
        s=-
        t=0 0
        a=group:BUNDLE 0 1
        m=audio 9 UDP/TLS/RTP/SAVPF \(audioFormats)
        c=IN IP4 0.0.0.0
        a=mid:0
        a=ice-ufrag:remU
        a=ice-pwd:remotepasswordremotepw
        a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
        a=setup:\(setup)
        a=candidate:1 1 udp 2130706431 192.0.2.9 40000 typ host
        a=rtcp-mux
        a=rtcp-rsize
        a=recvonly
        \(rtpmap)
        a=ssrc:777 cname:remote
        m=application \(dataPort) UDP/DTLS/SCTP webrtc-datachannel
        c=IN IP4 0.0.0.0
        a=mid:1
        a=sctp-port:5001
        """
    }

    @Test("negotiating our offer with an answer")
    func negotiateAnswer() throws {
        let offer = try SessionDescription.offer(fixtureLocal())
        let answer = try SessionDescription.parse(sampleAnswer())
        let n = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: answer)
        #expect(n.opusPayloadType == 111)
        #expect(n.remoteSSRC == 777)
        #expect(n.remoteICEUfrag == "remU" && n.remoteICEPwd == "remotepasswordremotepw")
        #expect(n.remoteFingerprints.count == 1 && n.remoteFingerprints[0].algorithm == "sha-256")
        #expect(n.remoteSetup == .active && n.localDTLSRole == .server)
        #expect(n.remoteCandidates == ["1 1 udp 2130706431 192.0.2.9 40000 typ host"])
        #expect(n.remoteCandidatesBySection == [SectionCandidates(mid: "0", index: 0, candidates: n.remoteCandidates)])
        #expect(!n.remoteEndOfCandidates)
        #expect(n.rtcpReducedSize && n.bundled)
        // The remote only receives, so we only send.
        #expect(n.audioDirection == .sendonly)
        #expect(n.dataChannel == NegotiatedDataChannel(mid: "1", remoteSCTPPort: 5001, remoteMaxMessageSize: 65536))

        let passive = try NegotiatedSession.negotiate(
            localOffer: offer, remoteAnswer: SessionDescription.parse(sampleAnswer(setup: "passive")))
        #expect(passive.localDTLSRole == .client)

        let rejected = try NegotiatedSession.negotiate(
            localOffer: offer, remoteAnswer: SessionDescription.parse(sampleAnswer(dataPort: 0)))
        #expect(!rejected.dataChannelAccepted)
    }

    @Test("answers that make the call unusable are typed errors")
    func unusableAnswers() throws {
        let offer = try SessionDescription.offer(fixtureLocal())
        func negotiate(_ text: String) -> SDPError? {
            do {
                _ = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: SessionDescription.parse(text))
                return nil
            } catch {
                return error
            }
        }
        #expect(negotiate(sampleAnswer(setup: "actpass"))
            == .invalidSetup(reason: "the answer says actpass, which only an offer may say"))
        #expect(negotiate(sampleAnswer(audioFormats: "0", rtpmap: "a=rtpmap:0 PCMU/8000"))
            == .opusNotAccepted(codecs: "PCMU/8000"))
        #expect(negotiate(sampleAnswer().replacingOccurrences(of: "m=audio 9", with: "m=audio 0")) == .audioRejected)
        let noFingerprint = sampleAnswer().split(separator: "\n").filter { !$0.contains("fingerprint") }
            .joined(separator: "\n")
        #expect(negotiate(noFingerprint) == .noFingerprint(section: "audio section (mid 0)"))
        let noPwd = sampleAnswer().split(separator: "\n").filter { !$0.contains("ice-pwd") }.joined(separator: "\n")
        #expect(negotiate(noPwd) == .noICECredentials(section: "audio section (mid 0)"))
    }

    @Test("answering a remote offer: Opus PT kept, others rejected, DTLS client by default")
    func answerer() throws {
        let remoteOffer = """
        v=0
        o=- 5 2 IN IP4 127.0.0.1
        s=-
        t=0 0
        a=group:BUNDLE a v d
        a=ice-ufrag:offU
        a=ice-pwd:offerpasswordofferpassw
        a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
        m=audio 9 UDP/TLS/RTP/SAVPF 0 109
        c=IN IP4 0.0.0.0
        a=mid:a
        a=setup:actpass
        a=sendonly
        a=rtcp-mux
        a=rtpmap:0 PCMU/8000
        a=rtpmap:109 opus/48000/2
        a=ssrc:42 cname:x
        a=candidate:1 1 udp 2130706431 192.0.2.4 4000 typ host
        m=video 9 UDP/TLS/RTP/SAVPF 96
        a=mid:v
        a=rtpmap:96 VP8/90000
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=mid:d
        a=sctp-port:5000
        """
        let offer = try SessionDescription.parse(remoteOffer)
        let answer = try SessionDescription.answer(to: offer, fixtureLocal())
        #expect(try SessionDescription.parse(answer.text) == answer)
        #expect(answer.media.count == 3)
        #expect(answer.media.map(\.mid) == ["a", "v", "d"])
        #expect(answer.media[0].formats == ["109"] && answer.media[0].opusPayloadType == 109)
        #expect(answer.media[0].direction == .recvonly)
        // We do not send, so we announce no SSRC or msid.
        #expect(answer.media[0].ssrcs.isEmpty && answer.media[0].msids.isEmpty)
        #expect(!answer.media[0].rtcpReducedSize)
        #expect(answer.media[1].isRejected && answer.media[1].formats == ["96"] && answer.media[1].kind == .video)
        #expect(answer.media[1].iceUfrag == nil && answer.media[1].candidates.isEmpty)
        #expect(answer.media[2].port == 9 && answer.media[2].sctpPort == 5000)
        #expect(answer.bundleGroup?.mids == ["a", "d"])
        #expect(answer.media[0].setup == .active && answer.media[2].setup == .active)

        let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
        #expect(n.opusPayloadType == 109)
        #expect(n.localDTLSRole == .client && n.remoteSetup == .actpass)
        #expect(n.remoteICEUfrag == "offU")
        #expect(n.remoteSSRC == 42)
        #expect(n.audioDirection == .recvonly)
        #expect(n.remoteCandidates == ["1 1 udp 2130706431 192.0.2.4 4000 typ host"])
        #expect(n.dataChannel?.remoteSCTPPort == 5000 && n.dataChannel?.remoteMaxMessageSize == 65536)

        let server = try SessionDescription.answer(to: offer, fixtureLocal(), role: .server)
        #expect(server.media[0].setup == .passive)
        #expect(try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: server).localDTLSRole == .server)

        // An offer that says active leaves us passive whatever we prefer.
        let activeOffer = try SessionDescription.parse(remoteOffer.replacingOccurrences(of: "a=setup:actpass", with: "a=setup:active"))
        #expect(try SessionDescription.answer(to: activeOffer, fixtureLocal()).media[0].setup == .passive)
    }

    @Test("offers we cannot answer are typed errors")
    func unanswerableOffers() throws {
        let base = "v=0\no=- 5 2 IN IP4 127.0.0.1\ns=-\nt=0 0\na=ice-ufrag:offU\na=ice-pwd:offerpasswordofferpassw\na=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08\n"
        func answer(_ media: String) -> SDPError? {
            do {
                _ = try SessionDescription.answer(to: SessionDescription.parse(base + media), fixtureLocal())
                return nil
            } catch {
                return error
            }
        }
        #expect(answer("m=audio 9 UDP/TLS/RTP/SAVPF 0 8\na=rtcp-mux\n") == .opusNotOffered(codecs: "PCMU/8000, PCMA/8000"))
        #expect(answer("m=audio 9 UDP/TLS/RTP/SAVPF 111\na=rtpmap:111 opus/48000/2\n") == .rtcpMuxRequired)
        #expect(answer("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\n") == .noAudio)
        #expect(answer("m=audio 9 UDP/TLS/RTP/SAVPF 111\na=rtpmap:111 opus/48000/2\na=rtcp-mux\na=setup:holdconn\n")
            == .invalidSetup(reason: "the offer says a=setup:holdconn"))
        #expect(answer("m=audio 9 UDP/TLS/RTP/SAVPF 111\na=rtpmap:111 opus/48000/2\na=rtcp-mux\n") == nil)
    }
}
