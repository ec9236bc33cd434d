import Wire

/// How a data channel delivers (RFC 8832 §5.1 Channel Type).
public enum ChannelReliability: Equatable, Sendable {
    case reliable
    /// DATA_CHANNEL_PARTIAL_RELIABLE_REXMIT: at most this many retransmissions.
    case maxRetransmits(UInt32)
    /// DATA_CHANNEL_PARTIAL_RELIABLE_TIMED: retransmit for at most this many milliseconds.
    case maxLifetime(milliseconds: UInt32)
}

/// DATA_CHANNEL_OPEN (RFC 8832 §5.1), sent on PPID 50 on the channel's stream.
///
///     | Message Type  |  Channel Type |            Priority           |
///     |                    Reliability Parameter                      |
///     |         Label Length          |       Protocol Length         |
///     \                             Label                             \
///     \                            Protocol                           \
public struct DataChannelOpen: Equatable, Sendable {
    public static let messageType: UInt8 = 0x03
    public var ordered: Bool
    public var reliability: ChannelReliability
    public var priority: UInt16
    public var label: String
    public var protocolName: String

    public init(ordered: Bool = true, reliability: ChannelReliability = .reliable, priority: UInt16 = 0,
                label: String, protocolName: String = "") {
        self.ordered = ordered
        self.reliability = reliability
        self.priority = priority
        self.label = label
        self.protocolName = protocolName
    }

    /// Channel Type: 0x00/0x80 reliable, 0x01/0x81 rexmit, 0x02/0x82 timed; the high bit
    /// marks unordered.
    public var channelType: UInt8 {
        let base: UInt8
        switch reliability {
        case .reliable: base = 0x00
        case .maxRetransmits: base = 0x01
        case .maxLifetime: base = 0x02
        }
        return base | (ordered ? 0 : 0x80)
    }

    public func serialize() -> [UInt8] {
        var out: [UInt8] = [Self.messageType, channelType]
        out.appendUInt16(priority)
        switch reliability {
        case .reliable: out.appendUInt32(0)
        case .maxRetransmits(let n): out.appendUInt32(n)
        case .maxLifetime(let ms): out.appendUInt32(ms)
        }
        let l = Array(label.utf8)
        let p = Array(protocolName.utf8)
        out.appendUInt16(UInt16(truncatingIfNeeded: l.count))
        out.appendUInt16(UInt16(truncatingIfNeeded: p.count))
        out.append(contentsOf: l)
        out.append(contentsOf: p)
        return out
    }

    /// Parses an OPEN; lengths must match the message exactly, and label and protocol
    /// may not exceed `maxStringLength` bytes each.
    public static func parse(_ bytes: [UInt8], maxStringLength: Int) throws(SCTPError) -> DataChannelOpen {
        guard bytes.count >= 12, bytes[0] == messageType else { throw .malformedDCEP }
        let type = bytes[1]
        let priority = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
        let param = UInt32(bytes[4]) << 24 | UInt32(bytes[5]) << 16 | UInt32(bytes[6]) << 8 | UInt32(bytes[7])
        let labelLength = Int(UInt16(bytes[8]) << 8 | UInt16(bytes[9]))
        let protocolLength = Int(UInt16(bytes[10]) << 8 | UInt16(bytes[11]))
        guard labelLength <= maxStringLength, protocolLength <= maxStringLength else { throw .labelTooLong }
        guard 12 + labelLength + protocolLength == bytes.count else { throw .malformedDCEP }
        let reliability: ChannelReliability
        switch type & 0x7f {
        case 0x00: reliability = .reliable
        case 0x01: reliability = .maxRetransmits(param)
        case 0x02: reliability = .maxLifetime(milliseconds: param)
        default: throw .malformedDCEP
        }
        let label = String(decoding: bytes[12..<(12 + labelLength)], as: UTF8.self)
        let proto = String(decoding: bytes[(12 + labelLength)...], as: UTF8.self)
        return DataChannelOpen(ordered: type & 0x80 == 0, reliability: reliability, priority: priority,
                               label: label, protocolName: proto)
    }
}

