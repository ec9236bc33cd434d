// The conversation against a model server over a network with latency, on a manual
// clock: seeded button presses of every length, barge-ins and uplink frames (some
// dropped, as DTX does), for minutes of simulated time. The server keeps the rules of
// Tests/Interop/peer.py's OpenAIScript (and the real service's): a commit needs 100 ms
// of audio it has received since the last clear, counted in 48 kHz samples; one active
// response at a time; a cancel needs an active response.
import Testing
import Wire
import JSON
@testable import Agent

/// The server side, reduced to what decides its errors.
private struct ModelServer {
    static let minCommitSamples = 48_000 / 10  // OpenAIScript.MIN_COMMIT_SAMPLES

    var samplesSinceClear = 0
    var activeResponse: String? = nil
    var playing = false
    var doneAt = Int.max
    var stopAt = Int.max
    var nextID = 1
    var errors: [String] = []
    var commits = 0
    var responses = 0
    /// `audio_end_ms` of each truncate the client sent.
    var truncates: [Int] = []

    /// Audio that arrived over RTP.
    mutating func audio(milliseconds: Int) { samplesSinceClear += milliseconds * 48 }

    /// A client event; returns the server events it causes.
    mutating func handle(_ text: String, now: Int) -> [JSONValue] {
        guard let e = try? JSONValue.parse(text), let type = e["type"]?.string else {
            errors.append("invalid_json")
            return [["type": "error", "error": ["code": "invalid_json", "message": "?"]]]
        }
        func error(_ code: String) -> [JSONValue] {
            errors.append(code)
            return [["type": "error", "error": ["code": .string(code), "message": "model", "event_id": e["event_id"] ?? .null]]]
        }
        switch type {
        case "session.update":
            return [["type": "session.updated", "session": ["audio": ["input": ["turn_detection": e["session"]?["audio"]?["input"]?["turn_detection"] ?? .null]]]]]
        case "input_audio_buffer.clear":
            samplesSinceClear = 0
            return [["type": "input_audio_buffer.cleared"]]
        case "input_audio_buffer.commit":
            guard samplesSinceClear >= Self.minCommitSamples else { return error("input_audio_buffer_commit_empty") }
            samplesSinceClear = 0
            commits += 1
            let item = "item_u\(commits)"
            return [["type": "input_audio_buffer.committed", "item_id": .string(item)],
                    ["type": "conversation.item.input_audio_transcription.completed", "item_id": .string(item), "transcript": "turn \(commits)"]]
        case "response.create":
            guard activeResponse == nil else { return error("conversation_already_has_active_response") }
            let id = "resp_\(nextID)"
            nextID += 1
            responses += 1
            activeResponse = id
            playing = true
            doneAt = now + 300  // generation
            stopAt = now + 900  // the voice plays on after response.done
            return [["type": "response.created", "response": ["id": .string(id)]],
                    ["type": "output_audio_buffer.started", "response_id": .string(id)],
                    ["type": "response.output_audio_transcript.delta", "response_id": .string(id), "item_id": .string("item_a_" + id), "delta": "Hello "]]
        case "response.cancel":
            guard let id = activeResponse else { return error("response_cancel_not_active") }
            activeResponse = nil
            doneAt = .max
            var out: [JSONValue] = [["type": "response.done", "response": ["id": .string(id), "status": "cancelled", "output": []]]]
            if playing {
                playing = false
                stopAt = .max
                out.append(["type": "output_audio_buffer.stopped", "response_id": .string(id)])
            }
            return out
        case "output_audio_buffer.clear":
            playing = false
            stopAt = .max
            return [["type": "output_audio_buffer.cleared"]]
        case "conversation.item.truncate":
            truncates.append(Int(e["audio_end_ms"]?.int64 ?? -1))
            return [["type": "conversation.item.truncated", "item_id": e["item_id"] ?? .null]]
        default:
            return error("invalid_value")
        }
    }

    /// Time passes: generation ends, then the voice.
    mutating func tick(now: Int) -> [JSONValue] {
        var out: [JSONValue] = []
        if now >= doneAt, let id = activeResponse {
            activeResponse = nil
            doneAt = .max
            out.append(["type": "response.output_audio_transcript.done", "response_id": .string(id), "item_id": .string("item_a_" + id), "transcript": "Hello there."])
            out.append(["type": "response.done", "response": ["id": .string(id), "status": "completed", "output": []]])
        }
        if now >= stopAt {
            playing = false
            stopAt = .max
            out.append(["type": "output_audio_buffer.stopped"])
        }
        return out
    }
}

