import Testing
@testable import ICE
import Wire

/// A TURN client on a manual clock, talking to a scripted server: the test reads what
/// the client sent and answers with messages built here (signed with the long-term key
/// the server would use, RFC 8489 §9.2.2).
struct TURNHarness {
    static let user = "linnet", realm = "linnet.test", password = "secret"
    static let key = STUNMessage.longTermKey(username: user, realm: realm, password: password)
    static let relayed = SocketAddress(ip: IPAddress("192.0.2.10")!, port: 50_000)
    static let mapped = SocketAddress(ip: IPAddress("198.51.100.7")!, port: 40_001)
    static let peer = SocketAddress(ip: IPAddress("203.0.113.5")!, port: 6000)

    var client: TURNClient<SeededRandom>
    var now = Instant(nanoseconds: 1_000_000_000)
    var sent: [[UInt8]] = []
    var events: [TURNEvent] = []
    var deadline = Instant.distantFuture

    init(transport: TURNTransport = .udp, password: String = TURNHarness.password, timing: TURNTiming = TURNTiming(),
         pinnedRealm: String? = nil) {
        let url = ICEServerURL(scheme: transport == .tls ? .turns : .turn, host: "192.0.2.1", transport: transport)
        var server = TURNServer(url: url, username: Self.user, credential: password)
        server.realm = pinnedRealm
        client = TURNClient(server: server, timing: timing, rng: SeededRandom(seed: 7))
    }

    mutating func drain() {
        while true {
            switch client.pollOutput() {
            case .send(let b): sent.append(b)
            case .event(let e): events.append(e)
            case .timeout(let t): deadline = t; return
            }
        }
    }

    /// What the client sent since the last call.
    mutating func take() -> [[UInt8]] {
        defer { sent.removeAll() }
        return sent
    }

    mutating func takeEvents() -> [TURNEvent] {
        defer { events.removeAll() }
        return events
    }

    mutating func deliver(_ bytes: [UInt8]) {
        client.handleMessage(bytes, now: now)
        drain()
    }

    mutating func advance(to t: Instant) {
        now = t
        client.handleTimeout(now: now)
        drain()
    }

    /// Runs the clock to the client's deadline (what the runtime's timer does).
    mutating func fire() { advance(to: deadline) }

    /// A response to `request` (its method and transaction), signed with `key` when given.
    static func response(to request: [UInt8], error: (Int, String)? = nil, _ attributes: [STUNAttribute] = [],
                         key: [UInt8]? = TURNHarness.key) -> [UInt8] {
        let req = try! STUNMessage.parse(request)
        let type = STUNMessageType(method: req.type.method, messageClass: error == nil ? .successResponse : .errorResponse)
        var attrs = attributes
        if let (code, reason) = error { attrs.insert(.errorCode(ErrorCode(code: code, reason: reason)), at: 0) }
        return try! STUNMessage(type: type, transactionID: req.transactionID, attributes: attrs)
            .serialized(integrityKey: key, fingerprint: false)
    }

    static func challenge(to request: [UInt8], nonce: String = "nonce-1") -> [UInt8] {
        response(to: request, error: (401, "Unauthorized"), [.realm(Realm(realm)), .nonce(Nonce(nonce))], key: nil)
    }

    static func allocateSuccess(to request: [UInt8], lifetime: UInt32 = 600) -> [UInt8] {
        response(to: request, [.xorRelayedAddress(XORRelayedAddress(relayed)), .xorMappedAddress(XORMappedAddress(mapped)),
                               .lifetime(Lifetime(seconds: lifetime))])
    }

    /// Allocate, 401, authenticated Allocate, success.
    mutating func allocate(lifetime: UInt32 = 600) {
        client.allocate(now: now)
        drain()
        let first = take()
        deliver(Self.challenge(to: first[0]))
        let second = take()
        deliver(Self.allocateSuccess(to: second[0], lifetime: lifetime))
        #expect(takeEvents() == [.allocated(relayed: Self.relayed, mapped: Self.mapped)])
    }
}

func parsed(_ b: [UInt8]) -> STUNMessage { try! STUNMessage.parse(b) }

