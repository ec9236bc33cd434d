// The fleet's view of a device: the core's counters in Prometheus's text exposition
// format (prometheus.io, "Exposition formats", text format 0.0.4), for node_exporter's
// textfile collector to serve (the runtime writes the file whole and renames it). Names
// follow Prometheus's conventions: base units (seconds, bytes, ratios), `_total` for
// counters, one HELP and one TYPE line before each family's samples. Pure: the time
// of the write is an input.
import Wire
import JSON
import Peer

/// One metric family being written: its HELP and TYPE, then its samples.
struct MetricsText {
    var bytes: [UInt8] = []

    mutating func family(_ name: String, _ type: String, _ help: String) {
        bytes += Array("# HELP \(name) \(help)\n# TYPE \(name) \(type)\n".utf8)
    }

    /// A sample; label values escaped as the format has it (backslash, double quote,
    /// line feed).
    mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
        var line = name
        if !labels.isEmpty {
            line += "{" + labels.map { $0.0 + "=\"" + MetricsText.escape($0.1) + "\"" }.joined(separator: ",") + "}"
        }
        bytes += Array((line + " " + MetricsText.number(value) + "\n").utf8)
    }

    static func escape(_ s: String) -> String {
        var out: [UInt8] = []
        for b in s.utf8 {
            switch b {
            case 0x5C: out += [0x5C, 0x5C]
            case 0x22: out += [0x5C, 0x22]
            case 0x0A: out += [0x5C, 0x6E]
            default: out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Integers without a fraction (counters read as such); others as JSON numbers.
    static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.rounded() == v && abs(v) < 1e15 { return String(Int64(v)) }
        return JSONNumber(v).description
    }
}

extension AgentCore {
    /// The metrics file's bytes at `unixTime` (its freshness sample, so an alert can
    /// catch a file that stopped being written).
    public func metricsText(version: String, unixTime: Double) -> [UInt8] {
        var m = MetricsText()
        m.family("linnet_build_info", "gauge", "Linnet's version; always 1.")
        m.sample("linnet_build_info", [("version", version)], 1)
        m.family("linnet_metrics_timestamp_seconds", "gauge", "When this file was written (Unix time).")
        m.sample("linnet_metrics_timestamp_seconds", [], (unixTime * 1000).rounded() / 1000)

        m.family("linnet_session_state", "gauge", "1 for the provider session's current state, 0 for the others.")
        for s in [SessionState.new, .connecting, .connected, .disconnected, .failed, .closed, .paused] {
            m.sample("linnet_session_state", [("state", s.rawValue)], s == supervisor.state ? 1 : 0)
        }
        m.family("linnet_session_starts_total", "counter", "Provider sessions started, by reason.")
        m.sample("linnet_session_starts_total", [("reason", "initial")], Double(sessionStarts.initial))
        m.sample("linnet_session_starts_total", [("reason", "reconnect")], Double(sessionStarts.reconnect))
        m.sample("linnet_session_starts_total", [("reason", "rollover")], Double(sessionStarts.rollover))
        m.sample("linnet_session_starts_total", [("reason", "resume")], Double(sessionStarts.resume))
        m.sample("linnet_session_starts_total", [("reason", "demand")], Double(sessionStarts.demand))
        if let d = pressToFirstPacket {
            m.family("linnet_on_demand_first_packet_seconds", "gauge", "Session on demand: from the last press that started a session to its first audio packet.")
            m.sample("linnet_on_demand_first_packet_seconds", [], Double(d.milliseconds) / 1000)
        }
        m.family("linnet_connects_total", "counter", "Times a provider session connected.")
        m.sample("linnet_connects_total", [], Double(connects))
        if let ms = lastConnectMilliseconds {
            m.family("linnet_connect_seconds", "gauge", "How long the last session took from its offer to connected.")
            m.sample("linnet_connect_seconds", [], Double(ms) / 1000)
        }
        m.family("linnet_muted", "gauge", "1 while the microphone is muted.")
        m.sample("linnet_muted", [], muted ? 1 : 0)

        // Packets: the closed sessions' totals plus the active one's.
        var sent = totals.sent, received = totals.received
        if let p = activeSession?.peer {
            sent += p.stats.rtpSent
            received += p.stats.rtpReceived
            let stats = p.stats
            if let rtt = stats.roundTripTime {
                m.family("linnet_rtt_seconds", "gauge", "Round-trip time to the provider (RTCP).")
                m.sample("linnet_rtt_seconds", [], Double(rtt.microseconds) / 1_000_000)
            }
            m.family("linnet_remote_loss_ratio", "gauge", "Fraction of our packets the provider reported lost (RTCP).")
            m.sample("linnet_remote_loss_ratio", [], Double(stats.remoteFractionLost) / 256)
            m.family("linnet_jitter_seconds", "gauge", "Interarrival jitter of the provider's audio (RFC 3550 6.4.1).")
            m.sample("linnet_jitter_seconds", [], Double(stats.jitter) / 48_000)
        }
        m.family("linnet_rtp_packets_total", "counter", "Audio packets, by direction.")
        m.sample("linnet_rtp_packets_total", [("direction", "sent")], Double(sent))
        m.sample("linnet_rtp_packets_total", [("direction", "received")], Double(received))

        m.family("linnet_capture_xruns_total", "counter", "Microphone overruns.")
        m.sample("linnet_capture_xruns_total", [], Double(audio.captureXruns))
        m.family("linnet_playback_xruns_total", "counter", "Speaker underruns.")
        m.sample("linnet_playback_xruns_total", [], Double(audio.playbackXruns))
        m.family("linnet_capture_stalls_total", "counter", "Stops of the microphone's audio longer than 200 ms.")
        m.sample("linnet_capture_stalls_total", [], Double(audio.captureStalls))

        m.family("linnet_network_bytes_total", "counter", "UDP payload bytes to and from the provider (STUN, DTLS, SRTP, TURN), by direction.")
        m.sample("linnet_network_bytes_total", [("direction", "sent")], Double(networkBytes.sent))
        m.sample("linnet_network_bytes_total", [("direction", "received")], Double(networkBytes.received))
        m.family("linnet_barge_ins_total", "counter", "Times the user cut the assistant off, by how.")
        m.sample("linnet_barge_ins_total", [("source", "voice")], Double(bargeIns.voice))
        m.sample("linnet_barge_ins_total", [("source", "button")], Double(bargeIns.button))

        m.family("linnet_tool_calls_total", "counter", "The model's tool calls, by result.")
        m.sample("linnet_tool_calls_total", [("result", "ok")], Double(toolCallsRun))
        m.sample("linnet_tool_calls_total", [("result", "failed")], Double(toolCallsFailed))

        m.family("linnet_provider_tokens_total", "counter", "Tokens the provider reported (response.done usage), by direction and modality.")
        m.sample("linnet_provider_tokens_total", [("direction", "input"), ("modality", "text")], Double(usage.inputTextTokens))
        m.sample("linnet_provider_tokens_total", [("direction", "input"), ("modality", "audio")], Double(usage.inputAudioTokens))
        m.sample("linnet_provider_tokens_total", [("direction", "output"), ("modality", "text")], Double(usage.outputTextTokens))
        m.sample("linnet_provider_tokens_total", [("direction", "output"), ("modality", "audio")], Double(usage.outputAudioTokens))
        m.family("linnet_provider_cached_tokens_total", "counter", "Input tokens the provider reported as cached.")
        m.sample("linnet_provider_cached_tokens_total", [], Double(usage.inputCachedTokens))
        m.family("linnet_provider_responses_total", "counter", "Responses that reported usage.")
        m.sample("linnet_provider_responses_total", [], Double(usage.responses))

        if let u = todaySoFar {
            m.family("linnet_daily_connected_seconds", "gauge", "Connected time on the local day so far (max-daily-minutes counts it).")
            m.sample("linnet_daily_connected_seconds", [], Double(u.connectedMilliseconds / 100) / 10)
            m.family("linnet_daily_tokens", "gauge", "The provider's tokens on the local day so far (max-daily-tokens counts them).")
            m.sample("linnet_daily_tokens", [], Double(u.tokens))
        }
        m.family("linnet_daily_cap_reached", "gauge", "1 while a daily cap holds the sessions until the next local day.")
        m.sample("linnet_daily_cap_reached", [], capped == nil ? 0 : 1)
        return m.bytes
    }
}