private struct SimulationResult {
    var server: ModelServer
    var presses = 0
    var commitsSent = 0
    var tooShort = 0
    var cancelsSent = 0
    var userLines = 0
    var assistantLines = 0
    var speakingAtEnd = false
    var serverPlayingAtEnd = false
    var unexpected: [String] = []
}

/// Runs `seconds` of a conversation in 10 ms ticks. `channelLatency` and `rtpLatency`
/// are one-way delays in ms (the data channel is ordered; RTP is in order here too).
private func simulate(seed: UInt64, seconds: Int, channelLatency: Int, rtpLatency: Int,
                      minimumCommit: Int = 100, tail: Int = 0) -> SimulationResult {
    var rng = SeededRandom(seed: seed)
    var settings = RealtimeSettings(transcriptionModel: "gpt-4o-mini-transcribe", turnDetection: .ptt,
                                    minimumCommitMilliseconds: minimumCommit, pttTailMilliseconds: tail)
    settings.truncatesHeardAudio = true
    var c = RealtimeConversation(settings: settings)
    var server = ModelServer()
    var result = SimulationResult(server: server)
    enum Packet { case event(String), audio(Int) }
    var toServer: [(at: Int, seq: Int, packet: Packet)] = []
    var seq = 0
    var toClient: [(at: Int, text: String)] = []
    var pressed = false
    var releaseAt = 0
    let t0 = Instant(nanoseconds: 0)

    func drainClient(now: Int) {
        while true {
            switch c.pollOutput() {
            case .none: return
            case .send(let text):
                seq += 1
                toServer.append((now + channelLatency, seq, .event(text)))
                let type = (try? JSONValue.parse(text))?["type"]?.string
                if type == "input_audio_buffer.commit" { result.commitsSent += 1 }
                if type == "response.cancel" { result.cancelsSent += 1 }
            case .cutPlayback, .releasePlayback:
                break
            case .event(let e):
                switch e {
                case .tooShort: result.tooShort += 1
                case .transcript(.user, _, true, _): result.userLines += 1
                case .transcript(.assistant, _, true, _), .interrupted: result.assistantLines += 1
                case .providerError(let code, _, _):
                    if code != "response_cancel_not_active" { result.unexpected.append(code ?? "nil") }
                case .malformed(let r), .settingIgnored(let r): result.unexpected.append(r)
                default: break
                }
            }
        }
    }

    c.channelOpened(now: t0)
    drainClient(now: 0)
    for now in stride(from: 0, through: seconds * 1000, by: 10) {
        let instant = t0 + .milliseconds(Int64(now))
        // Arrivals at the server (in send order: every delay here is constant per path,
        // and ties go to what was sent first).
        toServer.sort { ($0.at, $0.seq) < ($1.at, $1.seq) }
        while let first = toServer.first, first.at <= now {
            toServer.removeFirst()
            switch first.packet {
            case .audio(let ms): server.audio(milliseconds: ms)
            case .event(let text):
                for e in server.handle(text, now: now) { toClient.append((now + channelLatency, e.serializedString())) }
            }
        }
        for e in server.tick(now: now) { toClient.append((now + channelLatency, e.serializedString())) }
        // The speaker plays the provider's stream without a pause (RTP as fast as the
        // channel): what has been heard is the time, in ms.
        c.downlink(heard: now, spurtStart: 0)
        if let t = c.nextDeadline, t <= instant {
            c.handleTimeout(now: instant)
            drainClient(now: now)
        }
        // Arrivals at the client.
        while let first = toClient.first, first.at <= now {
            toClient.removeFirst()
            c.received(text: first.text, now: instant)
            drainClient(now: now)
        }
        // The uplink: a 20 ms frame every other tick; one in ten is not sent (DTX).
        if now % 20 == 0, rng.next() % 10 != 0 {
            c.audioSent(milliseconds: 20)
            seq += 1
            toServer.append((now + rtpLatency, seq, .audio(20)))
        }
        // The button: presses from a tap to a sentence; none in the last 3 s, so the
        // run ends settled.
        let quiet = now >= seconds * 1000 - 3000
        if !pressed, !quiet, rng.next() % 40 == 0 {
            pressed = true
            result.presses += 1
            releaseAt = now + 10 * Int(rng.next() % 40)  // 0…390 ms
            c.press(now: instant)
        } else if pressed, now >= releaseAt {
            pressed = false
            c.release(now: instant)
        }
        drainClient(now: now)
    }
    result.server = server
    result.speakingAtEnd = c.isAssistantSpeaking
    result.serverPlayingAtEnd = server.playing || server.activeResponse != nil
    return result
}

