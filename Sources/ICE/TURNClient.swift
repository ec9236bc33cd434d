import Wire

/// Why a TURN allocation could not be made or kept, worded for the log and `check`.
public enum TURNFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// 401 to a request that carried our credentials (RFC 8489 §9.2.4), or 441 Wrong
    /// Credentials (RFC 8656 §19): the username or credential is wrong. Not retried.
    case unauthorized(String)
    /// An error response other than the ones handled (403, 437, 486, 508, …).
    case refused(code: Int, reason: String)
    /// No response within the transaction timeout (RFC 8489 §6.2.1), over UDP.
    case timeout
    /// No response over a TCP or TLS connection that stayed up (RFC 8489 §6.2.2: 39.5 s,
    /// shorter here): the server accepted the connection but does not answer.
    case noAnswerOverConnection
    /// The TCP or TLS connection to the server failed or closed; the runtime's words.
    case connection(String)
    /// The `turns:` server's certificate does not verify (or no trust store): only a
    /// person can fix it, as for HTTPS (README: exit 78).
    case certificate(String)
    /// A response that does not make sense (no XOR-RELAYED-ADDRESS, a 401 without REALM
    /// or NONCE, a bad MESSAGE-INTEGRITY).
    case badResponse(String)

    public var description: String {
        switch self {
        case .unauthorized(let m): return "authentication failed: \(m)"
        case .refused(let code, let reason): return "refused: \(code) \(reason)"
        case .timeout: return "no response (unreachable, or UDP blocked)"
        case .noAnswerOverConnection: return "no response over the connection (the server accepted it but does not answer TURN)"
        case .connection(let m): return "connection failed: \(m)"
        case .certificate(let m): return m
        case .badResponse(let m): return "bad response: \(m)"
        }
    }

    /// Only a person can fix it: retrying soon changes nothing.
    public var isConfiguration: Bool {
        switch self {
        case .unauthorized, .certificate: return true
        default: return false
        }
    }
}

/// Timing of a TURN client. Defaults follow RFC 8656 and RFC 8489 where they give numbers.
public struct TURNTiming: Sendable {
    /// First retransmission timeout over UDP (RFC 8489 §6.2.1: 500 ms); doubles.
    public var initialRTO: Duration = .milliseconds(500)
    /// Transmissions over UDP, first included (Rc = 7); the last waits Rm × RTO (16).
    public var maxTransmissions = 7
    /// How long a request waits over TCP or TLS, where nothing is retransmitted
    /// (RFC 8489 §6.2.2 says 39.5 s; shorter here so a dead server is noticed while a
    /// session can still use the news).
    public var streamTimeout: Duration = .seconds(10)
    /// The allocation lifetime asked for; the server decides (RFC 8656 §7.1: 600 s default).
    public var requestedLifetime: UInt32 = 600
    /// Permissions last 300 s (RFC 8656 §9); refreshed after this.
    public var permissionRefresh: Duration = .seconds(240)
    /// Channel bindings last 600 s (RFC 8656 §12); refreshed after this.
    public var channelRefresh: Duration = .seconds(540)
    /// Packets held per peer while its permission is being installed.
    public var maxQueuedPerPeer = 16

    public init() {}
}

/// What a TURN client tells its owner.
public enum TURNEvent: Hashable, Sendable {
    /// The allocation exists: `relayed` is the relay candidate's address; `mapped` is our
    /// address as the server saw it (a server-reflexive address over UDP).
    case allocated(relayed: SocketAddress, mapped: SocketAddress?)
    /// A Refresh succeeded (the allocation lives on, same relayed address).
    case refreshed
    /// The allocation could not be made, or was lost (a refresh failed, the server
    /// forgot it, the connection went away).
    case failed(TURNFailure)
    /// A packet from `peer`, out of a Data indication or a channel.
    case data(from: SocketAddress, bytes: [UInt8])
}

public enum TURNOutput: Hashable, Sendable {
    /// Send these bytes to the server (one datagram, or one message on the stream,
    /// already padded for streams).
    case send([UInt8])
    case event(TURNEvent)
    case timeout(Instant)
}

