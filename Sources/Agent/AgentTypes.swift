// The vocabulary between the agent core and the runtime that drives it: exit statuses,
// the log level, HTTP exchange ids and failures, and what the core asks of the runtime
// (`AgentOutput`). Apart from `AgentCore` so the runtime and the CLI can read what they
// answer to without the core's state machine.
import Wire
import JSON
import Signaling
import ICE

/// Exit statuses (sysexits.h), one rule for every command (README "exit statuses").
public enum ExitStatus: Int32, Sendable {
    case ok = 0
    case usage = 64
    case dataError = 65
    case unavailable = 69
    case software = 70
    /// An output failed while running (EX_IOERR): e.g. `--output` hit a full disk, so
    /// the recording is incomplete. The call itself went on.
    case ioError = 74
    case config = 78
}

/// Severity of a line the core wants logged (the runtime owns the log): the program's
/// one log level (Wire's, which Platform's Log filters by), not a copy of it.
public typealias AgentLogLevel = LogLevel

/// One HTTP exchange the runtime runs for the core.
public typealias RequestID = Int

/// Why an HTTP exchange got no usable response, as the runtime's client saw it.
public struct HTTPTransportFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Nothing came back: DNS, refused, reset, timeout, TLS other than certificates.
        case noAnswer
        /// Bytes came back that are not acceptable HTTP (garbage, too large).
        case badData
        /// Only a person can fix it: a certificate that does not verify, no trust store.
        case configuration
    }
    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// What the core asks of the runtime.
public enum AgentOutput {
    /// Bind this session's UDP sockets (one per gathering address); answer with
    /// `socketsBound` or `socketsUnavailable`.
    case bind(session: Int)
    /// The session is gone: close its sockets.
    case unbind(session: Int)
    case transmit(session: Int, bytes: [UInt8], from: SocketAddress, to: SocketAddress)
    /// Run this exchange; answer with `httpResponse` or `httpFailed` (never both).
    case http(RequestID, HTTPRequest, timeout: Duration)
    /// Abandon an exchange: its answer must not be delivered.
    case cancelHTTP(RequestID)
    /// The microphone's mute gate (push-to-talk, the mute button, and silence until
    /// the provider's session is configured).
    case mute(Bool)
    /// Empty the playback of this session at once (barge-in): whatever the audio output
    /// still holds (the core has emptied the session's jitter buffer itself).
    case flushPlayback(session: Int)
    /// The speaker of this session goes quiet at once (a barge-in not yet confirmed):
    /// drop what the audio output holds, as a flush does; the core silences the
    /// session's playout itself, and nothing of the jitter buffer is dropped.
    case duckPlayback(session: Int)
    /// Play the earcon on the speaker now, over whatever plays (the wake word heard).
    case earcon
    /// Audio now goes to (and comes from) this session; the speaker plays `playing`.
    case switchAudio(session: Int)
    /// Keep this on disk while the session lives (a process killed mid-call cannot
    /// close it; the next start does): `nil` forgets it (the session is closed).
    case pendingClose(session: Int, PendingClose?)
    /// A TURN server the provider's answer named, judged usable (`LearnedServers`):
    /// sessions from the next one on allocate on it too. Not this one: its offer was
    /// complete before the answer came, and no provider here takes trickled candidates.
    case addRelay(TURNServer, SocketAddress)
    /// The same, named by host: resolve it and answer with `relayResolved`.
    case resolveRelay(TURNServer)
    /// Run a tool the model called, off the loop; answer with `toolFinished` (once).
    case runTool(ToolRun)
    /// Stop run `id` (it timed out; the model has been told): its result is not wanted.
    case cancelTool(Int)
    /// An ICE restart began on a session with relayed candidates: refresh its TURN
    /// allocations now (RFC 8656 §7.2).
    case refreshRelays(session: Int)
    /// A line for the `--events` file.
    case record(String, [(String, JSONValue)])
    case log(AgentLogLevel, String)
    /// A log line with journald fields (`JournalMessage`): the lines a fleet's logs are
    /// searched by.
    case journal(AgentLogLevel, String, [(String, String)])
    /// systemd's `STATUS=`.
    case notify(String)
    /// Rewrite the status file.
    case status(AgentStatus)
    /// Every session is closed: exit with this.
    case exit(ExitStatus)
    /// Call `handleTimeout` at this instant.
    case timeout(Instant)
}

/// The run's life in the agent core: running until asked to stop, stopping while its
/// sessions close (provider-side close first), stopped once `.exit` is out. The exit
/// status exists only in the cases that have one.
enum RunLife: Equatable {
    case running
    case stopping(ExitStatus)
    case stopped(ExitStatus)
}

/// The assistant's voice as the events channel reports it; when it began, for the
/// local barge-in's debounce (a stretch of the user's voice that began before it counts
/// from its start).
enum AssistantVoice: Equatable {
    case silent
    case speaking(since: Instant)
}

/// The journal's message ids (`MESSAGE_ID=`, 128 bits as hex, made once for Linnet) of
/// the lines a fleet searches its shipped logs by, with the fields each carries.
public enum JournalMessage {
    /// The session state changed: `LINNET_STATE`, `LINNET_SESSION` (when one is
    /// active or being set up), `LINNET_REASON` (when given).
    public static let stateChanged = "0e2cd5e273cb4042ac189835bf4db46b"
    /// A provider session is being started: `LINNET_SESSION`, `LINNET_REASON` (initial,
    /// reconnect, rollover, resume).
    public static let sessionStarted = "dbaec74cf13a46d88e2db77b38f60a7e"
}
