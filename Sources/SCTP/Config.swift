import Wire

/// Tunables of one association. Defaults are what Linnet uses toward browsers.
public struct SCTPConfig: Sendable {
    /// Our SCTP port and the peer's (`a=sctp-port`, 5000 by default, RFC 8841).
    public var localPort: UInt16 = 5000
    public var remotePort: UInt16 = 5000
    /// Largest SCTP packet we send. 1200 bytes leaves room for DTLS, UDP and IPv6 headers
    /// inside a 1280-byte IPv6 minimum MTU (RFC 8831 §5, RFC 8261 §5). No PMTU discovery.
    public var mtu: Int = 1200
    /// Largest user message sent or accepted (`a=max-message-size`; browsers default to
    /// 256 KiB; 64 KiB is assumed when the peer's SDP says nothing).
    public var maxMessageSize: Int = 256 * 1024
    /// Receive buffer: the a_rwnd we advertise and the bound on reassembly memory. It must
    /// hold at least two maximal messages, or an ordered stream could wait forever.
    public var receiveBufferSize: Int = 1024 * 1024
    /// Bytes queued or unacknowledged on the send side before `send` refuses more.
    public var sendBufferLimit: Int = 1024 * 1024
    /// Streams offered each way (OS and MIS of INIT). Data channels use one per channel.
    public var streams: UInt16 = 1024
    /// RTO.Initial (RFC 9260 §16: 1 s): nothing is known about the path yet.
    public var rtoInitial: Duration = .seconds(1)
    /// RTO.Min: 400 ms instead of the RFC's 1 s. A data channel shares a path with
    /// interactive audio whose RTT is tens of milliseconds; a 1 s floor would stall a lost
    /// message for a second. 400 ms stays above the peer's 200 ms delayed SACK plus a
    /// typical RTT, so a merely delayed SACK does not cause spurious retransmissions.
    public var rtoMin: Duration = .milliseconds(400)
    /// RTO.Max: 10 s instead of 60 s. ICE consent freshness declares a path dead after
    /// 30 s (RFC 7675), so a longer back-off never helps; a shorter one resumes a channel
    /// within seconds after a short outage.
    public var rtoMax: Duration = .seconds(10)
    /// HB.interval (RFC 9260 §8.3): a heartbeat every 30 s + RTO on an idle association.
    public var heartbeatInterval: Duration = .seconds(30)
    /// Association.Max.Retrans: consecutive unanswered retransmissions and heartbeats
    /// before the peer is declared unreachable.
    public var maxRetransmissions: Int = 10
    /// Max.Init.Retransmits for INIT and COOKIE-ECHO.
    public var maxInitRetransmissions: Int = 8
    /// Delayed SACK (RFC 9260 §6.2: at most 200 ms, and at least every second packet).
    public var delayedAckTimeout: Duration = .milliseconds(200)
    /// Valid.Cookie.Life (RFC 9260 §16: 60 s).
    public var cookieLifetime: Duration = .seconds(60)

    public init() {}
}

/// Counters for diagnostics and tests; they only grow.
public struct SCTPStats: Sendable {
    public var packetsReceived = 0
    public var packetsSent = 0
    /// Packets that failed to parse: bad CRC, truncated or lying lengths, bad fields.
    public var droppedMalformed = 0
    /// Packets with a verification tag that is not ours (RFC 9260 §8.5), or wrong ports.
    public var droppedBadTag = 0
    /// Packets that made no sense in the current state (e.g. INIT bundled with other chunks).
    public var droppedUnexpected = 0
    /// DATA chunks refused because the receive buffer was full or the TSN too far ahead.
    public var droppedDataForWindow = 0
    public var duplicateTSNs = 0
    public var dataChunksSent = 0
    public var retransmissions = 0
    public var fastRetransmits = 0
    public var t3Expirations = 0
    public var heartbeatsSent = 0
    public var heartbeatAcksReceived = 0
    public var sacksSent = 0
    public init() {}
}
