// The Media module's MediaPath (Opus, the jitter buffer, the frame clock) as the core's
// `CallMedia`. The conformance lives here, beside the protocol: a module that owns
// neither type may not add it (Embedded builds each module on its own and rejects a
// retroactive conformance).
import Wire
import Peer
import Media

extension MediaPath: CallMedia {
    public var frameTicks: UInt32 { clock.rtpTicks }

    /// A packet from the peer: its payload array goes into the jitter buffer as it is.
    public func received(_ audio: ReceivedAudio) {
        received(sequence: audio.sequence, timestamp: audio.timestamp, payload: audio.payload, arrival: audio.arrival)
    }

    public var counters: MediaCounters {
        var c = MediaCounters()
        c.framesDecoded = stats.framesDecoded
        c.concealed = stats.concealed
        c.fecRecovered = stats.fecRecovered
        c.bytesSent = bytesSent
        c.encodeErrors = stats.encodeErrors
        c.decodeErrors = stats.decodeErrors
        c.jitterTargetMicroseconds = Int(jitterTarget.microseconds)
        return c
    }
}
