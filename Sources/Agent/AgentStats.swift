// The stats line and record: the counters the runtime and the media keep up to date,
// and how the core turns them (with the active peer's figures) into `key=value` fields.
// Formatting only: the core's timers decide when a stats line is written.
import Wire
import JSON
import ICE
import Peer

/// Packets and frames over all the sessions of a run.
public struct CallTotals: Sendable, Equatable {
    public var sent = 0
    public var received = 0
    public var decoded = 0
    public var concealed = 0
}

public struct MediaCounters: Sendable, Equatable {
    public var framesDecoded = 0
    public var concealed = 0
    public var fecRecovered = 0
    public var bytesSent = 0
    /// Frames the codec refused: uplink frames not sent, packets not decoded.
    public var encodeErrors = 0
    public var decodeErrors = 0
    /// The jitter buffer's target delay: the largest recent lateness plus one frame,
    /// within its configured bounds (what each talkspurt starts at).
    public var jitterTargetMicroseconds = 0
    public init() {}
}

/// The audio side's figures, which the runtime keeps up to date (`AgentCore.audio`).
public struct AudioCounters: Sendable, Equatable {
    public var captureXruns = 0
    public var playbackXruns = 0
    public var captureStalls = 0
    public var captureStaleFrames = 0
    /// The audio threads' timeline jumps (DuplexAudio.timelineJumps).
    public var timelineJumps = 0
    /// Microphone level (RMS dBFS), when a meter runs.
    public var micDBFS: Double?
    public init() {}
}

extension AgentCore {
    /// The stats line's fields (state, audio counters, the active call's figures).
    public func statsFields() -> [(String, JSONValue)] {
        var f: [(String, JSONValue)] = [("state", .string(supervisor.state.rawValue)), ("reconnects", .number(JSONNumber(reconnects)))]
        f.append(("capture_xruns", .number(JSONNumber(audio.captureXruns))))
        // Stops of the uplink past 200 ms (the process stopped, the loop held) and the
        // frames dropped as stale after them rather than sent late in a burst.
        f.append(("capture_stalls", .number(JSONNumber(audio.captureStalls))))
        f.append(("capture_stale_frames", .number(JSONNumber(audio.captureStaleFrames))))
        f.append(("playback_xruns", .number(JSONNumber(audio.playbackXruns))))
        // Each jump of an audio thread's timeline moves the echo reference (the echo
        // comes back while the canceller learns again): a figure for a board whose
        // driver reports its delay coarsely.
        f.append(("audio_timeline_jumps", .number(JSONNumber(audio.timelineJumps))))
        if let db = audio.micDBFS { f.append(("mic_dbfs", .number(JSONNumber((db * 10).rounded() / 10)))) }
        // What the provider said the run cost so far (shown once it said anything).
        if usage.responses > 0 {
            f.append(("tokens_in", JSONValue(usage.inputTokens)))
            f.append(("tokens_out", JSONValue(usage.outputTokens)))
        }
        guard let s = activeSession, let p = s.peer else { return f }
        let stats = p.stats
        let media = s.media?.counters ?? MediaCounters()
        f.append(("session", .number(JSONNumber(s.id))))
        f.append(("packets_sent", .number(JSONNumber(stats.rtpSent))))
        f.append(("packets_received", .number(JSONNumber(stats.rtpReceived))))
        f.append(("packets_lost", .number(JSONNumber(Int(stats.packetsLost)))))
        f.append(("remote_loss_percent", .number(JSONNumber((Double(stats.remoteFractionLost) * 1000 / 256).rounded() / 10))))
        f.append(("jitter_ms", .number(JSONNumber((Double(stats.jitter) / 4.8).rounded() / 10))))
        f.append(("jitter_target_ms", .number(JSONNumber((Double(media.jitterTargetMicroseconds) / 100).rounded() / 10))))
        f.append(("concealed", .number(JSONNumber(media.concealed))))
        f.append(("fec_recovered", .number(JSONNumber(media.fecRecovered))))
        f.append(("srtp_dropped", .number(JSONNumber(stats.srtpDropped))))
        // What could not go: the socket refused it, or RTP/SRTP could not make the
        // packet (shown once there is any).
        if stats.sendFailed > 0 { f.append(("send_failed", .number(JSONNumber(stats.sendFailed)))) }
        if stats.rtpNotProtected > 0 { f.append(("rtp_not_protected", .number(JSONNumber(stats.rtpNotProtected)))) }
        if stats.rtcpNotProtected > 0 { f.append(("rtcp_not_protected", .number(JSONNumber(stats.rtcpNotProtected)))) }
        // What the codec refused (shown once there is any).
        if media.encodeErrors > 0 { f.append(("encode_failed", .number(JSONNumber(media.encodeErrors)))) }
        if media.decodeErrors > 0 { f.append(("decode_failed", .number(JSONNumber(media.decodeErrors)))) }
        // DTLS/SRTP from addresses ICE never validated, and STUN that failed its
        // integrity check: strangers, dropped without an answer.
        f.append(("stranger_dropped", .number(JSONNumber(stats.unvalidatedDropped + p.iceStats.unauthenticated))))
        if let rtt = stats.roundTripTime { f.append(("rtt_ms", .number(JSONNumber((Double(rtt.microseconds) / 100).rounded() / 10)))) }
        if let last = lastStats, now > last.at, media.bytesSent >= last.bytes {
            let kbps = Double(media.bytesSent - last.bytes) * 8 / (Double((now - last.at).microseconds) / 1_000_000) / 1000
            f.append(("bitrate_kbps", .number(JSONNumber((kbps * 10).rounded() / 10))))
        }
        lastStats = (now, media.bytesSent)
        if let ms = lastConnectMilliseconds { f.append(("connect_ms", .number(JSONNumber(Int(ms))))) }
        return f
    }

    func writeStats() {
        let f = statsFields()
        record("stats", f)
        var line = "stats:"
        for (k, v) in f { line += " \(k)=" + String(decoding: v.serialized(), as: UTF8.self) }
        log(.info, line)
        writeStatus()
    }
}
