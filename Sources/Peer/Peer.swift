/// Peer: one WebRTC peer connection, sans-IO: the glue between ICE, DTLS, SRTP, RTP
/// and SCTP on one bundled transport.
///
/// Design decisions:
/// - One 5-tuple for everything (BUNDLE and rtcp-mux): incoming datagrams are
///   demultiplexed by their first byte (RFC 7983 §7): 0–3 STUN, 20–63 DTLS, 128–191
///   RTP/RTCP (RTCP when the second byte is 192–223, RFC 5761 §4).
/// - DTLS starts when ICE has a pair (the client) or is waiting from the moment the
///   remote description is set (the server), so a peer whose ICE finishes first is
///   never lost. Nothing is decrypted or sent on SRTP before the DTLS handshake has
///   verified the peer's fingerprint and exported keys.
/// - Offerer or answerer: the offer says `actpass`; the answer's `a=setup` decides
///   (PROTOCOLS.md: every stack measured answers `active`, making us the DTLS server).
/// - Media leaves as events: received Opus payloads go to the caller's jitter buffer
///   and decoder; sending takes an encoded payload and does RTP + SRTP here.
/// - Consent expiry after `.connected` is not the end: the peer stops sending
///   (RFC 7675 §5.1) but keeps DTLS, SRTP, SCTP and RTP state, so an ICE restart
///   (Restart.swift, RFC 8445 §9) resumes the call without a new handshake.
import Wire
import SDP
import ICE
import DTLS
import SRTP
import RTP
import SCTP

/// Why the connection cannot go on (or a call was refused), for the log.
public enum PeerError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The remote description is unusable.
    case sdp(SDPError)
    /// The DTLS handshake failed (fingerprint mismatch, no SRTP profile…).
    case dtls(DTLSError)
    /// libsrtp could not be keyed.
    case srtp(SRTPError)
    /// Every candidate pair failed, or consent expired (RFC 7675).
    case iceFailed
    /// A call made in the wrong state (e.g. an answer before an offer).
    case wrongState(String)
    /// Randomness for credentials could not be drawn.
    case random(DTLSError)
    /// A data-channel call failed (not connected, message too large, buffer full…).
    case dataChannel(SCTPError)

    public var description: String {
        switch self {
        case .sdp(let e): return e.description
        case .dtls(let e): return e.description
        case .srtp(let e): return e.description
        case .iceFailed: return "ICE failed: no path to the peer (or consent expired)"
        case .wrongState(let s): return "peer: \(s)"
        case .random(let e): return e.description
        case .dataChannel(let e): return "data channel: \(e)"
        }
    }
}

/// An Opus packet received from the peer, after SRTP and RTP.
public struct ReceivedAudio: Equatable, Sendable {
    /// Extended sequence number (RFC 3550 A.1).
    public var sequence: Int64
    public var timestamp: UInt32
    public var marker: Bool
    public var payload: [UInt8]
    public var arrival: Instant
}

public enum PeerEvent: Equatable, Sendable {
    case iceStateChanged(ICEState)
    case selectedPairChanged(ICESelectedPair)
    /// All local candidates are known (the offer/answer can be sent).
    case gatheringComplete
    /// DTLS finished with a verified peer: media can flow.
    case connected
    case audio(ReceivedAudio)
    /// A data-channel event: the association is up, a channel opened or closed, a
    /// message arrived (RFC 8831, DCEP RFC 8832).
    case dataChannel(DataChannelEvent)
    /// The call cannot go on. The one exception is `.failed(.iceFailed)` after
    /// `.connected` (consent expired, RFC 7675): the peer keeps its DTLS, SRTP and SCTP
    /// state and sends nothing; `restartICE` (offerer) or a restart offer to
    /// `acceptOffer` (answerer) can bring it back, otherwise call `close`.
    case failed(PeerError)
    case closed
}

public enum PeerOutput: Equatable, Sendable {
    case transmit(bytes: [UInt8], from: SocketAddress, to: SocketAddress)
    case event(PeerEvent)
    case timeout(Instant)
}

/// Counters for stats lines and tests.
public struct PeerStats: Equatable, Sendable {
    public var rtpSent = 0
    public var rtpBytesSent = 0
    public var rtpReceived = 0
    public var rtcpSent = 0
    public var rtcpReceived = 0
    /// SRTP/SRTCP packets that failed authentication or replay checks: dropped.
    public var srtpDropped = 0
    /// Datagrams that matched no protocol or failed to parse: dropped.
    public var malformed = 0
    /// DTLS or SRTP from a 5-tuple ICE has not validated (a stranger, RFC 8445 §7.3): dropped.
    public var unvalidatedDropped = 0
    /// RTP audio received although the negotiated direction says we do not receive: dropped.
    public var directionDropped = 0
    /// SCTP packets DTLS refused to send.
    public var dataChannelSendErrors = 0
    /// Datagrams the driver could not hand to the kernel (`transmitFailed`): a full
    /// socket buffer, no route. Lost, as the network would lose them; `rtpSent` and
    /// `rtcpSent` count only what went.
    public var sendFailed = 0
    /// Audio frames RTP packetization or SRTP protection refused (a payload too large for
    /// the packet, an SRTP error): not sent, their time passes.
    public var rtpNotProtected = 0
    /// RTCP reports (and the closing BYE) that could not be written or protected: not
    /// sent; the next report interval tries again.
    public var rtcpNotProtected = 0
    /// Round-trip time from the peer's last report about our stream (RFC 3550 §6.4.1).
    public var roundTripTime: Duration? = nil
    /// The peer's view of our stream: fraction lost (0–255) and interarrival jitter (ticks).
    public var remoteFractionLost: UInt8 = 0
    public var remoteJitter: UInt32 = 0
    /// Our view of the peer's stream.
    public var packetsLost: Int64 = 0
    public var jitter: UInt32 = 0
}

