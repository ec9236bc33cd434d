import Testing
import Wire
@testable import SDP

/// Hostile and broken input: every case is a typed error, none traps.
@Suite("SDP malformed input")
struct MalformedTests {
    private func parseError(_ bytes: [UInt8]) -> SDPError? {
        do {
            _ = try SessionDescription.parse(bytes: bytes)
            return nil
        } catch {
            return error
        }
    }

    private func parseError(_ text: String) -> SDPError? { parseError(Array(text.utf8)) }

    @Test("empty and white-space-only input")
    func empty() {
        #expect(parseError([]) == .empty)
        #expect(parseError(" \r\n\r\n\t\n") == .empty)
    }

    @Test("an HTML error page and a JSON error body are not SDP, and say what they start with")
    func htmlAndJSON() {
        let html = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head><body>v=0</body></html>\n"
        #expect(parseError(html) == .notSDP(preview: "<!DOCTYPE html>.<html><head><title>502 B"))
        let json = #"{"error":{"message":"Invalid SDP offer.","code":"invalid_offer"}}"#
        guard case .notSDP(let preview) = parseError(json) else {
            Issue.record("expected notSDP")
            return
        }
        #expect(preview.hasPrefix("{\"error\""))
        #expect(SDPError.notSDP(preview: preview).description.contains("not a session description"))
    }

    @Test("binary garbage: seeded random bytes never trap and never parse")
    func garbage() {
        var rng = SeededRandom(seed: 0x5D9)
        for _ in 0..<500 {
            let count = Int(rng.next() % 600)
            var bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if bytes.first == UInt8(ascii: "v") { bytes[0] = 0 }
            #expect(parseError(bytes) != nil)
        }
    }

    @Test("mutations of a real answer: truncation and byte flips give a model or a typed error")
    func mutations() throws {
        let base = try Fixtures.bytes("aiortc-answer.sdp")
        // Every truncation point.
        for end in stride(from: 0, through: base.count, by: 7) {
            _ = try? SessionDescription.parse(bytes: Array(base[..<end]))
        }
        var rng = SeededRandom(seed: 42)
        let offer = try SessionDescription.offer(fixtureLocal())
        for _ in 0..<400 {
            var bytes = base
            for _ in 0..<(1 + rng.next() % 4) {
                bytes[Int(rng.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: rng.next())
            }
            // Parse, and when it parses, negotiate: both may fail, neither may trap.
            if let d = try? SessionDescription.parse(bytes: bytes) {
                _ = try? NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: d)
                _ = d.text
            }
        }
    }

    @Test("absurdly long lines and oversized bodies are refused before they grow")
    func sizes() {
        let longLine = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\na=x-junk:" + String(repeating: "A", count: 100_000) + "\r\n"
        #expect(parseError(longLine) == .lineTooLong(line: 3, length: 100_009, limit: SDPLimits.maximumLineLength))
        let many = "v=0\r\n" + String(repeating: "a=x:1\r\n", count: 50_000)
        #expect(parseError(many) == .tooLarge(size: 350_005, limit: SDPLimits.maximumSize))
        // A long first line that is not SDP is reported as not SDP.
        #expect(parseError(String(repeating: "x", count: 10_000)) == .notSDP(preview: String(repeating: "x", count: 40)))
    }

