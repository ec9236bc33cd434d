// What a SessionMachine tells the core, instead of calling it: the core applies each in
// order once the call into the session returns (AgentCore.apply), so a session never
// runs the core's code in the middle of its own.
import Wire
import JSON
import Signaling

enum SessionReport {
    /// An output as it stands (a datagram, a log line, a record, a pending close, a
    /// relay refresh).
    case output(AgentOutput)
    /// An HTTP exchange for `purpose`; its result comes back through
    /// `httpResponse`/`httpFailed` with the same purpose.
    case request(SessionMachine.Purpose, HTTPRequest, timeout: Duration)
    /// Cancel every exchange of this session still out (it is closing).
    case cancelRequests
    /// ICE and DTLS are up (again, after a disconnection or a restart).
    case connected
    /// ICE lost the path; consent may still bring it back.
    case disconnected
    /// The provider ended the call.
    case ended(String)
    case failed(SessionFailure, ExitStatus)
    /// A WHIP ICE restart was answered (or not).
    case restartDone(ok: Bool)
    case channelOpened(channel: UInt16, label: String)
    case message(label: String, text: String?, binary: [UInt8]?)
    /// TURN servers the answer named, for later sessions.
    case learn([ICEServerLink])
    /// The peer has closed: the session is over and its sockets may go.
    case finished
}