public enum PeerRole: Sendable { case offerer, answerer }

public struct PeerConfiguration: Sendable {
    /// The bound addresses of the UDP sockets, one per interface address.
    public var hostAddresses: [SocketAddress]
    public var ice: ICEConfig
    public var opusPayloadType: UInt8 = 111
    public var dataChannel = true
    public var maxMessageSize: UInt64 = 262_144
    /// How often RTCP reports go out (randomised ±50 %, RFC 3550 §6.3.5 spirit).
    public var rtcpInterval: Duration = .seconds(1)

    public init(hostAddresses: [SocketAddress], ice: ICEConfig = ICEConfig()) {
        self.hostAddresses = hostAddresses
        var config = ice
        // RFC 8445 §14.2 lets Ta go down to 5 ms. A board has a handful of pairs (two
        // interfaces, IPv4 and IPv6, a few remote candidates: 20 checks in 100 ms is far
        // inside any rate limit), and every check paced behind the first, the
        // nomination included, adds Ta to the connect time.
        if config.ta > .milliseconds(5) { config.ta = .milliseconds(5) }
        self.ice = config
    }
}

/// One peer connection. Drive contract: after `start(now:)` and every
/// `handleInput`/`handleTimeout`/`sendAudio`, drain `pollOutput()` until `.timeout`.
public final class Peer {
    public let role: PeerRole
    public let configuration: PeerConfiguration
    let identity: Identity
    let crypto: CryptoRandom
    var ice: ICEAgent<SeededRandom>
    var rng: SeededRandom
    var dtls: DTLSConnection?
    var channels: DataChannels?
    var channelsDeadline = Instant.distantFuture
    var outbound: SRTPContext?
    var inbound: SRTPContext?
    var sender: RTPSender
    var receiveStats: RTPReceiveStatistics?
    let cname: String
    var negotiated: NegotiatedSession?
    var localDescriptionText: String?
    var sessionID: UInt64
    /// The o= line's version: bumped by each description that changes something
    /// (RFC 3264 §8), an ICE restart here.
    var sessionVersion: UInt64 = 1
    /// Offerer: `restartICE` made a new offer; its answer has not been applied yet.
    var restartPending = false
    /// ICE failed (consent expired, RFC 7675 §5.1) after DTLS was up: nothing may be sent
    /// until an ICE restart selects a pair with fresh consent. DTLS, SRTP and SCTP keep
    /// their state for that restart.
    public private(set) var consentLost = false
    var gathered: [Candidate] = []
    public private(set) var gatheringComplete = false
    var events = OutputQueue<PeerEvent>()
    var transmits = OutputQueue<(bytes: [UInt8], from: SocketAddress, to: SocketAddress)>()
    var pair: ICESelectedPair?
    /// Where the last DTLS datagram came from (and arrived on): the server's reply path
    /// when its ICE has not selected a pair yet.
    var dtlsPath: (local: SocketAddress, remote: SocketAddress)?
    /// DTLS from a candidate pair that ICE has not validated yet (`holdEarlyDTLS`).
    var earlyDTLS: [(bytes: [UInt8], from: SocketAddress, local: SocketAddress)] = []
    var nextRTCP: Instant? = nil
    var iceDeadline = Instant.distantFuture
    public private(set) var stats = PeerStats()
    public private(set) var connected = false
    var closed = false
    var scratch = [UInt8](repeating: 0, count: 1500)
    /// A sent datagram's array handed back by the I/O shell (`recycle`), whose storage
    /// the next datagram built from `scratch` reuses: one audio packet every 20 ms then
    /// costs no allocation on the loop.
    var spareDatagram: [UInt8] = []
    /// The payload arrays of the last `payloadPool.count` `.audio` events. Once the
    /// jitter buffer has played one and let it go, the pool's is its only reference, and
    /// the packet that many later is copied into its storage (no allocation per
    /// received packet). The jitter buffer lets a packet go within its delay, a few
    /// frames; the pool spans 16 (320 ms).
    var payloadPool = [[UInt8]](repeating: [], count: 16)
    var payloadPoolNext = 0

