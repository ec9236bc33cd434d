import Wire

/// A full ICE agent (RFC 8445) for one component, with consent freshness (RFC 7675).
///
/// ## Drive contract (sans-IO)
///
/// The agent owns no socket and reads no clock. Its owner (the IO layer) does this:
///
/// 1. Create it with the role, local credentials, the addresses of the UDP sockets it
///    has bound (host candidates) and a seeded generator; call `start(now:)`.
/// 2. Give it remote credentials and candidates as signaling delivers them
///    (`setRemoteCredentials`, `addRemoteCandidate`, also after checks began).
/// 3. Whenever a STUN datagram arrives (first byte 0–3, `isSTUN(firstByte:)`), call
///    `handleInput(bytes, from: sender, local: address of the receiving socket, now:)`.
/// 4. When the deadline it last returned has come, call `handleTimeout(now:)`.
/// 5. After any of these calls, drain `pollOutput()` until it returns `.timeout(t)`:
///    `.transmit(bytes, from, to)` is sent from the socket bound to `from`;
///    `.event` goes to the peer connection; `t` is the next deadline.
///
/// Behaviour: local host candidates are announced at start, server-reflexive ones are
/// gathered through `config.stunServer`. Pairs are checked highest priority first, one new
/// check every Ta; incoming checks are answered (XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY,
/// FINGERPRINT) and trigger checks back; unknown sources become peer-reflexive remote
/// candidates. The controlling agent nominates with USE-CANDIDATE (regular nomination);
/// role conflicts are resolved with the tie-breaker and 487. Once connected, consent
/// checks run every ~5 s (±20 %); unanswered for `disconnectedTimeout` → `disconnected`,
/// no response for `consentTimeout` → `failed`. Messages that do not parse or do not
/// authenticate are dropped and counted in `stats`.
public struct ICEAgent<R: RandomNumberGenerator> {
    public private(set) var role: ICERole
    public let tieBreaker: UInt64
    public private(set) var localCredentials: ICECredentials
    public private(set) var remoteCredentials: ICECredentials?
    public private(set) var state: ICEState = .new
    public private(set) var selectedPair: ICESelectedPair?
    public private(set) var stats = ICEStats()
    public let config: ICEConfig

    private var rng: R
    private var locals: [LocalCandidate] = []
    private var remotes: [RemoteCandidate] = []
    private var pairs: [CandidatePair] = []
    private var triggered: [Int] = []
    private var transactions: [Transaction] = []
    private var outputs = OutputQueue<ICEOutput>()

    private var nextPacing: Instant? = nil
    private var lastPaced: Instant? = nil
    private var firstValidAt: Instant? = nil
    private var nominating: Int? = nil
    private var selectedIndex: Int? = nil
    private var remoteEndOfCandidates = false
    private var gatheringDone = false
    /// Relayed candidates added or given up, of `config.expectedRelays`.
    private var relaysSettled = 0
    private var pendingRelays: Int { max(0, config.expectedRelays - relaysSettled) }
    private var prflxCounter = 0
    /// Controlling: the pair being nominated to replace a stale selected pair.
    private var switchingTo: Int? = nil
    /// During a restart the previous pair stays usable only until its consent would
    /// have expired (RFC 7675 §5.1); no checks run on it any more.
    private var previousPairExpiry: Instant? = nil

    // Consent freshness (RFC 7675).
    private var lastConsent: Instant = .zero
    private var oldestUnanswered: Instant? = nil
    /// When anything last arrived from the peer (STUN here, media through `noteInbound`).
    private var lastInbound: Instant = .zero
    private var nextConsent: Instant? = nil

    /// - Parameters:
    ///   - hostAddresses: the bound addresses of the UDP sockets (one per interface
    ///     address); their order sets the local preference (first is preferred).
    ///   - tieBreaker: the 64-bit role tie-breaker; drawn from `rng` when nil.
    public init(role: ICERole, localCredentials: ICECredentials, hostAddresses: [SocketAddress],
                config: ICEConfig = ICEConfig(), rng: R, tieBreaker: UInt64? = nil) {
        self.role = role
        self.localCredentials = localCredentials
        self.config = config
        var generator = rng
        if let tieBreaker {
            self.tieBreaker = tieBreaker
        } else {
            self.tieBreaker = generator.next()
        }
        self.rng = generator
        for (i, address) in hostAddresses.enumerated() {
            let localPreference = UInt16(clamping: 65535 - i)
            let candidate = Candidate(
                foundation: Candidate.foundation(type: .host, base: address.ip),
                priority: Candidate.priority(type: .host, localPreference: localPreference),
                address: address, type: .host)
            locals.append(LocalCandidate(candidate: candidate, base: address, localPreference: localPreference))
        }
        // Advertised addresses (one-to-one NAT): a server-reflexive candidate per UDP
        // host candidate of the same family, at the same port, its foundation keyed on
        // the advertised address as a STUN server's would be (RFC 8445 §5.1.1.3).
        for ip in config.advertised {
            for host in locals where host.candidate.type == .host && host.base.ip.isV4 == ip.isV4 && host.base.ip != ip {
                let mapped = SocketAddress(ip: ip, port: host.base.port)
                guard !locals.contains(where: { $0.candidate.socketAddress == mapped }) else { continue }
                let c = Candidate(foundation: Candidate.foundation(type: .serverReflexive, base: host.base.ip, server: ip),
                                  priority: Candidate.priority(type: .serverReflexive, localPreference: host.localPreference),
                                  address: mapped, type: .serverReflexive, related: host.base)
                locals.append(LocalCandidate(candidate: c, base: host.base, localPreference: host.localPreference))
            }
        }
        if config.tcpActive {
            var seen: [IPAddress] = []
            for address in hostAddresses where !seen.contains(address.ip) {
                seen.append(address.ip)
                // RFC 6544 §4.2: local preference = 2^13 · direction-pref (active: 6) +
                // other-pref; UDP host candidates (65535 down) stay ahead of these.
                let localPreference = UInt16(6 << 13) | UInt16(clamping: 8191 - seen.count)
                let base = SocketAddress(ip: address.ip, port: 9)
                let candidate = Candidate(
                    foundation: Candidate.foundation(type: .host, base: address.ip, transport: .tcp), transport: .tcp,
                    priority: Candidate.priority(type: .host, localPreference: localPreference),
                    address: base, type: .host, extensions: [CandidateExtension(name: "tcptype", value: "active")])
                locals.append(LocalCandidate(candidate: candidate, base: base, localPreference: localPreference))
            }
        }
    }

