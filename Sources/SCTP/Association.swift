import Wire

/// A user message as it arrives from the peer.
public struct SCTPMessage: Equatable, Sendable {
    public var streamID: UInt16
    public var ppid: UInt32
    public var unordered: Bool
    public var data: [UInt8]
    public init(streamID: UInt16, ppid: UInt32, unordered: Bool, data: [UInt8]) {
        self.streamID = streamID
        self.ppid = ppid
        self.unordered = unordered
        self.data = data
    }
}

/// Why an association ended.
public enum SCTPCloseReason: Equatable, Sendable {
    /// Graceful SHUTDOWN completed (RFC 9260 §9.2).
    case shutdown
    /// The peer sent ABORT; its first error cause code, if any.
    case abortedByPeer(cause: UInt16?)
    /// We aborted (the application asked, or the peer broke the protocol).
    case abortedLocally
    /// Retransmissions, heartbeats or INIT went unanswered too often.
    case peerUnreachable
    /// The peer sent a message larger than the receive buffer (`limit` bytes): it could
    /// never be reassembled, and its fragments left no room for the rest. Far past
    /// the `a=max-message-size` the SDP offered (RFC 8841 §6; RFC 8831 §6.6).
    case messageTooLarge(limit: Int)
}

extension SCTPCloseReason: CustomStringConvertible {
    public var description: String {
        switch self {
        case .shutdown: return "shut down"
        case .abortedByPeer(let cause): return "aborted by the peer" + (cause.map { " (cause \($0))" } ?? "")
        case .abortedLocally: return "aborted here (the peer broke the protocol, or the association was ended)"
        case .peerUnreachable: return "the peer stopped answering"
        case .messageTooLarge(let limit): return "the peer sent a message of more than \(limit / 1024) KiB, which can never be reassembled: aborted"
        }
    }
}

/// What the association tells its user.
public enum SCTPEvent: Equatable, Sendable {
    /// The association is established (after COOKIE-ACK or a valid COOKIE-ECHO).
    case connected
    /// A complete user message.
    case message(SCTPMessage)
    /// The peer reset these streams of its outgoing direction (RFC 6525 §5.2.2): our
    /// incoming sequence numbers for them start again at 0.
    case incomingStreamsReset([UInt16])
    /// Our request to reset these outgoing streams was performed by the peer.
    case outgoingStreamsReset([UInt16])
    /// The peer denied or failed our reset of these streams.
    case streamResetFailed([UInt16])
    /// After `sendBufferFull`, the buffer has drained to half its limit.
    case sendBufferLow
    /// The association is over; nothing more will be sent or delivered.
    case closed(SCTPCloseReason)
}

/// What `pollOutput` returns: a packet to send inside DTLS, an event, or the deadline at
/// which `handleTimeout` must be called (when nothing else is pending).
public enum SCTPOutput: Equatable, Sendable {
    case transmit([UInt8])
    case event(SCTPEvent)
    case timeout(Instant)
}

/// Association states (RFC 9260 §4).
public enum SCTPState: Equatable, Sendable {
    case closed, cookieWait, cookieEchoed, established
    case shutdownPending, shutdownSent, shutdownReceived, shutdownAckSent
}

// Serial number arithmetic (RFC 1982) for 32-bit TSNs and 16-bit SSNs.
@inline(__always) func tsnLT(_ a: UInt32, _ b: UInt32) -> Bool { a != b && (b &- a) < 0x8000_0000 }
@inline(__always) func tsnLE(_ a: UInt32, _ b: UInt32) -> Bool { a == b || tsnLT(a, b) }
@inline(__always) func ssnLE(_ a: UInt16, _ b: UInt16) -> Bool { a == b || (b &- a) < 0x8000 }

/// One SCTP association over DTLS (RFC 8261), sans-IO.
///
/// Drive contract (ARCHITECTURE.md "Drive loop"): feed each decrypted DTLS record with
/// `handleInput(_:now:)`, call `handleTimeout(now:)` when the last `.timeout` deadline
/// has come, and after any handle or API call drain `pollOutput()` until it returns
/// `.timeout`. `.transmit` packets go into DTLS records; events go to the user.
///
/// Both roles call `connect(now:)`: over DTLS both ends may send INIT, and the
/// simultaneous INIT of RFC 9260 §5.2.1/§5.2.4 resolves into one association.
///
/// Design decisions:
/// - Stateless server side: INIT is answered with a State Cookie that holds everything
///   needed, signed with SipHash-2-4 under a per-association key (see `SipHash24`).
/// - One destination (DTLS carries a single path): no multi-homing, no PMTU discovery;
///   packets stay within `config.mtu` (1200).
/// - Send side: messages are fragmented when queued; TSNs are assigned when a fragment is
///   first sent. Retransmission by T3-rtx with RTO estimation (§6.3), fast retransmit after
///   three miss reports (§7.2.4, HTNA), congestion control (§7.2: slow start, congestion
///   avoidance, fast recovery) and the peer's rwnd.
/// - Receive side: reassembly of B/E fragments, ordered and unordered delivery, SACK with
///   gap blocks and duplicate TSNs, delayed SACK (200 ms or every second packet), a real
///   a_rwnd. Memory is bounded: buffered fragments count their bytes plus a fixed
///   per-chunk overhead against `receiveBufferSize`; DATA past it is dropped (the sender
///   retransmits), except the next in-sequence TSN, which may use up to the same amount
///   again so a full buffer of out-of-order data can never deadlock.
/// - Partial reliability is understood on receive (FORWARD-TSN, RFC 3758) but we never
///   abandon our own messages: everything we send is reliable.
/// - Stream reset (RFC 6525): outgoing SSN reset requests to close streams, and answers
///   to the peer's. Other re-configuration requests are denied.
public struct SCTPAssociation {
    public let config: SCTPConfig
    public private(set) var state: SCTPState = .closed
    public private(set) var stats = SCTPStats()

    var rng: SeededRandom
    let cookieKey: SipHash24

    // Handshake.
    let localTag: UInt32
    let localInitialTSN: UInt32
    var peerTag: UInt32 = 0
    var t1Deadline: Instant?
    var t1Retries = 0
    var t1Timeout: Duration
    var cookieToEcho: [UInt8] = []

    // Negotiated.
    var outboundStreams: UInt16 = 0
    var inboundStreams: UInt16 = 0
    var peerSupportsReconfig = false
    var peerSupportsForwardTSN = false

    // Send side.
    struct Pending {
        var streamID: UInt16
        var ssn: UInt16
        var ppid: UInt32
        var unordered: Bool
        var beginning: Bool
        var ending: Bool
        var data: [UInt8]
    }
    struct Sent {
        var chunk: DataChunk
        var sentAt: Instant
        var transmissions: Int
        var gapAcked = false
        var inFlight = true
        var retransmit = false
        var fastRetransmit = false
        var fastRetransmitted = false
        var missingReports = 0
        var size: Int { chunk.userData.count }
    }
    var sendQueue: [Pending] = []
    var sendQueueHead = 0
    var queuedBytes = 0
    var outstanding: [Sent] = []
    var outstandingBytes = 0
    var flightSize = 0
    var nextTSN: UInt32
    var lastCumAck: UInt32
    var nextSSN: [UInt16: UInt16] = [:]
    var sendBlocked = false