    /// - Parameters:
    ///   - seed: seeds the generator for SSRC, sequence numbers, tie-breaker and
    ///     transaction ids (from the system's CSPRNG in production, fixed in tests).
    ///     ICE passwords come from `crypto`.
    public init(role: PeerRole, configuration: PeerConfiguration, identity: Identity, crypto: CryptoRandom, seed: UInt64) throws(PeerError) {
        self.role = role
        self.configuration = configuration
        self.identity = identity
        self.crypto = crypto
        var r = SeededRandom(seed: seed)
        let credentials = try Peer.makeCredentials(crypto)
        ice = ICEAgent(role: role == .offerer ? .controlling : .controlled, localCredentials: credentials,
                       hostAddresses: configuration.hostAddresses, config: configuration.ice, rng: SeededRandom(seed: r.next()))
        sender = RTPSender(payloadType: configuration.opusPayloadType, using: &r)
        sessionID = r.next() >> 2
        cname = Peer.token(&r, length: 16)
        rng = r
    }

    /// ICE credentials with more than the 24 and 128 bits RFC 8445 §5.3 asks for, from
    /// the cryptographic generator (the password authenticates every check).
    static func makeCredentials(_ crypto: CryptoRandom) throws(PeerError) -> ICECredentials {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        let bytes: [UInt8]
        do throws(DTLSError) { bytes = try crypto.bytes(8 + 24) } catch { throw .random(error) }
        let ufrag = String(decoding: bytes[0..<8].map { alphabet[Int($0 & 63)] }, as: UTF8.self)
        let pwd = String(decoding: bytes[8...].map { alphabet[Int($0 & 63)] }, as: UTF8.self)
        return ICECredentials(ufrag: ufrag, password: pwd)
    }

    static func token(_ r: inout SeededRandom, length: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var out: [UInt8] = []
        for _ in 0..<length { out.append(alphabet[Int(r.next() % UInt64(alphabet.count))]) }
        return String(decoding: out, as: UTF8.self)
    }

    public var iceState: ICEState { ice.state }
    public var selectedPair: ICESelectedPair? { ice.selectedPair }
    public var localSSRC: UInt32 { sender.ssrc }
    public var negotiatedSession: NegotiatedSession? { negotiated }
    /// We offered a data channel and the answer rejected it (`m=application 0`).
    public var dataChannelRejected: Bool { configuration.dataChannel && negotiated.map { !$0.dataChannelAccepted } == true }
    public var iceStats: ICEStats { ice.stats }

    // MARK: Signaling

    /// Starts gathering (host candidates now, server-reflexive when a STUN server is
    /// configured). Wait for `.gatheringComplete` (or a bounded time) before building
    /// the description: no peer here trickles over HTTP (PROTOCOLS.md).
    public func start(now: Instant) {
        ice.start(now: now)
        drainICE(now: now)
    }

    /// A relayed candidate the owner allocated on a TURN server (see
    /// `ICEAgent.addRelayCandidate`); what the peer then sends "from" `relayed` is the
    /// owner's to send through that allocation.
    public func addRelayCandidate(relayed: SocketAddress, mapped: SocketAddress?, server: IPAddress, now: Instant) {
        ice.addRelayCandidate(relayed: relayed, mapped: mapped, server: server, now: now)
        drainICE(now: now)
    }

    /// One of `configuration.ice.expectedRelays` could not be allocated.
    public func relayGatheringFailed(now: Instant) {
        ice.relayGatheringFailed(now: now)
        drainICE(now: now)
    }

    func localDescription() -> LocalDescription {
        let audio = LocalAudio(payloadType: negotiated?.opusPayloadType ?? configuration.opusPayloadType, ssrc: sender.ssrc,
                               cname: cname, streamID: "linnet", trackID: "mic")
        return LocalDescription(sessionID: sessionID, sessionVersion: sessionVersion, iceUfrag: ice.localCredentials.ufrag, icePwd: ice.localCredentials.password,
                                fingerprints: [Fingerprint(algorithm: "sha-256", bytes: identity.fingerprint)],
                                candidates: gathered.map { String(Substring($0.description.utf8.dropFirst("candidate:".utf8.count))) }, audio: audio,
                                dataChannel: configuration.dataChannel ? LocalDataChannel(maxMessageSize: configuration.maxMessageSize) : nil)
    }

    /// Our offer (offerer), with every candidate gathered so far.
    public func createOffer() throws(PeerError) -> String {
        guard role == .offerer else { throw .wrongState("an answerer does not create offers") }
        do throws(SDPError) {
            let text = try SessionDescription.offer(localDescription()).text
            localDescriptionText = text
            return text
        } catch {
            throw .sdp(error)
        }
    }

    /// Applies the peer's answer to our offer.
    public func setRemoteAnswer(_ text: String, now: Instant) throws(PeerError) {
        guard role == .offerer, let offerText = localDescriptionText else { throw .wrongState("an answer before our offer") }
        guard negotiated == nil else { throw .wrongState("the answer was already applied") }
        do throws(SDPError) {
            let offer = try SessionDescription.parse(offerText)
            let answer = try SessionDescription.parse(text)
            let n = try NegotiatedSession.negotiate(localOffer: offer, remoteAnswer: answer)
            try apply(n, now: now)
        } catch {
            throw .sdp(error)
        }
    }