    // MARK: - Public operations

    /// Announces host candidates, starts server-reflexive gathering and checks.
    public mutating func start(now: Instant) {
        guard state == .new else { return }
        setState(.checking)
        for l in locals { emit(.localCandidate(l.candidate)) }
        var gathering = false
        if let server = config.stunServer {
            for (i, l) in locals.enumerated() where l.base.ip.isV4 == server.ip.isV4 && l.candidate.type == .host && l.candidate.transport == .udp {
                let id = TransactionID.random(using: &rng)
                let m = STUNMessage(type: .bindingRequest, transactionID: id)
                // No attributes: serialized() has nothing to refuse.
                guard let bytes = try? m.serialized(fingerprint: true) else { continue }
                startTransaction(Transaction(id: id, kind: .gather(local: i), bytes: bytes, from: l.base, to: server,
                                             key: nil, now: now, rto: config.initialRTO))
                gathering = true
            }
        }
        if !gathering && pendingRelays == 0 { finishGathering() }
        schedulePacing(now: now)
    }

    /// A TURN allocation made by the owner (RFC 8656 §7): `relayed` becomes a local
    /// relayed candidate (RFC 8445 §5.1.1.2) whose base is itself; checks and media
    /// "from" it are the owner's to send through the allocation. `mapped` is our address
    /// as the TURN server saw it (the candidate's related address), `server` the TURN
    /// server's IP (it sets the foundation, §5.1.1.3). Counts towards
    /// `config.expectedRelays`: gathering completes once every expected relay was added
    /// or given up (`relayGatheringFailed`). May come before or after remote candidates.
    public mutating func addRelayCandidate(relayed: SocketAddress, mapped: SocketAddress?, server: IPAddress, now: Instant) {
        guard state != .closed else { return }
        if !locals.contains(where: { $0.base == relayed }) {
            // Relays keep their configuration order as local preference, below hosts'.
            let relays = locals.filter { $0.candidate.type == .relay }.count
            let localPreference = UInt16(clamping: 65535 - relays)
            let c = Candidate(foundation: Candidate.foundation(type: .relay, base: relayed.ip, server: server),
                              priority: Candidate.priority(type: .relay, localPreference: localPreference),
                              address: relayed, type: .relay, related: mapped)
            locals.append(LocalCandidate(candidate: c, base: relayed, localPreference: localPreference))
            let l = locals.count - 1
            emit(.localCandidate(c))
            for r in remotes.indices where remotes[r].address.ip.isV4 == relayed.ip.isV4 && remotes[r].candidate.transport == .udp {
                _ = addPair(local: l, remote: r)
            }
            schedulePacing(now: now)
        }
        relayGathered()
    }

    /// One of `config.expectedRelays` could not be allocated; gathering goes on without it.
    public mutating func relayGatheringFailed(now: Instant) { relayGathered() }

    private mutating func relayGathered() {
        relaysSettled += 1
        if pendingRelays == 0 && !transactions.contains(where: { $0.isGather }) && state != .new { finishGathering() }
    }

    /// The peer's ufrag and password (from its SDP); may come after `start`.
    public mutating func setRemoteCredentials(_ credentials: ICECredentials, now: Instant) {
        remoteCredentials = credentials
        schedulePacing(now: now)
    }

    /// Adds a remote candidate. Returns false when it is not usable here (TCP, mDNS name,
    /// component other than 1, duplicate) and was ignored.
    @discardableResult
    public mutating func addRemoteCandidate(_ candidate: Candidate, now: Instant) -> Bool {
        guard state != .closed, candidate.isUsable || (config.tcpActive && candidate.isTCPPassive), candidate.component == 1,
              let address = candidate.socketAddress else { return false }
        // UDP and TCP candidates may share an address: they are different paths.
        if let i = remotes.firstIndex(where: { $0.address == address && $0.candidate.transport == candidate.transport }) {
            // A signaled candidate replaces a peer-reflexive one learned from a check
            // (RFC 8445 §7.3.1.3 keeps the signaled type and priority).
            if remotes[i].candidate.type == .peerReflexive {
                remotes[i].candidate = candidate
                // The check that taught us this address paired it with one local
                // candidate only (the one it arrived on); now that it is signaled it
                // pairs with every local one, as if it had come first. (Seen with
                // aiortc, which checks before its answer is applied: without this the
                // relayed pair never formed and a firewalled call never connected.)
                for l in locals.indices where locals[l].pairable && locals[l].base.ip.isV4 == address.ip.isV4
                    && locals[l].candidate.transport == candidate.transport && !pairs.contains(where: { $0.local == l && $0.remote == i }) {
                    _ = addPair(local: l, remote: i)
                }
                schedulePacing(now: now)
                return true
            }
            return false
        }
        if candidate.transport == .tcp,
           remotes.count(where: { $0.candidate.transport == .tcp }) >= config.maximumTCPRemotes { return false }
        remotes.append(RemoteCandidate(candidate: candidate, address: address))
        let r = remotes.count - 1
        for l in locals.indices where locals[l].pairable && locals[l].base.ip.isV4 == address.ip.isV4
            && locals[l].candidate.transport == candidate.transport {
            _ = addPair(local: l, remote: r)
        }
        schedulePacing(now: now)
        return true
    }

