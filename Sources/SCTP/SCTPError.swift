import Wire

/// Everything that can go wrong in the SCTP module: bad packets from the network and
/// refused requests from the application. Bad input is always one of these, never a trap.
public enum SCTPError: Error, Equatable, Sendable {
    /// A field ran past the end of its packet, chunk or parameter (the `WireError` says where).
    case truncated(WireError)
    /// The packet is shorter than the 12-byte common header (RFC 9260 §3.1).
    case packetTooShort
    /// The CRC-32c checksum does not match the packet (RFC 9260 §6.8): the packet is dropped.
    case badChecksum
    /// A chunk or parameter length is below its header size or runs past its container
    /// (RFC 9260 §3.2: such a packet is malformed and dropped).
    case badLength
    /// A chunk field holds a value its definition does not allow (e.g. an INIT with a zero
    /// Initiate Tag, RFC 9260 §3.3.2).
    case invalidField
    /// A mandatory parameter is missing (e.g. an INIT-ACK without a State Cookie).
    case missingParameter
    /// The association is not (or no longer) established: nothing can be sent.
    case notEstablished
    /// A message is larger than the configured maximum message size.
    case messageTooLarge(size: Int, limit: Int)
    /// The send buffer holds `sendBufferLimit` bytes already: wait for `.sendBufferLow`.
    case sendBufferFull
    /// The stream id is outside the negotiated number of outbound streams.
    case invalidStream
    /// The stream is being reset (closed): no more messages are accepted on it.
    case streamClosing
    /// The data channel id is unknown or the channel is not open.
    case unknownChannel
    /// A DCEP message (RFC 8832 §5) is malformed or has an unknown message type.
    case malformedDCEP
    /// A data channel label or protocol is longer than the configured bound.
    case labelTooLong
    /// No free stream id is left for a new data channel.
    case noStreamAvailable
}

extension SCTPError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .truncated(let e): return "truncated: " + e.description
        case .packetTooShort: return "packet shorter than the common header"
        case .badChecksum: return "bad CRC-32c checksum"
        case .badLength: return "chunk or parameter length out of range"
        case .invalidField: return "invalid field value"
        case .missingParameter: return "missing mandatory parameter"
        case .notEstablished: return "association not established"
        case .messageTooLarge(let size, let limit): return "message of \(size) bytes exceeds \(limit)"
        case .sendBufferFull: return "send buffer full"
        case .invalidStream: return "invalid stream id"
        case .streamClosing: return "stream is closing"
        case .unknownChannel: return "unknown data channel"
        case .malformedDCEP: return "malformed DCEP message"
        case .labelTooLong: return "label or protocol too long"
        case .noStreamAvailable: return "no stream id available"
        }
    }
}
