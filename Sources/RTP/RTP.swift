/// RTP: RTP and RTCP packets (RFC 3550), the Opus payload format (RFC 7587) and the
/// jitter buffer. (Contents arrive with issues 3 and 4.)
import Wire