/// Payload Protocol Identifiers of WebRTC (RFC 8831 §8).
public enum DataChannelPPID {
    public static let dcep: UInt32 = 50
    public static let string: UInt32 = 51
    public static let binary: UInt32 = 53
    public static let emptyString: UInt32 = 56
    public static let emptyBinary: UInt32 = 57
}

/// DATA_CHANNEL_ACK (RFC 8832 §5.2): one byte.
public let dataChannelAckMessage: UInt8 = 0x02

public struct DataChannelConfig: Sendable {
    public var sctp = SCTPConfig()
    /// RFC 8832 §6: the DTLS client uses even stream ids, the server odd ones.
    public var isDTLSClient: Bool
    /// Bound on label and protocol (bytes each). RFC 8832 sets none beyond the 16-bit
    /// length; the W3C API allows 65,535. Linnet's peers use short labels (`oai-events`),
    /// so a larger one is treated as abuse and the channel is refused by resetting its
    /// stream, the way RFC 8831 §6.7 closes a channel.
    public var maxLabelLength: Int = 1024

    public init(isDTLSClient: Bool) { self.isDTLSClient = isDTLSClient }
}

/// Data channel events.
public enum DataChannelEvent: Equatable, Sendable {
    /// The SCTP association is up; channels can be opened.
    case connected
    /// A channel is open: the peer opened it (we sent the ACK) or acknowledged ours.
    case opened(channel: UInt16, label: String, protocolName: String)
    /// A message; empty messages arrive empty (their one-byte placeholder removed).
    case message(channel: UInt16, data: [UInt8], isText: Bool)
    /// Both directions of the channel's stream are reset.
    case closed(channel: UInt16)
    /// After a `sendBufferFull` error, the send buffer drained to half.
    case sendBufferLow
    /// The association ended; every channel is gone.
    case associationClosed(SCTPCloseReason)
}

public enum DataChannelOutput: Equatable, Sendable {
    case transmit([UInt8])
    case event(DataChannelEvent)
    case timeout(Instant)
}

/// WebRTC data channels (RFC 8831) with DCEP (RFC 8832) over one `SCTPAssociation`.
///
/// Same drive contract as the association: `handleInput` / `handleTimeout`, then drain
/// `pollOutput()` until `.timeout`. Work triggered by association events (the ACK to an
/// OPEN, the reset that answers a peer's close) is sent with the time of the last handle
/// or API call.
///
/// Design decisions:
/// - In-band negotiation only (DCEP); our channels are reliable, ordered or unordered.
///   Partially reliable channels opened by the peer are accepted — the peer abandons, we
///   follow its FORWARD-TSN — but what we send on them is delivered reliably.
/// - Before the ACK arrives our messages are sent ordered (RFC 8832 §6), so none can
///   overtake the OPEN.
/// - Closing resets our outgoing stream; the peer answers by resetting its own; the
///   channel is closed when both directions are reset (RFC 8831 §6.7).
public struct DataChannels {
    public private(set) var association: SCTPAssociation
    public let config: DataChannelConfig

    enum Phase { case opening, open, closing }
    struct Channel {
        var label: String
        var protocolName: String
        var ordered: Bool
        var local: Bool
        var acked: Bool
        var phase: Phase
        var outgoingReset = false
        var incomingReset = false
    }
    var channels: [UInt16: Channel] = [:]
    var toAnnounceOnConnect: [UInt16] = []
    var events: [DataChannelEvent] = []
    var eventHead = 0
    var lastNow = Instant.zero
    /// Messages dropped: unknown channel, deprecated PPIDs, bad DCEP.
    public private(set) var droppedMessages = 0

    public init<R: RandomNumberGenerator>(config: DataChannelConfig, random: inout R) {
        self.config = config
        self.association = SCTPAssociation(config: config.sctp, random: &random)
    }

    /// Starts the association (both DTLS roles call this).
    public mutating func connect(now: Instant) {
        lastNow = now
        association.connect(now: now)
    }