    // Congestion control and timers (§6.3, §7.2).
    var cwnd: Int
    var ssthresh: Int = Int(UInt32.max)
    var partialBytesAcked = 0
    var peerRwnd = 0
    var inFastRecovery = false
    var recoveryPoint: UInt32 = 0
    var srtt: Duration?
    var rttvar: Duration = .zero
    public private(set) var rto: Duration
    var t3Deadline: Instant?
    var errorCount = 0

    // Heartbeat (§8.3).
    var heartbeatDeadline: Instant?
    var heartbeatNonce: UInt64 = 0
    var heartbeatOutstanding = false

    // Receive side.
    var cumTSN: UInt32 = 0
    var receivedAbove = TSNRanges()
    var duplicates: [UInt32] = []
    var fragments: [UInt32: DataChunk] = [:]
    var orderedPending: [UInt16: [UInt16: SCTPMessage]] = [:]
    var nextExpectedSSN: [UInt16: UInt16] = [:]
    public private(set) var receiveBuffered = 0
    var sackImmediately = false
    var sackDeadline: Instant?
    var dataPacketsSinceSack = 0

    // Shutdown (§9.2).
    var t2Deadline: Instant?
    var shutdownRequested = false

    // Stream reset (RFC 6525).
    var resettingStreams = Set<UInt16>()
    var resetQueue: [UInt16] = []
    var reconfigInFlight: OutgoingResetRequest?
    var reconfigDeadline: Instant?
    var myNextRequestSeq: UInt32
    var peerNextRequestSeq: UInt32 = 0
    var lastPeerResponse: ReconfigResponse?

    // Output.
    var controlChunks: [Chunk] = []
    var outputs: [SCTPOutput] = []
    var outputHead = 0
    var closeReported = false

    /// Per buffered DATA chunk, this many bytes count against the receive buffer on top of
    /// its payload, so a flood of tiny chunks cannot use unbounded memory.
    static let chunkOverhead = 64
    /// DATA more than this many TSNs ahead of the cumulative TSN is dropped (gap offsets
    /// in SACK are 16 bits).
    static let maxTSNWindow: UInt32 = 0xffff
    static let dataHeader = 16
    static let commonHeader = 12

    /// - Parameter random: randomness for tags, initial TSNs and the cookie key. In
    ///   production pass a generator seeded from the system CSPRNG; tests pass a seeded one.
    public init<R: RandomNumberGenerator>(config: SCTPConfig = SCTPConfig(), random: inout R) {
        self.config = config
        self.rng = SeededRandom(seed: random.next())
        self.cookieKey = SipHash24(k0: random.next(), k1: random.next())
        var tag: UInt32 = 0
        while tag == 0 { tag = UInt32(truncatingIfNeeded: random.next()) }
        localTag = tag
        localInitialTSN = UInt32(truncatingIfNeeded: random.next())
        nextTSN = localInitialTSN
        lastCumAck = localInitialTSN &- 1
        myNextRequestSeq = localInitialTSN
        rto = config.rtoInitial
        t1Timeout = config.rtoInitial
        // RFC 9260 §7.2.1: initial cwnd = min(4*MTU, max(2*MTU, 4380 bytes)).
        cwnd = min(4 &* config.mtu, max(2 &* config.mtu, 4380))
    }

    // MARK: - Public API

    /// Bytes queued or sent but not yet acknowledged (the W3C `bufferedAmount` plus what
    /// is in flight).
    public var bufferedAmount: Int { queuedBytes &+ outstandingBytes }
    /// Our current advertised receive window.
    public var advertisedWindow: Int { max(0, config.receiveBufferSize &- receiveBuffered) }
    /// Current congestion window (for tests and diagnostics).
    public var congestionWindow: Int { cwnd }
    public var isEstablished: Bool { state == .established }
    /// The number of streams we may send on (after the handshake).
    public var outgoingStreamCount: UInt16 { outboundStreams }

    /// Sends INIT (RFC 9260 §5.1). Call on both sides once DTLS is up.
    public mutating func connect(now: Instant) {
        guard state == .closed, !closeReported else { return }
        state = .cookieWait
        t1Retries = 0
        t1Timeout = config.rtoInitial
        t1Deadline = now + t1Timeout
        sendInit()
    }

    /// Queues a message. Empty messages are not allowed by SCTP (a DATA chunk must carry
    /// data, RFC 9260 §3.3.1); the data channel layer sends one zero byte instead.
    public mutating func send(stream: UInt16, ppid: UInt32, data: [UInt8], unordered: Bool = false,
                              now: Instant) throws(SCTPError) {
        guard state == .established else { throw .notEstablished }
        guard !data.isEmpty else { throw .invalidField }
        guard data.count <= config.maxMessageSize else {
            throw .messageTooLarge(size: data.count, limit: config.maxMessageSize)
        }
        guard stream < outboundStreams else { throw .invalidStream }
        guard !resettingStreams.contains(stream) else { throw .streamClosing }
        guard bufferedAmount &+ data.count <= config.sendBufferLimit else {
            sendBlocked = true
            throw .sendBufferFull
        }
        var ssn: UInt16 = 0
        if !unordered {
            ssn = nextSSN[stream] ?? 0
            nextSSN[stream] = ssn &+ 1
        }
        let maxFragment = config.mtu &- Self.commonHeader &- Self.dataHeader
        var offset = 0
        while offset < data.count {
            let end = min(offset &+ maxFragment, data.count)
            sendQueue.append(Pending(streamID: stream, ssn: ssn, ppid: ppid, unordered: unordered,
                                     beginning: offset == 0, ending: end == data.count,
                                     data: Array(data[offset..<end])))
            offset = end
        }
        queuedBytes &+= data.count
        flush(now: now)
    }

    /// Resets (closes) our outgoing side of these streams (RFC 6525 §5.1.2). Messages
    /// already queued are sent first; new ones are refused. `.outgoingStreamsReset` follows.
    public mutating func resetStreams(_ streams: [UInt16], now: Instant) throws(SCTPError) {
        guard state == .established else { throw .notEstablished }
        for s in streams where s >= outboundStreams { throw .invalidStream }
        for s in streams where !resettingStreams.contains(s) {
            resettingStreams.insert(s)
            resetQueue.append(s)
        }
        flush(now: now)
    }

    /// Graceful shutdown (RFC 9260 §9.2): queued data is delivered first.
    public mutating func shutdown(now: Instant) {
        switch state {
        case .established:
            state = .shutdownPending
            flush(now: now)
        case .cookieWait, .cookieEchoed:
            close(.shutdown)
        default:
            break
        }
    }

    /// Ends the association at once with ABORT (RFC 9260 §9.1).
    public mutating func abort(now: Instant) {
        guard state != .closed else { return }
        sendAbort(cause: ErrorCause(code: ErrorCause.userInitiatedAbort))
        close(.abortedLocally)
    }

    /// The next output; `.timeout` when none is left.
    public mutating func pollOutput() -> SCTPOutput {
        if outputHead < outputs.count {
            let o = outputs[outputHead]
            outputHead &+= 1
            if outputHead == outputs.count {
                outputs.removeAll(keepingCapacity: true)
                outputHead = 0
            }
            return o
        }
        return .timeout(nextDeadline)
    }

    var nextDeadline: Instant {
        guard state != .closed else { return .distantFuture }
        var d = Instant.distantFuture
        for t in [t1Deadline, t3Deadline, sackDeadline, heartbeatDeadline, t2Deadline, reconfigDeadline] {
            if let t, t < d { d = t }
        }
        return d
    }