    /// Answers the peer's offer (answerer): returns our answer. Call after gathering.
    public func acceptOffer(_ text: String, now: Instant) throws(PeerError) -> String {
        guard role == .answerer else { throw .wrongState("an offerer does not answer") }
        // A later offer on the same session: an ICE restart when its ufrag changed.
        if let current = negotiated { return try acceptReoffer(text, current: current, now: now) }
        do throws(SDPError) {
            let offer = try SessionDescription.parse(text)
            // We take the DTLS client role toward an actpass offer, as RFC 5763 §5
            // recommends: the handshake can start as soon as ICE has a pair, without
            // waiting for the offerer to learn the answer.
            let answer = try SessionDescription.answer(to: offer, localDescription(), role: .client)
            let n = try NegotiatedSession.negotiate(remoteOffer: offer, localAnswer: answer)
            try apply(n, now: now)
            let out = answer.text
            localDescriptionText = out
            return out
        } catch {
            throw .sdp(error)
        }
    }

    func apply(_ n: NegotiatedSession, now: Instant) throws(SDPError) {
        negotiated = n
        if n.opusPayloadType != sender.payloadType {
            var r = rng
            let replacement = RTPSender(payloadType: n.opusPayloadType, using: &r)
            rng = r
            sender = replacement
        }
        ice.setRemoteCredentials(ICECredentials(ufrag: n.remoteICEUfrag, password: n.remoteICEPwd), now: now)
        for line in n.remoteCandidates {
            // The far end's line: one this agent cannot read (an unknown transport or
            // form) is skipped, and its other candidates still connect.
            if let c = try? Candidate(parsing: line), c.isUsable || c.isTCPPassive { _ = ice.addRemoteCandidate(c, now: now) }
        }
        if n.remoteEndOfCandidates { ice.setRemoteEndOfCandidates(now: now) }
        let fingerprints = n.remoteFingerprints.compactMap { f -> CertificateFingerprint? in
            CertificateFingerprint(hashName: f.algorithm, hex: Hex.encode(f.bytes))
        }
        let dtlsRole: DTLS.DTLSRole = n.localDTLSRole == .client ? .client : .server
        do throws(DTLSError) {
            let connection = try DTLSConnection(role: dtlsRole, identity: identity, random: crypto, remoteFingerprints: fingerprints)
            dtls = connection
            if dtlsRole == .server { connection.start(now: now) }
        } catch {
            fail(.dtls(error))
        }
        drainICE(now: now)
    }

    // MARK: Drive

    /// A datagram arrived on the socket bound to `local` from `from`.
    ///
    /// STUN goes to ICE, which authenticates every check itself. DTLS and SRTP (and
    /// SCTP, which rides on DTLS) are taken only from a 5-tuple ICE has validated (RFC
    /// 8445 §7.3, RFC 8842 §4): one datagram from a stranger's port, a ClientHello or
    /// random bytes, must not reach the handshake, move the DTLS path, draw an alert
    /// back, or count as the peer being alive for consent. A little DTLS from a pair that
    /// exists but is not validated yet is held (`earlyDTLS`): the peer may start its
    /// handshake the moment its own check succeeds, a round trip before ours does.
    public func handleInput(_ bytes: [UInt8], from: SocketAddress, local: SocketAddress, now: Instant) {
        guard !closed, let first = bytes.first else { return }
        switch first {
        case 0...3:
            ice.handleInput(bytes, from: from, local: local, now: now)
            drainICE(now: now)
        case 20...63:
            guard dtls != nil, ice.isValidated(local: local, remote: from) else {
                holdEarlyDTLS(bytes, from: from, local: local)
                return
            }
            receiveDTLS(bytes, from: from, local: local, now: now)
        case 128...191:
            // SRTP is unprotected in place: in a copy, since the caller keeps its array.
            var packet = bytes
            packet.withUnsafeMutableBytes { receiveMedia($0, from: from, local: local, now: now) }
        default:
            stats.malformed += 1
        }
    }

    /// The same for a datagram in the caller's receive buffer, which it borrows for the
    /// call and may overwrite: SRTP/SRTCP is authenticated and decrypted in place there
    /// (libsrtp works in place), so an audio packet is copied once, its payload into the
    /// `.audio` event, between the socket and the jitter buffer. STUN and DTLS (control
    /// traffic, a few packets a second) are copied into arrays as `handleInput(_:)` takes them.
    public func handleInput(_ datagram: UnsafeMutableRawBufferPointer, from: SocketAddress, local: SocketAddress, now: Instant) {
        guard !closed, datagram.count > 0 else { return }
        if (128...191).contains(datagram[0]) {
            receiveMedia(datagram, from: from, local: local, now: now)
        } else {
            handleInput(Array(datagram), from: from, local: local, now: now)
        }
    }

    func receiveMedia(_ packet: UnsafeMutableRawBufferPointer, from: SocketAddress, local: SocketAddress, now: Instant) {
        guard ice.isValidated(local: local, remote: from) else {
            stats.unvalidatedDropped += 1
            return
        }
        ice.noteInbound(now: now)
        receiveSRTP(packet, now: now)
    }

    func receiveDTLS(_ bytes: [UInt8], from: SocketAddress, local: SocketAddress, now: Instant) {
        guard let dtls else { return }
        ice.noteInbound(now: now)
        dtlsPath = (local, from)
        dtls.handleInput(bytes, now: now)
        drainDTLS(now: now)
    }

