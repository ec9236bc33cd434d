// Why an HTTP exchange failed, worded for the log, and which failures only a person can
// fix: the client's one error type, which the commands and the runtime (Support.swift)
// also classify, so it reads apart from the client's machinery.
import Wire
import Platform
import Signaling

/// Why an HTTP exchange failed, worded for the log.
public enum HTTPClientError: Error, CustomStringConvertible {
    /// getaddrinfo found no address.
    case resolve(Resolver.Failure)
    /// Every address refused or failed: one error per address tried, in order.
    case connect([SystemError])
    /// The connection failed after it was established (reset, …).
    case io(SystemError)
    /// The response is not acceptable HTTP (malformed, too large, truncated).
    case http(HTTPError)
    /// The deadline passed; `phase` says where the exchange was.
    case timeout(HTTPURL, Duration, phase: String)
    /// The TLS handshake or connection failed, including a refused certificate (whose
    /// description names the problem: expired, other host, unknown CA, pin mismatch).
    case tls(TLSError)
    /// An https URL was used but there are no trust anchors: the system CA bundle is
    /// missing (install `ca-certificates`) and no CA file was configured.
    case noTrustStore(path: String)
    /// The system CA bundle exists but could not be read or parsed.
    case badTrustStore(path: String, reason: String)
    /// The configured extra CA file cannot be read or holds no certificate.
    case caFile(path: String, reason: String)

    /// True when retrying soon cannot help and a person must act: no or bad trust
    /// anchors, or a refused certificate (wrong CA, host, pin, expired, or a board clock
    /// that is not set). The session supervisor backs off long on these, like on 401/403.
    var isConfigurationProblem: Bool {
        switch self {
        case .noTrustStore, .badTrustStore, .caFile: return true
        case .tls(.certificateRejected), .tls(.invalidHostname): return true
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .resolve(let f): return f.description
        case .connect(let errors):
            var text = "cannot connect: "
            for (i, e) in errors.enumerated() { text += (i == 0 ? "" : "; ") + e.description }
            return errors.isEmpty ? "cannot connect: no address" : text
        case .io(let e): return "connection failed: \(e)"
        case .http(let e): return e.description
        case .timeout(let url, let d, let phase): return "no answer from \(url) within \(d) (\(phase))"
        case .tls(let e): return e.description
        case .noTrustStore(let path):
            return "https needs trusted CA certificates: \(path) is missing (install ca-certificates, or set a CA file)"
        case .badTrustStore(let path, let reason): return "cannot use the CA bundle \(path): \(reason)"
        case .caFile(let path, let reason): return "cannot use the CA file \(path): \(reason)"
        }
    }
}