    // MARK: - Input

    /// One SCTP packet (a decrypted DTLS record's payload).
    public mutating func handleInput(_ bytes: [UInt8], now: Instant) {
        guard state != .closed || !closeReported else {
            answerAfterClose(bytes)
            return
        }
        let packet: SCTPPacket
        do throws(SCTPError) {
            packet = try SCTPPacket.parse(bytes)
        } catch {
            stats.droppedMalformed &+= 1
            return
        }
        stats.packetsReceived &+= 1
        guard packet.destinationPort == config.localPort, packet.sourcePort == config.remotePort else {
            stats.droppedBadTag &+= 1
            return
        }
        guard checkVerificationTag(packet) else {
            stats.droppedBadTag &+= 1
            return
        }
        var sawData = false
        for chunk in packet.chunks {
            guard state != .closed || !closeReported else { break }
            switch chunk {
            case .data(let d):
                sawData = true
                handleData(d)
            case .initiation(let i): handleInit(i, now: now)
            case .initAck(let a): handleInitAck(a, now: now)
            case .cookieEcho(let c): handleCookieEcho(c, now: now)
            case .cookieAck: handleCookieAck(now: now)
            case .sack(let s): handleSack(s, now: now)
            case .heartbeat(let h):
                if state != .closed && state != .cookieWait {
                    controlChunks.append(.heartbeatAck(HeartbeatAckChunk(info: h.info)))
                }
            case .heartbeatAck(let h): handleHeartbeatAck(h, now: now)
            case .abort(let a):
                close(.abortedByPeer(cause: a.causes.first?.code))
            case .shutdown(let s): handleShutdown(s, now: now)
            case .shutdownAck: handleShutdownAck(now: now)
            case .shutdownComplete:
                if state == .shutdownAckSent { close(.shutdown) }
            case .error:
                // Reports only (e.g. an unrecognized chunk of ours); nothing to undo.
                break
            case .forwardTSN(let f): handleForwardTSN(f)
            case .reconfig(let r): handleReconfig(r, now: now)
            case .unknown(let u):
                // Reported whole when it fits a packet; a larger one is skipped silently.
                if u.reportsError, u.value.count <= config.mtu / 2 {
                    controlChunks.append(.error(ErrorChunk(causes: [
                        ErrorCause(code: ErrorCause.unrecognizedChunkType, info: u.bytes)])))
                }
            }
        }
        if sawData { noteDataPacket(now: now) }
        flush(now: now)
    }

