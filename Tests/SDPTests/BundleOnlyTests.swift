import Testing
@testable import SDP

/// GStreamer's webrtcbin (bundle-policy max-bundle, the default of its WHIP clients)
/// offers every section after the first with port 0 and `a=bundle-only` (RFC 8843 §6).
/// Port 0 there means "bundled", not "rejected": the data channel must be answered.
@Suite("SDP: bundle-only sections")
struct BundleOnlyTests {
    @Test("answering webrtcbin's max-bundle offer accepts its bundle-only data channel")
    func answerGStreamerOffer() throws {
        let offer = try Fixtures.parse("gstreamer-offer.sdp")
        #expect(offer.media[1].port == 0)
        #expect(!offer.media[1].isRejected)
        let answer = try SessionDescription.answer(to: offer, fixtureLocal())
        #expect(answer.text.contains("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"))
        #expect(answer.bundleGroup?.mids == ["audio0", "application1"])
        let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
        #expect(n.dataChannel?.mid == "application1")
        #expect(n.dataChannel?.remoteSCTPPort == 5000)
        // webrtcbin writes its candidates in the first section only.
        #expect(n.remoteCandidates == ["1 1 UDP 2015364095 127.0.0.1 54360 typ host"])
        #expect(n.remoteSetup == .actpass && n.localDTLSRole == .client)
    }

    @Test("port 0 without bundle-only is still a rejected section")
    func plainPortZeroIsRejected() {
        let m = MediaSection(kind: .application, port: 0, proto: "UDP/DTLS/SCTP", formats: ["webrtc-datachannel"])
        #expect(m.isRejected)
        var b = m
        b.otherAttributes = [SDPAttribute(name: "bundle-only")]
        #expect(!b.isRejected)
    }
}
