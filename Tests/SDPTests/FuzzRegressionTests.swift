import Testing
import Wire
@testable import SDP

/// Inputs found by Fuzz/ (scripts/fuzz.sh, target fuzz_sdp), byte for byte.
@Suite struct FuzzRegressionTests {
    /// Two m-sections with `a=mid:0`: the answer builder accepted the offer, then
    /// negotiating that answer paired the offer's audio with the other section (matching
    /// is by mid) and refused our own answer with a misleading "answered by a p section".
    /// A repeated mid is refused up front now, on both paths.
    @Test func duplicateMidIsRefused() throws {
        let offerText = "v=0\nm=p 9 U\na=mid:0\nm=audio 9 V 111\ra=ice-ufrag:4\na=ice-pwd:W\ra=fingerprint:6 0A\na=mid:0\ra=rtcp-mux\na=rtpmap:111 opus/48000"
        let offer = try SessionDescription.parse(offerText)
        #expect(offer.media.count == 2)
        #expect(offer.media.map(\.mid) == ["0", "0"])
        #expect(throws: SDPError.duplicateMid("0")) { try SessionDescription.answer(to: offer, fixtureLocal()) }

        // Our offer answered by a description with a repeated mid.
        let ours = try SessionDescription.offer(fixtureLocal())
        var answer = try SessionDescription.parse(try Fixtures.text("aiortc-answer.sdp"))
        #expect(throws: Never.self) { try NegotiatedSession.negotiate(localOffer: ours, remoteAnswer: answer) }
        answer.media.append(answer.media[0])
        #expect(throws: SDPError.duplicateMid(answer.media[0].mid ?? "")) {
            try NegotiatedSession.negotiate(localOffer: ours, remoteAnswer: answer)
        }
    }
}
