/// SCTP: SCTP over DTLS (RFC 8261, RFC 9260) and WebRTC data channels (RFC 8831, DCEP
/// RFC 8832), sans-IO.
///
/// Layers, bottom up:
/// - `SCTPPacket` / `Chunk` and one type per chunk (`DataChunk`, `InitChunk`, `SackChunk`,
///   … `ForwardTSNChunk`, `ReconfigChunk`): parse and serialize, CRC-32c checked and
///   written least significant byte first (RFC 9260 appendix A). Malformed input is a
///   typed `SCTPError`, never a trap; unknown chunks and parameters are kept so their
///   type bits can be obeyed (skip, stop, report).
/// - `SCTPAssociation`: the protocol machine (handshake with signed State Cookie,
///   reliability, congestion control, heartbeat, shutdown, stream reset). Packets in and
///   out are plain byte arrays that travel inside DTLS records; the module never touches
///   DTLS, sockets or clocks.
/// - `DataChannels`: DCEP open/ack and the PPID conventions for text, binary and empty
///   messages on top of one association.
///
/// Design decisions:
/// - One drive contract everywhere: `handleInput(bytes, now:)`, `handleTimeout(now:)`,
///   then drain `pollOutput()` until `.timeout(deadline)`.
/// - Packets are built as `[UInt8]`: SCTP runs on the loop thread, not the real-time
///   audio path, and a data channel message is already a heap value.
/// - Memory is bounded by configuration: the send buffer refuses messages past
///   `sendBufferLimit` (then signals `.sendBufferLow`), and the receive side never holds
///   more than about twice `receiveBufferSize`, whatever the peer sends.
/// - Timer values differ from RFC 9260 where WebRTC needs it (RTO.Min 400 ms, RTO.Max
///   10 s); `SCTPConfig` documents each choice.
/// - Not implemented: multi-homing, PMTU discovery, sending FORWARD-TSN (our messages are
///   all reliable), I-DATA (RFC 8260), association restart (§5.2.4 case A), AUTH.
import Wire
