/// What Linnet does with the ICE servers a provider names in its answer (WHIP's `Link:
/// rel="ice-server"`, RFC 9725 §4.6; a backend's `iceServers`): which are used, from the
/// next session on, and which are refused and why. Pure: the runtime resolves names and
/// makes the allocations; every decision is here, tested on its own.
///
/// Whoever answers the offer chooses these servers, so each is treated as that party's:
/// - **Credentials stay home.** A learned server uses only the username and password
///   that came with it. The device's configured TURN credentials belong to the server
///   they were configured for (`TURNServer.realm` also pins its realm), never to a host,
///   port or realm the answer names: a provider naming `turn:evil` without credentials
///   would otherwise receive the configured username and a key derived from the password.
/// - **No reaching inward.** `learned-ice-servers` decides how far in a learned server
///   may be: `auto` (default) no further than the route's own host (a WHIP server on
///   127.0.0.1 may name servers on this host; one on the internet only servers on the
///   internet); `internet`: only global addresses; `any`; `none`. A name is judged by
///   what it resolves to (`allows`), `localhost` by its name. A kiosk's LAN is not made
///   reachable by whoever answers the offer.
/// - **Bounded.** At most `maxServers` URLs are considered over the process's life, and
///   a username that can never be sent (over 513 bytes) is refused when learned, not
///   found out by every later session's relay gathering timing out.
import Wire
import ICE
import Settings
import Signaling

public struct LearnedServers: Sendable {
    public static let maxServers = 4

    /// How far in a learned server may be (`learned-ice-servers`).
    public let reach: LearnedServerReach
    /// The scope of the route's host (from its URL: an address, or `localhost`); nil: a
    /// name, judged as the internet.
    public let routeScope: IPAddress.Scope?
    /// URLs seen (used or not), as the answer spelled them.
    public private(set) var seen: [String] = []

    public enum Verdict: Equatable, Sendable {
        /// Use it from the next session: its address is known.
        case use(TURNServer, SocketAddress)
        /// Use it once its name resolves to an address `allows`.
        case resolve(TURNServer)
        /// Not used; say why once.
        case refused(String)
        /// Not used, nothing to say (a repeat, a `stun:` URL, the cap).
        case ignored
    }

    public init(reach: LearnedServerReach, routeHost: String) {
        self.reach = reach
        var host = routeHost
        // An IPv6 literal as a URL writes it: [2001:db8::1].
        if host.startsWithBytes("["), host.endsWithBytes("]") { host = String(Substring(host.utf8.dropFirst().dropLast())) }
        if host.bytesEqual("localhost") || host.endsWithBytes(".localhost") {
            routeScope = .host
        } else {
            routeScope = IPAddress(host)?.scope
        }
    }

    /// The narrowest scope a learned server may be in.
    var innermost: IPAddress.Scope? {
        switch reach {
        case .none: return nil
        case .any: return .host
        case .internet: return .global
        case .auto: return routeScope ?? .global
        }
    }

    /// Whether a learned server at `ip` may be used.
    public func allows(_ ip: IPAddress) -> Bool {
        guard let innermost else { return false }
        return ip.scope >= innermost
    }

    public func scopeRefusal(_ url: ICEServerURL, _ scope: IPAddress.Scope) -> String {
        "the answer's ice-server \(url) is on \(scope), further in than the route's host: not used (learned-ice-servers = any allows it)"
    }

    /// One server the answer named; `configured`: the device's own TURN servers.
    public mutating func consider(_ link: ICEServerLink, configured: [TURNServer]) -> Verdict {
        guard !seen.containsBytes(equalTo: link.url) else { return .ignored }
        guard seen.count < Self.maxServers else { return .ignored }
        seen.append(link.url)
        let url: ICEServerURL
        do throws(ICEError) { url = try ICEServerURL(parsing: link.url) } catch {
            return .refused("the answer's ice-server \(printableForLog(link.url, maxBytes: 200)) is unusable: \(error)")
        }
        guard url.isTURN else { return .ignored }
        guard reach != .none else { return .refused("the answer names TURN server \(url): not used (learned-ice-servers = none)") }
        guard let username = link.username, let credential = link.credential else {
            return .refused("the answer's ice-server \(url) came without a username and credential: not used (the configured TURN credentials belong to the configured servers only)")
        }
        if let problem = TURNServer.credentialProblem(username: username, credential: credential) {
            return .refused("the answer's ice-server \(url): \(problem): not used")
        }
        if configured.contains(where: { $0.url == url && $0.username.bytesEqual(username) }) { return .ignored }
        let server = TURNServer(url: url, username: username, credential: credential)
        if let ip = url.ip {
            guard allows(ip) else { return .refused(scopeRefusal(url, ip.scope)) }
            return .use(server, SocketAddress(ip: ip, port: url.port))
        }
        if url.host.bytesEqual("localhost") || url.host.endsWithBytes(".localhost") {
            guard let innermost, innermost <= .host else { return .refused(scopeRefusal(url, .host)) }
        }
        return .resolve(server)
    }
}