    /// The peer signaled `a=end-of-candidates`: when every pair has failed, the agent fails.
    public mutating func setRemoteEndOfCandidates(now: Instant) {
        remoteEndOfCandidates = true
        checkForFailure(now: now)
    }

    /// ICE restart (RFC 8445 §9): new local credentials; the remote ones, and the remote
    /// candidates, come again through signaling. Checks start over; the old selected pair
    /// stays in `selectedPair` until a new one is nominated.
    public mutating func restart(localCredentials: ICECredentials, now: Instant) {
        guard state != .closed else { return }
        self.localCredentials = localCredentials
        remoteCredentials = nil
        remotes.removeAll()
        pairs.removeAll()
        triggered.removeAll()
        transactions.removeAll { if case .check = $0.kind { return true } else { return false } }
        locals.removeAll { $0.candidate.type == .peerReflexive }
        previousPairExpiry = selectedPair == nil ? nil : lastConsent + config.consentTimeout
        nominating = nil
        switchingTo = nil
        selectedIndex = nil
        firstValidAt = nil
        remoteEndOfCandidates = false
        nextConsent = nil
        oldestUnanswered = nil
        nextPacing = nil
        if state != .checking { setState(.checking) }
    }

    /// Stops everything: no more transmissions, no more answers.
    public mutating func close() {
        guard state != .closed else { return }
        transactions.removeAll()
        triggered.removeAll()
        nextPacing = nil
        nextConsent = nil
        setState(.closed)
    }

    /// The checklist, highest pair priority first (for diagnostics and tests).
    public var checklist: [(local: SocketAddress, remote: SocketAddress, state: String, nominated: Bool)] {
        pairs.indices.sorted { pairPriority($0) > pairPriority($1) }.map { i in
            (locals[pairs[i].local].base, remotes[pairs[i].remote].address, "\(pairs[i].state)", pairs[i].nominated)
        }
    }

    /// Whether ICE has validated the 5-tuple `local` ← `remote`: a check on that pair got
    /// an authenticated success response (RFC 8445 §7.2.5.3.2, the valid list), or it is
    /// the selected pair (also the previous generation's, which stays usable through a
    /// restart until its consent would expire). Only such a path may carry DTLS, SRTP
    /// and what rides on them (RFC 8445 §7.3, RFC 8842 §4): anything else is a stranger.
    public func isValidated(local: SocketAddress, remote: SocketAddress) -> Bool {
        if let s = selectedPair, s.local == local, s.remote == remote { return true }
        return pairs.contains { $0.state == .succeeded && locals[$0.local].base == local && remotes[$0.remote].address == remote }
    }

    /// Whether `local` ← `remote` is a candidate pair at all (signaled, or learned from an
    /// authenticated check) that is not validated yet: what arrives on it may be the
    /// peer running a step ahead (its DTLS ClientHello before our own check's answer), so
    /// a caller may hold a little of it until `isValidated` says yes.
    public func mayBecomeValidated(local: SocketAddress, remote: SocketAddress) -> Bool {
        pairs.contains { $0.state != .failed && locals[$0.local].base == local && remotes[$0.remote].address == remote }
    }

    public var localCandidates: [Candidate] { locals.map { $0.candidate } }
    public var remoteCandidates: [Candidate] { remotes.map { $0.candidate } }

    // MARK: - Drive

    /// A STUN datagram arrived on the socket bound to `local` from `from`.
    /// Media (DTLS, SRTP) arrived: the peer is sending, no early consent check needed.
    public mutating func noteInbound(now: Instant) { lastInbound = now }

    public mutating func handleInput(_ bytes: [UInt8], from: SocketAddress, local: SocketAddress, now: Instant) {
        guard state != .closed else { return }
        lastInbound = now
        let message: STUNMessage
        do throws(ICEError) {
            message = try STUNMessage.parse(bytes)
        } catch {
            stats.malformed += 1
            return
        }
        switch message.type.messageClass {
        case .request:
            guard message.type.method == STUNMessageType.bindingMethod else { stats.malformed += 1; return }
            handleRequest(message, bytes: bytes, from: from, local: local, now: now)
        case .successResponse, .errorResponse:
            handleResponse(message, bytes: bytes, from: from, local: local, now: now)
        case .indication:
            // Binding indications are keepalives (RFC 8489 §3): nothing to do.
            break
        }
    }

