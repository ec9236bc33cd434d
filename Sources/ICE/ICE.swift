/// ICE: the STUN codec (RFC 8489), a full ICE agent (RFC 8445) and consent freshness
/// (RFC 7675), sans-IO: datagrams and time in, datagrams, events and deadlines out.
/// (Contents arrive with issue 4.)
import Wire