/// A sans-IO TURN client for one allocation (RFC 8656), with long-term credentials
/// (RFC 8489 §9.2).
///
/// ## Drive contract
///
/// Call `allocate(now:)` once the path to the server exists (at once over UDP; after the
/// runtime connected the stream over TCP/TLS). Feed every message from the server to
/// `handleMessage` (whole ones: the owner deframes streams), call `handleTimeout` at
/// the deadline, and after any call drain `pollOutput()` until `.timeout`. `send(_:to:)`
/// relays a packet to a peer; `release(now:)` ends the allocation (LIFETIME 0).
///
/// Behaviour:
/// - Allocate goes out without credentials; the 401 brings REALM and NONCE (§9.2.3),
///   the retry carries USERNAME, REALM, NONCE and MESSAGE-INTEGRITY keyed with
///   MD5(username:realm:password). A 401 to that retry, or 441, is final: wrong
///   credentials are reported once, never retried (no retry storm). 438 Stale Nonce
///   is retried with the new nonce, at most twice in a row per request.
/// - Responses to authenticated requests must carry a valid MESSAGE-INTEGRITY; others
///   are ignored as forgeries (RFC 8489 §9.2.5).
/// - Refresh before the lifetime ends (a minute early, or at half for short lifetimes);
///   permissions (per peer IP) every 240 s, channels every 540 s.
/// - Packets to a peer wait (a few per peer) for its permission (CreatePermission,
///   §9), then go as Send indications (§11) while a ChannelBind (§12) is in flight,
///   then as ChannelData. A ChannelBind failure leaves the peer on Send indications.
/// - Over UDP requests are retransmitted (RFC 8489 §6.2.1); over TCP and TLS not.
public struct TURNClient<R: RandomNumberGenerator> {
    public enum State: Hashable, Sendable {
        case idle
        case allocating
        case allocated
        case failed(TURNFailure)
        case released
    }

    public let server: TURNServer
    public let timing: TURNTiming
    public private(set) var state = State.idle
    public private(set) var relayedAddress: SocketAddress?
    public private(set) var mappedAddress: SocketAddress?
    /// Requests sent, retransmissions included (tests check there is no storm).
    public private(set) var requestsSent = 0
    /// Allocate requests sent (first transmissions): one unauthenticated, one with
    /// credentials, and one more per stale nonce.
    public private(set) var allocateAttempts = 0

    var rng: R
    public private(set) var realm: String?
    var nonce: String?
    var key: [UInt8]?
    var lifetime: UInt32 = 600
    var refreshAt: Instant?
    var transactions: [TURNTransaction] = []
    var permissions: [IPAddress: Permission] = [:]
    var channels: [SocketAddress: Channel] = [:]
    var channelPeers: [UInt16: SocketAddress] = [:]
    var nextChannel: UInt16 = ChannelNumber.range.lowerBound
    var outputs = OutputQueue<TURNOutput>()

    struct Permission {
        var installed = false
        var pending = false
        var refreshAt: Instant? = nil
        var queued: [(SocketAddress, [UInt8])] = []
    }

    struct Channel {
        var number: UInt16
        var bound = false
        var pending = false
        var refreshAt: Instant? = nil
        /// The server refused it: Send indications for good.
        var refused = false
    }

    public init(server: TURNServer, timing: TURNTiming = TURNTiming(), rng: R) {
        self.server = server
        self.timing = timing
        self.rng = rng
    }

    var reliable: Bool { server.transport.isStream }

    /// The longest packet relayed: a UDP datagram's payload over IPv4 (65535 − 20 − 8).
    public static var maxPacket: Int { 65_507 }

    // MARK: Operations

    /// Starts the allocation (RFC 8656 §7.1).
    public mutating func allocate(now: Instant) {
        guard state == .idle else { return }
        state = .allocating
        sendAllocate(now: now)
    }

    /// Sends `bytes` to `peer` through the relay. While the allocation is being made, or
    /// while the peer's permission is pending, a few packets (`maxQueuedPerPeer`, the
    /// newest) wait; after a failure or release, and above `maxPacket` bytes, they are
    /// dropped.
    public mutating func send(_ bytes: [UInt8], to peer: SocketAddress, now: Instant) {
        // A UDP datagram carries at most 65507 bytes; longer ones could not be framed
        // (ChannelData and DATA lengths are 16 bits, RFC 8656 §12.4, §18.4).
        guard bytes.count <= Self.maxPacket else { return }
        if state == .allocating {
            // Held until the allocation exists; its success asks for the permissions.
            var p = permissions[peer.ip] ?? Permission()
            if p.queued.count >= timing.maxQueuedPerPeer { p.queued.removeFirst() }
            p.queued.append((peer, bytes))
            permissions[peer.ip] = p
            return
        }
        guard state == .allocated else { return }
        if let c = channels[peer], c.bound {
            emitSend(ChannelData(channel: c.number, data: bytes).serialized(padded: reliable))
            return
        }
        var p = permissions[peer.ip] ?? Permission()
        if p.installed {
            permissions[peer.ip] = p
            sendIndication(bytes, to: peer)
            bindChannel(peer, now: now)
            return
        }
        if p.queued.count >= timing.maxQueuedPerPeer { p.queued.removeFirst() }
        p.queued.append((peer, bytes))
        let start = !p.pending
        p.pending = true
        permissions[peer.ip] = p
        if start { sendCreatePermission(peer.ip, now: now) }
    }