    /// The deadline returned by `pollOutput` has come (calling earlier is harmless).
    public mutating func handleTimeout(now: Instant) {
        guard state != .closed else { return }
        if let t = previousPairExpiry, now >= t, selectedIndex == nil {
            previousPairExpiry = nil
            selectedPair = nil
        }
        retransmit(now: now)
        if let t = nextPacing, t <= now { pace(now: now) }
        maybeNominate(now: now)
        consentTick(now: now)
        checkForFailure(now: now)
    }

    /// The next output; `.timeout` when there is nothing else to do now.
    public mutating func pollOutput() -> ICEOutput {
        if let o = outputs.popFirst() { return o }
        return .timeout(nextDeadline())
    }

    // MARK: - Requests (RFC 8445 §7.3)

    private mutating func handleRequest(_ m: STUNMessage, bytes: [UInt8], from: SocketAddress, local: SocketAddress,
                                        now: Instant) {
        // RFC 8489 §6.3.1: unknown comprehension-required attributes → 420.
        if !m.unknownRequired.isEmpty {
            stats.unknownAttributeRequests += 1
            let reply = STUNMessage(type: .bindingError, transactionID: m.transactionID, attributes: [
                .errorCode(ErrorCode(code: ErrorCode.unknownAttribute, reason: "Unknown Attribute")),
                .unknownAttributes(UnknownAttributes(m.unknownRequired)),
            ])
            // The listed types come from a request that fitted in a datagram: encodable.
            if let out = try? reply.serialized(fingerprint: true) { transmit(out, from: local, to: from) }
            return
        }
        // Authentication (RFC 8445 §7.3, RFC 8489 §9.1.3): USERNAME must be
        // "ourUfrag:theirUfrag" and MESSAGE-INTEGRITY keyed with our password.
        let localKey = STUNMessage.shortTermKey(password: localCredentials.password)
        // Ufrags are compared as bytes (RFC 8839 §5.4: ice-char octets; Wire/Text.swift).
        guard let username = m.username, username.startsWithBytes(localCredentials.ufrag + ":"),
              (try? m.verifyIntegrity(of: bytes, key: localKey)) != nil else {
            stats.unauthenticated += 1
            return
        }
        let remoteUfrag = Substring(username.utf8.dropFirst(localCredentials.ufrag.utf8.count + 1))

        // Role conflict (RFC 8445 §7.3.1.1).
        if role == .controlling, let theirs = m.iceControlling {
            stats.roleConflicts += 1
            if tieBreaker >= theirs {
                sendError(ErrorCode.roleConflict, reason: "Role Conflict", to: m, from: local, peer: from, key: localKey)
                return
            }
            switchRole(to: .controlled)
        } else if role == .controlled, let theirs = m.iceControlled {
            stats.roleConflicts += 1
            if tieBreaker >= theirs {
                switchRole(to: .controlling)
            } else {
                sendError(ErrorCode.roleConflict, reason: "Role Conflict", to: m, from: local, peer: from, key: localKey)
                return
            }
        }

        // Success response (RFC 8445 §7.3.1.2): XOR-MAPPED-ADDRESS is the source.
        let reply = STUNMessage(type: .bindingSuccess, transactionID: m.transactionID,
                                attributes: [.xorMappedAddress(XORMappedAddress(from))])
        if let out = try? reply.serialized(integrityKey: localKey, fingerprint: true) {
            stats.requestsAnswered += 1
            transmit(out, from: local, to: from)
        }

        // A check from an earlier generation (the peer's old ufrag) is answered but
        // does not touch the checklist.
        if let remote = remoteCredentials, !remote.ufrag.bytesEqual(remoteUfrag) { return }
        guard let l = locals.firstIndex(where: { $0.base == local && $0.pairable }) else { return }

        // Peer-reflexive remote candidate (RFC 8445 §7.3.1.3).
        let transport = locals[l].candidate.transport
        var r = remotes.firstIndex(where: { $0.address == from && $0.candidate.transport == transport })
        if r == nil {
            guard let priority = m.priority else { return }
            prflxCounter += 1
            let c = Candidate(foundation: "prflx\(prflxCounter)", transport: transport, priority: priority, address: from, type: .peerReflexive)
            remotes.append(RemoteCandidate(candidate: c, address: from))
            r = remotes.count - 1
        }
        guard let remoteIndex = r else { return }
        var p = pairs.firstIndex(where: { $0.local == l && $0.remote == remoteIndex })
        if p == nil { p = addPair(local: l, remote: remoteIndex) }
        guard let pairIndex = p else { return }

        // Triggered check (RFC 8445 §7.3.1.4) and nomination by the peer (§7.3.1.5).
        let nominate = m.useCandidate && role == .controlled
        switch pairs[pairIndex].state {
        case .succeeded:
            if nominate {
                nominatePair(pairIndex, now: now)
            } else if state == .disconnected, pairIndex != selectedIndex, !triggered.contains(pairIndex) {
                // The selected pair is going stale while the peer reaches us on this
                // one: check it again, so a fresh response can move us over
                // (`switchFromStalePair`).
                pairs[pairIndex].state = .waiting
                triggered.append(pairIndex)
                schedulePacing(now: now)
            }
        case .inProgress:
            // RFC 8445 §7.3.1.4: cancel the in-progress check (no more retransmissions,
            // but its response still counts) and check the pair again at once. Our first
            // check may have reached the peer before it could answer (before it had our
            // credentials, or before it was listening); waiting out its retransmission
            // would cost a whole RTO of connect time.
            if nominate { pairs[pairIndex].nominateOnSuccess = true }
            for t in transactions.indices {
                if case .check(let q, _, false) = transactions[t].kind, q == pairIndex { transactions[t].cancelled = true }
            }
            pairs[pairIndex].state = .waiting
            if !triggered.contains(pairIndex) { triggered.append(pairIndex) }
            schedulePacing(now: now)
        case .frozen, .waiting, .failed:
            if nominate { pairs[pairIndex].nominateOnSuccess = true }
            pairs[pairIndex].state = .waiting
            if !triggered.contains(pairIndex) { triggered.append(pairIndex) }
            schedulePacing(now: now)
        }
    }

