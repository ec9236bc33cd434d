import Testing
@testable import ICE
import Wire

@Suite struct CandidateParsing {
    @Test func chromeServerReflexiveWithExtensions() throws {
        let c = try Candidate(parsing: "a=candidate:842163049 1 udp 1677729535 203.0.113.7 51234 typ srflx raddr 192.168.1.2 rport 51235 generation 0 ufrag EsAw network-id 1 network-cost 10")
        #expect(c.foundation == "842163049")
        #expect(c.component == 1)
        #expect(c.transport == .udp)
        #expect(c.priority == 1_677_729_535)
        #expect(c.socketAddress == SocketAddress("203.0.113.7:51234"))
        #expect(c.type == .serverReflexive)
        #expect(c.relatedAddress == .ip(IPAddress("192.168.1.2")!))
        #expect(c.relatedPort == 51235)
        #expect(c.extensionValue("generation") == "0")
        #expect(c.extensionValue("ufrag") == "EsAw")
        #expect(c.extensionValue("network-id") == "1")
        #expect(c.extensionValue("network-cost") == "10")
        #expect(c.isUsable)
        // Serializes back to the same attribute value (without "a=").
        #expect(c.description == "candidate:842163049 1 udp 1677729535 203.0.113.7 51234 typ srflx raddr 192.168.1.2 rport 51235 generation 0 ufrag EsAw network-id 1 network-cost 10")
        #expect(try Candidate(parsing: c.description) == c)
    }

    @Test func ipv6HostUppercaseTransportAndCRLF() throws {
        let c = try Candidate(parsing: "candidate:1 1 UDP 2130706431 2001:db8::7 50000 typ host\r\n")
        #expect(c.transport == .udp)
        #expect(c.socketAddress == SocketAddress("[2001:db8::7]:50000"))
        #expect(c.type == .host)
        #expect(c.relatedAddress == nil && c.extensions.isEmpty)
        #expect(c.isUsable)
    }

    @Test func tcpCandidatesParseButAreUnusable() throws {
        // OpenAI offers TCP passive on 443 next to UDP; browsers send active ones on port 9.
        let passive = try Candidate(parsing: "candidate:2 1 TCP 2105458943 192.0.2.5 443 typ host tcptype passive")
        #expect(passive.transport == .tcp)
        #expect(passive.tcpType == "passive")
        #expect(!passive.isUsable)
        let active = try Candidate(parsing: "candidate:3 1 tcp 1518280447 192.0.2.5 9 typ host tcptype active generation 0")
        #expect(active.tcpType == "active" && !active.isUsable)
    }

    @Test func mdnsHostnameParsesButIsUnusable() throws {
        let c = try Candidate(parsing: "candidate:3442447574 1 udp 2122260223 5b2b3d0e-1f1a-4c3c-9d36-3a2c6a1a0b6c.local 54400 typ host generation 0 network-cost 999")
        #expect(c.address == .hostname("5b2b3d0e-1f1a-4c3c-9d36-3a2c6a1a0b6c.local"))
        #expect(c.socketAddress == nil)
        #expect(!c.isUsable)
    }

    @Test func componentTwoAndRelayParse() throws {
        let c = try Candidate(parsing: "candidate:a+b/c 2 udp 16777214 198.51.100.1 3478 typ relay raddr 0.0.0.0 rport 0")
        #expect(c.component == 2 && c.type == .relay && c.foundation == "a+b/c")
        #expect(c.relatedAddress == .ip(.anyV4) && c.relatedPort == 0)
    }