    /// Ends the allocation: a Refresh with LIFETIME 0 (RFC 8656 §7.2). Outstanding
    /// requests end. The Refresh is a transaction like any other, so that a lost one is
    /// retransmitted over UDP and a 438 Stale Nonce is followed (otherwise the server
    /// keeps the relay until the lifetime runs out); its answer raises no event. An
    /// owner that closes the path at once loses nothing by it.
    public mutating func release(now: Instant) {
        let wasAllocated = state == .allocated
        state = .released
        transactions.removeAll()
        refreshAt = nil
        guard wasAllocated else { return }
        start(.release, STUNMessage(type: .refreshRequest, transactionID: .random(using: &rng),
                                    attributes: [.lifetime(Lifetime(seconds: 0))]), now: now)
    }

    /// The path to the server failed (the stream closed or could not be opened).
    public mutating func connectionLost(_ why: String) {
        switch state {
        case .released, .failed: return
        default: fail(.connection(why))
        }
    }

    /// Whether `bytes` (a datagram from the server's address) is for this client: TURN
    /// responses to our transactions, Data indications and ChannelData. Anything else
    /// (a Binding response to ICE's own gathering) is not.
    public func owns(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.first else { return false }
        if ChannelData.isChannelData(firstByte: first) { return true }
        guard first <= 3, bytes.count >= STUNHeader.size else { return false }
        let rawType = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        guard let type = STUNMessageType(rawValue: rawType) else { return false }
        if type == .dataIndication { return true }
        let id = TransactionID(word(bytes, 8), word(bytes, 12), word(bytes, 16))
        return transactions.contains { $0.id == id }
    }

    /// One whole message from the server.
    public mutating func handleMessage(_ bytes: [UInt8], now: Instant) {
        // What does not parse is not the server's (or is mangled): dropped like a
        // lost datagram, which the transactions' retransmissions cover.
        guard let first = bytes.first else { return }
        if ChannelData.isChannelData(firstByte: first) {
            guard state == .allocated, let cd = try? ChannelData.parse(bytes), let peer = channelPeers[cd.channel] else { return }
            emit(.data(from: peer, bytes: cd.data))
            return
        }
        guard let m = try? STUNMessage.parse(bytes) else { return }
        switch m.type.messageClass {
        case .indication:
            if m.type == .dataIndication, state == .allocated, let peer = m.peerAddress, let data = m.data {
                emit(.data(from: peer, bytes: data))
            }
        case .successResponse, .errorResponse:
            handleResponse(m, bytes: bytes, now: now)
        case .request:
            break
        }
    }

    public mutating func handleTimeout(now: Instant) {
        retransmit(now: now)
        guard state == .allocated else { return }
        if let t = refreshAt, now >= t {
            refreshAt = nil
            sendRefresh(lifetime: timing.requestedLifetime, now: now)
        }
        for (ip, p) in permissions where p.installed && (p.refreshAt.map { now >= $0 } ?? false) {
            permissions[ip]?.refreshAt = nil
            sendCreatePermission(ip, now: now)
        }
        for (peer, c) in channels where c.bound && (c.refreshAt.map { now >= $0 } ?? false) {
            channels[peer]?.refreshAt = nil
            sendChannelBind(peer, number: c.number, now: now)
        }
    }

    /// Refreshes the allocation now (an ICE restart checks that the relay still lives).
    public mutating func refresh(now: Instant) {
        guard state == .allocated, !transactions.contains(where: { if case .refresh = $0.kind { return true } else { return false } }) else { return }
        refreshAt = nil
        sendRefresh(lifetime: timing.requestedLifetime, now: now)
    }

    public mutating func pollOutput() -> TURNOutput {
        outputs.popFirst() ?? .timeout(deadline)
    }