    /// After the association is gone only one packet gets an answer: a SHUTDOWN-ACK whose
    /// SHUTDOWN-COMPLETE was lost is answered with SHUTDOWN-COMPLETE, T set and its own
    /// tag reflected (§8.4 (5)), so the peer can finish too.
    mutating func answerAfterClose(_ bytes: [UInt8]) {
        guard let packet = try? SCTPPacket.parse(bytes), packet.verificationTag == localTag,
              packet.chunks.contains(.shutdownAck(ShutdownAckChunk())) else { return }
        emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort,
                        verificationTag: packet.verificationTag,
                        chunks: [.shutdownComplete(ShutdownCompleteChunk(reflectedTag: true))]))
    }

    /// RFC 9260 §8.5: every packet carries our tag, except INIT (tag 0, alone in its
    /// packet, §6.10) and ABORT / SHUTDOWN-COMPLETE with T set (the peer's own tag).
    func checkVerificationTag(_ p: SCTPPacket) -> Bool {
        guard let first = p.chunks.first else { return p.verificationTag == localTag }
        switch first {
        case .initiation:
            return p.verificationTag == 0 && p.chunks.count == 1
        case .abort(let a):
            return a.reflectedTag ? (peerTag != 0 && p.verificationTag == peerTag) : p.verificationTag == localTag
        case .shutdownComplete(let c):
            return c.reflectedTag ? (peerTag != 0 && p.verificationTag == peerTag) : p.verificationTag == localTag
        default:
            for c in p.chunks { if case .initiation = c { return false } }
            return p.verificationTag == localTag
        }
    }

    /// Handle the deadline returned by `pollOutput`.
    public mutating func handleTimeout(now: Instant) {
        guard state != .closed else { return }
        if let t = t1Deadline, t <= now { onT1(now: now) }
        if let t = t3Deadline, t <= now, state != .closed { onT3(now: now) }
        if let t = t2Deadline, t <= now, state != .closed { onT2(now: now) }
        if let t = sackDeadline, t <= now {
            sackDeadline = nil
            sackImmediately = true
        }
        if let t = heartbeatDeadline, t <= now, state != .closed { onHeartbeatTimer(now: now) }
        if let t = reconfigDeadline, t <= now, state != .closed {
            reconfigDeadline = nil
            if let r = reconfigInFlight { sendReconfigRequest(r, now: now) }
        }
        flush(now: now)
    }

    // MARK: - Handshake (RFC 9260 §5)

    func initFields(withCookie cookie: [UInt8]?, unrecognized: [[UInt8]] = []) -> InitFields {
        InitFields(initiateTag: localTag, aRwnd: UInt32(clamping: advertisedWindow),
                   outboundStreams: config.streams, inboundStreams: config.streams,
                   initialTSN: localInitialTSN,
                   parameters: InitParameters(stateCookie: cookie, forwardTSNSupported: true,
                                              // RFC 5061 §4.2.7: the extensions we implement.
                                              supportedExtensions: [ReconfigChunk.type, ForwardTSNChunk.type],
                                              unrecognized: unrecognized))
    }

    mutating func sendInit() {
        emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort, verificationTag: 0,
                        chunks: [.initiation(InitChunk(initFields(withCookie: nil)))]))
    }

    /// INIT in any state is answered with an INIT-ACK carrying our tag and initial TSN
    /// (unchanged while our own INIT is outstanding, §5.2.1) and a cookie; no state is kept.
    mutating func handleInit(_ i: InitChunk, now: Instant) {
        switch state {
        case .shutdownAckSent:
            // §9.2: an INIT here is answered by repeating SHUTDOWN-ACK.
            controlChunks.append(.shutdownAck(ShutdownAckChunk()))
            return
        default:
            break
        }
        let cookie = makeCookie(peer: i.fields, now: now)
        // Report unknown parameters only as far as they fit one packet.
        var unrecognized: [[UInt8]] = []
        var room = config.mtu / 2
        for u in i.fields.parameters.unrecognized where u.count <= room {
            unrecognized.append(u)
            room &-= padded4(u.count) &+ 4
        }
        let ack = InitAckChunk(initFields(withCookie: cookie, unrecognized: unrecognized))
        emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort,
                        verificationTag: i.fields.initiateTag, chunks: [.initAck(ack)]))
    }

    mutating func handleInitAck(_ a: InitAckChunk, now: Instant) {
        // §5.2.3: INIT-ACK outside COOKIE-WAIT is discarded.
        guard state == .cookieWait, let cookie = a.fields.parameters.stateCookie else {
            stats.droppedUnexpected &+= 1
            return
        }
        adoptPeer(tag: a.fields.initiateTag, initialTSN: a.fields.initialTSN, rwnd: a.fields.aRwnd,
                  theirOutbound: a.fields.outboundStreams, theirInbound: a.fields.inboundStreams,
                  extensions: a.fields.parameters.supportedExtensions,
                  forwardTSN: a.fields.parameters.forwardTSNSupported)
        cookieToEcho = cookie
        state = .cookieEchoed
        t1Retries = 0
        t1Timeout = rto
        t1Deadline = now + t1Timeout
        sendCookieEcho()
    }

    mutating func sendCookieEcho() {
        emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort, verificationTag: peerTag,
                        chunks: [.cookieEcho(CookieEchoChunk(cookie: cookieToEcho))]))
    }

    mutating func handleCookieEcho(_ c: CookieEchoChunk, now: Instant) {
        guard let cookie = parseCookie(c.cookie) else {
            stats.droppedUnexpected &+= 1
            return
        }
        if now - cookie.createdAt > config.cookieLifetime || cookie.createdAt.nanoseconds > now.nanoseconds {
            // §5.1.5 step 3: stale cookie → ERROR "Stale Cookie" with the staleness in µs.
            var info: [UInt8] = []
            info.appendUInt32(UInt32(clamping: (now - cookie.createdAt - config.cookieLifetime).microseconds))
            emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort,
                            verificationTag: cookie.peerTag,
                            chunks: [.error(ErrorChunk(causes: [ErrorCause(code: ErrorCause.staleCookie, info: info)]))]))
            return
        }
        switch state {
        case .closed, .cookieWait, .cookieEchoed:
            // A fresh association (server side), or the collision of §5.2.4 case B/D: the
            // cookie holds our unchanged tag, so adopting the peer's values is consistent.
            adoptPeer(tag: cookie.peerTag, initialTSN: cookie.peerInitialTSN, rwnd: cookie.peerRwnd,
                      theirOutbound: cookie.peerOutbound, theirInbound: cookie.peerInbound,
                      extensions: cookie.peerReconfig ? [ReconfigChunk.type] : [],
                      forwardTSN: cookie.peerForwardTSN)
            controlChunks.append(.cookieAck(CookieAckChunk()))
            establish(now: now)
        case .established, .shutdownPending, .shutdownReceived, .shutdownSent:
            if cookie.peerTag == peerTag {
                // §5.2.4 case D: a duplicate; answer again.
                controlChunks.append(.cookieAck(CookieAckChunk()))
            } else {
                // Case A (peer restart) is not supported: we keep the association and
                // drop the cookie; the peer's T1 gives up and it will see our traffic fail.
                stats.droppedUnexpected &+= 1
            }
        case .shutdownAckSent:
            controlChunks.append(.shutdownAck(ShutdownAckChunk()))
        }
    }

    mutating func handleCookieAck(now: Instant) {
        guard state == .cookieEchoed else { return }
        establish(now: now)
    }

    mutating func establish(now: Instant) {
        state = .established
        t1Deadline = nil
        cookieToEcho = []
        heartbeatDeadline = now + config.heartbeatInterval + rto
        event(.connected)
    }

    mutating func adoptPeer(tag: UInt32, initialTSN: UInt32, rwnd: UInt32, theirOutbound: UInt16,
                            theirInbound: UInt16, extensions: [UInt8], forwardTSN: Bool) {
        peerTag = tag
        cumTSN = initialTSN &- 1
        receivedAbove.removeAll()
        fragments.removeAll()
        receiveBuffered = 0
        peerNextRequestSeq = initialTSN
        peerRwnd = Int(rwnd)
        ssthresh = Int(rwnd)
        outboundStreams = min(config.streams, theirInbound)
        inboundStreams = min(config.streams, theirOutbound)
        peerSupportsReconfig = extensions.contains(ReconfigChunk.type)
        peerSupportsForwardTSN = forwardTSN
    }

    // State Cookie: version, our tag, peer tag, peer initial TSN, peer a_rwnd, peer OS and
    // MIS, peer extension flags, creation time; then the SipHash-2-4 tag over all of it.
    struct Cookie {
        var peerTag: UInt32
        var peerInitialTSN: UInt32
        var peerRwnd: UInt32
        var peerOutbound: UInt16
        var peerInbound: UInt16
        var peerReconfig: Bool
        var peerForwardTSN: Bool
        var createdAt: Instant
    }
    static let cookieVersion: UInt8 = 1
    static let cookieLength = 1 + 4 + 4 + 4 + 4 + 2 + 2 + 1 + 8 + 8

    func makeCookie(peer: InitFields, now: Instant) -> [UInt8] {
        var c: [UInt8] = [Self.cookieVersion]
        c.reserveCapacity(Self.cookieLength)
        c.appendUInt32(localTag)
        c.appendUInt32(peer.initiateTag)
        c.appendUInt32(peer.initialTSN)
        c.appendUInt32(peer.aRwnd)
        c.appendUInt16(peer.outboundStreams)
        c.appendUInt16(peer.inboundStreams)
        let reconfig = peer.parameters.supportedExtensions.contains(ReconfigChunk.type)
        c.append((reconfig ? 1 : 0) | (peer.parameters.forwardTSNSupported ? 2 : 0))
        c.appendUInt64(UInt64(bitPattern: now.nanoseconds))
        c.appendUInt64(cookieKey.hash(c))
        return c
    }

    func parseCookie(_ c: [UInt8]) -> Cookie? {
        guard c.count == Self.cookieLength, c[0] == Self.cookieVersion else { return nil }
        func u32(_ i: Int) -> UInt32 { UInt32(c[i]) << 24 | UInt32(c[i + 1]) << 16 | UInt32(c[i + 2]) << 8 | UInt32(c[i + 3]) }
        func u16(_ i: Int) -> UInt16 { UInt16(c[i]) << 8 | UInt16(c[i + 1]) }
        func u64(_ i: Int) -> UInt64 { UInt64(u32(i)) << 32 | UInt64(u32(i + 4)) }
        let body = Array(c[0..<(Self.cookieLength - 8)])
        // Constant-time comparison is unnecessary for a 64-bit tag checked once per packet
        // over DTLS, but cheap: compare all bytes.
        var diff: UInt64 = cookieKey.hash(body) ^ u64(Self.cookieLength - 8)
        diff |= UInt64(u32(1) ^ localTag)  // a cookie for another association of ours
        guard diff == 0 else { return nil }
        return Cookie(peerTag: u32(5), peerInitialTSN: u32(9), peerRwnd: u32(13), peerOutbound: u16(17),
                      peerInbound: u16(19), peerReconfig: c[21] & 1 != 0, peerForwardTSN: c[21] & 2 != 0,
                      createdAt: Instant(nanoseconds: Int64(bitPattern: u64(22))))
    }

    mutating func onT1(now: Instant) {
        t1Retries &+= 1
        guard t1Retries <= config.maxInitRetransmissions else {
            close(.peerUnreachable)
            return
        }
        t1Timeout = min(t1Timeout * 2, config.rtoMax)
        t1Deadline = now + t1Timeout
        switch state {
        case .cookieWait: sendInit()
        case .cookieEchoed: sendCookieEcho()
        default: t1Deadline = nil
        }
    }

    // MARK: - Receiving DATA (RFC 9260 §6.2)

    mutating func handleData(_ d: DataChunk) {
        switch state {
        case .established, .shutdownPending, .shutdownSent:
            break
        default:
            // COOKIE-ECHOED: the peer is ahead of us; it retransmits after our COOKIE-ACK.
            return
        }
        if d.userData.isEmpty {
            // §6.2: a DATA chunk without user data → ABORT with "No User Data".
            var info: [UInt8] = []
            info.appendUInt32(d.tsn)
            sendAbort(cause: ErrorCause(code: ErrorCause.noUserData, info: info))
            close(.abortedLocally)
            return
        }
        if d.immediate { sackImmediately = true }
        let tsn = d.tsn
        if tsnLE(tsn, cumTSN) || receivedAbove.contains(tsn, base: cumTSN) {
            stats.duplicateTSNs &+= 1
            if duplicates.count < 16 { duplicates.append(tsn) }
            sackImmediately = true
            return
        }
        guard tsn &- cumTSN <= Self.maxTSNWindow else {
            stats.droppedDataForWindow &+= 1
            return
        }
        let cost = d.userData.count &+ Self.chunkOverhead
        let limit = tsn == cumTSN &+ 1 ? 2 &* config.receiveBufferSize : config.receiveBufferSize
        guard receiveBuffered &+ cost <= limit else {
            stats.droppedDataForWindow &+= 1
            sackImmediately = true
            return
        }
        // Mark received.
        if tsn == cumTSN &+ 1 {
            cumTSN = tsn
            if let end = receivedAbove.popContiguous(after: cumTSN) { cumTSN = end }
        } else {
            receivedAbove.insert(tsn, base: cumTSN)
            sackImmediately = true  // §6.7: report gaps at once
        }
        if d.streamID >= inboundStreams {
            // §6.5: invalid stream → ERROR, the TSN is acknowledged but the data discarded.
            var info: [UInt8] = []
            info.appendUInt16(d.streamID)
            info.appendUInt16(0)
            controlChunks.append(.error(ErrorChunk(causes: [ErrorCause(code: ErrorCause.invalidStreamIdentifier, info: info)])))
            return
        }
        fragments[tsn] = d
        receiveBuffered &+= cost
        reassemble(around: tsn)
        if receiveBuffered >= config.receiveBufferSize && receivedAbove.ranges.isEmpty && !fragments.isEmpty {
            // The window is shut, nothing is missing below what is buffered (no gap a
            // retransmission could fill), and reassembly delivered nothing to make room:
            // what waits are fragments of messages larger than this side can hold. The
            // sender can only probe the zero window, a chunk every retransmission
            // timeout, and the stream is stuck for good while the association looks
            // "connected". End it with a reason instead.
            sendAbort(cause: ErrorCause(code: ErrorCause.protocolViolation))
            close(.messageTooLarge(limit: config.receiveBufferSize))
        }
    }

    /// Fragments of one message carry consecutive TSNs (§6.9). Look forward from `tsn`
    /// for the E fragment first (cheap when fragments arrive in order), then back to B.
    mutating func reassemble(around tsn: UInt32) {
        guard let here = fragments[tsn] else { return }
        var last = tsn
        var cur = here
        while !cur.ending {
            guard let next = fragments[last &+ 1], next.streamID == here.streamID,
                  next.unordered == here.unordered, !next.beginning else { return }
            last &+= 1
            cur = next
        }
        var first = tsn
        cur = here
        while !cur.beginning {
            guard let prev = fragments[first &- 1], prev.streamID == here.streamID,
                  prev.unordered == here.unordered, !prev.ending else { return }
            first &-= 1
            cur = prev
        }
        var data: [UInt8] = []
        var t = first
        var count = 0
        while true {
            if let f = fragments.removeValue(forKey: t) {
                data.append(contentsOf: f.userData)
                count &+= 1
            }
            if t == last { break }
            t &+= 1
        }
        let head = cur
        let message = SCTPMessage(streamID: head.streamID, ppid: head.ppid, unordered: head.unordered, data: data)
        let cost = data.count &+ count &* Self.chunkOverhead
        if head.unordered {
            receiveBuffered &-= cost
            event(.message(message))
            return
        }
        // Ordered: the message stays buffered until its turn; count only one overhead.
        receiveBuffered &-= (count &- 1) &* Self.chunkOverhead
        let expected = nextExpectedSSN[head.streamID] ?? 0
        guard ssnLE(expected, head.ssn) else {
            // An SSN already delivered: a protocol violation that would sit in memory forever.
            receiveBuffered &-= data.count &+ Self.chunkOverhead
            return
        }
        if let old = orderedPending[head.streamID]?[head.ssn] {
            // The same SSN twice (a misbehaving peer): keep the newer, release the older.
            receiveBuffered &-= old.data.count &+ Self.chunkOverhead
        }
        orderedPending[head.streamID, default: [:]][head.ssn] = message
        deliverOrdered(stream: head.streamID)
    }

    mutating func deliverOrdered(stream: UInt16) {
        var expected = nextExpectedSSN[stream] ?? 0
        while let m = orderedPending[stream]?.removeValue(forKey: expected) {
            receiveBuffered &-= m.data.count &+ Self.chunkOverhead
            event(.message(m))
            expected &+= 1
        }
        nextExpectedSSN[stream] = expected
        if orderedPending[stream]?.isEmpty == true { orderedPending[stream] = nil }
    }

    mutating func noteDataPacket(now: Instant) {
        dataPacketsSinceSack &+= 1
        if dataPacketsSinceSack >= 2 || state == .shutdownSent { sackImmediately = true }
        if !sackImmediately, sackDeadline == nil { sackDeadline = now + config.delayedAckTimeout }
    }

    func makeSack() -> SackChunk {
        var blocks: [GapAckBlock] = []
        // Room in one packet next to the header, SACK fields and duplicates; the lowest
        // blocks matter most (they drive the sender's fast retransmit).
        let room = (config.mtu &- Self.commonHeader &- 16 &- 4 &* duplicates.count) / 4
        for r in receivedAbove.ranges.prefix(room) {
            blocks.append(GapAckBlock(start: UInt16(truncatingIfNeeded: r.first &- cumTSN),
                                      end: UInt16(truncatingIfNeeded: r.last &- cumTSN)))
        }
        return SackChunk(cumulativeTSNAck: cumTSN, aRwnd: UInt32(clamping: advertisedWindow),
                         gapBlocks: blocks, duplicateTSNs: duplicates)
    }

    // MARK: - FORWARD-TSN (RFC 3758 §3.6)

    mutating func handleForwardTSN(_ f: ForwardTSNChunk) {
        guard state == .established || state == .shutdownPending || state == .shutdownSent else { return }
        sackImmediately = true
        let newCum = f.newCumulativeTSN
        guard tsnLT(cumTSN, newCum), newCum &- cumTSN <= Self.maxTSNWindow else { return }
        // Abandoned fragments are dropped; whole messages never straddle the new point.
        for (tsn, frag) in fragments where tsnLE(tsn, newCum) {
            fragments[tsn] = nil
            receiveBuffered &-= frag.userData.count &+ Self.chunkOverhead
        }
        receivedAbove.removeThrough(newCum, base: cumTSN)
        cumTSN = newCum
        if let end = receivedAbove.popContiguous(after: cumTSN) { cumTSN = end }
        for s in f.skipped {
            // Deliver what waits up to the skipped SSN, then continue after it.
            if var pending = orderedPending[s.streamID] {
                let ready = pending.keys.filter { ssnLE($0, s.ssn) }.sorted { ssnLE($0, $1) }
                for k in ready {
                    if let m = pending.removeValue(forKey: k) {
                        receiveBuffered &-= m.data.count &+ Self.chunkOverhead
                        event(.message(m))
                    }
                }
                orderedPending[s.streamID] = pending
            }
            let expected = nextExpectedSSN[s.streamID] ?? 0
            if ssnLE(expected, s.ssn) { nextExpectedSSN[s.streamID] = s.ssn &+ 1 }
            deliverOrdered(stream: s.streamID)
        }
    }

    // MARK: - SACK processing (RFC 9260 §6.2.1, §7.2)

    mutating func handleSack(_ s: SackChunk, now: Instant) {
        guard state == .established || state == .shutdownPending || state == .shutdownReceived
            || state == .shutdownSent else { return }
        let cum = s.cumulativeTSNAck
        // Old SACKs (reordered) are ignored; one acknowledging what we never sent is bogus.
        guard tsnLE(lastCumAck, cum), tsnLT(cum, nextTSN) else { return }
        let cumAdvanced = cum != lastCumAck
        let flightBefore = flightSize
        var newlyAcked = 0
        var rttSampled = false

        // Cumulative acknowledgement.
        var removeCount = 0
        for i in outstanding.indices {
            let e = outstanding[i]
            guard tsnLE(e.chunk.tsn, cum) else { break }
            removeCount &+= 1
            if !e.gapAcked { newlyAcked &+= e.size }
            if e.inFlight { flightSize &-= e.size }
            outstandingBytes &-= e.size
            if !rttSampled, e.transmissions == 1, !e.gapAcked {
                updateRTO(sample: now - e.sentAt)
                rttSampled = true
            }
        }
        if removeCount > 0 { outstanding.removeFirst(removeCount) }
        lastCumAck = cum

        // Gap blocks: which of the rest arrived.
        var highestNewlyAcked: UInt32?
        if !s.gapBlocks.isEmpty || outstanding.contains(where: { $0.gapAcked }) {
            // Blocks come sorted (§3.3.4) and so does `outstanding`: walk both at once.
            var b = 0
            let blocks = s.gapBlocks
            for i in outstanding.indices {
                let offset = outstanding[i].chunk.tsn &- cum
                while b < blocks.count, UInt32(blocks[b].end) < offset { b &+= 1 }
                let inGap = b < blocks.count && UInt32(blocks[b].start) <= offset && offset <= UInt32(blocks[b].end)
                if inGap, !outstanding[i].gapAcked {
                    outstanding[i].gapAcked = true
                    outstanding[i].retransmit = false
                    outstanding[i].fastRetransmit = false
                    newlyAcked &+= outstanding[i].size
                    if outstanding[i].inFlight {
                        outstanding[i].inFlight = false
                        flightSize &-= outstanding[i].size
                    }
                    highestNewlyAcked = outstanding[i].chunk.tsn
                    if !rttSampled, outstanding[i].transmissions == 1 {
                        updateRTO(sample: now - outstanding[i].sentAt)
                        rttSampled = true
                    }
                } else if !inGap, outstanding[i].gapAcked {
                    // Reneged (§6.2.1 allows it): retransmit it later.
                    outstanding[i].gapAcked = false
                    outstanding[i].retransmit = true
                }
            }
        }

        // Miss indications (§7.2.4, HTNA): below the highest newly acknowledged TSN.
        if let h = highestNewlyAcked {
            var startedRecovery = false
            for i in outstanding.indices {
                let e = outstanding[i]
                guard tsnLT(e.chunk.tsn, h) else { break }
                guard !e.gapAcked, !e.retransmit, !e.fastRetransmitted else { continue }
                outstanding[i].missingReports &+= 1
                if outstanding[i].missingReports >= 3 {
                    outstanding[i].fastRetransmit = true
                    outstanding[i].retransmit = true
                    outstanding[i].fastRetransmitted = true
                    if outstanding[i].inFlight {
                        outstanding[i].inFlight = false
                        flightSize &-= outstanding[i].size
                    }
                    stats.fastRetransmits &+= 1
                    if !inFastRecovery && !startedRecovery {
                        // §7.2.3 / §7.2.4: enter Fast Recovery once.
                        ssthresh = max(cwnd / 2, 4 &* config.mtu)
                        cwnd = ssthresh
                        partialBytesAcked = 0
                        inFastRecovery = true
                        recoveryPoint = nextTSN &- 1
                        startedRecovery = true
                    }
                }
            }
        }

        if newlyAcked > 0 { errorCount = 0 }
        if inFastRecovery, tsnLE(recoveryPoint, cum) { inFastRecovery = false }

        // Congestion window (§7.2.1, §7.2.2): grow only on cumulative progress and when
        // the window was in use.
        if cumAdvanced, !inFastRecovery {
            let ackedByCum = newlyAcked
            if cwnd <= ssthresh {
                if flightBefore &+ config.mtu >= cwnd { cwnd &+= min(ackedByCum, config.mtu) }
            } else {
                partialBytesAcked &+= ackedByCum
                if partialBytesAcked >= cwnd, flightBefore &+ config.mtu >= cwnd {
                    partialBytesAcked &-= cwnd
                    cwnd &+= config.mtu
                }
            }
        }
        if outstanding.isEmpty { partialBytesAcked = 0 }

        // rwnd = a_rwnd minus what is still outstanding (§6.2.1).
        var stillOut = 0
        for e in outstanding where !e.gapAcked { stillOut &+= e.size }
        peerRwnd = max(0, Int(s.aRwnd) &- stillOut)

        // T3-rtx (§6.3.2 R2, R3).
        if !outstanding.contains(where: { $0.inFlight || $0.retransmit }) {
            t3Deadline = nil
        } else if cumAdvanced {
            t3Deadline = now + rto
        }
        heartbeatDeadline = now + config.heartbeatInterval + rto
        checkSendBufferLow()
    }

    mutating func updateRTO(sample r: Duration) {
        // §6.3.1 C2/C3 with α = 1/8, β = 1/4.
        if let s = srtt {
            let delta = s > r ? s - r : r - s
            rttvar = rttvar * 3 / 4 + delta / 4
            srtt = s * 7 / 8 + r / 8
        } else {
            srtt = r
            rttvar = r / 2
        }
        let raw = srtt! + rttvar * 4
        rto = min(max(raw, config.rtoMin), config.rtoMax)
    }

    mutating func onT3(now: Instant) {
        // §6.3.3: back off, collapse the window, retransmit everything not gap-acked.
        t3Deadline = nil
        stats.t3Expirations &+= 1
        errorCount &+= 1
        if errorCount > config.maxRetransmissions {
            sendAbort(cause: nil)
            close(.peerUnreachable)
            return
        }
        rto = min(rto * 2, config.rtoMax)
        ssthresh = max(cwnd / 2, 4 &* config.mtu)
        cwnd = config.mtu
        partialBytesAcked = 0
        inFastRecovery = false
        for i in outstanding.indices where !outstanding[i].gapAcked {
            outstanding[i].retransmit = true
            outstanding[i].fastRetransmit = false
            if outstanding[i].inFlight {
                outstanding[i].inFlight = false
                flightSize &-= outstanding[i].size
            }
        }
    }

    mutating func checkSendBufferLow() {
        if sendBlocked, bufferedAmount <= config.sendBufferLimit / 2 {
            sendBlocked = false
            event(.sendBufferLow)
        }
    }

    // MARK: - Heartbeat (§8.3)

    mutating func onHeartbeatTimer(now: Instant) {
        guard state == .established || state == .shutdownPending else {
            heartbeatDeadline = nil
            return
        }
        if heartbeatOutstanding {
            errorCount &+= 1
            if errorCount > config.maxRetransmissions {
                sendAbort(cause: nil)
                close(.peerUnreachable)
                return
            }
        }
        heartbeatNonce = rng.next()
        var info: [UInt8] = []
        info.appendUInt64(heartbeatNonce)
        info.appendUInt64(UInt64(bitPattern: now.nanoseconds))
        controlChunks.append(.heartbeat(HeartbeatChunk(info: info)))
        heartbeatOutstanding = true
        stats.heartbeatsSent &+= 1
        heartbeatDeadline = now + config.heartbeatInterval + rto
    }

    mutating func handleHeartbeatAck(_ h: HeartbeatAckChunk, now: Instant) {
        guard h.info.count == 16 else { return }
        var nonce: UInt64 = 0
        var sent: UInt64 = 0
        for i in 0..<8 {
            nonce = nonce << 8 | UInt64(h.info[i])
            sent = sent << 8 | UInt64(h.info[8 + i])
        }
        guard heartbeatOutstanding, nonce == heartbeatNonce else { return }
        heartbeatOutstanding = false
        errorCount = 0
        stats.heartbeatAcksReceived &+= 1
        let sample = now - Instant(nanoseconds: Int64(bitPattern: sent))
        if sample >= .zero { updateRTO(sample: sample) }
    }

    // MARK: - Shutdown (§9.2)

    mutating func handleShutdown(_ s: ShutdownChunk, now: Instant) {
        switch state {
        case .established, .shutdownPending:
            // Its Cumulative TSN Ack acknowledges like a SACK without gaps.
            handleSack(SackChunk(cumulativeTSNAck: s.cumulativeTSNAck, aRwnd: UInt32(clamping: peerRwnd &+ outstandingBytes)), now: now)
            state = .shutdownReceived
        case .shutdownSent:
            // Both sides shut down: answer with SHUTDOWN-ACK (§9.2).
            state = .shutdownReceived
        default:
            break
        }
    }

    mutating func handleShutdownAck(now: Instant) {
        switch state {
        case .shutdownSent, .shutdownAckSent:
            emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort, verificationTag: peerTag,
                            chunks: [.shutdownComplete(ShutdownCompleteChunk())]))
            close(.shutdown)
        case .cookieWait, .cookieEchoed, .closed:
            // §8.4 (5): out of the blue SHUTDOWN-ACK → SHUTDOWN-COMPLETE with T set.
            break
        default:
            break
        }
    }

    mutating func onT2(now: Instant) {
        t2Deadline = nil
        errorCount &+= 1
        if errorCount > config.maxRetransmissions {
            sendAbort(cause: nil)
            close(.peerUnreachable)
            return
        }
        rto = min(rto * 2, config.rtoMax)
        switch state {
        case .shutdownSent:
            controlChunks.append(.shutdown(ShutdownChunk(cumulativeTSNAck: cumTSN)))
        case .shutdownAckSent:
            controlChunks.append(.shutdownAck(ShutdownAckChunk()))
        default:
            return
        }
        t2Deadline = now + rto
    }

    /// Moves the shutdown along once everything we sent is acknowledged.
    mutating func advanceShutdown(now: Instant) {
        let drained = sendQueueHead == sendQueue.count && outstanding.isEmpty
        guard drained else { return }
        switch state {
        case .shutdownPending:
            state = .shutdownSent
            controlChunks.append(.shutdown(ShutdownChunk(cumulativeTSNAck: cumTSN)))
            t2Deadline = now + rto
            t3Deadline = nil
        case .shutdownReceived:
            state = .shutdownAckSent
            controlChunks.append(.shutdownAck(ShutdownAckChunk()))
            t2Deadline = now + rto
            t3Deadline = nil
        default:
            break
        }
    }

    // MARK: - Stream reset (RFC 6525)

    mutating func handleReconfig(_ r: ReconfigChunk, now: Instant) {
        guard state == .established || state == .shutdownPending else { return }
        var answers: [ReconfigParameter] = []
        for p in r.parameters {
            switch p {
            case .outgoingReset(let req):
                answers.append(.response(answerOutgoingReset(req)))
            case .incomingReset(let req):
                answers.append(.response(answerOther(requestSequence: req.requestSequence)))
            case .response(let resp):
                handleReconfigResponse(resp, now: now)
            case .other(let tlv):
                if tlv.value.count >= 4 {
                    let seq = UInt32(tlv.value[0]) << 24 | UInt32(tlv.value[1]) << 16
                        | UInt32(tlv.value[2]) << 8 | UInt32(tlv.value[3])
                    answers.append(.response(answerOther(requestSequence: seq)))
                }
            }
        }
        if !answers.isEmpty { controlChunks.append(.reconfig(ReconfigChunk(parameters: answers))) }
    }

    /// RFC 6525 §5.2.1: sequence numbers decide new, repeated or bad requests.
    mutating func checkRequestSequence(_ seq: UInt32) -> ReconfigResponse? {
        if seq == peerNextRequestSeq { return nil }
        if seq == peerNextRequestSeq &- 1, let last = lastPeerResponse { return last }
        return ReconfigResponse(responseSequence: seq, result: .errorBadSequenceNumber)
    }

    mutating func answerOutgoingReset(_ req: OutgoingResetRequest) -> ReconfigResponse {
        if let early = checkRequestSequence(req.requestSequence) { return early }
        // §5.2.2: perform once everything up to the sender's last TSN has arrived.
        guard tsnLE(req.senderLastTSN, cumTSN) else {
            return ReconfigResponse(responseSequence: req.requestSequence, result: .inProgress)
        }
        var streams = req.streams
        if streams.isEmpty {
            streams = Array(Set(nextExpectedSSN.keys).union(orderedPending.keys)).sorted()
        }
        for s in streams {
            nextExpectedSSN[s] = nil
            if let pending = orderedPending.removeValue(forKey: s) {
                for (_, m) in pending { receiveBuffered &-= m.data.count &+ Self.chunkOverhead }
            }
        }
        let resp = ReconfigResponse(responseSequence: req.requestSequence, result: .successPerformed)
        peerNextRequestSeq &+= 1
        lastPeerResponse = resp
        event(.incomingStreamsReset(req.streams))
        return resp
    }

    mutating func answerOther(requestSequence seq: UInt32) -> ReconfigResponse {
        if let early = checkRequestSequence(seq) { return early }
        let resp = ReconfigResponse(responseSequence: seq, result: .denied)
        peerNextRequestSeq &+= 1
        lastPeerResponse = resp
        return resp
    }

    mutating func handleReconfigResponse(_ resp: ReconfigResponse, now: Instant) {
        guard let req = reconfigInFlight, resp.responseSequence == req.requestSequence else { return }
        switch ReconfigResponse.Result(rawValue: resp.result) {
        case .inProgress:
            // Ask again after an RTO (§5.2.2 leaves the retry to the sender).
            reconfigDeadline = now + rto
            return
        case .successPerformed, .successNothingToDo:
            for s in req.streams {
                nextSSN[s] = nil
                resettingStreams.remove(s)
            }
            event(.outgoingStreamsReset(req.streams))
        default:
            for s in req.streams { resettingStreams.remove(s) }
            event(.streamResetFailed(req.streams))
        }
        reconfigInFlight = nil
        reconfigDeadline = nil
        myNextRequestSeq &+= 1
    }

    /// Sends a queued reset once the streams' queued data has gone out (§5.1.2: one
    /// request at a time; the receiver waits for data up to Sender's Last Assigned TSN).
    mutating func startQueuedReset(now: Instant) {
        guard reconfigInFlight == nil, !resetQueue.isEmpty else { return }
        var q = sendQueueHead
        while q < sendQueue.count {
            if resetQueue.contains(sendQueue[q].streamID) { return }
            q &+= 1
        }
        let streams = resetQueue
        resetQueue.removeAll()
        if !peerSupportsReconfig {
            // The peer cannot reset streams: report failure instead of waiting forever.
            for s in streams { resettingStreams.remove(s) }
            event(.streamResetFailed(streams))
            return
        }
        let req = OutgoingResetRequest(requestSequence: myNextRequestSeq, responseSequence: peerNextRequestSeq &- 1,
                                       senderLastTSN: nextTSN &- 1, streams: streams)
        reconfigInFlight = req
        sendReconfigRequest(req, now: now)
    }

    mutating func sendReconfigRequest(_ req: OutgoingResetRequest, now: Instant) {
        controlChunks.append(.reconfig(ReconfigChunk(parameters: [.outgoingReset(req)])))
        reconfigDeadline = now + rto
    }

    // MARK: - Output

    mutating func event(_ e: SCTPEvent) { outputs.append(.event(e)) }

    mutating func emit(_ p: SCTPPacket) {
        let bytes = p.serialize()
        guard !bytes.isEmpty else { return }  // only a chunk over 64 KiB fails; never sent
        stats.packetsSent &+= 1
        outputs.append(.transmit(bytes))
    }

    mutating func sendAbort(cause: ErrorCause?) {
        guard peerTag != 0 else { return }
        emit(SCTPPacket(sourcePort: config.localPort, destinationPort: config.remotePort, verificationTag: peerTag,
                        chunks: [.abort(AbortChunk(causes: cause.map { [$0] } ?? []))]))
    }

    mutating func close(_ reason: SCTPCloseReason) {
        state = .closed
        t1Deadline = nil; t2Deadline = nil; t3Deadline = nil
        sackDeadline = nil; heartbeatDeadline = nil; reconfigDeadline = nil
        controlChunks.removeAll()
        sendQueue.removeAll(); sendQueueHead = 0; queuedBytes = 0
        outstanding.removeAll(); outstandingBytes = 0; flightSize = 0
        fragments.removeAll(); orderedPending.removeAll(); receiveBuffered = 0
        if !closeReported {
            closeReported = true
            event(.closed(reason))
        }
    }

    /// Builds packets: control chunks first (SACK, answers), then retransmissions, then
    /// new DATA as the congestion and receive windows allow (§6.1).
    mutating func flush(now: Instant) {
        guard state != .closed else { return }
        let dataAllowed = state == .established || state == .shutdownPending || state == .shutdownReceived
        if dataAllowed { startQueuedReset(now: now) }

        var chunks: [Chunk] = []
        var size = Self.commonHeader
        var sentData = false

        func ship(_ a: inout SCTPAssociation) {
            guard !chunks.isEmpty else { return }
            a.emit(SCTPPacket(sourcePort: a.config.localPort, destinationPort: a.config.remotePort,
                              verificationTag: a.peerTag, chunks: chunks))
            chunks.removeAll(keepingCapacity: true)
            size = Self.commonHeader
        }
        func add(_ c: Chunk, _ a: inout SCTPAssociation) {
            let n = c.encodedLength
            if size &+ n > a.config.mtu { ship(&a) }
            chunks.append(c)
            size &+= n
        }

        // A delayed SACK rides along when DATA is about to go out anyway.
        let piggyback = sackDeadline != nil && dataAllowed && sendQueueHead < sendQueue.count
        let needSack = (sackImmediately || piggyback || !duplicates.isEmpty) && peerTag != 0
            && state != .cookieWait && state != .cookieEchoed
        if needSack {
            add(.sack(makeSack()), &self)
            stats.sacksSent &+= 1
            sackImmediately = false
            sackDeadline = nil
            dataPacketsSinceSack = 0
            duplicates.removeAll()
        }
        let control = controlChunks
        controlChunks.removeAll()
        for c in control { add(c, &self) }

        if dataAllowed {
            // Fast retransmissions: one packet's worth regardless of cwnd (§7.2.4 (3)).
            var fastBudget = config.mtu &- Self.commonHeader
            for i in outstanding.indices where outstanding[i].fastRetransmit {
                let n = padded4(Self.dataHeader &+ outstanding[i].size)
                guard n <= fastBudget else { break }
                fastBudget &-= n
                retransmit(i, now: now)
                add(.data(outstanding[i].chunk), &self)
                sentData = true
            }
            // T3 retransmissions, within cwnd.
            for i in outstanding.indices where outstanding[i].retransmit {
                guard flightSize < cwnd else { break }
                retransmit(i, now: now)
                add(.data(outstanding[i].chunk), &self)
                sentData = true
            }
            // New data, once nothing waits for retransmission.
            let retransmitsWaiting = outstanding.contains(where: { $0.retransmit })
            while sendQueueHead < sendQueue.count, !retransmitsWaiting || flightSize == 0 {
                let p = sendQueue[sendQueueHead]
                guard flightSize < cwnd, flightSize == 0 || peerRwnd >= p.data.count else { break }
                sendQueueHead &+= 1
                queuedBytes &-= p.data.count
                let chunk = DataChunk(tsn: nextTSN, streamID: p.streamID, ssn: p.ssn, ppid: p.ppid,
                                      unordered: p.unordered, beginning: p.beginning, ending: p.ending,
                                      userData: p.data)
                nextTSN &+= 1
                outstanding.append(Sent(chunk: chunk, sentAt: now, transmissions: 1))
                outstandingBytes &+= p.data.count
                flightSize &+= p.data.count
                peerRwnd = max(0, peerRwnd &- p.data.count)
                stats.dataChunksSent &+= 1
                add(.data(chunk), &self)
                sentData = true
            }
            if sendQueueHead == sendQueue.count, sendQueueHead > 0 {
                sendQueue.removeAll(keepingCapacity: true)
                sendQueueHead = 0
            } else if sendQueueHead > 256, sendQueueHead &* 2 > sendQueue.count {
                sendQueue.removeFirst(sendQueueHead)
                sendQueueHead = 0
            }
        }
        ship(&self)
        if sentData {
            if t3Deadline == nil { t3Deadline = now + rto }
            heartbeatDeadline = now + config.heartbeatInterval + rto
        }
        if state == .shutdownPending || state == .shutdownReceived {
            advanceShutdown(now: now)
            let pending = controlChunks
            controlChunks.removeAll()
            for c in pending { add(c, &self) }
            ship(&self)
        }
    }

    mutating func retransmit(_ i: Int, now: Instant) {
        outstanding[i].retransmit = false
        outstanding[i].fastRetransmit = false
        outstanding[i].transmissions &+= 1
        outstanding[i].sentAt = now
        outstanding[i].missingReports = 0
        if !outstanding[i].inFlight {
            outstanding[i].inFlight = true
            flightSize &+= outstanding[i].size
        }
        stats.retransmissions &+= 1
        if i == 0 { t3Deadline = now + rto }
    }
}
