import Wire

/// Which side decides: the controlling agent nominates (RFC 8445 §2.3). Linnet as
/// offerer is controlling, as answerer controlled (PROTOCOLS.md).
public enum ICERole: Hashable, Sendable, CustomStringConvertible {
    case controlling
    case controlled

    public var description: String { self == .controlling ? "controlling" : "controlled" }
}

/// The agent's connection state, named as app SDKs name them.
public enum ICEState: Hashable, Sendable, CustomStringConvertible {
    /// Created; `start` not called yet.
    case new
    /// Checks are running and nothing is selected yet (also after an ICE restart).
    case checking
    /// A nominated pair is selected and consent is fresh.
    case connected
    /// Consent checks on the selected pair have gone unanswered for `disconnectedTimeout`;
    /// becomes `connected` again when a response arrives.
    case disconnected
    /// Consent expired (RFC 7675 §5.1) or every pair failed: only an ICE restart helps.
    case failed
    /// `close` was called; nothing more is sent or answered.
    case closed

    public var description: String {
        switch self {
        case .new: return "new"
        case .checking: return "checking"
        case .connected: return "connected"
        case .disconnected: return "disconnected"
        case .failed: return "failed"
        case .closed: return "closed"
        }
    }
}

/// A username fragment and password (RFC 8445 §5.3). The IO layer generates them with a
/// CSPRNG: ufrag at least 4 ice-chars (24 bits), password at least 22 (128 bits).
public struct ICECredentials: Hashable, Sendable {
    public var ufrag: String
    public var password: String
    public init(ufrag: String, password: String) {
        self.ufrag = ufrag
        self.password = password
    }
}

/// The pair media flows over: send from `local` (a socket's address) to `remote`.
public struct ICESelectedPair: Hashable, Sendable, CustomStringConvertible {
    public var local: SocketAddress
    public var remote: SocketAddress
    public var localCandidate: Candidate
    public var remoteCandidate: Candidate

    public var description: String { "\(local) → \(remote)" }
}

/// What the agent tells its owner.
public enum ICEEvent: Hashable, Sendable {
    case stateChanged(ICEState)
    /// A local candidate to signal to the peer (host at start, server-reflexive later).
    case localCandidate(Candidate)
    /// No more local candidates will come (send `a=end-of-candidates`).
    case gatheringComplete
    case selectedPairChanged(ICESelectedPair)
    /// The role changed after a role conflict (RFC 8445 §7.3.1.1, §7.2.5.1).
    case roleChanged(ICERole)
}

/// One step of output; see `ICEAgent` for the drive contract.
public enum ICEOutput: Hashable, Sendable {
    /// Send `bytes` from the socket bound to `from` to `to`.
    case transmit(bytes: [UInt8], from: SocketAddress, to: SocketAddress)
    case event(ICEEvent)
    /// Nothing more now: call `handleTimeout` at this instant (or earlier on input).
    case timeout(Instant)
}

/// Counters of what the agent received and refused; nothing dropped is trusted.
public struct ICEStats: Hashable, Sendable {
    /// Datagrams that did not parse as STUN (bad framing, fingerprint, attribute).
    public var malformed = 0
    /// Messages whose MESSAGE-INTEGRITY or USERNAME did not check out.
    public var unauthenticated = 0
    /// Responses matching no outstanding transaction (late, duplicated or forged).
    public var unmatchedResponses = 0
    /// Authenticated Binding requests answered.
    public var requestsAnswered = 0
    /// Checks sent (first transmissions), consent checks included.
    public var checksSent = 0
    public var retransmissions = 0
    /// Role conflicts seen, whichever side switched.
    public var roleConflicts = 0
    /// Requests refused with 420 for unknown comprehension-required attributes.
    public var unknownAttributeRequests = 0
    /// Moves off a selected pair that lost consent to one with fresh responses (NAT
    /// rebinding; see `ICEAgent`).
    public var staleSwitches = 0
}