    /// At most this many early DTLS datagrams are held (a ClientHello in fragments, or a
    /// server's first flight): beyond it, or from no candidate pair at all, dropped.
    static let earlyDTLSLimit = 8

    func holdEarlyDTLS(_ bytes: [UInt8], from: SocketAddress, local: SocketAddress) {
        guard earlyDTLS.count < Self.earlyDTLSLimit, ice.mayBecomeValidated(local: local, remote: from) else {
            stats.unvalidatedDropped += 1
            return
        }
        earlyDTLS.append((bytes, from, local))
    }

    /// Hands held DTLS to the handshake once its pair is validated; drops what can no
    /// longer be (its pair failed or went away with a restart).
    func releaseEarlyDTLS(now: Instant) {
        guard !earlyDTLS.isEmpty, dtls != nil else { return }
        let held = earlyDTLS
        earlyDTLS.removeAll()
        for d in held {
            if ice.isValidated(local: d.local, remote: d.from) {
                receiveDTLS(d.bytes, from: d.from, local: d.local, now: now)
            } else if ice.mayBecomeValidated(local: d.local, remote: d.from) {
                earlyDTLS.append(d)
            } else {
                stats.unvalidatedDropped += 1
            }
        }
    }

    public func handleTimeout(now: Instant) {
        guard !closed else { return }
        if now >= iceDeadline {
            ice.handleTimeout(now: now)
            drainICE(now: now)
        }
        dtls?.handleTimeout(now: now)
        drainDTLS(now: now)
        if now >= channelsDeadline {
            channels?.handleTimeout(now: now)
            drainChannels(now: now)
        }
        if let t = nextRTCP, now >= t { sendRTCP(now: now) }
    }

    public func pollOutput() -> PeerOutput {
        if let t = transmits.popFirst() { return .transmit(bytes: t.bytes, from: t.from, to: t.to) }
        if let e = events.popFirst() { return .event(e) }
        // A closed or failed connection asks for no more timeouts.
        if closed { return .timeout(.distantFuture) }
        var deadline = iceDeadline
        deadline = min(deadline, dtlsDeadline)
        if let t = nextRTCP { deadline = min(deadline, t) }
        if channels != nil { deadline = min(deadline, channelsDeadline) }
        return .timeout(deadline)
    }

    /// The DTLS connection's next deadline, from its last `.timeout` output.
    var dtlsDeadline = Instant.distantFuture

    /// Sends one encoded Opus frame of `samples` 48 kHz ticks (960 for 20 ms). Dropped
    /// (not queued) before the connection is up: live audio that cannot go now is stale.
    ///
    /// Nothing is sent when the negotiated direction does not allow it (RFC 3264 §6.1: an
    /// answer of `inactive`, or `sendonly` from the answerer's side): on a device with a
    /// microphone that is a privacy matter, not a detail.
    public func sendAudio(_ payload: UnsafeRawBufferPointer, samples: UInt32, now: Instant) {
        guard connected, let outbound, let path = currentPath, negotiated?.audioDirection.sends ?? false else {
            sender.skip(samples: samples)
            return
        }
        let result: Int? = scratch.withUnsafeMutableBytes { buffer in
            // Each refusal is counted below (`rtpNotProtected`); the error says no more
            // than that the packet could not be made.
            guard let n = try? sender.packetize(payload: payload, samples: samples, now: now, into: buffer) else { return nil }
            return try? outbound.protectRTP(buffer, length: n)
        }
        guard let length = result else { stats.rtpNotProtected += 1; return }
        stats.rtpSent += 1
        stats.rtpBytesSent += length
        transmits.append((datagram(length), path.local, path.remote))
    }

    /// Sends one frame of `samples` 48 kHz ticks whose payload `encode` writes straight
    /// into the packet: it gets the space after the RTP header (SRTP's tag still fits
    /// behind it) and returns the payload length, or nil when there is nothing to send
    /// (the frame's time passes, as for `skipAudio`). The header is written in front,
    /// SRTP protects in place, and the one copy is the datagram handed to `pollOutput`
    /// (before: the encoder's packet, the RTP packet and the datagram, three copies).
    ///
    /// `encode` is called whether or not the packet can go (an encoder sees every frame,
    /// so its state and figures do not depend on the connection); the same rules as
    /// `sendAudio(_:samples:now:)` then decide.
    public func sendAudio(samples: UInt32, now: Instant, encode: (UnsafeMutableRawBufferPointer) -> Int?) {
        let header = RTPPacket.fixedHeaderLength
        var notProtected = false
        let length: Int? = scratch.withUnsafeMutableBytes { buffer in
            let room = UnsafeMutableRawBufferPointer(rebasing: buffer[header..<(buffer.count - SRTPContext.rtpOverhead)])
            guard let n = encode(room), n >= 0, n <= room.count else { return nil }
            guard connected, let outbound, currentPath != nil, negotiated?.audioDirection.sends ?? false else { return nil }
            notProtected = true  // until it is: counted as `rtpNotProtected`
            guard let packet = try? sender.packetize(payloadLength: n, samples: samples, now: now, into: buffer),
                  let length = try? outbound.protectRTP(buffer, length: packet) else { return nil }
            notProtected = false
            return length
        }
        if notProtected { stats.rtpNotProtected += 1 }
        guard let length, let path = currentPath else {
            // Not sent (nothing encoded, not connected, not ours to send): time moves on.
            if length == nil { sender.skip(samples: samples) }
            return
        }
        stats.rtpSent += 1
        stats.rtpBytesSent += length
        transmits.append((datagram(length), path.local, path.remote))
    }

