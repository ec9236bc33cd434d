import Testing
import Wire
@testable import SDP

/// A Chrome-style offer written by hand for these tests: session-level nothing, all
/// transport attributes per section, a candidate with a trailing `ufrag`, a ufrag with
/// `/`, header extensions with and without direction, an unknown attribute and a b= line.
private let browserStyleOffer = """
v=0
o=- 4611731400430051336 2 IN IP4 127.0.0.1
s=-
t=0 0
a=group:BUNDLE 0 1
a=extmap-allow-mixed
a=msid-semantic: WMS stream1
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 0 8 126
c=IN IP4 0.0.0.0
b=AS:64
a=rtcp:9 IN IP4 0.0.0.0
a=candidate:3813392066 1 udp 2122260223 192.0.2.5 54321 typ host generation 0 ufrag a/b+ network-id 1
a=candidate:559267639 1 tcp 1518280447 192.0.2.5 9 typ host tcptype active generation 0
a=ice-ufrag:a/b+
a=ice-pwd:Hx0sUzL3yJ2aS9/sUv1pQz+A
a=ice-options:trickle
a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:0
a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level
a=extmap:2/recvonly urn:ietf:params:rtp-hdrext:csrc-audio-level vad=on
a=sendrecv
a=msid:stream1 track1
a=rtcp-mux
a=rtcp-rsize
a=rtpmap:111 opus/48000/2
a=rtcp-fb:111 transport-cc
a=fmtp:111 minptime=10;useinbandfec=1
a=rtpmap:63 red/48000/2
a=fmtp:63 111/111
a=rtpmap:126 telephone-event/8000
a=ssrc:1001 cname:abc+def
a=ssrc:1001 msid:stream1 track1
a=x-unknown:some value
m=application 9 UDP/DTLS/SCTP webrtc-datachannel
c=IN IP4 0.0.0.0
a=ice-ufrag:a/b+
a=ice-pwd:Hx0sUzL3yJ2aS9/sUv1pQz+A
a=fingerprint:SHA-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
a=setup:actpass
a=mid:1
a=sctp-port:5000
a=max-message-size:262144

"""

private let fingerprintBytes: [UInt8] = [
    0x6B, 0x8B, 0xF0, 0x65, 0x5F, 0x78, 0xE2, 0x51, 0x3B, 0xAC, 0x6F, 0xF3, 0x3F, 0x46, 0x1B, 0x35,
    0xDC, 0xB8, 0x5F, 0x64, 0x1A, 0x24, 0xC2, 0x43, 0xF0, 0xA1, 0x58, 0xD0, 0xA1, 0x2C, 0x19, 0x08,
]

