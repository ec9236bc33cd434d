/// Signaling: the HTTP/1.1 codec, the TLS client (mbedtls, in memory) and the session
/// routes: the app backend, WHIP (RFC 9725) and OpenAI Realtime. (Contents arrive with
/// issues 4 and 6.)
import Wire