    public var deadline: Instant {
        var t = Instant.distantFuture
        for tx in transactions where tx.deadline < t { t = tx.deadline }
        guard state == .allocated else { return t }
        if let r = refreshAt, r < t { t = r }
        for p in permissions.values { if let r = p.refreshAt, r < t { t = r } }
        for c in channels.values { if let r = c.refreshAt, r < t { t = r } }
        return t
    }

    // MARK: Requests

    mutating func sendAllocate(now: Instant) {
        var attributes: [STUNAttribute] = [.requestedTransport(RequestedTransport(RequestedTransport.udp))]
        // An IPv6 server gives an IPv6 relay only when asked (RFC 8656 §7.1); peers
        // reached over IPv4 need an IPv4 relay, which is the default.
        attributes.append(.lifetime(Lifetime(seconds: timing.requestedLifetime)))
        allocateAttempts += 1
        start(.allocate, STUNMessage(type: .allocateRequest, transactionID: .random(using: &rng), attributes: attributes), now: now)
    }

    mutating func sendRefresh(lifetime: UInt32, now: Instant) {
        start(.refresh, STUNMessage(type: .refreshRequest, transactionID: .random(using: &rng),
                                    attributes: [.lifetime(Lifetime(seconds: lifetime))]), now: now)
    }

    mutating func sendCreatePermission(_ ip: IPAddress, now: Instant) {
        // The port of XOR-PEER-ADDRESS is ignored (RFC 8656 §9: permissions are per IP).
        start(.createPermission(ip), STUNMessage(type: .createPermissionRequest, transactionID: .random(using: &rng),
                                                 attributes: [.xorPeerAddress(XORPeerAddress(SocketAddress(ip: ip, port: 0)))]), now: now)
    }

    mutating func bindChannel(_ peer: SocketAddress, now: Instant) {
        if let c = channels[peer], c.bound || c.pending || c.refused { return }
        guard nextChannel <= ChannelNumber.range.upperBound else { return }
        let number = nextChannel
        nextChannel += 1
        channels[peer] = Channel(number: number, pending: true)
        channelPeers[number] = peer
        sendChannelBind(peer, number: number, now: now)
    }

    mutating func sendChannelBind(_ peer: SocketAddress, number: UInt16, now: Instant) {
        channels[peer]?.pending = true
        start(.channelBind(peer, number), STUNMessage(type: .channelBindRequest, transactionID: .random(using: &rng),
                                                      attributes: [.channelNumber(ChannelNumber(number)), .xorPeerAddress(XORPeerAddress(peer))]),
              now: now)
    }

    mutating func sendIndication(_ bytes: [UInt8], to peer: SocketAddress) {
        // Indications are not authenticated (RFC 8656 §11.1).
        let m = STUNMessage(type: .sendIndication, transactionID: .random(using: &rng),
                            attributes: [.xorPeerAddress(XORPeerAddress(peer)), .data(DataAttribute(bytes))])
        // DATA is one of ICE's datagrams, far below the 64 KiB serialized() refuses.
        if let out = try? m.serialized() { emitSend(out) }
    }

    /// The message with USERNAME, REALM, NONCE and MESSAGE-INTEGRITY once we have a
    /// realm and nonce (RFC 8489 §9.2.4); as it is before the first 401.
    /// serialized() refuses only an attribute over 64 KiB: REALM and NONCE each came in
    /// one of the server's, and USERNAME is the configured one.
    func authenticated(_ m: STUNMessage) -> [UInt8]? {
        guard let realm, let nonce, let key else { return try? m.serialized(fingerprint: false) }
        var signed = m
        signed.attributes += [.username(Username(server.username)), .realm(Realm(realm)), .nonce(Nonce(nonce))]
        return try? signed.serialized(integrityKey: key, fingerprint: false)
    }

    mutating func start(_ kind: TURNTransaction.Kind, _ m: STUNMessage, now: Instant, staleRetries: Int = 0) {
        guard let bytes = authenticated(m) else { return }
        var tx = TURNTransaction(id: m.transactionID, kind: kind, message: m, bytes: bytes, sentWithKey: key,
                                 deadline: now + (reliable ? timing.streamTimeout : timing.initialRTO), rto: timing.initialRTO)
        tx.staleRetries = staleRetries
        transactions.append(tx)
        requestsSent += 1
        emitSend(bytes)
    }