    @Test func malformedLinesAreTypedErrors() {
        let cases: [(String, String)] = [
            ("", "field count"),
            ("candidate:1 1 udp 2130706431 192.0.2.1 5000 typ", "field count"),
            ("candidate:\(String(repeating: "a", count: 33)) 1 udp 1 192.0.2.1 5000 typ host", "foundation"),
            ("candidate:fo_o 1 udp 1 192.0.2.1 5000 typ host", "foundation"),
            ("candidate:1 0 udp 1 192.0.2.1 5000 typ host", "component-id"),
            ("candidate:1 257 udp 1 192.0.2.1 5000 typ host", "component-id"),
            ("candidate:1 1 udp 4294967296 192.0.2.1 5000 typ host", "priority"),
            ("candidate:1 1 udp -1 192.0.2.1 5000 typ host", "priority"),
            ("candidate:1 1 udp 1 192.0.2.1 65536 typ host", "port"),
            ("candidate:1 1 udp 1 192.0.2.1 5000 type host", "cand-type"),
            ("candidate:1 1 udp 1 192.0.2.1 5000 typ relayed", "cand-type"),
            ("candidate:1 1 udp 1 2001:db8:::1 5000 typ host", "connection-address"),
            ("candidate:1 1 udp 1 192.0.2.1 5000 typ srflx raddr", "extension"),
            ("candidate:1 1 udp 1 192.0.2.1 5000 typ srflx raddr 1.2.3.4 rport x", "rport"),
            ("candidate:1 1 udp 1 192.0.2.1 5000 typ host generation 0 ufrag", "extension"),
        ]
        for (line, field) in cases {
            #expect(throws: ICEError.invalidCandidate(field: field), "\(line)") { try Candidate(parsing: line) }
        }
    }
}

@Suite struct CandidatePriorities {
    @Test func candidatePriorityFormula() {
        // RFC 8445 §5.1.2.1, computed here with plain arithmetic.
        #expect(Candidate.priority(type: .host, localPreference: 65535, component: 1) == 126 * 16_777_216 + 65535 * 256 + 255)
        #expect(Candidate.priority(type: .host, localPreference: 65535, component: 1) == 2_130_706_431)
        #expect(Candidate.priority(type: .serverReflexive, localPreference: 65535, component: 1) == 1_694_498_815)
        #expect(Candidate.priority(type: .peerReflexive, localPreference: 1, component: 2) == 110 * 16_777_216 + 256 + 254)
        #expect(Candidate.priority(type: .relay, localPreference: 0, component: 1) == 255)
        // Types dominate local preference.
        #expect(Candidate.priority(type: .host, localPreference: 0) > Candidate.priority(type: .peerReflexive, localPreference: 65535))
        #expect(Candidate.priority(type: .peerReflexive, localPreference: 0) > Candidate.priority(type: .serverReflexive, localPreference: 65535))
    }

    @Test func pairPriorityFormula() {
        var rng = SeededRandom(seed: 8445)
        for _ in 0..<1000 {
            // Real priorities are below 2^31 (type preference ≤ 126 in the top byte).
            let g = UInt32(truncatingIfNeeded: rng.next()) >> 1, d = UInt32(truncatingIfNeeded: rng.next()) >> 1
            // Reference in double-width arithmetic: 2^32*min + 2*max + (G>D).
            let expected = (UInt64(min(g, d)) * 4_294_967_296) &+ 2 * UInt64(max(g, d)) &+ (g > d ? 1 : 0)
            #expect(candidatePairPriority(controlling: g, controlled: d) == expected)
            // Both agents order pairs identically: swapping roles only flips the tie bit.
            let swapped = candidatePairPriority(controlling: d, controlled: g)
            if g != d { #expect(swapped ^ expected == 1) }
        }
        #expect(candidatePairPriority(controlling: 5, controlled: 5) == 5 << 32 | 10)
    }

    @Test func foundationsFollowTheirInputs() {
        let base = IPAddress("192.168.1.2")!
        let server = IPAddress("198.51.100.3")!
        let f = Candidate.foundation(type: .serverReflexive, base: base, server: server)
        #expect(f == Candidate.foundation(type: .serverReflexive, base: base, server: server))
        #expect(f != Candidate.foundation(type: .host, base: base))
        #expect(f != Candidate.foundation(type: .serverReflexive, base: IPAddress("192.168.1.3")!, server: server))
        #expect(f != Candidate.foundation(type: .serverReflexive, base: base, server: IPAddress("198.51.100.4")!))
        #expect(f != Candidate.foundation(type: .serverReflexive, base: base, server: server, transport: .tcp))
        #expect(f.utf8.count <= 32 && f.utf8.allSatisfy(Candidate.isIceChar))
    }
}