    private mutating func sendError(_ code: Int, reason: String, to m: STUNMessage, from local: SocketAddress,
                                    peer: SocketAddress, key: [UInt8]) {
        let reply = STUNMessage(type: .bindingError, transactionID: m.transactionID,
                                attributes: [.errorCode(ErrorCode(code: code, reason: reason))])
        // Our own short reason: serialized() has nothing to refuse.
        if let out = try? reply.serialized(integrityKey: key, fingerprint: true) { transmit(out, from: local, to: peer) }
    }

    private mutating func switchRole(to newRole: ICERole) {
        guard role != newRole else { return }
        role = newRole
        nominating = nil
        emit(.roleChanged(newRole))
    }

    // MARK: - Responses (RFC 8445 §7.2.5)

    private mutating func handleResponse(_ m: STUNMessage, bytes: [UInt8], from: SocketAddress, local: SocketAddress,
                                         now: Instant) {
        guard let t = transactions.firstIndex(where: { $0.id == m.transactionID }) else {
            stats.unmatchedResponses += 1
            return
        }
        let tx = transactions[t]
        // A response must come from where the request went (a STUN server's answers carry
        // no integrity, so this is their only check besides the transaction ID).
        if tx.isGather && from != tx.to {
            stats.unmatchedResponses += 1
            return
        }
        if let key = tx.key {
            guard (try? m.verifyIntegrity(of: bytes, key: key)) != nil else {
                stats.unauthenticated += 1
                return
            }
        }
        transactions.remove(at: t)
        switch tx.kind {
        case .gather(let l):
            handleGatherResponse(m, local: l, server: tx.to)
        case .check(let p, let useCandidate, let consent):
            guard p < pairs.count else { return }
            if m.type.messageClass == .errorResponse {
                if m.errorCode?.code == ErrorCode.roleConflict {
                    // RFC 8445 §7.2.5.1: switch to the role opposite the one in our request
                    // and check the pair again.
                    stats.roleConflicts += 1
                    switchRole(to: tx.role == .controlling ? .controlled : .controlling)
                    pairs[p].state = .waiting
                    if !triggered.contains(p) { triggered.append(p) }
                    schedulePacing(now: now)
                } else if !consent {
                    pairs[p].state = .failed
                }
                return
            }
            // RFC 8445 §7.2.5.2.1: the response must come back on the same addresses.
            guard from == tx.to, local == tx.from else {
                if !consent { pairs[p].state = .failed }
                return
            }
            if let mapped = m.mappedAddress, !locals.contains(where: { $0.candidate.socketAddress == mapped }) {
                // Peer-reflexive local candidate (RFC 8445 §7.2.5.3.1); its base is the
                // socket the check went out of, which is what we send from anyway.
                let c = Candidate(foundation: Candidate.foundation(type: .peerReflexive, base: tx.from.ip),
                                  priority: tx.priority, address: mapped, type: .peerReflexive)
                locals.append(LocalCandidate(candidate: c, base: tx.from, localPreference: 0))
            }
            checkSucceeded(p, useCandidate: useCandidate, now: now)
        }
    }

    private mutating func checkSucceeded(_ p: Int, useCandidate: Bool, now: Instant) {
        pairs[p].lastSucceeded = now
        if pairs[p].state != .succeeded {
            pairs[p].state = .succeeded
            if firstValidAt == nil { firstValidAt = now }
            // Unfreeze pairs with the same foundation (RFC 8445 §7.2.5.3.3).
            for i in pairs.indices where pairs[i].state == .frozen && pairs[i].foundation.bytesEqual(pairs[p].foundation) {
                pairs[i].state = .waiting
            }
        }
        if p == selectedIndex {
            // Consent (RFC 7675 §5.1): any authenticated response on the selected pair.
            lastConsent = now
            oldestUnanswered = nil
            if state == .disconnected { setState(.connected) }
        }
        if (useCandidate && role == .controlling) || (pairs[p].nominateOnSuccess && role == .controlled) {
            nominatePair(p, now: now, replacingStale: p == switchingTo)
        }
        if state == .disconnected { switchFromStalePair(now: now) }
        // The controlling agent nominates as soon as nothing better can still succeed
        // (RFC 8445 §8.1.1), not at its next timer: with a single pair the next timer is
        // `nominationDelay` away.
        maybeNominate(now: now)
        schedulePacing(now: now)
    }