@Suite struct TURNClientAuthentication {
    @Test func challengeThenOneAuthenticatedRetry() throws {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        let first = h.take()
        #expect(first.count == 1)
        let a = parsed(first[0])
        #expect(a.type == .allocateRequest)
        #expect(a.username == nil && a.integrity == nil, "the first Allocate goes without credentials (RFC 8489 §9.2.3)")
        #expect(a.attributes.contains(.requestedTransport(RequestedTransport(17))))

        h.deliver(TURNHarness.challenge(to: first[0]))
        let second = h.take()
        #expect(second.count == 1)
        let b = parsed(second[0])
        #expect(b.type == .allocateRequest)
        #expect(b.transactionID != a.transactionID, "a new transaction")
        #expect(b.username == "linnet" && b.realm == "linnet.test" && b.nonce == "nonce-1")
        #expect(b.attributes.contains(.requestedTransport(RequestedTransport(17))))
        try b.verifyIntegrity(of: second[0], key: TURNHarness.key)

        h.deliver(TURNHarness.allocateSuccess(to: second[0]))
        #expect(h.takeEvents() == [.allocated(relayed: TURNHarness.relayed, mapped: TURNHarness.mapped)])
        #expect(h.client.state == .allocated)
        #expect(h.client.relayedAddress == TURNHarness.relayed)
        #expect(h.client.requestsSent == 2 && h.client.allocateAttempts == 2)
        #expect(h.take().isEmpty)
    }

    /// The credentials were accepted under one realm; a challenge naming another (a
    /// relay in the middle, a spoofed server) gets no key derived and nothing signed:
    /// the allocation fails as a configuration problem, and nothing after the first,
    /// unauthenticated Allocate is sent. Under the pinned realm it goes on as before.
    @Test func aChallengeUnderAnotherRealmGetsNoCredentials() throws {
        var h = TURNHarness(pinnedRealm: "linnet.test")
        h.client.allocate(now: h.now)
        h.drain()
        let first = h.take()
        h.deliver(TURNHarness.response(to: first[0], error: (401, "Unauthorized"), [.realm(Realm("evil\nrealm")), .nonce(Nonce("n"))], key: nil))
        #expect(h.take().isEmpty, "nothing signed for another realm")
        guard case .failed(let f) = h.client.state else { Issue.record("state \(h.client.state)"); return }
        #expect(f.isConfiguration && f.description.contains("realm 'evil?realm', not 'linnet.test'"), "\(f)")
        // The pinned realm itself: the usual challenge and signed retry.
        var ok = TURNHarness(pinnedRealm: "linnet.test")
        ok.client.allocate(now: ok.now)
        ok.drain()
        ok.deliver(TURNHarness.challenge(to: ok.take()[0]))
        let second = ok.take()
        #expect(second.count == 1)
        try parsed(second[0]).verifyIntegrity(of: second[0], key: TURNHarness.key)
    }