    mutating func retransmit(now: Instant) {
        var i = 0
        while i < transactions.count {
            guard transactions[i].deadline <= now else { i += 1; continue }
            if !reliable && transactions[i].transmissions < timing.maxTransmissions {
                transactions[i].transmissions += 1
                transactions[i].rto = transactions[i].rto * 2
                // RFC 8489 §6.2.1: after the last transmission, wait Rm (16) × RTO.
                let wait = transactions[i].transmissions == timing.maxTransmissions ? timing.initialRTO * 16 : transactions[i].rto
                transactions[i].deadline = now + wait
                requestsSent += 1
                emitSend(transactions[i].bytes)
                i += 1
                continue
            }
            let tx = transactions.remove(at: i)
            timedOut(tx, now: now)
        }
    }

    mutating func timedOut(_ tx: TURNTransaction, now: Instant) {
        switch tx.kind {
        case .allocate, .refresh:
            fail(reliable ? .noAnswerOverConnection : .timeout)
        case .release:
            break
        case .createPermission(let ip):
            // A failed install drops the waiting packets; a failed refresh means the
            // server's permission lapses within a minute (RFC 8656 §9: 300 s), so it
            // counts as gone: the next packet asks again.
            permissions[ip] = nil
        case .channelBind(let peer, _):
            // Never bound, or its refresh failed (the server's binding lapses, RFC 8656
            // §12: ChannelData on it would be dropped): Send indications from now on.
            // The number stays reserved for this peer (§12: no rebinding it elsewhere).
            channels[peer]?.pending = false
            channels[peer]?.bound = false
            channels[peer]?.refreshAt = nil
            channels[peer]?.refused = true
        }
    }

    // MARK: Responses

    mutating func handleResponse(_ m: STUNMessage, bytes: [UInt8], now: Instant) {
        // The transaction ID and the method must both match (RFC 8489 §6.3.3 ties a
        // response to its request by the ID; a different method is not its answer).
        guard let t = transactions.firstIndex(where: { $0.id == m.transactionID && $0.message.type.method == m.type.method })
        else { return }
        let tx = transactions[t]
        // RFC 8489 §9.2.5: a request sent with credentials expects MESSAGE-INTEGRITY on
        // its response; a response without one (or with a wrong one) is ignored as a
        // forgery, except the 401/438 that bring a new nonce (the server cannot sign
        // with a key it says is stale).
        let code = m.errorCode?.code
        if let key = tx.sentWithKey, code != ErrorCode.unauthenticated, code != ErrorCode.staleNonce {
            guard (try? m.verifyIntegrity(of: bytes, key: key)) != nil else { return }
        }
        transactions.remove(at: t)
        if m.type.messageClass == .errorResponse {
            return handleError(m, tx, now: now)
        }
        switch tx.kind {
        case .allocate:
            guard state == .allocating else { return }
            guard let relayed = m.relayedAddress else { return fail(.badResponse("an Allocate success without XOR-RELAYED-ADDRESS")) }
            relayedAddress = relayed
            mappedAddress = m.mappedAddress
            state = .allocated
            scheduleRefresh(m.lifetime ?? 600, now: now)
            emit(.allocated(relayed: relayed, mapped: m.mappedAddress))
            // Packets sent while allocating wait for their permissions now.
            for (ip, p) in permissions where !p.queued.isEmpty && !p.pending {
                permissions[ip]?.pending = true
                sendCreatePermission(ip, now: now)
            }
        case .refresh:
            guard state == .allocated else { return }
            scheduleRefresh(m.lifetime ?? lifetime, now: now)
            emit(.refreshed)
        case .createPermission(let ip):
            guard var p = permissions[ip] else { return }
            p.installed = true
            p.pending = false
            p.refreshAt = now + timing.permissionRefresh
            let queued = p.queued
            p.queued.removeAll()
            permissions[ip] = p
            for (peer, data) in queued {
                sendIndication(data, to: peer)
                bindChannel(peer, now: now)
            }
        case .release:
            break
        case .channelBind(let peer, _):
            guard var c = channels[peer] else { return }
            c.bound = true
            c.pending = false
            c.refreshAt = now + timing.channelRefresh
            channels[peer] = c
            // A channel binding refreshes the permission too (RFC 8656 §12.2).
            let permissionRefresh = now + timing.permissionRefresh
            if permissions[peer.ip] != nil { permissions[peer.ip]?.refreshAt = permissionRefresh }
        }
    }