    /// NAT rebinding (RFC 4787 §4.3: a mapping timed out or the router restarted): the
    /// peer's packets suddenly come from a new port, and what we send to the old one is
    /// lost. Its checks from the new port create a peer-reflexive pair (§7.3.1.3) whose
    /// triggered check succeeds, but RFC 8445 alone keeps the nominated pair until
    /// consent expires and the call fails. So, once the selected pair has gone
    /// `disconnected` and another pair of this generation has a success response less
    /// than `disconnectedTimeout` old (consent on that 5-tuple, RFC 7675 §5.1), we move
    /// to it: the controlling agent nominates it again with USE-CANDIDATE (as in
    /// renomination, draft-thatcher-ice-renomination), the controlled agent selects it
    /// (the controlling agent's nomination cannot reach it while its own answers go to
    /// the dead port). Nothing changes while consent on the selected pair is fresh.
    private mutating func switchFromStalePair(now: Instant) {
        guard state == .disconnected, let s = selectedIndex, switchingTo == nil else { return }
        let fresh = pairs.indices.filter { i in
            i != s && pairs[i].state == .succeeded && (pairs[i].lastSucceeded.map { now - $0 < config.disconnectedTimeout } ?? false)
        }
        guard let best = fresh.max(by: { pairPriority($0) < pairPriority($1) }) else { return }
        stats.staleSwitches += 1
        if role == .controlling {
            switchingTo = best
            nominating = best
            pairs[best].state = .waiting
            triggered.insert(best, at: 0)
            schedulePacing(now: now)
        } else {
            nominatePair(best, now: now, replacingStale: true)
        }
    }

    private mutating func handleGatherResponse(_ m: STUNMessage, local l: Int, server: SocketAddress) {
        defer { if !transactions.contains(where: { $0.isGather }) && pendingRelays == 0 { finishGathering() } }
        guard m.type.messageClass == .successResponse, let mapped = m.mappedAddress else { return }
        // A mapped address equal to the base adds nothing (RFC 8445 §5.1.3).
        guard mapped != locals[l].base,
              !locals.contains(where: { $0.candidate.socketAddress == mapped }) else { return }
        let c = Candidate(foundation: Candidate.foundation(type: .serverReflexive, base: locals[l].base.ip, server: server.ip),
                          priority: Candidate.priority(type: .serverReflexive, localPreference: locals[l].localPreference),
                          address: mapped, type: .serverReflexive, related: locals[l].base)
        locals.append(LocalCandidate(candidate: c, base: locals[l].base, localPreference: locals[l].localPreference))
        emit(.localCandidate(c))
    }

    private mutating func finishGathering() {
        guard !gatheringDone else { return }
        gatheringDone = true
        emit(.gatheringComplete)
    }

    // MARK: - Nomination and selection

    /// The controlling agent nominates the best valid pair once no better pair can still
    /// succeed, or `nominationDelay` after the first valid pair (RFC 8445 §8.1.1).
    private mutating func maybeNominate(now: Instant) {
        guard role == .controlling, nominating == nil, selectedIndex == nil, let first = firstValidAt,
              remoteCredentials != nil else { return }
        guard let best = pairs.indices.filter({ pairs[$0].state == .succeeded })
            .max(by: { pairPriority($0) < pairPriority($1) }) else { return }
        let betterPending = pairs.indices.contains {
            pairPriority($0) > pairPriority(best) && pairs[$0].state != .failed && pairs[$0].state != .succeeded
        }
        guard !betterPending || now >= first + config.nominationDelay else { return }
        nominating = best
        pairs[best].state = .waiting
        triggered.insert(best, at: 0)
        schedulePacing(now: now)
    }

    private mutating func nominatePair(_ p: Int, now: Instant, replacingStale: Bool = false) {
        pairs[p].nominated = true
        if replacingStale { switchingTo = nil }
        // RFC 8445 §8.1.2: with a nominated pair, Waiting and Frozen pairs are not checked.
        for i in pairs.indices where pairs[i].state == .waiting || pairs[i].state == .frozen {
            pairs[i].state = .failed
        }
        triggered.removeAll()
        if let s = selectedIndex, s == p || (pairPriority(s) > pairPriority(p) && !replacingStale && state != .disconnected) {
            return
        }
        selectedIndex = p
        previousPairExpiry = nil
        let l = pairs[p].local, r = pairs[p].remote
        let selected = ICESelectedPair(local: locals[l].base, remote: remotes[r].address,
                                       localCandidate: locals[l].candidate, remoteCandidate: remotes[r].candidate)
        selectedPair = selected
        emit(.selectedPairChanged(selected))
        lastConsent = now
        oldestUnanswered = nil
        nextConsent = now + consentInterval()
        if state != .connected { setState(.connected) }
    }

    // MARK: - Checks and pacing (RFC 8445 §6.1.4.2)

    private mutating func schedulePacing(now: Instant) {
        guard nextPacing == nil, hasCheckToSend else { return }
        if let last = lastPaced, last + config.ta > now {
            nextPacing = last + config.ta
        } else {
            nextPacing = now
        }
    }

    private var hasCheckToSend: Bool {
        guard remoteCredentials != nil, state != .closed else { return false }
        return !triggered.isEmpty || pairs.contains { $0.state == .waiting || $0.state == .frozen }
    }

    /// One check per Ta: the triggered queue first, then the best Waiting pair, then the
    /// best Frozen one (which gets unfrozen).
    private mutating func pace(now: Instant) {
        nextPacing = nil
        guard remoteCredentials != nil else { return }
        var chosen: Int? = nil
        while !triggered.isEmpty {
            let p = triggered.removeFirst()
            if pairs[p].state == .waiting || pairs[p].state == .frozen || nominating == p {
                chosen = p
                break
            }
        }
        if chosen == nil {
            chosen = bestPair(in: .waiting) ?? bestPair(in: .frozen)
        }
        guard let p = chosen else { return }
        sendCheck(p, useCandidate: role == .controlling && nominating == p, consent: false, now: now)
        lastPaced = now
        schedulePacing(now: now)
    }