    @Test func challengeWithoutRealmOrNonceFails() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0], error: (401, "Unauthorized"), [.realm(Realm("r"))], key: nil))
        #expect(h.take().isEmpty)
        guard case .failed(.badResponse) = h.client.state else { Issue.record("state \(h.client.state)"); return }
    }

    @Test func unauthorizedToAuthenticatedRequestIsFinal() {
        var h = TURNHarness(password: "wrong")
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        let retry = h.take()
        #expect(retry.count == 1)
        // The server cannot check our MESSAGE-INTEGRITY: 401 again, unsigned.
        let refusal = TURNHarness.challenge(to: retry[0], nonce: "nonce-2")
        h.deliver(refusal)
        let events = h.takeEvents()
        #expect(events.count == 1)
        guard case .failed(.unauthorized(let why)) = events.first else { Issue.record("\(events)"); return }
        #expect(why.contains("linnet"))
        #expect(h.client.state == .failed(.unauthorized(why)))
        #expect(TURNFailure.unauthorized(why).isConfiguration)
        // The same 401 again (a retransmitted response), and a long wait: nothing more.
        h.deliver(refusal)
        h.advance(to: h.now + .seconds(3600))
        #expect(h.take().isEmpty && h.takeEvents().isEmpty)
        #expect(h.client.requestsSent == 2)
        #expect(h.deadline == .distantFuture)
    }

    @Test func wrongCredentials441IsFinal() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        h.deliver(TURNHarness.response(to: h.take()[0], error: (441, "Wrong Credentials")))
        let events = h.takeEvents()
        #expect(events.count == 1)
        guard case .failed(.unauthorized(let why)) = events.first else { Issue.record("\(events)"); return }
        #expect(why.contains("441"))
        h.advance(to: h.now + .seconds(3600))
        #expect(h.take().isEmpty && h.client.requestsSent == 2)
    }

    @Test func staleNonceRetriedAtMostTwice() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        var nonces: [String] = []
        for i in 2...4 {
            let out = h.take()
            #expect(out.count == 1)
            guard let req = out.first else { return }
            nonces.append(parsed(req).nonce ?? "")
            // 438 carries the new nonce and is not signed (the old nonce's key is void).
            h.deliver(TURNHarness.response(to: req, error: (438, "Stale Nonce"),
                                           [.realm(Realm(TURNHarness.realm)), .nonce(Nonce("nonce-\(i)"))], key: nil))
        }
        #expect(nonces == ["nonce-1", "nonce-2", "nonce-3"], "each retry carries the nonce the 438 brought")
        #expect(h.take().isEmpty)
        #expect(h.takeEvents() == [.failed(.refused(code: 438, reason: "Stale Nonce"))])
        #expect(h.client.requestsSent == 4)
    }

    @Test func staleNonceOnRefreshIsRetriedWithTheNewNonce() throws {
        var h = TURNHarness()
        h.allocate()
        h.client.refresh(now: h.now)
        h.drain()
        let r = h.take()
        h.deliver(TURNHarness.response(to: r[0], error: (438, "Stale Nonce"), [.realm(Realm(TURNHarness.realm)), .nonce(Nonce("n2"))], key: nil))
        let again = h.take()
        #expect(again.count == 1)
        let m = parsed(again[0])
        #expect(m.type == .refreshRequest && m.nonce == "n2")
        try m.verifyIntegrity(of: again[0], key: TURNHarness.key)
        h.deliver(TURNHarness.response(to: again[0], [.lifetime(Lifetime(seconds: 600))]))
        #expect(h.takeEvents() == [.refreshed])
        #expect(h.client.state == .allocated)
    }

    @Test func responsesWithoutValidIntegrityAreIgnored() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        let req = h.take()[0]
        let attrs: [STUNAttribute] = [.xorRelayedAddress(XORRelayedAddress(SocketAddress(ip: IPAddress("10.6.6.6")!, port: 1))),
                                      .lifetime(Lifetime(seconds: 600))]
        // Unsigned, signed with another key, and a 403 unsigned: all forgeries.
        h.deliver(TURNHarness.response(to: req, attrs, key: nil))
        h.deliver(TURNHarness.response(to: req, attrs, key: STUNMessage.longTermKey(username: "x", realm: "y", password: "z")))
        h.deliver(TURNHarness.response(to: req, error: (403, "Forbidden"), key: nil))
        // A tampered copy of a good response (one bit of the relayed port flipped).
        var tampered = TURNHarness.allocateSuccess(to: req)
        tampered[27] ^= 1
        h.deliver(tampered)
        #expect(h.takeEvents().isEmpty)
        #expect(h.client.state == .allocating)
        // A response to a transaction we never started.
        var other = TURNHarness.allocateSuccess(to: req)
        other[19] ^= 0xFF
        h.deliver(other)
        #expect(h.client.state == .allocating)
        // The real one still counts.
        h.deliver(TURNHarness.allocateSuccess(to: req))
        #expect(h.takeEvents() == [.allocated(relayed: TURNHarness.relayed, mapped: TURNHarness.mapped)])
    }

    @Test func allocateSuccessWithoutRelayedAddressFails() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        h.deliver(TURNHarness.response(to: h.take()[0], [.lifetime(Lifetime(seconds: 600))]))
        guard case .failed(.badResponse) = h.client.state else { Issue.record("\(h.client.state)"); return }
    }

    @Test func refusalsOfTheAllocationAreReported() {
        for (code, reason) in [(486, "Allocation Quota Reached"), (508, "Insufficient Capacity"), (403, "Forbidden")] {
            var h = TURNHarness()
            h.client.allocate(now: h.now)
            h.drain()
            h.deliver(TURNHarness.challenge(to: h.take()[0]))
            h.deliver(TURNHarness.response(to: h.take()[0], error: (code, reason)))
            #expect(h.takeEvents() == [.failed(.refused(code: code, reason: reason))])
            #expect(h.take().isEmpty)
        }
    }
}