    /// The driver could not send a `.transmit`'s datagram (the socket said no): counted
    /// in `sendFailed`, and taken back out of `rtpSent` / `rtcpSent` when it was RTP or
    /// RTCP (RFC 7983 §7: first byte 128–191; RTCP's packet types 192–223, RFC 5761 §4),
    /// so the stats say what went.
    public func transmitFailed(_ bytes: [UInt8]) {
        stats.sendFailed += 1
        guard bytes.count >= 2, bytes[0] >= 128, bytes[0] <= 191 else { return }
        if bytes[1] >= 192 && bytes[1] <= 223 {
            stats.rtcpSent = max(0, stats.rtcpSent - 1)
        } else {
            stats.rtpSent = max(0, stats.rtpSent - 1)
            stats.rtpBytesSent = max(0, stats.rtpBytesSent - bytes.count)
        }
    }

    /// Hands back the array of a `.transmit` once it is sent, so the next datagram can be
    /// built in its storage. Optional: an array that is not handed back, or is still
    /// referenced elsewhere when the next datagram is built, only costs an allocation.
    public func recycle(_ datagram: consuming [UInt8]) {
        if datagram.capacity > spareDatagram.capacity { spareDatagram = datagram }
    }

    /// `scratch[0..<length]` as a datagram of its own, in the recycled storage when it
    /// can be (`refill`).
    func datagram(_ length: Int) -> [UInt8] {
        var d: [UInt8] = []
        swap(&d, &spareDatagram)
        scratch.withUnsafeBytes { refill(&d, with: UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
        return d
    }

    /// `bytes` as a payload array of its own, in the storage of the pool's oldest when
    /// it can be (`refill`); the pool keeps a reference to it.
    func pooledPayload(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var d: [UInt8] = []
        swap(&d, &payloadPool[payloadPoolNext])
        refill(&d, with: bytes)
        payloadPool[payloadPoolNext] = d
        payloadPoolNext = (payloadPoolNext &+ 1) % payloadPool.count
        return d
    }

    /// A frame that is not sent (mute with DTX, or nothing captured): RTP time moves on.
    public func skipAudio(samples: UInt32) { sender.skip(samples: samples) }

    // MARK: Data channels

    /// Opens a data channel (reliable; ordered unless asked); returns its id. Fails
    /// before the association is up (wait for `.dataChannel(.connected)`).
    public func openChannel(label: String, ordered: Bool = true, now: Instant) throws(PeerError) -> UInt16 {
        guard var c = channels else { throw .wrongState("no data channel association (not negotiated, or not connected yet)") }
        do throws(SCTPError) {
            let id = try c.open(label: label, ordered: ordered, now: now)
            channels = c
            drainChannels(now: now)
            return id
        } catch {
            channels = c
            throw .dataChannel(error)
        }
    }

    public func send(channel: UInt16, text: String, now: Instant) throws(PeerError) {
        guard var c = channels else { throw .wrongState("no data channel association") }
        do throws(SCTPError) { try c.send(channel, text: text, now: now) } catch { channels = c; throw .dataChannel(error) }
        channels = c
        drainChannels(now: now)
    }

    public func send(channel: UInt16, binary: [UInt8], now: Instant) throws(PeerError) {
        guard var c = channels else { throw .wrongState("no data channel association") }
        do throws(SCTPError) { try c.send(channel, binary: binary, now: now) } catch { channels = c; throw .dataChannel(error) }
        channels = c
        drainChannels(now: now)
    }

    public func closeChannel(_ channel: UInt16, now: Instant) throws(PeerError) {
        guard var c = channels else { throw .wrongState("no data channel association") }
        do throws(SCTPError) { try c.close(channel, now: now) } catch { channels = c; throw .dataChannel(error) }
        channels = c
        drainChannels(now: now)
    }

    /// The label of an open channel.
    public func label(of channel: UInt16) -> String? { channels?.label(of: channel) }

    func startChannels(now: Instant) {
        guard let n = negotiated, let dc = n.dataChannel, let dtls else { return }
        var config = DataChannelConfig(isDTLSClient: dtls.role == .client)
        config.sctp.remotePort = dc.remoteSCTPPort
        // RFC 8841 §6: never send more than the peer accepts; receive what we offered.
        config.sctp.maxMessageSize = Int(min(dc.remoteMaxMessageSize, configuration.maxMessageSize))
        var r = rng
        var c = DataChannels(config: config, random: &r)
        rng = r
        c.connect(now: now)
        channels = c
        drainChannels(now: now)
    }

    func drainChannels(now: Instant) {
        guard var c = channels else { return }
        var records: [[UInt8]] = []
        loop: while true {
            switch c.pollOutput() {
            case .transmit(let packet): records.append(packet)
            case .event(let e): events.append(.dataChannel(e))
            case .timeout(let t):
                channelsDeadline = t
                break loop
            }
        }
        channels = c
        guard let dtls, !records.isEmpty else { return }
        // Each SCTP packet is one DTLS record (RFC 8261 §5). A record DTLS refuses is
        // lost like a datagram; SCTP retransmits it.
        for r in records {
            do throws(DTLSError) { try dtls.send(r) } catch { stats.dataChannelSendErrors += 1 }
        }
        drainDTLS(now: now)
    }

    /// Ends the call: RTCP BYE, DTLS close_notify, ICE closed.
    public func close(now: Instant) {
        guard !closed else { return }
        if connected, let outbound, let path = currentPath {
            let length: Int? = scratch.withUnsafeMutableBytes { buffer in
                guard let n = try? RTCP.writeGoodbye(RTCPGoodbye(ssrcs: [sender.ssrc]), into: buffer) else { return nil }
                return try? outbound.protectRTCP(buffer, length: n)
            }
            // The BYE is a courtesy (consent ends the call for the far end anyway).
            if let length { transmits.append((datagram(length), path.local, path.remote)) } else { stats.rtcpNotProtected += 1 }
        }
        if var c = channels {
            c.abort(now: now)
            channels = c
            drainChannels(now: now)
        }
        dtls?.close()
        drainDTLS(now: now)
        ice.close()
        closed = true
        nextRTCP = nil
        events.append(.closed)
    }

    // MARK: Internals

    var currentPath: (local: SocketAddress, remote: SocketAddress)? {
        // RFC 7675 §5.1: once consent expired, nothing goes out until a restart has a
        // pair with fresh consent (its `selectedPairChanged` clears the flag).
        if consentLost { return nil }
        if let p = ice.selectedPair { return (p.local, p.remote) }
        // Once ICE has selected a pair, only a selected pair carries anything (during a
        // restart the old one until its consent would expire, then none).
        if pair != nil { return nil }
        return dtlsPath
    }

    func drainICE(now: Instant) {
        loop: while true {
            switch ice.pollOutput() {
            case .transmit(let bytes, let from, let to):
                transmits.append((bytes, from, to))
            case .event(let e):
                handleICE(e, now: now)
            case .timeout(let t):
                iceDeadline = t
                break loop
            }
        }
        releaseEarlyDTLS(now: now)
    }

    func handleICE(_ e: ICEEvent, now: Instant) {
        switch e {
        case .stateChanged(let s):
            events.append(.iceStateChanged(s))
            if s == .failed {
                if connected {
                    // Consent expired on an established call. The peer stays as it is
                    // (keys, SCTP, RTP sequence) so `restartICE` can bring it back
                    // (RFC 8445 §9); `.failed(.iceFailed)` tells the owner, who either
                    // restarts or closes.
                    consentLost = true
                    events.append(.failed(.iceFailed))
                } else {
                    fail(.iceFailed)
                }
            }
            if s == .connected, let dtls, dtls.role == .client, dtls.state == .new {
                dtls.start(now: now)
                drainDTLS(now: now)
            }
        case .localCandidate(let c):
            gathered.append(c)
        case .gatheringComplete:
            gatheringComplete = true
            events.append(.gatheringComplete)
        case .selectedPairChanged(let p):
            pair = p
            consentLost = false
            events.append(.selectedPairChanged(p))
        case .roleChanged:
            break
        }
    }

    func drainDTLS(now: Instant) {
        guard let dtls else { return }
        loop: while true {
            switch dtls.pollOutput() {
            case .transmit(let bytes):
                if let path = currentPath { transmits.append((bytes, path.local, path.remote)) }
            case .event(let e):
                switch e {
                case .connected(let keys):
                    do throws(SRTPError) {
                        outbound = try SRTPContext(direction: .outbound, masterKey: keys.localKey, masterSalt: keys.localSalt)
                        inbound = try SRTPContext(direction: .inbound, masterKey: keys.remoteKey, masterSalt: keys.remoteSalt)
                        connected = true
                        nextRTCP = now + .milliseconds(500)
                        events.append(.connected)
                        startChannels(now: now)
                    } catch {
                        fail(.srtp(error))
                    }
                case .data(let d):
                    if var c = channels {
                        c.handleInput(d, now: now)
                        channels = c
                        drainChannels(now: now)
                    }
                case .closed:
                    if !closed {
                        closed = true
                        events.append(.closed)
                    }
                case .failed(let error):
                    fail(.dtls(error))
                }
            case .timeout(let t):
                dtlsDeadline = t
                break loop
            }
        }
    }

    func fail(_ error: PeerError) {
        guard !closed else { return }
        closed = true
        channels = nil
        connected = false
        nextRTCP = nil
        events.append(.failed(error))
    }

    /// SRTP or SRTCP in `packet`, decrypted in place.
    func receiveSRTP(_ packet: UnsafeMutableRawBufferPointer, now: Instant) {
        guard connected, let inbound, packet.count >= 12 else { stats.malformed += 1; return }
        // RFC 5761 §4: with rtcp-mux, payload types 192–223 (the second byte,
        // including the marker bit) are RTCP.
        let isRTCP = (192...223).contains(packet[1])
        let length: Int
        do throws(SRTPError) {
            length = isRTCP ? try inbound.unprotectRTCP(packet, length: packet.count) : try inbound.unprotectRTP(packet, length: packet.count)
        } catch {
            stats.srtpDropped += 1
            return
        }
        let plain = UnsafeRawBufferPointer(rebasing: packet[0..<length])
        if isRTCP {
            receiveRTCP(Array(plain), now: now)
            return
        }
        guard let rtp = try? RTPPacket.parse(plain) else { stats.malformed += 1; return }
        guard rtp.header.payloadType == (negotiated?.opusPayloadType ?? sender.payloadType) else { return }
        // Audio the negotiated direction does not let us receive is not played (RFC 3264 §6.1).
        guard negotiated?.audioDirection.receives ?? false else {
            stats.directionDropped += 1
            return
        }
        if receiveStats == nil || receiveStats?.ssrc != rtp.header.ssrc {
            // One in-order packet validates the source: the SSRC was signalled in SDP and the
            // packet passed SRTP authentication, so RFC 3550 A.1 probation would only lose audio.
            receiveStats = RTPReceiveStatistics(ssrc: rtp.header.ssrc, minSequential: 1)
        }
        guard let extended = receiveStats?.received(sequence: rtp.header.sequenceNumber, timestamp: rtp.header.timestamp, arrival: now) else {
            return
        }
        stats.rtpReceived += 1
        // The one copy of a received packet: the event owns its payload, and the jitter
        // buffer keeps that array as it is.
        let payload = pooledPayload(UnsafeRawBufferPointer(rebasing: plain[rtp.payload]))
        events.append(.audio(ReceivedAudio(sequence: extended, timestamp: rtp.header.timestamp, marker: rtp.header.marker,
                                           payload: payload, arrival: now)))
    }

    func receiveRTCP(_ bytes: [UInt8], now: Instant) {
        guard let packets = try? RTCP.parseCompound(bytes) else { stats.malformed += 1; return }
        stats.rtcpReceived += 1
        for p in packets {
            switch p {
            case .senderReport(let sr):
                receiveStats?.senderReportReceived(ntpTimestamp: sr.senderInfo.ntpTimestamp, arrival: now)
                noteReports(sr.reports, now: now)
            case .receiverReport(let rr):
                noteReports(rr.reports, now: now)
            default:
                break
            }
        }
    }

    func noteReports(_ blocks: [RTCPReportBlock], now: Instant) {
        for b in blocks where b.ssrc == sender.ssrc {
            stats.remoteFractionLost = b.fractionLost
            stats.remoteJitter = b.jitter
            if b.lastSenderReport != 0, let rtt = NTPTime.roundTripTime(lastSenderReport: b.lastSenderReport,
                                                                        delaySinceLastSenderReport: b.delaySinceLastSenderReport,
                                                                        arrival: NTPTime.middle32(NTPTime.timestamp(now))) {
                stats.roundTripTime = rtt
            }
        }
    }

    func sendRTCP(now: Instant) {
        let jitter = Int64(rng.next() % 1000)
        nextRTCP = now + configuration.rtcpInterval / 2 + configuration.rtcpInterval * jitter / 1000
        guard connected, let outbound, let path = currentPath else { return }
        var blocks: [RTCPReportBlock] = []
        if var rs = receiveStats {
            let block = rs.reportBlock(now: now)
            receiveStats = rs
            stats.packetsLost = Int64(block.cumulativeLost)
            stats.jitter = block.jitter
            blocks.append(block)
        }
        let length: Int? = scratch.withUnsafeMutableBytes { buffer in
            let n: Int?
            if sender.packetCount > 0 {
                let sr = RTCPSenderReport(ssrc: sender.ssrc, senderInfo: sender.senderInfo(now: now), reports: blocks)
                n = try? RTCP.writeSenderReport(sr, cname: cname, into: buffer)
            } else {
                n = try? RTCP.writeReceiverReport(RTCPReceiverReport(ssrc: sender.ssrc, reports: blocks), cname: cname, into: buffer)
            }
            guard let n else { return nil }
            return try? outbound.protectRTCP(buffer, length: n)
        }
        guard let length else { stats.rtcpNotProtected += 1; return }
        stats.rtcpSent += 1
        transmits.append((datagram(length), path.local, path.remote))
    }
}

/// Replaces `buffer`'s contents with `bytes`, in its storage when that is large enough
/// and `buffer` is its only reference: `removeAll(keepingCapacity:)` otherwise
/// allocates, as a plain copy would, and whoever else holds the old array keeps its
/// bytes. A new buffer holds at least 256 bytes, any audio packet at the usual rates
/// (Opus at 32 kbit/s: ~100 bytes with the RTP header and SRTP tag), so the next
/// packet fits when it comes back.
func refill(_ buffer: inout [UInt8], with bytes: UnsafeRawBufferPointer) {
    if buffer.capacity >= bytes.count {
        buffer.removeAll(keepingCapacity: true)
    } else {
        buffer = []
        buffer.reserveCapacity(max(bytes.count, 256))
    }
    buffer.append(contentsOf: bytes)
}