    @Test("bad syntax where it matters names the line")
    func badLines() {
        let head = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
        #expect(parseError("v=1\r\n") == .invalidLine(line: 1, reason: "the version must be v=0, found \"v=1\""))
        #expect(parseError(head + "m=audio nine UDP/TLS/RTP/SAVPF 111\r\n")
            == .invalidLine(line: 5, reason: "the m= port \"nine\" is not a number from 0 to 65535"))
        #expect(parseError(head + "m=audio 70000 UDP/TLS/RTP/SAVPF 111\r\n")
            == .invalidLine(line: 5, reason: "the m= port \"70000\" is not a number from 0 to 65535"))
        #expect(parseError(head + "m=audio 9\r\n") == .invalidLine(line: 5, reason: "an m= line needs media, port and protocol"))
        #expect(parseError(head + "m=audio 9 RTP/AVP 111\r\na=rtpmap:111 opus\r\n")
            == .invalidLine(line: 6, reason: "a=rtpmap must be <payload type> <encoding>/<clock rate>[/<channels>], found \"111 opus\""))
        #expect(parseError(head + "m=audio 9 RTP/AVP 200\r\na=rtpmap:200 opus/48000/2\r\n") != nil)
        #expect(parseError(head + "a=fingerprint:sha-256 AB:CD\r\n")
            == .invalidLine(line: 5, reason: "a=fingerprint has 2 bytes, sha-256 has 32"))
        #expect(parseError(head + "a=fingerprint:sha-256 ZZ:11\r\n")
            == .invalidLine(line: 5, reason: "a=fingerprint needs a hash function and hexadecimal bytes"))
        #expect(parseError(head + "a=setup:sometimes\r\n")
            == .invalidLine(line: 5, reason: "a=setup must be actpass, active, passive or holdconn, found \"sometimes\""))
        #expect(parseError(head + "a=ice-ufrag:\r\n") == .invalidLine(line: 5, reason: "a=ice-ufrag must hold one non-empty value"))
        #expect(parseError(head + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=sctp-port:-1\r\n")
            == .invalidLine(line: 6, reason: "a=sctp-port \"-1\" is not a port number"))
        #expect(parseError(head + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=max-message-size:99999999999999999999999\r\n")
            == .invalidLine(line: 6, reason: "a=max-message-size \"99999999999999999999999\" is not a number"))
        #expect(parseError(head + "m=audio 9 RTP/AVP 0\r\na=ssrc:abc cname:x\r\n")
            == .invalidLine(line: 6, reason: "a=ssrc must be <32-bit ssrc> <attribute>, found \"abc cname:x\""))
        #expect(parseError(head + "this is not a line\r\n")
            == .invalidLine(line: 5, reason: "expected <letter>=<value>, found \"this is not a line\""))
        #expect(parseError(head + "a=x\u{0}y\r\n") == .invalidLine(line: 5, reason: "it contains a control character"))
        #expect(parseError(head + "v=0\r\n") == .invalidLine(line: 5, reason: "a second v= line"))
        // LF-only input counts lines the same way.
        #expect(parseError("v=0\no=- 1 1 IN IP4 0.0.0.0\ns=-\nt=0 0\na=setup:x\n")
            == .invalidLine(line: 5, reason: "a=setup must be actpass, active, passive or holdconn, found \"x\""))
    }

    @Test("tolerated oddities: unknown lines and attributes, missing o/s/t, odd extmap")
    func tolerated() throws {
        let d = try SessionDescription.parse("v=0\r\nx=whatever\r\nm=audio 9 RTP/AVP 0\r\na=extmap:x bogus\r\na=foo\r\nz=1\r\n")
        #expect(d.otherLines == [SDPLine(type: "x", value: "whatever")])
        #expect(d.media[0].otherAttributes == [SDPAttribute(name: "extmap", value: "x bogus"), SDPAttribute(name: "foo")])
        #expect(d.media[0].otherLines == [SDPLine(type: "z", value: "1")])
        #expect(try SessionDescription.parse(d.text) == d)
    }

    @Test("answers that are SDP but unusable: no fingerprint, no candidates, no credentials")
    func unusableAnswers() throws {
        let offer = try SessionDescription.offer(fixtureLocal())
        let aiortc = try Fixtures.text("aiortc-answer.sdp")
        func without(_ prefix: String) throws -> SessionDescription {
            try SessionDescription.parse(aiortc.replacingOccurrences(of: "\r\n", with: "\n")
                .split(separator: "\n").filter { !$0.hasPrefix(prefix) }.joined(separator: "\r\n"))
        }
        #expect(throws: SDPError.noFingerprint(section: "audio section (mid 0)")) {
            try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: without("a=fingerprint:"))
        }
        #expect(throws: SDPError.noICECredentials(section: "audio section (mid 0)")) {
            try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: without("a=ice-ufrag:"))
        }
        // Without candidates the answer is still usable (peer-reflexive discovery, RFC
        // 8445 §7.3.1.3): the negotiation reports none and ICE decides.
        let noCandidates = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: without("a=candidate:"))
        #expect(noCandidates.remoteCandidates.isEmpty && noCandidates.remoteCandidatesBySection.isEmpty)
        #expect(throws: SDPError.noAudio) {
            try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: SessionDescription.parse(
                "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"))
        }
    }

    @Test("every error has a readable description")
    func descriptions() {
        let all: [SDPError] = [
            .empty, .notSDP(preview: "<html>"), .tooLarge(size: 1, limit: 0), .lineTooLong(line: 1, length: 2, limit: 1),
            .invalidLine(line: 3, reason: "why"), .noAudio, .audioRejected, .opusNotOffered(codecs: "PCMU/8000"),
            .opusNotAccepted(codecs: "PCMU/8000"), .noFingerprint(section: "s"), .noICECredentials(section: "s"),
            .invalidSetup(reason: "r"), .rtcpMuxRequired, .mediaMismatch(reason: "r"), .invalidValue(field: "f"),
        ]
        for e in all {
            #expect(e.description.hasPrefix("SDP: "))
            #expect(e.description.count > 25)
        }
        #expect(SDPError.invalidLine(line: 3, reason: "why").description == "SDP: line 3 is malformed: why")
    }
}