@Suite struct TURNClientLifetime {
    @Test func refreshScheduledBeforeLifetimeEnds() throws {
        var h = TURNHarness()
        let t0 = h.now
        h.allocate(lifetime: 600)
        #expect(h.deadline > t0 && h.deadline < t0 + .seconds(600))
        h.advance(to: h.deadline - .milliseconds(1))
        #expect(h.take().isEmpty)
        h.fire()
        let r = h.take()
        #expect(r.count == 1)
        let m = parsed(r[0])
        #expect(m.type == .refreshRequest && m.lifetime == 600 && m.username == "linnet")
        try m.verifyIntegrity(of: r[0], key: TURNHarness.key)
        #expect(h.now < t0 + .seconds(600))
        // The server grants less: the next refresh comes before that shorter end.
        let granted = h.now
        h.deliver(TURNHarness.response(to: r[0], [.lifetime(Lifetime(seconds: 60))]))
        #expect(h.takeEvents() == [.refreshed])
        #expect(h.deadline > granted && h.deadline < granted + .seconds(60))
        h.fire()
        #expect(h.take().map { parsed($0).type } == [.refreshRequest])
    }

    @Test func refreshFailureLosesTheAllocation() {
        var h = TURNHarness()
        h.allocate()
        h.client.refresh(now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0], error: (437, "Allocation Mismatch")))
        #expect(h.takeEvents() == [.failed(.refused(code: 437, reason: "Allocation Mismatch"))])
    }

    @Test func refreshTimeoutFailsTheAllocation() {
        var h = TURNHarness()
        h.allocate()
        h.fire()  // the scheduled refresh
        #expect(h.take().count == 1)
        var sends = 0
        while h.deadline != .distantFuture, sends < 20 {
            h.fire()
            sends += h.take().count
        }
        #expect(sends == 6, "six retransmissions of the refresh")
        #expect(h.takeEvents() == [.failed(.timeout)])
    }

    @Test func releaseSendsRefreshWithLifetimeZero() throws {
        var h = TURNHarness()
        h.allocate()
        h.client.release(now: h.now)
        h.drain()
        let out = h.take()
        #expect(out.count == 1)
        let m = parsed(out[0])
        #expect(m.type == .refreshRequest && m.lifetime == 0)
        try m.verifyIntegrity(of: out[0], key: TURNHarness.key)
        #expect(h.client.state == .released)
        #expect(h.client.owns(TURNHarness.response(to: out[0], [.lifetime(Lifetime(seconds: 0))])), "its answer is ours, not ICE's")
        h.deliver(TURNHarness.response(to: out[0], [.lifetime(Lifetime(seconds: 0))]))
        #expect(h.deadline == .distantFuture)
        #expect(h.takeEvents().isEmpty)
        // After release nothing is relayed and no timer runs.
        h.client.send([1, 2, 3], to: TURNHarness.peer, now: h.now)
        h.advance(to: h.now + .seconds(3600))
        #expect(h.take().isEmpty && h.takeEvents().isEmpty)
    }

    @Test func releaseIsRetransmittedAndFollowsStaleNonce() throws {
        var h = TURNHarness()
        h.allocate()
        h.client.release(now: h.now)
        h.drain()
        let first = h.take()
        h.fire()
        #expect(h.take() == first, "a lost release is sent again over UDP (RFC 8489 §6.2.1)")
        h.deliver(TURNHarness.response(to: first[0], error: (438, "Stale Nonce"), [.realm(Realm(TURNHarness.realm)), .nonce(Nonce("n9"))], key: nil))
        let again = h.take()
        #expect(again.count == 1)
        let m = parsed(again[0])
        #expect(m.type == .refreshRequest && m.lifetime == 0 && m.nonce == "n9")
        try m.verifyIntegrity(of: again[0], key: TURNHarness.key)
        h.deliver(TURNHarness.response(to: again[0], [.lifetime(Lifetime(seconds: 0))]))
        #expect(h.deadline == .distantFuture && h.takeEvents().isEmpty)
        // Unanswered, it gives up quietly.
        var g = TURNHarness()
        g.allocate()
        g.client.release(now: g.now)
        g.drain()
        while g.deadline != .distantFuture { g.fire() }
        #expect(g.takeEvents().isEmpty && g.client.state == .released)
    }

    @Test func releaseBeforeAllocationSendsNothing() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        _ = h.take()
        h.client.release(now: h.now)
        h.drain()
        h.advance(to: h.now + .seconds(60))
        #expect(h.take().isEmpty && h.takeEvents().isEmpty)
    }
}