@Suite("SDP parser")
struct ParserTests {
    @Test("a browser-style offer: every modelled field as written")
    func browserStyleFields() throws {
        let d = try SessionDescription.parse(browserStyleOffer)
        #expect(d.origin.sessionID == "4611731400430051336")
        #expect(d.origin.sessionVersion == "2")
        #expect(d.origin.address == "127.0.0.1")
        #expect(d.timing == "0 0")
        #expect(d.bundleGroup == MediaGroup(semantics: "BUNDLE", mids: ["0", "1"]))
        #expect(d.msidSemantic == "WMS stream1")
        #expect(d.otherAttributes == [SDPAttribute(name: "extmap-allow-mixed")])
        #expect(d.media.count == 2)

        let a = d.media[0]
        #expect(a.kind == .audio)
        #expect(a.port == 9)
        #expect(a.proto == "UDP/TLS/RTP/SAVPF")
        #expect(a.formats == ["111", "63", "0", "8", "126"])
        #expect(a.connection == Connection(networkType: "IN", addressType: "IP4", address: "0.0.0.0"))
        #expect(a.otherLines == [SDPLine(type: "b", value: "AS:64")])
        #expect(a.candidates == [
            "3813392066 1 udp 2122260223 192.0.2.5 54321 typ host generation 0 ufrag a/b+ network-id 1",
            "559267639 1 tcp 1518280447 192.0.2.5 9 typ host tcptype active generation 0",
        ])
        #expect(a.iceUfrag == "a/b+")
        #expect(a.icePwd == "Hx0sUzL3yJ2aS9/sUv1pQz+A")
        #expect(a.iceOptions == ["trickle"])
        #expect(a.fingerprints == [Fingerprint(algorithm: "sha-256", bytes: fingerprintBytes)])
        #expect(a.setup == .actpass)
        #expect(a.mid == "0")
        #expect(a.extensionMaps == [
            ExtensionMap(id: 1, uri: "urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
            ExtensionMap(id: 2, direction: .recvonly, uri: "urn:ietf:params:rtp-hdrext:csrc-audio-level",
                         attributes: "vad=on"),
        ])
        #expect(a.direction == .sendrecv)
        #expect(a.msids == [MediaStreamID(stream: "stream1", track: "track1")])
        #expect(a.rtcpMux && a.rtcpReducedSize)
        #expect(a.rtpMaps == [
            RTPMap(payloadType: 111, encoding: "opus", clockRate: 48000, channels: 2),
            RTPMap(payloadType: 63, encoding: "red", clockRate: 48000, channels: 2),
            RTPMap(payloadType: 126, encoding: "telephone-event", clockRate: 8000),
        ])
        #expect(a.rtcpFeedback == [RTCPFeedback(format: "111", feedback: "transport-cc")])
        #expect(a.formatParameters(for: 111) == "minptime=10;useinbandfec=1")
        #expect(a.formatParameters(for: 63) == "111/111")
        #expect(a.formatParameters.first?.parameter("useinbandfec") == "1")
        #expect(a.formatParameters.first?.parameter("MINPTIME") == "10")
        #expect(a.formatParameters.first?.parameter("stereo") == nil)
        #expect(a.ssrcs == [SSRCAttribute(ssrc: 1001, attribute: "cname", value: "abc+def"),
                            SSRCAttribute(ssrc: 1001, attribute: "msid", value: "stream1 track1")])
        #expect(a.announcedSSRCs == [1001])
        #expect(a.opusPayloadType == 111)
        #expect(a.otherAttributes == [SDPAttribute(name: "rtcp", value: "9 IN IP4 0.0.0.0"),
                                      SDPAttribute(name: "x-unknown", value: "some value")])
        #expect(a.codecSummary == "opus/48000/2, red/48000/2, PCMU/8000, PCMA/8000, telephone-event/8000")

        let dc = d.media[1]
        #expect(dc.kind == .application && dc.isSCTP && !dc.isRTP)
        #expect(dc.formats == ["webrtc-datachannel"])
        // `SHA-256` is case-insensitive (RFC 8122 §5) and kept lowercase.
        #expect(dc.fingerprints == [Fingerprint(algorithm: "sha-256", bytes: fingerprintBytes)])
        #expect(dc.sctpPort == 5000)
        #expect(dc.maxMessageSize == 262_144)
        #expect(d.dataChannelIndex == 1 && d.audioIndex == 0)
    }

    @Test("CRLF, LF, bare CR and trailing white space give the same model")
    func lineEnds() throws {
        let lf = try SessionDescription.parse(browserStyleOffer)
        let crlfText = try SessionDescription.parse(crlf(browserStyleOffer))
        let cr = try SessionDescription.parse(browserStyleOffer.replacingOccurrences(of: "\n", with: "\r"))
        let padded = try SessionDescription.parse(browserStyleOffer.replacingOccurrences(of: "\n", with: "  \r\n"))
        #expect(crlfText == lf)
        #expect(cr == lf)
        #expect(padded == lf)
    }

    @Test("parse → text → parse is stable, and the text uses CRLF only")
    func roundTrip() throws {
        let d = try SessionDescription.parse(browserStyleOffer)
        let text = d.text
        #expect(try SessionDescription.parse(text) == d)
        let bytes = Array(text.utf8)
        for (i, b) in bytes.enumerated() where b == 0x0A {
            #expect(i > 0 && bytes[i - 1] == 0x0D)
        }
        // Unknown lines survive.
        #expect(text.contains("a=x-unknown:some value\r\n"))
        #expect(text.contains("a=extmap-allow-mixed\r\n"))
        #expect(text.contains("b=AS:64\r\n"))
    }

    @Test("session-level credentials, fingerprint and setup apply to every section")
    func sessionLevelTransport() throws {
        let text = """
        v=0
        o=- 1 1 IN IP4 0.0.0.0
        s=-
        t=0 0
        a=ice-ufrag:sess
        a=ice-pwd:sessionpasswordsessionpw
        a=fingerprint:sha-1 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33
        a=setup:passive
        m=audio 9 UDP/TLS/RTP/SAVPF 111
        a=rtpmap:111 opus/48000/2
        a=candidate:1 1 udp 1 192.0.2.1 1000 typ host
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=ice-ufrag:media
        a=ice-pwd:mediapasswordmediapasswd
        a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
        """
        let d = try SessionDescription.parse(text)
        let t0 = d.transport(for: 0)
        #expect(t0.iceUfrag == "sess" && t0.icePwd == "sessionpasswordsessionpw")
        #expect(t0.fingerprints.map(\.algorithm) == ["sha-1"])
        #expect(t0.fingerprints.first?.bytes.count == 20)
        #expect(t0.setup == .passive)
        #expect(t0.candidates == ["1 1 udp 1 192.0.2.1 1000 typ host"])
        // Media level overrides session level (RFC 8839 §5.4, RFC 8122 §5).
        let t1 = d.transport(for: 1)
        #expect(t1.iceUfrag == "media" && t1.icePwd == "mediapasswordmediapasswd")
        #expect(t1.fingerprints == [Fingerprint(algorithm: "sha-256", bytes: fingerprintBytes)])
        #expect(t1.setup == .passive)
        // Not bundled: the data section's candidates are its own (none).
        #expect(t1.candidates.isEmpty)
    }

    @Test("bundled sections take transport attributes and candidates from the BUNDLE tag")
    func bundleTagTransport() throws {
        let text = """
        v=0
        o=- 1 1 IN IP4 0.0.0.0
        s=-
        t=0 0
        a=group:BUNDLE a d
        m=audio 9 UDP/TLS/RTP/SAVPF 111
        a=mid:a
        a=ice-ufrag:tagU
        a=ice-pwd:tagpasswordtagpassword12
        a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08
        a=setup:active
        a=candidate:1 1 udp 1 192.0.2.1 1000 typ host
        a=candidate:2 1 udp 1 192.0.2.2 1000 typ host
        a=rtpmap:111 opus/48000/2
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel
        a=mid:d
        a=candidate:2 1 udp 1 192.0.2.2 1000 typ host
        a=candidate:3 1 udp 1 192.0.2.3 1000 typ host
        a=end-of-candidates
        """
        let d = try SessionDescription.parse(text)
        #expect(d.bundleTagIndex(for: 1) == 0)
        let t = d.transport(for: 1)
        #expect(t.iceUfrag == "tagU")
        #expect(t.setup == .active)
        #expect(t.fingerprints.count == 1)
        // The BUNDLE tag's candidates: the data section's "3" belongs to a transport
        // BUNDLE discards.
        #expect(t.candidates == ["1 1 udp 1 192.0.2.1 1000 typ host", "2 1 udp 1 192.0.2.2 1000 typ host"])
        #expect(!t.endOfCandidates)
        #expect(d.transport(for: 0) == t)

        // A tag section without candidates: all bundled sections' candidates, once each.
        let noTagCandidates = try SessionDescription.parse(text.split(separator: "\n")
            .filter { !($0.hasPrefix("a=candidate:1 ") || $0.hasPrefix("a=candidate:2 ")) }
            .joined(separator: "\n"))
        #expect(noTagCandidates.media[0].candidates.isEmpty)
        #expect(noTagCandidates.transport(for: 0).candidates == ["3 1 udp 1 192.0.2.3 1000 typ host"])
        #expect(noTagCandidates.transport(for: 0).endOfCandidates)
    }

    @Test("legacy data channel: DTLS/SCTP with a=sctpmap")
    func legacySCTPMap() throws {
        let text = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=application 9 DTLS/SCTP 5000\r\nc=IN IP4 0.0.0.0\r\na=sctpmap:5000 webrtc-datachannel 1024\r\n"
        let d = try SessionDescription.parse(text)
        #expect(d.dataChannelIndex == 0)
        #expect(d.media[0].sctpMap == SCTPMap(port: 5000, protocolName: "webrtc-datachannel", streams: 1024))
        #expect(try SessionDescription.parse(d.text) == d)
    }

    @Test("rejected sections, port counts and unknown media kinds")
    func oddMLines() throws {
        let text = "v=0\no=- 1 2 IN IP4 127.0.0.1\ns=-\nt=0 0\nm=video 0 UDP/TLS/RTP/SAVPF 96\nm=audio 49170/2 RTP/AVP 0\nm=message 9 TCP/MSRP *\n"
        let d = try SessionDescription.parse(text)
        #expect(d.media[0].isRejected && d.media[0].kind == .video)
        #expect(d.media[1].port == 49170 && d.media[1].portCount == 2)
        #expect(d.media[1].codecSummary == "PCMU/8000")
        #expect(d.media[1].opusPayloadType == nil)
        #expect(d.media[2].kind == .other("message"))
        #expect(try SessionDescription.parse(d.text) == d)
    }

    @Test("Opus is found case-insensitively and in m-line order, not rtpmap order")
    func opusLookup() throws {
        let text = "v=0\no=- 1 2 IN IP4 127.0.0.1\ns=-\nt=0 0\nm=audio 9 UDP/TLS/RTP/SAVPF 0 109 111\na=rtpmap:111 opus/48000/2\na=rtpmap:109 OPUS/48000/2\n"
        let d = try SessionDescription.parse(text)
        #expect(d.media[0].opusPayloadType == 109)
        // Opus at a clock rate other than 48000 is not RFC 7587 Opus.
        let wrong = "v=0\no=- 1 2 IN IP4 127.0.0.1\ns=-\nt=0 0\nm=audio 9 RTP/AVP 96\na=rtpmap:96 opus/16000/1\n"
        #expect(try SessionDescription.parse(wrong).media[0].opusPayloadType == nil)
    }
}