/// Tunables. Defaults follow the RFCs where they give numbers.
public struct ICEConfig: Sendable {
    /// STUN server for server-reflexive candidates (RFC 8445 §5.1.1.2); nil for none.
    public var stunServer: SocketAddress?
    /// Pacing of new checks, Ta (RFC 8445 §14.2): 50 ms.
    public var ta: Duration = .milliseconds(50)
    /// First retransmission timeout; RFC 8445 §14.3 wants at least 500 ms for checks.
    public var initialRTO: Duration = .milliseconds(500)
    /// Cap of the doubling RTO, which bounds the RFC 8489 §6.2.1 schedule.
    public var maxRTO: Duration = .milliseconds(3000)
    /// Transmissions per transaction, first one included (RFC 8489 Rc is 7).
    public var maxTransmissions = 7
    /// After the first valid pair, how long the controlling agent waits for a better one
    /// before nominating (regular nomination, RFC 8445 §8.1.1).
    public var nominationDelay: Duration = .milliseconds(500)
    /// Mean interval of consent checks (RFC 7675 §5.1: 5 s, randomised ±20 %).
    public var consentInterval: Duration = .seconds(5)
    /// Unanswered consent for this long → `disconnected`.
    public var disconnectedTimeout: Duration = .seconds(3)
    /// No consent response for this long → `failed` (RFC 7675 §5.1: 30 s).
    public var consentTimeout: Duration = .seconds(30)
    /// When nothing at all has arrived for this long on a connected agent, send a
    /// consent check at once instead of waiting for the next one (nil: never). RFC
    /// 7675's 5 s pace suits a stream that keeps coming; when it stops, one early check
    /// tells within `silenceProbe + disconnectedTimeout` whether the peer is still there.
    public var silenceProbe: Duration? = nil
    /// At most this many pairs (RFC 8445 §6.1.2.5 suggests 100).
    public var maxPairs = 100
    /// ICE-TCP (RFC 6544): an active TCP host candidate per host address (port 9, §4.5),
    /// paired with the peer's `tcptype passive` candidates. A check "from" such a
    /// candidate's base (IP:9) goes over the owner's TCP connection to the remote
    /// address, framed as RFC 4571 says; what arrives on it comes back with that base as
    /// `local`. Passive and simultaneous-open candidates are not offered.
    public var tcpActive = false
    /// At most this many of the peer's TCP candidates are taken (each is a TCP
    /// connection the owner opens on the first check): the answer comes from the
    /// provider, which must not make a device open dozens.
    public var maximumTCPRemotes = 8
    /// TURN allocations the owner is making (RFC 8656): gathering completes only when
    /// each was added (`addRelayCandidate`) or given up (`relayGatheringFailed`).
    public var expectedRelays = 0
    /// SOFTWARE to put in requests, if any.
    public var software: String? = nil
    /// Public addresses this host is known to be reachable at through a one-to-one NAT
    /// (a board behind a router that forwards its ports, a cloud VM's public IP): each
    /// UDP host candidate of the same family is also offered at that address and its own
    /// port, as a server-reflexive candidate whose base is the host candidate (RFC 8445
    /// §5.1.1.2 and §5.1.1.3: what a STUN server would have told us, told by the
    /// operator instead). Checks still go out from the base (§6.1.2.4 prunes such pairs
    /// to their base), so nothing else changes.
    public var advertised: [IPAddress] = []

    public init(stunServer: SocketAddress? = nil) { self.stunServer = stunServer }
}

extension ICEConfig {
    /// A voice call's consent timing (RFC 7675 §5.1), shared by every command that makes
    /// one (`run`, `demo`, `check`, `answer`): a call never goes quiet for long (audio or
    /// RTCP every second), so 1 s of nothing → an early consent check, unanswered for 2 s
    /// → disconnected. A vanished peer is noticed within 3 s. Not 1.5 s + 1.5 s: a check
    /// then has only one retransmission (at 0.5 s) before the verdict, and at 1 % loss
    /// each way that made about 8 false `disconnected`s (and ICE restarts) a day
    /// (AgentTests' soak); in 2 s it gets two (at 0.5 s and 1.5 s).
    public mutating func useVoiceCallConsent() {
        silenceProbe = .milliseconds(1000)
        disconnectedTimeout = .milliseconds(2000)
    }
}