    mutating func handleError(_ m: STUNMessage, _ tx: TURNTransaction, now: Instant) {
        let code = m.errorCode?.code ?? 0
        let reason = m.errorCode?.reason ?? ""
        switch code {
        case ErrorCode.unauthenticated where tx.sentWithKey == nil:
            // RFC 8489 §9.2.3: the challenge. Keep REALM and NONCE, compute the key, send
            // the same request again with credentials.
            guard let realm = m.realm, let nonce = m.nonce else {
                return fail(.badResponse("a 401 without REALM and NONCE"))
            }
            if let pinned = server.realm, !pinned.bytesEqual(realm) { return fail(realmChanged(realm, pinned)) }
            self.realm = realm
            self.nonce = nonce
            key = STUNMessage.longTermKey(username: server.username, realm: realm, password: server.credential)
            retry(tx, now: now)
        case ErrorCode.unauthenticated, ErrorCode.wrongCredentials:
            // Our credentials were refused: final. Retrying would only repeat it.
            let what = code == ErrorCode.wrongCredentials ? "441 Wrong Credentials" : "401 \(reason.isEmpty ? "Unauthorized" : reason)"
            let failure = TURNFailure.unauthorized("\(what) for user '\(server.username)' at \(server) (check ice-username and ice-credential)")
            if case .allocate = tx.kind { return fail(failure) }
            if case .refresh = tx.kind { return fail(failure) }
            timedOut(tx, now: now)
        case ErrorCode.staleNonce:
            // RFC 8489 §9.2.5: a new nonce; the same request again, a bounded number of times.
            guard let nonce = m.nonce, tx.staleRetries < 2 else {
                if case .allocate = tx.kind { return fail(.refused(code: code, reason: reason)) }
                return timedOut(tx, now: now)
            }
            self.nonce = nonce
            // The realm is compared as the server sent it, byte for byte (Wire/Text.swift).
            if let r = m.realm, !(realm?.bytesEqual(r) ?? false) {
                if let pinned = server.realm, !pinned.bytesEqual(r) { return fail(realmChanged(r, pinned)) }
                realm = r
                key = STUNMessage.longTermKey(username: server.username, realm: r, password: server.credential)
            }
            retry(tx, now: now, staleRetries: tx.staleRetries + 1)
        default:
            switch tx.kind {
            case .allocate, .refresh:
                // 437 on a refresh: the server no longer has the allocation.
                fail(.refused(code: code, reason: reason))
            case .createPermission, .channelBind, .release:
                timedOut(tx, now: now)
            }
        }
    }

    /// A challenge under another realm than the one the credentials were accepted under:
    /// no key is derived for it, and nobody but a person can say it is right.
    func realmChanged(_ realm: String, _ pinned: String) -> TURNFailure {
        .unauthorized("\(server) now asks for realm '\(printableForLog(realm))', not '\(printableForLog(pinned))' as before: the credentials are not sent under another realm (restart Linnet if the server really moved)")
    }

    mutating func retry(_ tx: TURNTransaction, now: Instant, staleRetries: Int = 0) {
        var m = tx.message
        m.transactionID = .random(using: &rng)
        if case .allocate = tx.kind { allocateAttempts += 1 }
        start(tx.kind, m, now: now, staleRetries: staleRetries)
    }

    mutating func scheduleRefresh(_ seconds: UInt32, now: Instant) {
        lifetime = seconds
        let s = Int64(seconds)
        let after = s >= 120 ? s - 60 : max(s / 2, 1)
        refreshAt = now + .seconds(after)
    }

    mutating func fail(_ f: TURNFailure) {
        if case .failed = state { return }
        if state == .released { return }
        state = .failed(f)
        transactions.removeAll()
        refreshAt = nil
        permissions.removeAll()
        emit(.failed(f))
    }

    mutating func emitSend(_ bytes: [UInt8]) { outputs.append(.send(bytes)) }
    mutating func emit(_ e: TURNEvent) { outputs.append(.event(e)) }
}

struct TURNTransaction {
    enum Kind {
        case allocate
        case refresh
        /// The Refresh with LIFETIME 0 of `release`.
        case release
        case createPermission(IPAddress)
        case channelBind(SocketAddress, UInt16)
    }

    var id: TransactionID
    var kind: Kind
    /// The request before credentials, to send again after 401/438.
    var message: STUNMessage
    var bytes: [UInt8]
    var sentWithKey: [UInt8]?
    var deadline: Instant
    var rto: Duration
    var transmissions = 1
    var staleRetries = 0
}

@inline(__always)
func word(_ b: [UInt8], _ i: Int) -> UInt32 {
    UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
}