    /// Opens a channel; returns its id (its stream). The `.opened` event follows the ACK.
    public mutating func open(label: String, protocolName: String = "", ordered: Bool = true,
                              priority: UInt16 = 0, now: Instant) throws(SCTPError) -> UInt16 {
        lastNow = now
        guard association.isEstablished else { throw .notEstablished }
        guard label.utf8.count <= config.maxLabelLength, protocolName.utf8.count <= config.maxLabelLength else {
            throw .labelTooLong
        }
        var id: UInt16 = config.isDTLSClient ? 0 : 1
        while channels[id] != nil || association.resettingStreams.contains(id) {
            guard id < 65533 else { throw .noStreamAvailable }
            id &+= 2
        }
        guard id < association.outgoingStreamCount else { throw .noStreamAvailable }
        let open = DataChannelOpen(ordered: ordered, priority: priority, label: label, protocolName: protocolName)
        try association.send(stream: id, ppid: DataChannelPPID.dcep, data: open.serialize(), now: now)
        channels[id] = Channel(label: label, protocolName: protocolName, ordered: ordered, local: true,
                               acked: false, phase: .opening)
        return id
    }

    /// Sends a text message (PPID 51, or 56 with one zero byte when empty).
    public mutating func send(_ channel: UInt16, text: String, now: Instant) throws(SCTPError) {
        let bytes = Array(text.utf8)
        try send(channel, bytes.isEmpty ? [0] : bytes,
                 ppid: bytes.isEmpty ? DataChannelPPID.emptyString : DataChannelPPID.string, now: now)
    }

    /// Sends a binary message (PPID 53, or 57 with one zero byte when empty).
    public mutating func send(_ channel: UInt16, binary: [UInt8], now: Instant) throws(SCTPError) {
        try send(channel, binary.isEmpty ? [0] : binary,
                 ppid: binary.isEmpty ? DataChannelPPID.emptyBinary : DataChannelPPID.binary, now: now)
    }

    mutating func send(_ id: UInt16, _ bytes: [UInt8], ppid: UInt32, now: Instant) throws(SCTPError) {
        lastNow = now
        guard let c = channels[id], c.phase != .closing else { throw .unknownChannel }
        try association.send(stream: id, ppid: ppid, data: bytes, unordered: !c.ordered && c.acked, now: now)
    }

    /// Closes a channel by resetting its outgoing stream; `.closed` follows.
    public mutating func close(_ id: UInt16, now: Instant) throws(SCTPError) {
        lastNow = now
        guard var c = channels[id], c.phase != .closing else { throw .unknownChannel }
        c.phase = .closing
        channels[id] = c
        try association.resetStreams([id], now: now)
    }

    /// Ends the association gracefully (SHUTDOWN); queued messages are delivered first.
    public mutating func shutdown(now: Instant) {
        lastNow = now
        association.shutdown(now: now)
    }

    /// Ends the association at once (ABORT).
    public mutating func abort(now: Instant) {
        lastNow = now
        association.abort(now: now)
    }

    /// Bytes waiting to be sent or acknowledged.
    public var bufferedAmount: Int { association.bufferedAmount }

    /// The label of an open channel.
    public func label(of id: UInt16) -> String? { channels[id]?.label }

    public mutating func handleInput(_ bytes: [UInt8], now: Instant) {
        lastNow = now
        association.handleInput(bytes, now: now)
    }

    public mutating func handleTimeout(now: Instant) {
        lastNow = now
        association.handleTimeout(now: now)
    }

    public mutating func pollOutput() -> DataChannelOutput {
        while true {
            if eventHead < events.count {
                let e = events[eventHead]
                eventHead &+= 1
                if eventHead == events.count {
                    events.removeAll(keepingCapacity: true)
                    eventHead = 0
                }
                return .event(e)
            }
            switch association.pollOutput() {
            case .transmit(let b): return .transmit(b)
            case .timeout(let t): return .timeout(t)
            case .event(let e): process(e)
            }
        }
    }

    // MARK: - Association events

    mutating func process(_ e: SCTPEvent) {
        switch e {
        case .connected:
            events.append(.connected)
        case .message(let m):
            receive(m)
        case .incomingStreamsReset(let ids):
            for id in ids { incomingReset(id) }
        case .outgoingStreamsReset(let ids):
            for id in ids {
                guard var c = channels[id] else { continue }
                c.outgoingReset = true
                channels[id] = c
                finishCloseIfDone(id)
            }
        case .streamResetFailed(let ids):
            // The peer cannot reset: the channel is unusable either way.
            for id in ids where channels.removeValue(forKey: id) != nil { events.append(.closed(channel: id)) }
        case .sendBufferLow:
            events.append(.sendBufferLow)
        case .closed(let reason):
            for id in channels.keys.sorted() { events.append(.closed(channel: id)) }
            channels.removeAll()
            events.append(.associationClosed(reason))
        }
    }