    private func bestPair(in s: PairState) -> Int? {
        pairs.indices.filter { pairs[$0].state == s }.max { pairPriority($0) < pairPriority($1) }
    }

    private mutating func sendCheck(_ p: Int, useCandidate: Bool, consent: Bool, now: Instant) {
        guard let remote = remoteCredentials else { return }
        let l = pairs[p].local, r = pairs[p].remote
        let id = TransactionID.random(using: &rng)
        // RFC 8445 §7.2.2: PRIORITY is what a peer-reflexive candidate from this check
        // would get; USERNAME is "theirUfrag:ourUfrag"; MESSAGE-INTEGRITY uses their pwd.
        let priority = Candidate.priority(type: .peerReflexive, localPreference: locals[l].localPreference)
        var attributes: [STUNAttribute] = []
        if let s = config.software { attributes.append(.software(Software(s))) }
        attributes.append(.username(Username(remote.ufrag + ":" + localCredentials.ufrag)))
        attributes.append(.priority(Priority(priority)))
        if role == .controlling {
            attributes.append(.iceControlling(ICEControlling(tieBreaker: tieBreaker)))
            if useCandidate { attributes.append(.useCandidate) }
        } else {
            attributes.append(.iceControlled(ICEControlled(tieBreaker: tieBreaker)))
        }
        let key = STUNMessage.shortTermKey(password: remote.password)
        let m = STUNMessage(type: .bindingRequest, transactionID: id, attributes: attributes)
        // serialized() sizes its buffer from the attributes and refuses only one over
        // 64 KiB: a far end whose ufrag is that long (RFC 8839 §5.4 allows 256
        // characters) gets no checks, and its call fails as one that never connected.
        guard let bytes = try? m.serialized(integrityKey: key, fingerprint: true) else { return }
        if !consent { pairs[p].state = .inProgress }
        var tx = Transaction(id: id, kind: .check(pair: p, useCandidate: useCandidate, consent: consent), bytes: bytes,
                             from: locals[l].base, to: remotes[r].address, key: key, now: now,
                             rto: config.initialRTO)
        tx.role = role
        tx.priority = priority
        startTransaction(tx)
    }

    private mutating func startTransaction(_ tx: Transaction) {
        stats.checksSent += 1
        transactions.append(tx)
        transmit(tx.bytes, from: tx.from, to: tx.to)
    }

    /// RFC 8489 §6.2.1 retransmission, doubling from `initialRTO` up to `maxRTO`, at most
    /// `maxTransmissions` sends; one more RTO after the last, then the transaction fails.
    private mutating func retransmit(now: Instant) {
        var i = 0
        while i < transactions.count {
            guard transactions[i].deadline <= now else { i += 1; continue }
            if transactions[i].transmissions < config.maxTransmissions {
                transactions[i].transmissions += 1
                let doubled = transactions[i].rto * 2
                transactions[i].rto = doubled < config.maxRTO ? doubled : config.maxRTO
                transactions[i].deadline = now + transactions[i].rto
                // A cancelled check (§7.3.1.4) keeps waiting for its response but is not sent again.
                if !transactions[i].cancelled {
                    stats.retransmissions += 1
                    transmit(transactions[i].bytes, from: transactions[i].from, to: transactions[i].to)
                }
                i += 1
                continue
            }
            let tx = transactions.remove(at: i)
            switch tx.kind {
            case .gather:
                if !transactions.contains(where: { $0.isGather }) && pendingRelays == 0 { finishGathering() }
            case .check(let p, _, let consent):
                // A cancelled check's silence is not a failure: the triggered check that
                // replaced it decides.
                if !consent && !tx.cancelled && p < pairs.count && pairs[p].state == .inProgress {
                    pairs[p].state = .failed
                    if nominating == p { nominating = nil }
                    if switchingTo == p { switchingTo = nil }
                }
            }
        }
    }

    private mutating func checkForFailure(now: Instant) {
        guard state == .checking, selectedIndex == nil, selectedPair == nil, remoteEndOfCandidates, !pairs.isEmpty,
              pairs.allSatisfy({ $0.state == .failed }) else { return }
        setState(.failed)
    }

    // MARK: - Consent freshness (RFC 7675)

    private mutating func consentInterval() -> Duration {
        // Uniform in [0.8, 1.2] × interval (RFC 7675 §5.1).
        let base = config.consentInterval.nanoseconds
        let span = UInt64(max(base / 5 * 2, 1))
        return Duration(nanoseconds: base / 5 * 4 + Int64(rng.next() % span))
    }

    private mutating func consentTick(now: Instant) {
        guard let s = selectedIndex, state == .connected || state == .disconnected else { return }
        if now >= lastConsent + config.consentTimeout {
            // Consent expired: stop sending on the pair (RFC 7675 §5.1).
            transactions.removeAll { if case .check(_, _, true) = $0.kind { return true } else { return false } }
            nextConsent = nil
            oldestUnanswered = nil
            selectedIndex = nil
            selectedPair = nil
            setState(.failed)
            return
        }
        if state == .connected, oldestUnanswered == nil, let probe = config.silenceProbe, now >= max(lastInbound, lastConsent) + probe {
            nextConsent = now
        }
        if let due = nextConsent, now >= due {
            if oldestUnanswered == nil { oldestUnanswered = now }
            sendCheck(s, useCandidate: false, consent: true, now: now)
            nextConsent = now + consentInterval()
        }
        if state == .connected, let since = oldestUnanswered, now >= since + config.disconnectedTimeout {
            setState(.disconnected)
            switchFromStalePair(now: now)
        }
    }