@Suite struct RealtimeSimulationTests {
    @Test("no network delay: no server error at all, every release accounted for", arguments: [UInt64(1), 2, 3])
    func instant(seed: UInt64) {
        let r = simulate(seed: seed, seconds: 120, channelLatency: 0, rtpLatency: 0)
        #expect(r.server.errors.isEmpty, "\(r.server.errors)")
        #expect(r.unexpected.isEmpty, "\(r.unexpected)")
        // Every commit was accepted; every release either committed or was too short.
        #expect(r.server.commits == r.commitsSent)
        #expect(r.commitsSent + r.tooShort == r.presses)
        #expect(r.userLines == r.server.commits)
        // The run exercised both outcomes and barge-ins.
        #expect(r.commitsSent > 50 && r.tooShort > 20 && r.cancelsSent > 10)
    }

    @Test("40 ms each way: only the unavoidable cancel race, never a bad commit", arguments: [UInt64(4), 5, 6])
    func delayed(seed: UInt64) {
        let r = simulate(seed: seed, seconds: 120, channelLatency: 40, rtpLatency: 40)
        // A cancel sent while the server's response.done is on its way is refused:
        // harmless, and the only error allowed.
        #expect(r.server.errors.allSatisfy { $0 == "response_cancel_not_active" }, "\(r.server.errors)")
        #expect(r.server.errors.count * 5 <= r.cancelsSent)
        #expect(r.unexpected.isEmpty, "\(r.unexpected)")
        #expect(r.server.commits == r.commitsSent && r.commitsSent > 50)
        #expect(!r.server.errors.contains("conversation_already_has_active_response"))
    }

    @Test("RTP 20 ms slower than the channel: a 120 ms minimum keeps commits valid; 100 ms does not")
    func audioLagsChannel() {
        var tightFailures = 0
        for seed in UInt64(7)...9 {
            let tight = simulate(seed: seed, seconds: 120, channelLatency: 20, rtpLatency: 40, minimumCommit: 100)
            tightFailures += tight.server.errors.filter { $0 == "input_audio_buffer_commit_empty" }.count
            let margin = simulate(seed: seed, seconds: 120, channelLatency: 20, rtpLatency: 40, minimumCommit: 120)
            #expect(!margin.server.errors.contains("input_audio_buffer_commit_empty"), "\(margin.server.errors)")
            #expect(margin.server.commits == margin.commitsSent && margin.commitsSent > 50)
        }
        // The model does catch the race (so the check above means something).
        #expect(tightFailures > 0)
    }

    @Test("RTP 20 ms slower than the channel: the 200 ms ptt tail keeps 100 ms commits valid")
    func tailCoversLag() {
        for seed in UInt64(7)...9 {
            let r = simulate(seed: seed, seconds: 120, channelLatency: 20, rtpLatency: 40, minimumCommit: 100, tail: 200)
            #expect(!r.server.errors.contains("input_audio_buffer_commit_empty"), "\(r.server.errors)")
            #expect(r.server.commits == r.commitsSent && r.commitsSent > 50)
            #expect(r.unexpected.isEmpty, "\(r.unexpected)")
        }
    }

    @Test("settled, the client's idea of speaking agrees with the server's, and every turn has its lines")
    func settled() {
        for seed in UInt64(10)...15 {
            let r = simulate(seed: seed, seconds: 30, channelLatency: 30, rtpLatency: 30)
            #expect(!r.serverPlayingAtEnd && !r.speakingAtEnd)
            #expect(r.unexpected.isEmpty, "\(r.unexpected)")
            #expect(r.userLines == r.server.commits)
            // Every response ends in a line: its done, or the heard part of a cut-off
            // one ("Hello…"), unless it was cut before "Hello" was said (5 characters at 15
            // characters a second, rounded: under 300 ms): each cut told the server what
            // was heard.
            let silentCuts = r.server.truncates.filter { $0 < 300 }.count
            #expect(r.assistantLines + silentCuts == r.server.responses)
            #expect(r.server.truncates.count > 3 && r.server.truncates.allSatisfy { $0 >= 0 })
        }
    }
}