    mutating func incomingReset(_ id: UInt16) {
        guard var c = channels[id] else { return }
        c.incomingReset = true
        if c.phase != .closing {
            // The peer closed: reset our side too (RFC 8831 §6.7).
            c.phase = .closing
            channels[id] = c
            do throws(SCTPError) {
                try association.resetStreams([id], now: lastNow)
            } catch {
                channels[id] = nil
                events.append(.closed(channel: id))
            }
            return
        }
        channels[id] = c
        finishCloseIfDone(id)
    }

    mutating func finishCloseIfDone(_ id: UInt16) {
        guard let c = channels[id], c.outgoingReset, c.incomingReset else { return }
        channels[id] = nil
        events.append(.closed(channel: id))
    }

    mutating func receive(_ m: SCTPMessage) {
        let id = m.streamID
        switch m.ppid {
        case DataChannelPPID.dcep:
            receiveDCEP(m)
        case DataChannelPPID.string, DataChannelPPID.binary, DataChannelPPID.emptyString, DataChannelPPID.emptyBinary:
            guard let c = channels[id], !c.incomingReset else {
                droppedMessages &+= 1
                return
            }
            // A message from the peer implies it saw our OPEN (RFC 8832 §6).
            if c.local && !c.acked { markAcked(id) }
            let empty = m.ppid == DataChannelPPID.emptyString || m.ppid == DataChannelPPID.emptyBinary
            let text = m.ppid == DataChannelPPID.string || m.ppid == DataChannelPPID.emptyString
            events.append(.message(channel: id, data: empty ? [] : m.data, isText: text))
        default:
            // 52 and 54 (partial string/binary) are deprecated (RFC 8831 §8); others unknown.
            droppedMessages &+= 1
        }
    }

    mutating func markAcked(_ id: UInt16) {
        guard var c = channels[id], !c.acked else { return }
        c.acked = true
        if c.phase == .opening { c.phase = .open }
        channels[id] = c
        events.append(.opened(channel: id, label: c.label, protocolName: c.protocolName))
    }

    mutating func receiveDCEP(_ m: SCTPMessage) {
        let id = m.streamID
        guard let type = m.data.first else {
            droppedMessages &+= 1
            return
        }
        // The ACK is the type byte alone (RFC 8832 §5.2), but pion pads it to 4 bytes.
        if type == dataChannelAckMessage {
            guard let c = channels[id], c.local else {
                droppedMessages &+= 1
                return
            }
            markAcked(id)
            return
        }
        // An OPEN from the peer must use the peer's parity and a free stream.
        let peerParity: UInt16 = config.isDTLSClient ? 1 : 0
        guard channels[id] == nil else {
            droppedMessages &+= 1
            return
        }
        let open: DataChannelOpen
        do throws(SCTPError) {
            guard id & 1 == peerParity else { throw .malformedDCEP }
            open = try DataChannelOpen.parse(m.data, maxStringLength: config.maxLabelLength)
        } catch {
            droppedMessages &+= 1
            refuse(id)
            return
        }
        channels[id] = Channel(label: open.label, protocolName: open.protocolName, ordered: open.ordered,
                               local: false, acked: true, phase: .open)
        do throws(SCTPError) {
            try association.send(stream: id, ppid: DataChannelPPID.dcep, data: [dataChannelAckMessage], now: lastNow)
        } catch {
            channels[id] = nil
            refuse(id)
            return
        }
        events.append(.opened(channel: id, label: open.label, protocolName: open.protocolName))
    }

    /// Refuses a channel the peer tried to open: reset our side of its stream so the
    /// peer's channel closes (RFC 8831 §6.7). Failure to reset leaves nothing to undo.
    mutating func refuse(_ id: UInt16) {
        guard id < association.outgoingStreamCount else { return }
        try? association.resetStreams([id], now: lastNow)
    }
}
