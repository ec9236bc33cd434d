// What the agent core needs of one call's media: a protocol, because the codec and the
// jitter buffer live in the runtime (the core owns no audio), and class-bound, because
// Embedded Swift has existentials of class protocols only.
import Wire
import Peer

/// Media for one call (encode the uplink, decode and play out the downlink): the
/// runtime makes one per session (`AgentCore.makeMedia`). Class-bound so the core can
/// hold any implementation (Embedded Swift has existentials of class protocols only).
public protocol CallMedia: AnyObject {
    /// The RTP duration of one uplink frame: 48 kHz ticks (48 × frame-ms, RFC 7587 §4.1).
    var frameTicks: UInt32 { get }
    /// Encodes one uplink frame into `packet`, the room after the RTP header of the
    /// datagram being built (Opus writes straight into it: one copy on the send path,
    /// Peer.sendAudio(samples:now:encode:)); the payload length, or nil when nothing is
    /// to be sent (the frame's RTP time still passes).
    func encode(_ frame: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableRawBufferPointer) -> Int?
    /// A received Opus packet, for the jitter buffer.
    func received(_ audio: ReceivedAudio)
    /// Fills `out` with the next decoded (or concealed) samples the speaker's clock
    /// pulls; how many were written.
    func playout(now: Instant, into out: UnsafeMutableBufferPointer<Int16>) -> Int
    /// Samples of the stream played out so far (the downlink's own clock).
    var streamSamples: Int { get }
    /// Whether the last playout was concealment rather than received audio.
    var lastConcealed: Bool { get }
    /// Drops what is queued to play, and silences what arrives until
    /// `releasePlayback` or a bounded time (the rest of a reply that was cut).
    func cutPlayback(now: Instant)
    /// Ends a cut's hold: what arrives from now on plays.
    func releasePlayback()
    /// Silences playout while on, without dropping anything or holding the stream
    /// (a barge-in not yet confirmed); a cut ends it.
    func duckPlayback(_ on: Bool)
    /// Whether playout is ducked.
    var ducked: Bool { get }
    /// Figures for the stats line.
    var counters: MediaCounters { get }
}