@Suite struct TURNClientRelaying {
    @Test func permissionBeforeDataThenChannel() throws {
        var h = TURNHarness()
        h.allocate()
        let peer = TURNHarness.peer
        h.client.send([1], to: peer, now: h.now)
        h.client.send([2, 2], to: peer, now: h.now)
        h.client.send([3, 3, 3], to: SocketAddress(ip: peer.ip, port: 6001), now: h.now)
        h.drain()
        let cp = h.take()
        #expect(cp.count == 1, "one CreatePermission per peer IP, no data before it succeeds")
        let perm = parsed(cp[0])
        #expect(perm.type == .createPermissionRequest && perm.peerAddress?.ip == peer.ip)
        try perm.verifyIntegrity(of: cp[0], key: TURNHarness.key)

        h.deliver(TURNHarness.response(to: cp[0]))
        let flushed = h.take()
        let indications = flushed.map(parsed).filter { $0.type == .sendIndication }
        #expect(indications.map { $0.data ?? [] } == [[1], [2, 2], [3, 3, 3]], "queued packets go out in order")
        #expect(indications.map { $0.peerAddress } == [peer, peer, SocketAddress(ip: peer.ip, port: 6001)])
        let binds = flushed.map(parsed).filter { $0.type == .channelBindRequest }
        #expect(binds.count == 2, "one channel per peer transport address")
        guard let bind = binds.first(where: { $0.peerAddress == peer }), let bindBytes = flushed.first(where: { parsed($0).transactionID == bind.transactionID })
        else { Issue.record("no ChannelBind for \(peer)"); return }
        let channel = try #require(bind.channelNumber)
        #expect(ChannelNumber.range.contains(channel))
        try bind.verifyIntegrity(of: bindBytes, key: TURNHarness.key)

        // While the bind is in flight: Send indications.
        h.client.send([4], to: peer, now: h.now)
        h.drain()
        #expect(h.take().map { parsed($0).type } == [.sendIndication])

        h.deliver(TURNHarness.response(to: bindBytes))
        h.client.send([5, 6, 7], to: peer, now: h.now)
        h.drain()
        let cd = h.take()
        #expect(cd == [ChannelData(channel: channel, data: [5, 6, 7]).serialized(padded: false)], "ChannelData, unpadded over UDP")

        // Data back: on the channel and in a Data indication.
        h.deliver(ChannelData(channel: channel, data: [9, 9]).serialized(padded: false))
        let other = SocketAddress(ip: peer.ip, port: 6001)
        h.deliver(try STUNMessage(type: .dataIndication, transactionID: TransactionID(1, 2, 3),
                                  attributes: [.xorPeerAddress(XORPeerAddress(other)), .data(DataAttribute([8]))]).serialized())
        // A channel never bound is ignored.
        h.deliver(ChannelData(channel: 0x4FFE, data: [0]).serialized(padded: false))
        #expect(h.takeEvents() == [.data(from: peer, bytes: [9, 9]), .data(from: other, bytes: [8])])
    }

