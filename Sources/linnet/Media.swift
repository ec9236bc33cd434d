// The media path of a call lives in the Media module (encode, jitter buffer, decode,
// the frame clock); this is its glue to the Peer's events.
import Wire
import Peer
import Media

/// The call's media path (Media module), under the name the runner uses.
typealias MediaPath = Media.MediaPath

extension Media.MediaPath {
    /// A packet from the peer: its payload array goes into the jitter buffer as it is.
    func received(_ audio: ReceivedAudio) {
        received(sequence: audio.sequence, timestamp: audio.timestamp, payload: audio.payload, arrival: audio.arrival)
    }
}

/// `1.5` (one decimal, no floating-point printing: Embedded Swift has none).
func tenths(_ seconds: Double) -> String {
    let t = Int(saturating: (seconds * 10).rounded())
    return "\(t / 10).\(t % 10)"
}
