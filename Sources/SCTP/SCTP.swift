/// SCTP: SCTP over DTLS (RFC 8261, RFC 9260) and WebRTC data channels (RFC 8831, DCEP
/// RFC 8832), sans-IO. (Contents arrive with issue 5.)
import Wire