    @Test func permissionAndChannelAreRefreshed() throws {
        var h = TURNHarness()
        h.allocate(lifetime: 3600)
        let peer = TURNHarness.peer
        h.client.send([1], to: peer, now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0]))
        let bind = h.take().first { parsed($0).type == .channelBindRequest }!
        h.deliver(TURNHarness.response(to: bind))
        let start = h.now
        // Permissions last 300 s (RFC 8656 §9), channels 600 s (§12): both renewed in time.
        var renewals: [(STUNMessageType, Duration)] = []
        while h.now < start + .seconds(700) {
            h.fire()
            for b in h.take() {
                let m = parsed(b)
                renewals.append((m.type, h.now - start))
                if m.type != .refreshRequest { h.deliver(TURNHarness.response(to: b)) }
                else { h.deliver(TURNHarness.response(to: b, [.lifetime(Lifetime(seconds: 3600))])) }
            }
        }
        let perms = renewals.filter { $0.0 == .createPermissionRequest }.map { $0.1 }
        let chans = renewals.filter { $0.0 == .channelBindRequest }.map { $0.1 }
        #expect(!chans.isEmpty && chans[0] < .seconds(600))
        // A ChannelBind refreshes the permission as well; without one, the permission
        // request must come before 300 s after the last renewal.
        var last = Duration.zero
        for t in (perms + chans).sorted() {
            #expect(t - last < .seconds(300))
            last = t
        }
    }

    @Test func streamsPadChannelData() {
        var h = TURNHarness(transport: .tcp)
        h.allocate()
        h.client.send([1, 2, 3, 4, 5], to: TURNHarness.peer, now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0]))
        let bind = h.take().first { parsed($0).type == .channelBindRequest }!
        h.deliver(TURNHarness.response(to: bind))
        h.client.send([1, 2, 3, 4, 5], to: TURNHarness.peer, now: h.now)
        h.drain()
        let out = h.take()
        #expect(out.count == 1 && out[0].count == 12, "RFC 8656 §12.5: padded to four over TCP")
    }

    @Test func permissionFailureDropsTheQueue() {
        var h = TURNHarness()
        h.allocate()
        h.client.send([1], to: TURNHarness.peer, now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0], error: (403, "Forbidden")))
        #expect(h.take().isEmpty)
        // A later packet asks again.
        h.client.send([2], to: TURNHarness.peer, now: h.now)
        h.drain()
        #expect(h.take().map { parsed($0).type } == [.createPermissionRequest])
    }

    @Test func queueIsBounded() {
        var h = TURNHarness()
        h.allocate()
        for i in 0..<100 { h.client.send([UInt8(i)], to: TURNHarness.peer, now: h.now) }
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0]))
        let data = h.take().map(parsed).filter { $0.type == .sendIndication }.map { $0.data ?? [] }
        #expect(data.count == TURNTiming().maxQueuedPerPeer)
        #expect(data.last == [99], "the newest packets are kept")
    }
}

@Suite struct TURNClientTransactions {
    @Test func udpRetransmissionSchedule() {
        var h = TURNHarness()
        let t0 = h.now
        h.client.allocate(now: h.now)
        h.drain()
        var times: [Duration] = []
        while h.deadline != .distantFuture, times.count < 20 {
            for _ in h.take() { times.append(h.now - t0) }
            h.fire()
        }
        // RFC 8489 §6.2.1: RTO 500 ms, doubling, Rc = 7 transmissions, then Rm × RTO.
        #expect(times == [0, 500, 1500, 3500, 7500, 15_500, 31_500].map { Duration.milliseconds($0) })
        #expect(h.now - t0 == .milliseconds(39_500))
        #expect(h.takeEvents() == [.failed(.timeout)])
        #expect(h.client.requestsSent == 7)
    }

    @Test func streamsDoNotRetransmit() {
        for transport in [TURNTransport.tcp, .tls] {
            var h = TURNHarness(transport: transport)
            let t0 = h.now
            h.client.allocate(now: h.now)
            h.drain()
            #expect(h.take().count == 1)
            #expect(h.deadline == t0 + TURNTiming().streamTimeout)
            h.fire()
            #expect(h.take().isEmpty)
            // Not "UDP blocked": the connection is up, the server does not answer.
            #expect(h.takeEvents() == [.failed(.noAnswerOverConnection)])
            #expect(h.client.requestsSent == 1)
        }
    }

