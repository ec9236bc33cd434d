import Testing
import Wire
import ICE
import Settings
import Signaling
@testable import Agent

/// `LearnedServers`: what a provider's answer may make the device connect to, and with
/// which credentials.
@Suite struct LearnedServersTests {
    let configured = TURNServer(url: try! ICEServerURL(parsing: "turn:turn.device.net"), username: "kiosk-17", credential: "s3cret")

    func link(_ url: String, _ user: String? = "u", _ pass: String? = "p") -> ICEServerLink {
        ICEServerLink(url: url, username: user, credential: pass)
    }

    @Test func scopesOfAddresses() {
        #expect(IPAddress("127.0.0.1")!.scope == .host && IPAddress("::1")!.scope == .host && IPAddress("0.0.0.0")!.scope == .host)
        #expect(IPAddress("169.254.1.1")!.scope == .link && IPAddress("fe80::1")!.scope == .link)
        for a in ["10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.0.1", "100.64.0.1", "fd00::1", "::ffff:192.168.1.1"] {
            #expect(IPAddress(a)!.scope == .site, "\(a)")
        }
        for a in ["172.32.0.1", "100.128.0.1", "8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8"] {
            #expect(IPAddress(a)!.scope == .global, "\(a)")
        }
    }

    @Test func credentialsStayWithTheConfiguredServer() {
        var l = LearnedServers(reach: .any, routeHost: "127.0.0.1")
        // No credentials of its own: refused, whatever the configured ones are.
        guard case .refused(let why) = l.consider(link("turn:198.51.100.7", nil, nil), configured: [configured]) else {
            Issue.record("used without credentials"); return
        }
        #expect(why.contains("without a username and credential") && !why.contains("kiosk-17"))
        // Half of them is no better.
        #expect(l.consider(link("turn:198.51.100.8", "u", nil), configured: [configured]) != .ignored)
        if case .use = l.consider(link("turn:198.51.100.9", nil, "p"), configured: [configured]) { Issue.record("used half credentials") }
        // With its own, it is used with those.
        guard case .use(let s, _) = l.consider(link("turn:198.51.100.10"), configured: [configured]) else { Issue.record("not used"); return }
        #expect(s.username == "u" && s.credential == "p")
    }

    @Test(arguments: [
        (LearnedServerReach.auto, "whip.example.net", ["turn:8.8.4.4": true, "turn:10.0.0.1": false, "turn:127.0.0.1": false, "turn:localhost": false]),
        (.auto, "192.168.1.2", ["turn:8.8.4.4": true, "turn:10.0.0.1": true, "turn:169.254.1.1": false, "turn:127.0.0.1": false]),
        (.auto, "127.0.0.1", ["turn:127.0.0.1": true, "turn:10.0.0.1": true, "turn:localhost": true]),
        (.auto, "[::1]", ["turn:[::1]": true]),
        (.internet, "127.0.0.1", ["turn:8.8.4.4": true, "turn:127.0.0.1": false]),
        (.any, "whip.example.net", ["turn:127.0.0.1": true, "turn:10.0.0.1": true]),
        (.none, "127.0.0.1", ["turn:8.8.4.4": false]),
    ])
    func reach(_ reach: LearnedServerReach, _ host: String, _ cases: [String: Bool]) {
        for (url, used) in cases {
            var l = LearnedServers(reach: reach, routeHost: host)
            let v = l.consider(link(url), configured: [])
            var wasUsed = false
            if case .use = v { wasUsed = true }
            if case .resolve = v { wasUsed = true }
            #expect(wasUsed == used, "\(reach) from \(host): \(url) → \(v)")
        }
    }

    @Test func aUsernameThatCanNeverBeSentIsRefusedWhenLearned() {
        var l = LearnedServers(reach: .any, routeHost: "127.0.0.1")
        let long = String(repeating: "u", count: 760)
        guard case .refused(let why) = l.consider(link("turn:127.0.0.1", long, "p"), configured: []) else { Issue.record("used"); return }
        #expect(why.contains("the username is 760 bytes"))
    }

    @Test func atMostFourAreConsideredAndRepeatsAreIgnored() {
        var l = LearnedServers(reach: .any, routeHost: "127.0.0.1")
        var used = 0
        for i in 0..<10 {
            if case .use = l.consider(link("turn:127.0.0.\(i + 1)"), configured: []) { used += 1 }
            if case .use = l.consider(link("turn:127.0.0.\(i + 1)"), configured: []) { used += 100 }
        }
        #expect(used == 4 && l.seen.count == 4)
    }
}