    // MARK: - Helpers

    private mutating func addPair(local l: Int, remote r: Int) -> Int? {
        guard pairs.count < config.maxPairs else { return nil }
        let foundation = locals[l].candidate.foundation + ":" + remotes[r].candidate.foundation
        // RFC 8445 §6.1.2.6: one pair per foundation starts Waiting, the rest Frozen.
        // Foundations are ice-char octets (RFC 8445 §5.1.1.3): compared as bytes.
        let waiting = !pairs.contains { $0.foundation.bytesEqual(foundation) }
        pairs.append(CandidatePair(local: l, remote: r, foundation: foundation, state: waiting ? .waiting : .frozen))
        return pairs.count - 1
    }

    private func pairPriority(_ p: Int) -> UInt64 {
        let local = locals[pairs[p].local].candidate.priority
        let remote = remotes[pairs[p].remote].candidate.priority
        return role == .controlling
            ? candidatePairPriority(controlling: local, controlled: remote)
            : candidatePairPriority(controlling: remote, controlled: local)
    }

    private func nextDeadline() -> Instant {
        var t = Instant.distantFuture
        guard state != .closed else { return t }
        for tx in transactions where tx.deadline < t { t = tx.deadline }
        if let p = nextPacing, p < t { t = p }
        if let e = previousPairExpiry, e < t { t = e }
        if role == .controlling, nominating == nil, selectedIndex == nil, let first = firstValidAt {
            let n = first + config.nominationDelay
            if n < t { t = n }
        }
        if selectedIndex != nil, state == .connected || state == .disconnected {
            if let c = nextConsent, c < t { t = c }
            let expiry = lastConsent + config.consentTimeout
            if expiry < t { t = expiry }
            if state == .connected, let since = oldestUnanswered {
                let d = since + config.disconnectedTimeout
                if d < t { t = d }
            }
            if state == .connected, oldestUnanswered == nil, let probe = config.silenceProbe {
                let d = max(lastInbound, lastConsent) + probe
                if d < t { t = d }
            }
        }
        return t
    }

    private mutating func transmit(_ bytes: [UInt8], from: SocketAddress, to: SocketAddress) {
        outputs.append(.transmit(bytes: bytes, from: from, to: to))
    }

    private mutating func emit(_ e: ICEEvent) { outputs.append(.event(e)) }

    private mutating func setState(_ s: ICEState) {
        guard state != s else { return }
        state = s
        emit(.stateChanged(s))
    }
}

// MARK: - Internal records

struct LocalCandidate {
    var candidate: Candidate
    /// The socket address checks go out of (RFC 8445 §5.1.1: the candidate's base). For
    /// a relayed candidate the base is the relayed address itself (§5.1.1.2): the runtime
    /// sends what goes "from" it through that TURN allocation.
    var base: SocketAddress
    var localPreference: UInt16

    /// Host and relayed candidates are paired; a server-reflexive one shares its host
    /// candidate's base and would only duplicate its pairs (RFC 8445 §6.1.2.4).
    var pairable: Bool { candidate.type == .host || candidate.type == .relay }
}

struct RemoteCandidate {
    var candidate: Candidate
    var address: SocketAddress
}

/// RFC 8445 §6.1.2.6 pair states.
enum PairState: Hashable, CustomStringConvertible {
    case frozen, waiting, inProgress, succeeded, failed

    var description: String {
        switch self {
        case .frozen: return "frozen"
        case .waiting: return "waiting"
        case .inProgress: return "in-progress"
        case .succeeded: return "succeeded"
        case .failed: return "failed"
        }
    }
}

struct CandidatePair {
    var local: Int
    var remote: Int
    var foundation: String
    var state: PairState
    var nominated = false
    /// Controlled side: USE-CANDIDATE arrived before our own check succeeded (§7.3.1.5).
    var nominateOnSuccess = false
    /// When a check on this pair last got an authenticated success response.
    var lastSucceeded: Instant? = nil
}

struct Transaction {
    enum Kind {
        case check(pair: Int, useCandidate: Bool, consent: Bool)
        case gather(local: Int)
    }

    var id: TransactionID
    var kind: Kind
    var bytes: [UInt8]
    var from: SocketAddress
    var to: SocketAddress
    /// MESSAGE-INTEGRITY key expected on the response (nil for a STUN server).
    var key: [UInt8]?
    var deadline: Instant
    var rto: Duration
    var transmissions = 1
    /// Replaced by a triggered check (RFC 8445 §7.3.1.4): no retransmissions, and no
    /// failure when it times out; a response still counts.
    var cancelled = false
    /// Our role and PRIORITY when the request was sent (for 487 and prflx candidates).
    var role: ICERole = .controlling
    var priority: UInt32 = 0

    init(id: TransactionID, kind: Kind, bytes: [UInt8], from: SocketAddress, to: SocketAddress, key: [UInt8]?,
         now: Instant, rto: Duration) {
        self.id = id
        self.kind = kind
        self.bytes = bytes
        self.from = from
        self.to = to
        self.key = key
        self.deadline = now + rto
        self.rto = rto
    }

    var isGather: Bool { if case .gather = kind { return true } else { return false } }
}
