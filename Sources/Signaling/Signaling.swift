/// Signaling: the HTTP/1.1 codec, the TLS client (mbedtls, in memory) and the session
/// routes: the app backend, WHIP (RFC 9725) and OpenAI Realtime.
import Wire

/// The program's version, for `linnet version` and the `User-Agent` it sends.
public enum LinnetVersion {
    public static let string = "0.1.0"
}