    @Test func retransmissionsAreTheSameBytes() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        let first = h.take()
        h.fire()
        #expect(h.take() == first)
        // The answer to a retransmission still counts: it is the same transaction.
        h.deliver(TURNHarness.challenge(to: first[0]))
        #expect(h.take().count == 1)
    }

    @Test func connectionLossFailsOnce() {
        var h = TURNHarness(transport: .tcp)
        h.allocate()
        h.client.connectionLost("reset by peer")
        h.client.connectionLost("again")
        h.drain()
        #expect(h.takeEvents() == [.failed(.connection("reset by peer"))])
        #expect(h.deadline == .distantFuture)
    }

    @Test func ownsOnlyItsTraffic() throws {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        let req = h.take()[0]
        #expect(h.client.owns(TURNHarness.challenge(to: req)))
        let binding = try STUNMessage(type: .bindingSuccess, transactionID: TransactionID(9, 9, 9)).serialized()
        #expect(!h.client.owns(binding))
        #expect(h.client.owns(ChannelData(channel: 0x4000, data: []).serialized(padded: false)))
        #expect(!h.client.owns([]))
        #expect(!h.client.owns([0x16, 0xfe, 0xfd]))  // DTLS
    }
}

@Suite struct TURNClientEdges {
    @Test func packetsSentWhileAllocatingWait() throws {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        let req = h.take()[0]
        h.client.send([7, 7], to: TURNHarness.peer, now: h.now)
        h.drain()
        #expect(h.take().isEmpty, "nothing goes out before the allocation exists")
        h.deliver(TURNHarness.allocateSuccess(to: req))
        let cp = h.take()
        try #require(cp.map { parsed($0).type } == [.createPermissionRequest])
        h.deliver(TURNHarness.response(to: cp[0]))
        let out = h.take().map(parsed)
        #expect(out.first?.type == .sendIndication && out.first?.data == [7, 7])
    }

    @Test func responseOfAnotherMethodIsIgnored() {
        var h = TURNHarness()
        h.client.allocate(now: h.now)
        h.drain()
        h.deliver(TURNHarness.challenge(to: h.take()[0]))
        let req = h.take()[0]
        // Same transaction ID, Refresh method: not the Allocate's answer.
        var wrong = TURNHarness.allocateSuccess(to: req)
        let m = parsed(wrong)
        let type = STUNMessageType(method: STUNMessageType.refreshMethod, messageClass: .successResponse)
        wrong = try! STUNMessage(type: type, transactionID: m.transactionID, attributes: m.attributes).serialized(integrityKey: TURNHarness.key)
        h.deliver(wrong)
        #expect(h.client.state == .allocating)
        h.deliver(TURNHarness.allocateSuccess(to: req))
        #expect(h.client.state == .allocated)
    }

    @Test func failedChannelRefreshFallsBackToIndications() {
        var h = TURNHarness()
        h.allocate(lifetime: 3600)
        let peer = TURNHarness.peer
        h.client.send([1], to: peer, now: h.now)
        h.drain()
        h.deliver(TURNHarness.response(to: h.take()[0]))
        let bind = h.take().first { parsed($0).type == .channelBindRequest }!
        h.deliver(TURNHarness.response(to: bind))
        // Run to the channel refresh and refuse it.
        var refused = false
        while !refused {
            h.fire()
            for b in h.take() {
                let m = parsed(b)
                if m.type == .channelBindRequest {
                    h.deliver(TURNHarness.response(to: b, error: (400, "Bad Request")))
                    refused = true
                } else {
                    h.deliver(TURNHarness.response(to: b, [.lifetime(Lifetime(seconds: 3600))]))
                }
            }
        }
        h.client.send([2], to: peer, now: h.now)
        h.drain()
        let out = h.take()
        #expect(out.count == 1)
        #expect(out.first.map { !ChannelData.isChannelData(firstByte: $0[0]) } == true, "no ChannelData on a binding the server let lapse")
        #expect(out.first.flatMap { try? STUNMessage.parse($0) }?.type == .sendIndication)
    }

    @Test func oversizedPacketsAreDropped() {
        var h = TURNHarness()
        h.allocate()
        h.client.send([UInt8](repeating: 0, count: 70_000), to: TURNHarness.peer, now: h.now)
        h.drain()
        #expect(h.take().isEmpty)
    }
}
