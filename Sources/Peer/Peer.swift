/// Peer: one peer connection: RFC 7983 demultiplexing of STUN, DTLS and SRTP on one
/// socket, the glue between the protocol cores, events and stats; offerer or answerer.
/// (Contents arrive with issue 4.)
import Wire
