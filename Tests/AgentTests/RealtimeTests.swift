// The Realtime conversation state machine (Sources/Agent/RealtimeConversation.swift).
//
// Server messages are the ones Tests/Interop/peer.py's OpenAIScript sends (json.dumps
// spacing, its field order and values), written out here as fixtures; what we send is
// parsed back with the JSON module and checked field by field.
import Testing
import Foundation
import Wire
import Settings
import JSON
@testable import Agent

// MARK: Helpers

private let t0 = Instant(nanoseconds: 1_000_000_000)

private func at(_ ms: Int64) -> Instant { t0 + .milliseconds(ms) }

/// Everything queued, in order.
private func drain(_ c: inout RealtimeConversation) -> [RealtimeOutput] {
    var out: [RealtimeOutput] = []
    while true {
        let o = c.pollOutput()
        if o == .none { return out }
        out.append(o)
        if out.count > 10_000 { Issue.record("pollOutput never returned .none"); return out }
    }
}

/// The client events among `outputs`, parsed.
private func sent(_ outputs: [RealtimeOutput]) throws -> [JSONValue] {
    var out: [JSONValue] = []
    for o in outputs {
        if case .send(let text) = o { out.append(try JSONValue.parse(text)) }
    }
    return out
}

private func types(_ events: [JSONValue]) -> [String] {
    events.map { $0["type"]?.string ?? "?" }
}

private func events(_ outputs: [RealtimeOutput]) -> [RealtimeEvent] {
    outputs.compactMap { if case .event(let e) = $0 { return e } else { return nil } }
}

private func receive(_ c: inout RealtimeConversation, _ text: String, at ms: Int64 = 0) -> [RealtimeOutput] {
    c.received(text: text, now: at(ms))
    return drain(&c)
}

/// A conversation whose channel is open and whose session.update was drained.
private func opened(_ settings: RealtimeSettings = RealtimeSettings(turnDetection: .ptt)) -> RealtimeConversation {
    var c = RealtimeConversation(settings: settings)
    c.channelOpened(now: t0)
    for _ in c.sessionUpdates() { c.received(text: #"{"type":"session.updated"}"#, now: t0) }
    _ = drain(&c)
    return c
}

/// `count` frames of `ms` each from the uplink.
private func sendAudio(_ c: inout RealtimeConversation, frames count: Int, ms: Int = 20) {
    for _ in 0..<count { c.audioSent(milliseconds: ms) }
}

// MARK: Fixtures (as OpenAIScript emits them)

private enum Fixture {
    static let sessionCreated = #"{"type": "session.created", "event_id": "event_8f0c1d2e3a4b5c6d7e8f9a0b", "session": {"type": "realtime", "object": "realtime.session", "id": "sess_1a2b3c4d5e6f7a8b9c0d1e2f", "model": "gpt-realtime", "output_modalities": ["audio"], "instructions": "", "tools": [], "tool_choice": "auto", "max_output_tokens": "inf", "tracing": null, "prompt": null, "expires_at": 1796051200, "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}, "transcription": null, "noise_reduction": null, "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 200, "idle_timeout_ms": null, "create_response": true, "interrupt_response": true}}, "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy", "speed": 1.0}}, "include": null}}"#
    static let sessionUpdated = #"{"type": "session.updated", "event_id": "event_9a0b1c2d3e4f5a6b7c8d9e0f", "session": {"type": "realtime", "object": "realtime.session", "id": "sess_1a2b3c4d5e6f7a8b9c0d1e2f", "model": "gpt-realtime", "output_modalities": ["audio"], "instructions": "Be brief.", "tools": [], "tool_choice": "auto", "max_output_tokens": "inf", "tracing": null, "prompt": null, "expires_at": 1796051200, "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": "gpt-4o-mini-transcribe"}, "noise_reduction": null, "turn_detection": null}, "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin", "speed": 1.0}}, "include": null}}"#
    static let cleared = #"{"type": "input_audio_buffer.cleared", "event_id": "event_0b1c2d3e4f5a6b7c8d9e0f1a"}"#
    static let committed = #"{"type": "input_audio_buffer.committed", "event_id": "event_1c2d3e4f5a6b7c8d9e0f1a2b", "previous_item_id": null, "item_id": "item_2d3e4f5a6b7c8d9e0f1a2b3c"}"#
    static let userCompleted = #"{"type": "conversation.item.input_audio_transcription.completed", "event_id": "event_3e4f5a6b7c8d9e0f1a2b3c4d", "item_id": "item_2d3e4f5a6b7c8d9e0f1a2b3c", "content_index": 0, "transcript": "hello linnet", "usage": {"type": "duration", "seconds": 0.4}}"#
    static let responseCreated = #"{"type": "response.created", "event_id": "event_4f5a6b7c8d9e0f1a2b3c4d5e", "response": {"object": "realtime.response", "id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "status": "in_progress", "output": []}}"#
    static let audioStarted = #"{"type": "output_audio_buffer.started", "event_id": "event_6b7c8d9e0f1a2b3c4d5e6f7a", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f"}"#
    static let audioStopped = #"{"type": "output_audio_buffer.stopped", "event_id": "event_7c8d9e0f1a2b3c4d5e6f7a8b", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f"}"#
    static let audioCleared = #"{"type": "output_audio_buffer.cleared", "event_id": "event_8d9e0f1a2b3c4d5e6f7a8b9c", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f"}"#
    static let replyItem = "item_9e0f1a2b3c4d5e6f7a8b9c0d"
    /// The reply's words as OpenAIScript.respond splits them (`--reply` default).
    static let replyWords = ["Hi, ", "this ", "is ", "the ", "test ", "provider."]
    static let reply = "Hi, this is the test provider."

    static func delta(_ d: String, legacy: Bool = false) -> String {
        let name = legacy ? "response.audio_transcript.delta" : "response.output_audio_transcript.delta"
        return #"{"type": "\#(name)", "event_id": "event_af0e1d2c3b4a5968778695a4", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "item_id": "\#(replyItem)", "output_index": 0, "content_index": 0, "delta": "\#(d)"}"#
    }

    static func done(legacy: Bool = false) -> String {
        let name = legacy ? "response.audio_transcript.done" : "response.output_audio_transcript.done"
        return #"{"type": "\#(name)", "event_id": "event_b01f2e3d4c5b6a798897a6b5", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "item_id": "\#(replyItem)", "output_index": 0, "content_index": 0, "transcript": "\#(reply)"}"#
    }

    static let responseDone = #"{"type": "response.done", "event_id": "event_c12a3f4e5d6c7b8a99a8b7c6", "response": {"object": "realtime.response", "id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "status": "completed", "status_details": null, "output": [{"id": "item_9e0f1a2b3c4d5e6f7a8b9c0d", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_audio", "transcript": "Hi, this is the test provider."}]}], "conversation_id": null, "output_modalities": ["audio"], "usage": null}}"#
    /// OpenAIScript.on_response_cancel: a cancelled response.done with a fresh item id
    /// and an empty transcript.
    static let responseCancelled = #"{"type": "response.done", "event_id": "event_d23b4a5f6e7d8c9baab9c8d7", "response": {"object": "realtime.response", "id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "status": "cancelled", "status_details": {"type": "cancelled", "reason": "client_cancelled"}, "output": [{"id": "item_e34c5b6a7f8e9dacbbcad9e8", "type": "message", "role": "assistant", "status": "cancelled", "content": [{"type": "output_audio", "transcript": ""}]}], "conversation_id": null, "output_modalities": ["audio"], "usage": null}}"#

    /// OpenAIScript.error, with the client event id it names.
    static func error(code: String, message: String, clientEventID: String?, param: String? = nil) -> String {
        let id = clientEventID.map { "\"\($0)\"" } ?? "null"
        let p = param.map { "\"\($0)\"" } ?? "null"
        return #"{"type": "error", "event_id": "event_f45d6c7b8a9f0edbccdbeaf9", "error": {"type": "invalid_request_error", "code": "\#(code)", "message": "\#(message)", "param": \#(p), "event_id": \#(id)}}"#
    }
}

// MARK: session.update

@Suite struct RealtimeSessionUpdateTests {
    @Test("push-to-talk with every field: GA shape, turn_detection null")
    func pttFull() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(
            instructions: "Be brief.\nAnswer in \"German\".", voice: "marin",
            transcriptionModel: "gpt-4o-mini-transcribe", turnDetection: .ptt))
        c.channelOpened(now: t0)
        let out = drain(&c)
        let msgs = try sent(out)
        try #require(msgs.count == 2 && out.count == 2)
        // turn_detection first, alone: a refusal of the rest cannot leave
        // the server's VAD on.
        #expect(msgs[0]["session"] == ["type": "realtime", "audio": ["input": ["turn_detection": .null]]])
        let e = msgs[1]
        #expect(e["type"]?.string == "session.update")
        #expect(e["event_id"]?.string?.isEmpty == false)
        let s = try #require(e["session"])
        #expect(s["type"]?.string == "realtime")
        #expect(s["instructions"]?.string == "Be brief.\nAnswer in \"German\".")
        #expect(s["audio"]?["output"]?["voice"]?.string == "marin")
        #expect(s["audio"]?["input"]?["transcription"]?["model"]?.string == "gpt-4o-mini-transcribe")
        #expect(s["audio"]?["input"]?["turn_detection"] == nil, "sent in the first update")
        // No beta-era top-level fields.
        #expect(s["voice"] == nil && s["turn_detection"] == nil && s["input_audio_transcription"] == nil)
        #expect(s.object?.keys == ["type", "instructions", "audio"])
        // A second open does not reconfigure.
        c.channelOpened(now: at(5))
        #expect(drain(&c).isEmpty)
    }

    @Test("push-to-talk without optional fields sends only type and turn detection")
    func pttMinimal() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(turnDetection: .ptt))
        c.channelOpened(now: t0)
        let all = try sent(drain(&c))
        #expect(all.count == 1, "nothing else to configure")
        let e = try #require(all.first)
        let s = try #require(e["session"]?.object)
        #expect(s.keys == ["type", "audio"])
        #expect(s["type"] == "realtime")
        #expect(e["session"]?["audio"]?.object?.keys == ["input"])
        #expect(e["session"]?["audio"]?["input"]?.object?.keys == ["turn_detection"])
        #expect(e["session"]?["audio"]?["input"]?["turn_detection"]?.isNull == true)
    }

    @Test("VAD: server_vad that answers and can be interrupted")
    func vad() throws {
        var settings = RealtimeSettings(voice: "alloy", turnDetection: .vad)
        settings.vadType = .serverVAD
        settings.vadThreshold = 0.6
        settings.vadSilenceMilliseconds = 700
        var c = RealtimeConversation(settings: settings)
        c.channelOpened(now: t0)
        let msgs = try sent(drain(&c))
        try #require(msgs.count == 2)
        let td = try #require(msgs[0]["session"]?["audio"]?["input"]?["turn_detection"])
        #expect(td == ["type": "server_vad", "threshold": 0.6, "silence_duration_ms": 700, "create_response": true, "interrupt_response": true])
        let e = msgs[1]
        #expect(e["session"]?["audio"]?["output"]?["voice"]?.string == "alloy")
        #expect(e["session"]?["audio"]?["input"] == nil)
        #expect(e["session"]?["instructions"] == nil)
    }

    @Test("voice mode sends only what is configured: the backend's turn detection survives")
    func onlyWhatIsConfigured() throws {
        // Nothing configured: no session.update at all, and nothing to wait for.
        var bare = RealtimeConversation(settings: RealtimeSettings(turnDetection: .vad), lines: ["hi"])
        bare.channelOpened(now: t0)
        #expect(drain(&bare) == [.send("hi")])
        #expect(bare.isConfigured)
        // semantic_vad: its type only (threshold and silence are server_vad's).
        var s = RealtimeSettings(turnDetection: .vad)
        s.vadType = .semanticVAD
        s.vadThreshold = 0.9
        s.noiseReduction = .off
        var c = RealtimeConversation(settings: s)
        c.channelOpened(now: t0)
        let msgs = try sent(drain(&c))
        #expect(msgs.map { $0["session"] } == [
            ["type": "realtime", "audio": ["input": ["turn_detection": ["type": "semantic_vad", "create_response": true, "interrupt_response": true]]]],
            ["type": "realtime", "audio": ["input": ["noise_reduction": .null]]]])
        s.noiseReduction = .far_field
        #expect(RealtimeConversation(settings: s).sessionUpdates().last?["session"]?["audio"]?["input"]?["noise_reduction"] == ["type": "far_field"])
        // Configured once both updates are confirmed.
        _ = receive(&c, #"{"type":"session.updated"}"#)
        #expect(!c.isConfigured)
        _ = receive(&c, #"{"type":"session.updated"}"#)
        #expect(c.isConfigured)
    }

    @Test("session.updated that kept the server's turn detection is reported")
    func settingIgnored() {
        // OpenAIScript's session.created shows server_vad: that is before our update and
        // says nothing.
        var c = opened()
        // Its expires_at is reported once, for the rollover's plan.
        #expect(events(receive(&c, Fixture.sessionCreated)) == [.sessionReady(updated: false), .expires(at: 1_796_051_200)])
        // A session.updated that still has it (the created session object, renamed).
        let kept = Fixture.sessionCreated.replacingOccurrences(of: "session.created", with: "session.updated")
        #expect(events(receive(&c, kept)) == [.sessionReady(updated: true),
                                               .settingIgnored("turn_detection is server_vad, push-to-talk asked for null")])
        // What OpenAIScript answers to our update (turn_detection null): fine.
        #expect(events(receive(&c, Fixture.sessionUpdated)) == [.sessionReady(updated: true)])
        // VAD mode that asked for server_vad and got null is reported the other way round.
        var vs = RealtimeSettings(turnDetection: .vad)
        vs.vadType = .serverVAD
        var v = opened(vs)
        #expect(events(receive(&v, Fixture.sessionUpdated)) == [.sessionReady(updated: true), .expires(at: 1_796_051_200),
                                                                 .settingIgnored("turn_detection is null, VAD mode asked for server_vad")])
        #expect(events(receive(&v, kept)) == [.sessionReady(updated: true)])
        // A session object without the GA audio section says nothing.
        #expect(events(receive(&v, #"{"type":"session.updated","session":{"turn_detection":null}}"#)) == [.sessionReady(updated: true)])
    }

    /// A backend's client secret made the session with `turn_detection: null`, and voice
    /// mode configured no kind of its own (it keeps the session's): it would be deaf, so
    /// it asks for server_vad once, says so, and waits for that to be confirmed.
    @Test func voiceModeNeverEndsWithoutVoiceDetection() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(turnDetection: .vad))
        c.channelOpened(now: t0)
        #expect(try sent(drain(&c)).isEmpty, "nothing configured: nothing sent")
        #expect(c.isConfigured)
        let created = Fixture.sessionUpdated.replacingOccurrences(of: "session.updated", with: "session.created")
        let out = receive(&c, created)
        let asked = try sent(out)
        #expect(asked.count == 1)
        let td = asked.first?["session"]?["audio"]?["input"]?["turn_detection"]
        #expect(td?["type"]?.string == "server_vad" && td?["create_response"] == true && td?["interrupt_response"] == true, "\(asked)")
        #expect(events(out).contains(.settingIgnored("the session has no voice detection (turn_detection null, as its backend or client secret made it): asked for server_vad, which voice mode needs")))
        // Once: a later null (the server refusing it) is reported, not asked again.
        let again = receive(&c, Fixture.sessionUpdated)
        #expect(try sent(again).isEmpty)
        #expect(events(again).contains(.settingIgnored("turn_detection is null, VAD mode asked for server_vad")))
        // Push-to-talk is not touched by a session.created that still has the server's VAD
        // (its own update comes after).
        var p = RealtimeConversation(settings: RealtimeSettings(turnDetection: .ptt))
        p.channelOpened(now: t0)
        _ = drain(&p)
        #expect(try sent(receive(&p, Fixture.sessionCreated)).isEmpty)
    }

    @Test("settings from Config: the effective turn detection and the provider keys")
    func fromConfig() throws {
        var config = Config()
        config.instructions = "Du bist ein Türsprecher."
        config.voice = "cedar"
        config.transcriptionModel = "whisper-1"
        #expect(RealtimeSettings(config: config).turnDetection == .vad)  // no button
        config.ptt = .chip("gpiochip0", offset: 17)
        let s = RealtimeSettings(config: config)
        #expect(s == RealtimeSettings(instructions: "Du bist ein Türsprecher.", voice: "cedar",
                                      transcriptionModel: "whisper-1", turnDetection: .ptt, pttTailMilliseconds: 200))
        #expect(s.minimumCommitMilliseconds == 100)
        config.pttMode = .open
        #expect(RealtimeSettings(config: config).turnDetection == .vad)
        config.turnDetection = .ptt
        let c = RealtimeConversation(config: config)
        #expect(c.settings.turnDetection == .ptt)
    }
}

// MARK: Push-to-talk

@Suite struct RealtimePushToTalkTests {
    @Test("a whole turn against OpenAIScript's messages: exact client events in order")
    func wholeTurn() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(instructions: "Be brief.", voice: "marin",
                                                                transcriptionModel: "gpt-4o-mini-transcribe"))
        var all: [RealtimeOutput] = []
        c.channelOpened(now: t0)
        all += drain(&c)
        all += receive(&c, Fixture.sessionCreated, at: 30)
        all += receive(&c, Fixture.sessionUpdated, at: 60)
        #expect(c.isSessionReady)

        c.press(now: at(1000))
        all += drain(&c)
        all += receive(&c, Fixture.cleared, at: 1030)
        sendAudio(&c, frames: 40)  // 800 ms
        #expect(c.sentMilliseconds == 800)
        c.release(now: at(1800))
        all += drain(&c)
        #expect(!c.isTalking)

        all += receive(&c, Fixture.committed, at: 1850)
        all += receive(&c, Fixture.userCompleted, at: 1900)
        all += receive(&c, Fixture.responseCreated, at: 1950)
        all += receive(&c, Fixture.audioStarted, at: 1960)
        for (i, w) in Fixture.replyWords.enumerated() {
            all += receive(&c, Fixture.delta(w), at: 2000 + 50 * Int64(i))
        }
        all += receive(&c, Fixture.done(), at: 2300)
        all += receive(&c, Fixture.responseDone, at: 2310)
        #expect(c.isAssistantSpeaking)  // the voice still plays after response.done
        all += receive(&c, Fixture.audioStopped, at: 3460)
        #expect(!c.isAssistantSpeaking)

        let msgs = try sent(all)
        #expect(types(msgs) == ["session.update", "session.update", "input_audio_buffer.clear",
                                "input_audio_buffer.commit", "response.create"])
        // Client event ids are unique strings.
        let ids = msgs.compactMap { $0["event_id"]?.string }
        #expect(ids.count == 5 && Set(ids).count == 5)
        // `type` leads each event (readable in logs and traces).
        #expect(msgs.allSatisfy { $0.object?.keys.first == "type" })
        // Commit and response.create carry nothing else (a response in the session's
        // configuration).
        #expect(msgs[3].object?.keys.sorted() == ["event_id", "type"])
        #expect(msgs[4].object?.keys.sorted() == ["event_id", "type"])

        var expected: [RealtimeEvent] = [
            .sessionReady(updated: false), .expires(at: 1_796_051_200), .sessionReady(updated: true),
            .transcript(role: .user, text: "hello linnet", final: true, itemID: "item_2d3e4f5a6b7c8d9e0f1a2b3c"),
            .speaking(true),
        ]
        var soFar = ""
        for w in Fixture.replyWords {
            soFar += w
            expected.append(.transcript(role: .assistant, text: soFar, final: false, itemID: Fixture.replyItem))
        }
        // The whole line once its audio has played (it was held since its done event).
        expected.append(.transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem))
        expected.append(.speaking(false))
        #expect(events(all) == expected)
        // Outputs keep the order of their causes: the session.update is first.
        if case .send = all.first {} else { Issue.record("session.update should come first") }
    }

    @Test("a press shorter than 100 ms of sent audio commits nothing")
    func tooShort() throws {
        var c = opened()
        c.press(now: at(0))
        let pressOut = try sent(drain(&c))
        #expect(types(pressOut) == ["input_audio_buffer.clear"])
        sendAudio(&c, frames: 4)  // 80 ms
        c.release(now: at(95))
        let out = drain(&c)
        #expect(try sent(out).isEmpty)
        #expect(events(out) == [.tooShort(sentMilliseconds: 80, held: .milliseconds(95))])
    }

    @Test("the threshold is audio sent, not time held; exactly 100 ms commits")
    func thresholdIsAudio() throws {
        var c = opened()
        // Audio before the press (the mute gate's silence) does not count.
        sendAudio(&c, frames: 50)
        c.press(now: at(0))
        _ = drain(&c)
        sendAudio(&c, frames: 9, ms: 10)  // 90 ms
        c.release(now: at(2000))  // held for 2 s, but only 90 ms went out
        #expect(events(drain(&c)) == [.tooShort(sentMilliseconds: 90, held: .seconds(2))])

        c.press(now: at(3000))
        _ = drain(&c)
        sendAudio(&c, frames: 10, ms: 10)  // 100 ms
        c.release(now: at(3100))
        let out = drain(&c)
        #expect(types(try sent(out)) == ["input_audio_buffer.commit"])
        #expect(events(out).isEmpty)
        #expect(types(try sent(receive(&c, Fixture.committed))) == ["response.create"])
        // Audio after the release counts for nothing.
        sendAudio(&c, frames: 10)
        #expect(c.sentMilliseconds == 100)
    }

    @Test("a lower minimum cannot go under the service's 100 ms")
    func floor() throws {
        var c = opened(RealtimeSettings(turnDetection: .ptt, minimumCommitMilliseconds: 20))
        c.press(now: at(0))
        _ = drain(&c)
        sendAudio(&c, frames: 4)  // 80 ms
        c.release(now: at(80))
        #expect(events(drain(&c)) == [.tooShort(sentMilliseconds: 80, held: .milliseconds(80))])
    }

    @Test("a raised minimum keeps a margin")
    func raisedMinimum() throws {
        var c = opened(RealtimeSettings(turnDetection: .ptt, minimumCommitMilliseconds: 140))
        c.press(now: at(0))
        _ = drain(&c)
        sendAudio(&c, frames: 6)  // 120 ms
        c.release(now: at(130))
        #expect(events(drain(&c)) == [.tooShort(sentMilliseconds: 120, held: .milliseconds(130))])
    }

    @Test("press while the assistant speaks: clear, response.cancel, output_audio_buffer.clear")
    func bargeIn() throws {
        var c = opened()
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        #expect(c.isAssistantSpeaking)
        c.press(now: at(500))
        let out = drain(&c)
        #expect(types(try sent(out)) == ["input_audio_buffer.clear", "response.cancel", "output_audio_buffer.clear"])
        #expect(events(out) == [.speaking(false)])
        #expect(out.last == .cutPlayback, "the local playback is emptied at once, and held")
        #expect(!c.isAssistantSpeaking)
        // OpenAIScript.on_response_cancel's answers, then on_output_clear's, then a late
        // output_audio_buffer.started of the cancelled response: no more speaking events,
        // no transcript line for the empty cancelled item.
        var late: [RealtimeOutput] = []
        late += receive(&c, Fixture.responseCancelled)
        late += receive(&c, Fixture.audioStopped)
        late += receive(&c, Fixture.audioCleared)
        late += receive(&c, Fixture.audioStarted)
        // The server's clear empties the local playback again (harmless twice).
        #expect(late == [.cutPlayback])
        #expect(!c.isAssistantSpeaking)
        // The turn goes on as usual.
        sendAudio(&c, frames: 10)
        c.release(now: at(800))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.commit"])
        #expect(types(try sent(receive(&c, Fixture.committed))) == ["response.create"])
    }

    @Test("a response cut off by a press leaves only the heard part of its line, marked interrupted")
    func cutOffLine() {
        // OpenAIScript's order: created, started, three deltas, then our press; its
        // cancelled response.done names a fresh, empty item, so the line comes from the
        // deltas of that response, cut to what the speaker played of it.
        var c = opened()
        c.downlink(heard: 5_000, spurtStart: 0)  // earlier audio, long before
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        for w in Fixture.replyWords.prefix(3) { _ = receive(&c, Fixture.delta(w)) }
        // 600 ms of it played: at 15 characters a second, 9 of "Hi, this is ".
        c.downlink(heard: 5_600, spurtStart: 5_000)
        c.press(now: at(0))
        _ = drain(&c)
        var late = receive(&c, Fixture.responseCancelled)
        late += receive(&c, Fixture.audioStopped)
        late += receive(&c, Fixture.audioCleared)
        #expect(events(late) == [.interrupted(text: "Hi, this…", heardMilliseconds: 600, itemID: Fixture.replyItem)])
        // A done for the same item later does not repeat it.
        #expect(events(receive(&c, Fixture.done())).isEmpty)
    }

    @Test("a press right after a release cancels the requested response before it exists")
    func quickRepress() throws {
        var c = opened()
        c.press(now: at(0))
        sendAudio(&c, frames: 10)
        c.release(now: at(200))
        _ = drain(&c)
        #expect(types(try sent(receive(&c, Fixture.committed, at: 205))) == ["response.create"])
        c.press(now: at(210))  // response.created has not come back yet
        let out = drain(&c)
        #expect(types(try sent(out)) == ["input_audio_buffer.clear", "response.cancel", "output_audio_buffer.clear"])
        #expect(events(out).isEmpty)  // it never spoke
        // The server created it, then cancelled it (OpenAIScript's order): not speaking.
        var late = receive(&c, Fixture.responseCreated)
        late += receive(&c, Fixture.audioStarted)
        late += receive(&c, Fixture.responseCancelled)
        #expect(late.isEmpty && !c.isAssistantSpeaking)
        // The next response is heard.
        sendAudio(&c, frames: 10)
        c.release(now: at(500))
        _ = drain(&c)
        #expect(types(try sent(receive(&c, Fixture.committed, at: 505))) == ["response.create"])
        #expect(events(receive(&c, #"{"type":"response.created","response":{"id":"resp_next"}}"#)) == [.speaking(true)])
    }

    @Test("a refused response.create is not waited for")
    func refusedCreate() throws {
        var c = opened()
        c.press(now: at(0))
        sendAudio(&c, frames: 10)
        c.release(now: at(200))
        _ = drain(&c)
        let create = try #require(try sent(receive(&c, Fixture.committed, at: 220)).last)
        #expect(create["type"]?.string == "response.create")
        let id = try #require(create["event_id"]?.string)
        _ = receive(&c, Fixture.error(code: "conversation_already_has_active_response",
                                      message: "Conversation already has an active response in progress.", clientEventID: id))
        c.press(now: at(300))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.clear"])
        // A response the server creates later (VAD, another client) is heard.
        #expect(events(receive(&c, Fixture.responseCreated)) == [.speaking(true)])
    }

    @Test("press after response.done while the voice still plays: no cancel, only output clear")
    func bargeInAfterDone() throws {
        var c = opened()
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        _ = receive(&c, Fixture.responseDone)
        #expect(c.isAssistantSpeaking)
        c.press(now: at(10))
        let out = drain(&c)
        #expect(types(try sent(out)) == ["input_audio_buffer.clear", "output_audio_buffer.clear"])
        #expect(events(out) == [.speaking(false)])
    }

    @Test("press while not speaking sends only the clear; double press and stray release do nothing")
    func bounces() throws {
        var c = opened()
        c.release(now: at(0))
        #expect(drain(&c).isEmpty)
        c.press(now: at(10))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.clear"])
        sendAudio(&c, frames: 3)
        c.press(now: at(70))  // a bounce: the turn goes on, the count is kept
        #expect(drain(&c).isEmpty)
        sendAudio(&c, frames: 3)
        c.release(now: at(130))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.commit"])
        c.release(now: at(140))
        #expect(drain(&c).isEmpty)
    }

    @Test("nothing is sent before the channel opens")
    func beforeOpen() {
        var c = RealtimeConversation(settings: RealtimeSettings(turnDetection: .ptt))
        c.press(now: t0)
        sendAudio(&c, frames: 20)
        c.release(now: at(400))
        #expect(drain(&c).isEmpty)
        #expect(!c.isTalking && c.sentMilliseconds == 0)
    }

    @Test("VAD mode: the button sends nothing; the server's speech events are reported")
    func vadIgnoresButton() throws {
        var c = opened(RealtimeSettings(turnDetection: .vad))
        c.press(now: at(0))
        sendAudio(&c, frames: 20)
        c.release(now: at(400))
        #expect(drain(&c).isEmpty)
        let out = receive(&c, #"{"type": "input_audio_buffer.speech_started", "event_id": "event_1", "audio_start_ms": 1000, "item_id": "item_1"}"#)
            + receive(&c, #"{"type": "input_audio_buffer.speech_stopped", "event_id": "event_2", "audio_end_ms": 2000, "item_id": "item_1"}"#)
        #expect(events(out) == [.userSpeech(true), .userSpeech(false)])
    }
}

// MARK: Transcripts

@Suite struct RealtimeTranscriptTests {
    @Test("older servers: response.audio_transcript.delta and .done")
    func legacyNames() {
        var c = opened()
        var out: [RealtimeOutput] = []
        for w in Fixture.replyWords { out += receive(&c, Fixture.delta(w, legacy: true)) }
        out += receive(&c, Fixture.done(legacy: true))
        let ev = events(out)
        #expect(ev.count == Fixture.replyWords.count + 1)
        #expect(ev.first == .transcript(role: .assistant, text: "Hi, ", final: false, itemID: Fixture.replyItem))
        #expect(ev.last == .transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem))
        // response.done repeats the item: no second final line.
        #expect(events(receive(&c, Fixture.responseDone)).filter {
            if case .transcript = $0 { return true } else { return false }
        }.isEmpty)
    }

    @Test("user transcription deltas accumulate; completed's transcript is the line")
    func userDeltas() {
        var c = opened()
        let item = "item_C9G8pGVKYnaZu8PH5YQ9O"
        func delta(_ d: String) -> String {
            #"{"type":"conversation.item.input_audio_transcription.delta","event_id":"event_001","item_id":"\#(item)","content_index":0,"delta":"\#(d)"}"#
        }
        var out = receive(&c, delta("Wie "))
        out += receive(&c, delta("spät"))
        out += receive(&c, #"{"type":"conversation.item.input_audio_transcription.completed","event_id":"event_002","item_id":"\#(item)","content_index":0,"transcript":"Wie spät ist es?"}"#)
        #expect(events(out) == [
            .transcript(role: .user, text: "Wie ", final: false, itemID: item),
            .transcript(role: .user, text: "Wie spät", final: false, itemID: item),
            .transcript(role: .user, text: "Wie spät ist es?", final: true, itemID: item),
        ])
    }

    @Test("a done without a transcript uses what the deltas said; items stay apart")
    func doneWithoutTranscript() {
        var c = opened()
        var out = receive(&c, #"{"type":"response.output_audio_transcript.delta","item_id":"a","delta":"one "}"#)
        out += receive(&c, #"{"type":"response.output_audio_transcript.delta","item_id":"b","delta":"two"}"#)
        out += receive(&c, #"{"type":"response.output_audio_transcript.delta","item_id":"a","delta":"three"}"#)
        out += receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"a"}"#)
        out += receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"b"}"#)
        let finals = events(out).filter { if case .transcript(_, _, true, _) = $0 { return true } else { return false } }
        #expect(finals == [.transcript(role: .assistant, text: "one three", final: true, itemID: "a"),
                           .transcript(role: .assistant, text: "two", final: true, itemID: "b")])
    }

    @Test("a relay forwarding only response.done still gives the assistant line; empty lines are dropped")
    func responseDoneOnly() {
        var c = opened()
        let out = receive(&c, Fixture.responseDone)
        #expect(events(out) == [.transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem)])
        // Blank user transcripts (silence) are no line.
        let blank = receive(&c, #"{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_x","content_index":0,"transcript":" \n"}"#)
        #expect(events(blank).isEmpty)
    }

    @Test("text-only responses: response.output_text.* and response.text.*")
    func textModality() {
        var c = opened()
        var out = receive(&c, #"{"type":"response.output_text.delta","item_id":"t1","delta":"Ja"}"#)
        out += receive(&c, #"{"type":"response.output_text.done","item_id":"t1","text":"Ja."}"#)
        out += receive(&c, #"{"type":"response.text.done","item_id":"t2","text":"Nein."}"#)
        #expect(events(out) == [.transcript(role: .assistant, text: "Ja", final: false, itemID: "t1"),
                                .transcript(role: .assistant, text: "Ja.", final: true, itemID: "t1"),
                                .transcript(role: .assistant, text: "Nein.", final: true, itemID: "t2")])
    }

    @Test("escaped JSON text reaches the transcript unescaped")
    func unicode() {
        var c = opened()
        let out = receive(&c, #"{"type":"conversation.item.input_audio_transcription.completed","item_id":"u","transcript":"Gr\u00fc\u00df Gott \ud83d\udd70 \"ok\""}"#)
        #expect(events(out) == [.transcript(role: .user, text: "Grüß Gott 🕰 \"ok\"", final: true, itemID: "u")])
    }
}

// MARK: Errors

@Suite struct RealtimeErrorTests {
    @Test("error events carry their code and the client event they name")
    func errorNamesClientEvent() throws {
        var c = opened()
        _ = receive(&c, Fixture.responseCreated)
        c.press(now: at(0))
        let pressed = try sent(drain(&c))
        let cancel = try #require(pressed.first(where: { $0["type"]?.string == "response.cancel" }))
        let cancelID = try #require(cancel["event_id"]?.string)
        let out = receive(&c, Fixture.error(code: "response_cancel_not_active",
                                            message: "Cancellation failed: no active response found.",
                                            clientEventID: cancelID))
        #expect(events(out) == [.providerError(code: "response_cancel_not_active",
                                               message: "Cancellation failed: no active response found.",
                                               clientEvent: "response.cancel")])
        // OpenAIScript's unsupported-type error with param, naming an id we never sent.
        let other = receive(&c, Fixture.error(code: "invalid_value", message: "Invalid value: 'x'. Unsupported event type.",
                                              clientEventID: "evt_not_ours", param: "type"))
        #expect(events(other) == [.providerError(code: "invalid_value", message: "Invalid value: 'x'. Unsupported event type.", clientEvent: nil)])
    }

    @Test("input_audio_buffer_commit_empty from the server (as OpenAIScript words it)")
    func commitEmpty() {
        var c = opened()
        let out = receive(&c, Fixture.error(code: "input_audio_buffer_commit_empty",
                                            message: "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has 60.00ms of audio.",
                                            clientEventID: nil))
        guard case .providerError(let code, let message, let clientEvent)? = events(out).first else {
            Issue.record("no providerError"); return
        }
        #expect(code == "input_audio_buffer_commit_empty" && clientEvent == nil)
        #expect(message.hasSuffix("60.00ms of audio."))
    }

    @Test("session_expired gives the error and then .sessionExpired; a null code is nil")
    func expired() {
        var c = opened()
        let out = receive(&c, #"{"type":"error","event_id":"e1","error":{"type":"invalid_request_error","code":"session_expired","message":"Your session hit the maximum duration of 60 minutes.","param":null,"event_id":null}}"#)
        #expect(events(out) == [
            .providerError(code: "session_expired", message: "Your session hit the maximum duration of 60 minutes.", clientEvent: nil),
            .sessionExpired(message: "Your session hit the maximum duration of 60 minutes."),
        ])
        let noCode = receive(&c, #"{"type":"error","error":{"type":"server_error","code":null,"message":"The server had an error."}}"#)
        #expect(events(noCode) == [.providerError(code: nil, message: "The server had an error.", clientEvent: nil)])
    }

    @Test("failed transcription and failed responses are provider errors")
    func failures() {
        var c = opened()
        let a = receive(&c, #"{"type":"conversation.item.input_audio_transcription.failed","item_id":"i","content_index":0,"error":{"type":"transcription_error","code":"audio_unintelligible","message":"The audio could not be transcribed.","param":null}}"#)
        #expect(events(a) == [.providerError(code: "audio_unintelligible", message: "The audio could not be transcribed.", clientEvent: nil)])
        _ = receive(&c, #"{"type":"response.created","response":{"id":"resp_f","status":"in_progress","output":[]}}"#)
        let b = receive(&c, #"{"type":"response.done","response":{"id":"resp_f","status":"failed","status_details":{"type":"failed","error":{"type":"server_error","code":"rate_limit_exceeded","message":"Slow down."}},"output":[]}}"#)
        #expect(events(b) == [.providerError(code: "rate_limit_exceeded", message: "Slow down.", clientEvent: nil), .speaking(false)])
    }
}

// MARK: Malformed and hostile input

@Suite struct RealtimeMalformedTests {
    /// The single event a message produced, which must be `.malformed`.
    private func malformedReason(_ text: String) -> String? {
        var c = opened()
        let ev = events(receive(&c, text))
        guard ev.count == 1, case .malformed(let reason) = ev[0] else { return nil }
        return reason
    }

    @Test("not JSON, truncated, not an object, no type, wrong field types")
    func shapes() throws {
        let cases = [
            "", "hello", #"{"type": "session.created""#, #"{"type":"error","error":{"code":"x""#,
            "[]", #"["session.created"]"#, "42", "null", #""session.created""#,
            "{}", #"{"type": 5}"#, #"{"type": null}"#, #"{"event_id":"e"}"#,
            #"{"type":"response.output_audio_transcript.delta","item_id":"i","delta":5}"#,
            #"{"type":"response.audio_transcript.done","item_id":"i","transcript":["x"]}"#,
            #"{"type":"error","error":"boom"}"#, #"{"type":"error"}"#,
            #"{"type":"session.created"} trailing"#,
        ]
        for text in cases {
            #expect(malformedReason(text) != nil, "\(text)")
        }
    }

    @Test("unknown event types are ignored; odd but valid members do not matter")
    func unknownIgnored() {
        var c = opened()
        var out = receive(&c, #"{"type":"rate_limits.updated","event_id":"e","rate_limits":[{"name":"requests","limit":1000,"remaining":999,"reset_seconds":0.06}]}"#)
        out += receive(&c, #"{"type":"conversation.item.added","item":{"id":"x"}}"#)
        out += receive(&c, #"{"type":"some.future.event","payload":{"a":[1,2,{"b":null}]}}"#)
        // A response with odd members: no crash, sensible reading.
        out += receive(&c, #"{"type":"response.created","response":5}"#)
        out += receive(&c, #"{"type":"response.done","response":{"id":7,"output":"none"}}"#)
        #expect(events(out) == [.speaking(true), .speaking(false)])
    }

    @Test("deep nesting is refused without recursion")
    func deepNesting() {
        let depth = 100_000
        let deep = #"{"type":"error","error":"# + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}"
        let reason = malformedReason(deep)
        #expect(reason?.contains("nesting too deep") == true)
        // Within the limit but in an odd place: a malformed error event.
        let shallow = #"{"type":"error","error":[[[[1]]]]}"#
        #expect(malformedReason(shallow) != nil)
    }

    @Test("huge messages and strings are refused; big deltas are capped")
    func huge() {
        // Over the document limit (1 MiB).
        let big = #"{"type":"response.output_audio_transcript.delta","item_id":"i","delta":""# + String(repeating: "a", count: 1 << 20) + #""}"#
        #expect(malformedReason(big)?.contains("too large") == true)
        // Over the string limit (256 KiB) inside the document limit.
        let long = #"{"type":"response.output_audio_transcript.delta","item_id":"i","delta":""# + String(repeating: "b", count: 300_000) + #""}"#
        #expect(malformedReason(long)?.contains("string too long") == true)
        // A long type name is refused by the same limit and never echoed.
        let longType = #"{"type":""# + String(repeating: "t", count: 300_000) + #""}"#
        let r = malformedReason(longType)
        #expect(r != nil && (r?.utf8.count ?? 0) < 200)

        // Accepted, but an item's text stops at maxTranscriptBytes, on a character
        // boundary (3-byte scalars, so the cap falls inside one).
        var c = opened()
        let chunk = String(repeating: "€", count: 33_334)  // 100,002 bytes
        var last: String? = nil
        for _ in 0..<3 {
            for e in events(receive(&c, #"{"type":"response.output_audio_transcript.delta","item_id":"i","delta":"\#(chunk)"}"#)) {
                if case .transcript(_, let text, _, _) = e { last = text }
            }
        }
        let cap = RealtimeConversation.maxTranscriptBytes
        #expect(cap % 3 != 0 && last?.utf8.count == cap / 3 * 3)
        let done = events(receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"i"}"#))
        guard case .transcript(_, let final, true, _)? = done.first else { Issue.record("no final"); return }
        #expect(final.utf8.count <= cap && final.unicodeScalars.allSatisfy { $0 == "€" })
    }

    @Test("many open items: memory stays bounded, the oldest is dropped")
    func manyItems() {
        var c = opened()
        for i in 0..<1000 {
            _ = receive(&c, #"{"type":"response.output_audio_transcript.delta","item_id":"item_\#(i)","delta":"w\#(i)"}"#)
        }
        // The first item was dropped: its done (without a transcript) has nothing to say.
        #expect(events(receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"item_0"}"#)).isEmpty)
        // The last ones are still open.
        #expect(events(receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"item_999"}"#))
                == [.transcript(role: .assistant, text: "w999", final: true, itemID: "item_999")])
        let keep = RealtimeConversation.maxOpenTranscripts
        let oldestKept = 1000 - keep
        #expect(events(receive(&c, #"{"type":"response.output_audio_transcript.done","item_id":"item_\#(oldestKept)"}"#))
                == [.transcript(role: .assistant, text: "w\(oldestKept)", final: true, itemID: "item_\(oldestKept)")])
    }

    @Test("seeded garbage never traps and always answers with at most one event per message")
    func garbage() {
        var rng = SeededRandom(seed: 0x5EED_0006)
        var c = opened()
        let seeds = [Fixture.sessionCreated, Fixture.responseDone, Fixture.delta("x"), Fixture.userCompleted,
                     Fixture.error(code: "a", message: "b", clientEventID: nil)]
        for round in 0..<2000 {
            var bytes = Array(seeds[round % seeds.count].utf8)
            // Flip, delete or duplicate a few bytes (kept ASCII so the String is valid).
            for _ in 0..<(1 + Int(rng.next() % 4)) where !bytes.isEmpty {
                let i = Int(rng.next() % UInt64(bytes.count))
                switch rng.next() % 3 {
                case 0: bytes[i] = UInt8(32 + rng.next() % 95)
                case 1: bytes.remove(at: i)
                default: bytes.insert(bytes[i], at: i)
                }
            }
            let out = receive(&c, String(decoding: bytes, as: UTF8.self))
            #expect(out.allSatisfy { if case .send = $0 { return false } else { return true } })
            // A response.done can finish one line and flip speaking, an error two events.
            #expect(out.count <= 3)
        }
    }

    @Test("data-channel messages: binary and invalid UTF-8 are refused, text as from a String")
    func channelMessages() {
        var c = opened()
        c.received(message: [1, 2, 3], isText: false, now: t0)
        var ev = events(drain(&c))
        guard case .malformed? = ev.first else { Issue.record("no malformed event"); return }
        #expect(ev.count == 1)
        // "é" as a lone Latin-1 byte inside the transcript.
        var bad = Array(#"{"type":"conversation.item.input_audio_transcription.completed","item_id":"i","transcript":"caf"#.utf8)
        bad += [0xE9, 0x22, 0x7D]
        c.received(message: bad, isText: true, now: t0)
        ev = events(drain(&c))
        guard case .malformed(let reason)? = ev.first else { Issue.record("invalid UTF-8 accepted"); return }
        #expect(reason.contains("UTF-8") && ev.count == 1)
        c.received(message: Array(Fixture.userCompleted.utf8), isText: true, now: t0)
        #expect(events(drain(&c)) == [.transcript(role: .user, text: "hello linnet", final: true, itemID: "item_2d3e4f5a6b7c8d9e0f1a2b3c")])
    }

    @Test("audio counts saturate")
    func saturation() {
        var c = opened()
        c.press(now: t0)
        c.audioSent(milliseconds: Int.max)
        c.audioSent(milliseconds: Int.max)
        c.audioSent(milliseconds: -5)
        #expect(c.sentMilliseconds == Int(Int32.max))
    }
}

// MARK: TranscriptLine

@Suite struct TranscriptLineTests {
    @Test("role prefix, trimmed ends")
    func plain() {
        #expect(TranscriptLine(role: .user, text: "  hello linnet\n").description == "user: hello linnet")
        #expect(TranscriptLine(role: .assistant, text: Fixture.reply).description == "assistant: Hi, this is the test provider.")
        #expect(TranscriptLine(role: .user, text: "Grüß Gott 🕰").description == "user: Grüß Gott 🕰")
    }

    @Test("control characters and separators are escaped: one transcript, one line")
    func escapes() {
        let line = TranscriptLine(role: .user, text: "a\nb\r\tc\\d\u{1B}[31m\u{7F}\u{85}\u{2028}e\u{0}").description
        #expect(line == #"user: a\nb\r\tc\\d\u{1b}[31m\u{7f}\u{85}\u{2028}e\u{0}"#)
        #expect(!line.unicodeScalars.contains { $0.value < 0x20 || ($0.value >= 0x7F && $0.value <= 0x9F) })
        // A literal backslash-n in the text stays distinguishable from a newline.
        #expect(TranscriptLine(role: .user, text: #"a\nb"#).description == #"user: a\\nb"#)
    }

    @Test("long lines are cut on a character boundary and marked")
    func cap() {
        let text = String(repeating: "é", count: 1000)  // 2,000 bytes
        let line = TranscriptLine(role: .assistant, text: text).formatted(maxBytes: 100)
        #expect(line.utf8.count <= 100)
        #expect(line.hasPrefix("assistant: é") && line.hasSuffix("…"))
        // "assistant: " is 11 bytes; 86 bytes remain before the 3-byte ellipsis: 43 é.
        #expect(line == "assistant: " + String(repeating: "é", count: 43) + "…")
        // An escape is never split.
        let esc = TranscriptLine(role: .user, text: String(repeating: "\u{1}", count: 50)).formatted(maxBytes: 30)
        #expect(esc == "user: " + String(repeating: #"\u{1}"#, count: 4) + "…")
        // A text that fits exactly is not cut.
        let exact = TranscriptLine(role: .user, text: String(repeating: "x", count: 94)).formatted(maxBytes: 100)
        #expect(exact == "user: " + String(repeating: "x", count: 94))
        // The default cap holds for hostile lengths.
        let huge = TranscriptLine(role: .user, text: String(repeating: "\n", count: 100_000) + "x" + String(repeating: "\u{1B}", count: 100_000)).description
        #expect(huge.utf8.count <= TranscriptLine.defaultMaxBytes && huge.hasPrefix(#"user: x\u{1b}"#))
    }
}

// MARK: Event descriptions and event-log entries

@Suite struct RealtimeEventTextTests {
    @Test("log lines escape the provider's text")
    func descriptions() {
        #expect(RealtimeEvent.transcript(role: .user, text: "hello\nlinnet ", final: true, itemID: "i").description == #"user: hello\nlinnet"#)
        #expect(RealtimeEvent.transcript(role: .assistant, text: "Hi, ", final: false, itemID: "i").description == "assistant (so far): Hi,")
        #expect(RealtimeEvent.providerError(code: "invalid_value", message: "bad\u{1B}[2J", clientEvent: "response.cancel").description
                == #"provider error invalid_value (after response.cancel): bad\u{1b}[2J"#)
        #expect(RealtimeEvent.providerError(code: nil, message: "oops", clientEvent: nil).description == "provider error: oops")
        #expect(RealtimeEvent.tooShort(sentMilliseconds: 80, held: .milliseconds(95)).description
                == "push-to-talk too short: 80 ms of audio sent in 95.000ms, nothing committed")
        let long = RealtimeEvent.providerError(code: "x", message: String(repeating: "m", count: 10_000), clientEvent: nil).description
        #expect(long.utf8.count <= 400 && long.hasSuffix("…"))
    }

    @Test("event-log entries serialize to the expected JSON")
    func entries() throws {
        func json(_ e: RealtimeEvent) throws -> JSONValue {
            let entry = e.eventLogEntry
            var o = JSONObject()
            o["type"] = .string(entry.type)
            for (k, v) in entry.fields { o[k] = v }
            // Through text and back, as the events file is read.
            return try JSONValue.parse(JSONValue.object(o).serializedString())
        }
        let t = try json(.transcript(role: .assistant, text: "Hi \"there\"\n", final: true, itemID: "item_1"))
        #expect(t["type"]?.string == "transcript" && t["role"]?.string == "assistant")
        #expect(t["text"]?.string == "Hi \"there\"\n" && t["final"]?.bool == true && t["item"]?.string == "item_1")
        let noItem = try json(.transcript(role: .user, text: "x", final: false, itemID: ""))
        #expect(noItem["item"] == nil && noItem["final"]?.bool == false)
        let e = try json(.providerError(code: nil, message: "m", clientEvent: "input_audio_buffer.commit"))
        #expect(e["type"]?.string == "provider_error" && e["code"]?.isNull == true && e["after"]?.string == "input_audio_buffer.commit")
        let s = try json(.tooShort(sentMilliseconds: 60, held: .milliseconds(75)))
        #expect(s["sent_ms"]?.int == 60 && s["held_ms"]?.int == 75)
        #expect(try json(.speaking(true))["on"]?.bool == true)
        #expect(try json(.userSpeech(false))["role"]?.string == "user")
    }
}

// MARK: Turns that never get lost

@Suite struct RealtimeTurnRuleTests {
    private func committed(_ item: String, previous: String?) -> String {
        let p = previous.map { "\"\($0)\"" } ?? "null"
        return #"{"type": "input_audio_buffer.committed", "event_id": "event_c", "previous_item_id": \#(p), "item_id": "\#(item)"}"#
    }

    private func userDone(_ item: String, _ text: String) -> String {
        #"{"type": "conversation.item.input_audio_transcription.completed", "event_id": "event_u", "item_id": "\#(item)", "content_index": 0, "transcript": "\#(text)"}"#
    }

    /// A turn of `frames` 20 ms frames, released at `ms`; what the release sent.
    private func turn(_ c: inout RealtimeConversation, at ms: Int64, frames: Int = 10) throws -> [JSONValue] {
        c.press(now: at(ms))
        _ = drain(&c)
        sendAudio(&c, frames: frames)
        c.release(now: at(ms + Int64(frames) * 20))
        return try sent(drain(&c))
    }

    @Test("response.create waits for input_audio_buffer.committed; a refused commit gets no response")
    func createAfterCommitted() throws {
        var c = opened()
        let release = try turn(&c, at: 0)
        #expect(types(release) == ["input_audio_buffer.commit"])
        let commitID = try #require(release.first?["event_id"]?.string)
        // The server refuses the commit (its buffer held too little): no response.create,
        // ever, so the assistant does not answer the old context.
        let refused = receive(&c, Fixture.error(code: "input_audio_buffer_commit_empty", message: "buffer too small", clientEventID: commitID))
        #expect(try sent(refused).isEmpty)
        #expect(events(refused) == [.providerError(code: "input_audio_buffer_commit_empty", message: "buffer too small",
                                                   clientEvent: "input_audio_buffer.commit")])
        #expect(c.nextDeadline == nil, "nothing waits for the refused commit")
        // The next turn is answered once its commit is confirmed.
        #expect(types(try turn(&c, at: 1000)) == ["input_audio_buffer.commit"])
        #expect(types(try sent(receive(&c, Fixture.committed))) == ["response.create"])
    }

    @Test("a commit nobody confirms is answered after 3 s anyway, with a warning")
    func commitUnconfirmed() throws {
        var c = opened()
        _ = try turn(&c, at: 0)
        #expect(c.nextDeadline == at(200) + RealtimeConversation.commitAnswerTimeout)
        c.handleTimeout(now: at(3199))
        #expect(drain(&c).isEmpty)
        c.handleTimeout(now: at(3200))
        let out = drain(&c)
        #expect(types(try sent(out)) == ["response.create"])
        #expect(events(out) == [.commitUnconfirmed(waited: .seconds(3))])
        // A late committed does not ask twice.
        #expect(try sent(receive(&c, Fixture.committed)).isEmpty)
    }

    @Test("after a cancel, response.create is held until the cancelled response's response.done")
    func createHeldUntilDone() throws {
        var c = opened()
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        // Barge in, say something short, release: the cancelled response is not done yet.
        c.press(now: at(0))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.clear", "response.cancel", "output_audio_buffer.clear"])
        sendAudio(&c, frames: 10)
        c.release(now: at(200))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.commit"])
        #expect(try sent(receive(&c, Fixture.committed, at: 210)).isEmpty, "held: the cancelled response is still active")
        #expect(c.createHeld)
        // Its done: now the create goes (the server would have refused it before).
        let done = receive(&c, Fixture.responseCancelled, at: 260)
        #expect(types(try sent(done)) == ["response.create"])
        #expect(!c.createHeld)
        #expect(events(receive(&c, #"{"type":"response.created","response":{"id":"resp_2"}}"#)) == [.speaking(true)])
    }

    @Test("a create refused with conversation_already_has_active_response is sent again at response.done")
    func refusedCreateRetried() throws {
        var c = opened()
        _ = try turn(&c, at: 0)
        let create = try #require(try sent(receive(&c, Fixture.committed)).first)
        let id = try #require(create["event_id"]?.string)
        // A response this client did not see start (a VAD turn, another client) is open.
        _ = receive(&c, Fixture.error(code: "conversation_already_has_active_response",
                                      message: "Conversation already has an active response in progress.", clientEventID: id))
        #expect(c.createHeld)
        let again = try sent(receive(&c, #"{"type":"response.done","response":{"id":"resp_other","status":"completed","output":[]}}"#))
        #expect(types(again) == ["response.create"])
    }

    @Test("the ptt tail: the commit goes out 200 ms after the release; a press within it continues the turn")
    func tail() throws {
        var c = opened(RealtimeSettings(turnDetection: .ptt, pttTailMilliseconds: 200))
        c.press(now: at(0))
        _ = drain(&c)
        sendAudio(&c, frames: 10)
        c.release(now: at(200))
        #expect(drain(&c).isEmpty && c.isInTail)
        #expect(c.nextDeadline == at(400))
        c.handleTimeout(now: at(399))
        #expect(drain(&c).isEmpty)
        c.handleTimeout(now: at(400))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.commit"])
        #expect(!c.isInTail)
        // Down again within the tail: no clear (the audio so far stays), one commit later.
        _ = receive(&c, Fixture.committed)
        _ = receive(&c, Fixture.responseDone)
        c.press(now: at(1000))
        _ = drain(&c)
        sendAudio(&c, frames: 10)
        c.release(now: at(1200))
        c.press(now: at(1300))
        #expect(drain(&c).isEmpty && c.isTalking && !c.isInTail)
        c.release(now: at(1500))
        c.handleTimeout(now: at(1700))
        #expect(types(try sent(drain(&c))) == ["input_audio_buffer.commit"])
    }

    @Test("until session.updated the session is not configured and the send lines wait; then they go, in order")
    func heldLines() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(voice: "marin"), lines: [#"{"type":"response.create"}"#])
        c.channelOpened(now: t0)
        #expect(types(try sent(drain(&c))) == ["session.update", "session.update"])
        #expect(!c.isConfigured)
        #expect(try sent(receive(&c, Fixture.sessionCreated, at: 30)).isEmpty)
        #expect(!c.isConfigured, "session.created shows the server's defaults")
        #expect(try sent(receive(&c, Fixture.sessionUpdated, at: 50)).isEmpty, "the first of two updates")
        let out = receive(&c, Fixture.sessionUpdated, at: 60)
        #expect(out.contains(.send(#"{"type":"response.create"}"#)))
        #expect(c.isConfigured)
    }

    @Test("no session.updated within 2 s: a warning, and the wait ends")
    func noSessionUpdated() throws {
        var c = RealtimeConversation(settings: RealtimeSettings(), lines: ["hello"])
        c.channelOpened(now: at(0))
        _ = drain(&c)
        #expect(c.nextDeadline == at(2000))
        c.handleTimeout(now: at(1999))
        #expect(drain(&c).isEmpty && !c.isConfigured)
        c.handleTimeout(now: at(2000))
        let out = drain(&c)
        #expect(out == [.event(.sessionNotConfirmed(waited: .seconds(2))), .send("hello")])
        #expect(c.isConfigured && c.nextDeadline == nil)
    }

    @Test("carried turns go into the new session as conversation.item.create before the held lines")
    func carriedTurns() throws {
        let turns = [CarriedTurn(role: .user, text: "my name is Ada"), CarriedTurn(role: .assistant, text: "Hello Ada.")]
        var c = RealtimeConversation(settings: RealtimeSettings(), lines: [#"{"type":"line"}"#], carried: turns)
        c.channelOpened(now: t0)
        _ = drain(&c)
        let out = receive(&c, Fixture.sessionUpdated)
        let items = try sent(out)
        #expect(types(items) == ["conversation.item.create", "conversation.item.create", "line"])
        #expect(items[0]["item"] == ["type": "message", "role": "user", "content": [["type": "input_text", "text": "my name is Ada"]]])
        #expect(items[1]["item"] == ["type": "message", "role": "assistant", "content": [["type": "output_text", "text": "Hello Ada."]]])
        #expect(out.last == .send(#"{"type":"line"}"#))
    }

    @Test("CarriedTurn.recent keeps the newest turns within the count and the byte bound")
    func recentTurns() {
        let turns = (1...30).map { CarriedTurn(role: $0 % 2 == 1 ? .user : .assistant, text: "turn \($0)") }
        #expect(CarriedTurn.recent(turns, count: 20, maxBytes: 10_000) == Array(turns.suffix(20)))
        // "turn 30" … are 7 bytes each: 3 fit in 21.
        #expect(CarriedTurn.recent(turns, count: 20, maxBytes: 21) == Array(turns.suffix(3)))
        #expect(CarriedTurn.recent(turns, count: 0, maxBytes: 100).isEmpty)
    }

    @Test("an assistant line waits for the user line it answers; out-of-order completions keep the committed order")
    func transcriptOrder() throws {
        var c = opened(RealtimeSettings(transcriptionModel: "gpt-4o-mini-transcribe", turnDetection: .ptt))
        _ = try turn(&c, at: 0)
        _ = receive(&c, committed("item_u1", previous: nil))
        _ = receive(&c, Fixture.responseCreated)
        // The reply's transcript is complete before the user's transcription.
        #expect(events(receive(&c, Fixture.done())).isEmpty, "held until the user line")
        let user = receive(&c, userDone("item_u1", "hello linnet"))
        #expect(events(user) == [.transcript(role: .user, text: "hello linnet", final: true, itemID: "item_u1"),
                                 .transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem)])
        _ = receive(&c, Fixture.responseDone)
        // Two turns whose transcriptions complete in the wrong order.
        _ = receive(&c, committed("item_u2", previous: Fixture.replyItem))
        _ = receive(&c, committed("item_u3", previous: "item_u2"))
        #expect(events(receive(&c, userDone("item_u3", "third"))).isEmpty)
        #expect(events(receive(&c, userDone("item_u2", "second"))) == [
            .transcript(role: .user, text: "second", final: true, itemID: "item_u2"),
            .transcript(role: .user, text: "third", final: true, itemID: "item_u3")])
    }

    @Test("a transcription that never comes holds the lines behind it 5 s at most; a failed one not at all")
    func transcriptHoldBounded() throws {
        var c = opened(RealtimeSettings(transcriptionModel: "gpt-4o-mini-transcribe", turnDetection: .ptt))
        _ = receive(&c, committed("item_u1", previous: nil), at: 100)
        #expect(c.nextDeadline == nil, "nothing waits behind it yet")
        #expect(events(receive(&c, Fixture.done(), at: 1000)).isEmpty)
        #expect(c.nextDeadline == at(5100))
        c.handleTimeout(now: at(5100))
        #expect(events(drain(&c)) == [.transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem)])
        // A failed transcription releases at once.
        _ = receive(&c, committed("item_u2", previous: nil), at: 6000)
        _ = receive(&c, #"{"type":"response.output_text.done","item_id":"item_a2","text":"ok"}"#, at: 6100)
        let failed = receive(&c, #"{"type":"conversation.item.input_audio_transcription.failed","item_id":"item_u2","error":{"code":"x","message":"no"}}"#, at: 6200)
        #expect(events(failed).contains(.transcript(role: .assistant, text: "ok", final: true, itemID: "item_a2")))
    }

    @Test("an input transcription delta without text is not malformed")
    func emptyUserDelta() {
        var c = opened()
        #expect(receive(&c, #"{"type":"conversation.item.input_audio_transcription.delta","item_id":"i"}"#).isEmpty)
        #expect(receive(&c, #"{"type":"conversation.item.input_audio_transcription.delta","item_id":"i","delta":null}"#).isEmpty)
        #expect(receive(&c, #"{"type":"conversation.item.input_audio_transcription.delta","item_id":"i","delta":""}"#).isEmpty)
    }

    @Test("isBusy, the rollover's quiet moment: not while the user speaks (VAD or button and tail) or a turn is answered")
    func busy() throws {
        var v = opened(RealtimeSettings(turnDetection: .vad))
        #expect(!v.isBusy)
        _ = receive(&v, #"{"type":"input_audio_buffer.speech_started","item_id":"i"}"#)
        #expect(v.isBusy)
        _ = receive(&v, #"{"type":"input_audio_buffer.speech_stopped","item_id":"i"}"#)
        #expect(!v.isBusy)
        _ = receive(&v, Fixture.responseCreated)
        #expect(v.isBusy)
        _ = receive(&v, Fixture.responseDone)
        #expect(!v.isBusy)
        var c = opened(RealtimeSettings(turnDetection: .ptt, pttTailMilliseconds: 200))
        c.press(now: at(0))
        #expect(c.isBusy)
        sendAudio(&c, frames: 10)
        c.release(now: at(200))
        #expect(c.isBusy, "the tail")
        c.handleTimeout(now: at(400))
        #expect(c.isBusy, "the commit waits for committed")
        _ = receive(&c, Fixture.committed)
        #expect(c.isBusy, "the response is asked for")
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.responseDone)
        #expect(!c.isBusy)
    }

    @Test("output_audio_buffer.cleared (VAD interruption) empties the local playback, and holds it")
    func clearedFlushes() {
        var c = opened(RealtimeSettings(turnDetection: .vad))
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        _ = receive(&c, Fixture.responseCancelled)
        let out = receive(&c, Fixture.audioCleared)
        #expect(out == [.event(.speaking(false)), .cutPlayback])
    }
}

// MARK: Local barge-in

/// `localSpeech`: Linnet's own voice flag cut the assistant in voice mode (AgentCore
/// debounces the flag; LocalBargeInTests drive it end to end).
@Suite struct RealtimeLocalSpeechTests {
    /// Voice mode, a reply playing, and the voice flag cuts it: the conversation and
    /// what the cut put out.
    func cutWhileSpeaking() -> (RealtimeConversation, [RealtimeOutput]) {
        var c = opened(RealtimeSettings(turnDetection: .vad))
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        let cut = c.localSpeech(now: at(100))
        #expect(cut)
        let out = drain(&c)
        return (c, out)
    }

    @Test("voice mode, a response in progress: response.cancel, output_audio_buffer.clear, flush")
    func cutsTheResponse() throws {
        var (c, out) = cutWhileSpeaking()
        // No input_audio_buffer.clear: in voice mode the user's words are in it.
        #expect(types(try sent(out)) == ["response.cancel", "output_audio_buffer.clear"])
        #expect(events(out) == [.speaking(false)])
        #expect(out.last == .cutPlayback)
        // The server's answers and a late started of the cancelled response.
        var late = receive(&c, Fixture.responseCancelled)
        late += receive(&c, Fixture.audioCleared)
        late += receive(&c, Fixture.audioStarted)
        #expect(late == [.cutPlayback] && !c.isAssistantSpeaking)
        // Once cut, nothing more to cut.
        let again = c.localSpeech(now: at(200))
        #expect(!again && drain(&c).isEmpty)
        // The server's next response is heard.
        #expect(events(receive(&c, #"{"type":"response.created","response":{"id":"resp_next"}}"#)) == [.speaking(true)])
    }

    @Test("a cut holds the downlink until a new reply's audio starts, the server's clear or not")
    func aCutHoldsUntilTheServerStops() throws {
        var (c, out) = cutWhileSpeaking()
        #expect(out.contains(.cutPlayback))
        // Neither the server's cleared (what it sent before is still on its way: it
        // holds again) nor a late start of the cancelled reply ends the hold; the next
        // reply's own audio does, once.
        #expect(receive(&c, Fixture.audioCleared) == [.cutPlayback])
        #expect(!receive(&c, Fixture.audioStarted).contains(.releasePlayback))
        _ = receive(&c, #"{"type":"response.created","response":{"id":"resp_next"}}"#)
        let next = #"{"type":"output_audio_buffer.started","response_id":"resp_next"}"#
        #expect(receive(&c, next).contains(.releasePlayback))
        #expect(!receive(&c, next).contains(.releasePlayback))
    }

    @Test("after response.done only the audio is cleared; silent: nothing")
    func noCancelWithoutAResponse() throws {
        var c = opened(RealtimeSettings(turnDetection: .vad))
        let silent = c.localSpeech(now: at(0))
        #expect(!silent && drain(&c).isEmpty)
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        _ = receive(&c, Fixture.responseDone)
        let cut = c.localSpeech(now: at(10))
        #expect(cut)
        #expect(types(try sent(drain(&c))) == ["output_audio_buffer.clear"])
    }

    @Test("push-to-talk: the button barges in, local speech sends nothing")
    func notInPushToTalk() {
        var c = opened()
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Fixture.audioStarted)
        let cut = c.localSpeech(now: at(0))
        #expect(!cut && drain(&c).isEmpty && c.isAssistantSpeaking)
    }
}

// MARK: Barge-in: what was heard

/// A cut of the assistant tells the provider how much of its audio item the speaker
/// actually played (`conversation.item.truncate`, FIELD.md "Interruption"), from the
/// device's own count of what came out of the speaker (`downlink(heard:spurtStart:)`),
/// and the line logged and carried is only the heard part.
@Suite struct RealtimeTruncateTests {
    static let itemAdded = #"{"type": "response.output_item.added", "event_id": "e1", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "output_index": 0, "item": {"id": "item_9e0f1a2b3c4d5e6f7a8b9c0d", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}"#
    static let partAdded = #"{"type": "response.content_part.added", "event_id": "e2", "response_id": "resp_5a6b7c8d9e0f1a2b3c4d5e6f", "item_id": "item_9e0f1a2b3c4d5e6f7a8b9c0d", "output_index": 0, "content_index": 1, "part": {"type": "output_audio", "transcript": ""}}"#
    static let speechStarted = #"{"type": "input_audio_buffer.speech_started", "event_id": "e3", "audio_start_ms": 1000, "item_id": "item_user"}"#

    func settings(_ mode: TurnDetection, truncates: Bool = true) -> RealtimeSettings {
        var s = RealtimeSettings(turnDetection: mode)
        s.truncatesHeardAudio = truncates
        return s
    }

    /// A reply whose audio stretch starts at `spurt` ms of the stream (its events arrive
    /// with the stream at `eventAt`), `played` ms of it heard when the cut comes.
    func replying(_ c: inout RealtimeConversation, eventAt: Int, spurt: Int, played: Int) {
        c.downlink(heard: eventAt, spurtStart: spurt <= eventAt ? spurt : nil)
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Self.itemAdded)
        _ = receive(&c, Self.partAdded)
        _ = receive(&c, Fixture.audioStarted)
        for w in Fixture.replyWords { _ = receive(&c, Fixture.delta(w)) }
        _ = receive(&c, Fixture.done())  // the whole text long before the audio is said
        c.downlink(heard: spurt + played, spurtStart: spurt)
    }

    func truncate(_ outputs: [RealtimeOutput]) throws -> JSONValue? {
        try sent(outputs).first { $0["type"]?.string == "conversation.item.truncate" }
    }

    @Test("a press over the reply truncates at what the speaker played, content index from the part")
    func pressTruncates() throws {
        var c = opened(settings(.ptt))
        // RTP ran 80 ms ahead of the events: the stretch began before the start event.
        replying(&c, eventAt: 10_080, spurt: 10_000, played: 1_400)
        c.press(now: at(0))
        let out = drain(&c)
        #expect(types(try sent(out)) == ["input_audio_buffer.clear", "response.cancel", "output_audio_buffer.clear", "conversation.item.truncate"])
        let t = try #require(try truncate(out))
        #expect(t["item_id"]?.string == Fixture.replyItem)
        #expect(t["content_index"]?.int64 == 1)
        #expect(t["audio_end_ms"]?.int64 == 1_400)
        #expect(out.contains(.cutPlayback))
        // The heard part (1.4 s at 15 characters a second: 21 characters), not the whole
        // reply the server's done event gave long before.
        #expect(events(out).contains(.interrupted(text: "Hi, this is the test…", heardMilliseconds: 1_400, itemID: Fixture.replyItem)))
        let finals = events(out).filter { e in
            if case .transcript(_, _, let final, _) = e { return final }
            return false
        }
        #expect(finals.isEmpty)
        // Once per item: the server's clear after it sends no second truncate.
        #expect(try truncate(receive(&c, Fixture.audioCleared)) == nil)
    }

    @Test("a provider streaming without pauses: the reply starts at its start event")
    func continuousStream() throws {
        var c = opened(settings(.ptt))
        // The stretch began a minute ago (silence packets between replies).
        replying(&c, eventAt: 60_000, spurt: 0, played: 0)
        c.downlink(heard: 60_900, spurtStart: 0)
        c.press(now: at(0))
        #expect(try truncate(drain(&c))?["audio_end_ms"]?.int64 == 900)
    }

    @Test("a cut told late (the channel retransmitting over loss) counts only the voice heard, not the silence after it")
    func lateCutStopsAtTheVoicesEnd() throws {
        var c = opened(settings(.vad))
        // 2.5 s of the reply was voiced, then the provider's VAD stopped it and its RTP
        // went on with silent frames; the cleared event came 1.4 s after.
        replying(&c, eventAt: 2_000, spurt: 2_000, played: 2_500)
        c.downlink(heard: 2_000 + 3_900, spurtStart: 2_000, voiceEnd: 2_000 + 2_500)
        _ = receive(&c, Self.speechStarted)
        let t = try #require(try truncate(receive(&c, Fixture.audioCleared)))
        #expect(t["audio_end_ms"]?.int64 == 2_500)
    }

    @Test("a press while the response is made but its audio has not begun truncates its item at 0")
    func pressBeforeTheAudio() throws {
        var c = opened(settings(.ptt))
        c.downlink(heard: 3_000, spurtStart: 0, voiceEnd: 3_000)  // an earlier reply still playing
        _ = receive(&c, Fixture.responseCreated)
        _ = receive(&c, Self.itemAdded)
        c.downlink(heard: 3_400, spurtStart: 0, voiceEnd: 3_400)
        c.press(now: at(0))
        let t = try #require(try truncate(drain(&c)))
        #expect(t["item_id"]?.string == Fixture.replyItem)
        #expect(t["audio_end_ms"]?.int64 == 0)
    }

    @Test("a pause inside the reply starts a later stretch, which is not where the item began")
    func pauseInsideTheReply() throws {
        var c = opened(settings(.vad))
        replying(&c, eventAt: 32_390, spurt: 32_400, played: 3_400)
        // Queued but not yet heard: the reply's last words after a 400 ms pause.
        c.downlink(heard: 36_290, spurtStart: 36_300, voiceEnd: 35_890)
        let cut = c.localSpeech(now: at(0))
        #expect(cut)
        // Heard up to where the voice last sounded, from where the item began.
        #expect(try truncate(drain(&c))?["audio_end_ms"]?.int64 == 35_890 - 32_400)
    }

    @Test("a press before the response's item was named truncates it when it is named")
    func pressBeforeTheItemIsNamed() throws {
        var c = opened(settings(.ptt))
        c.downlink(heard: 3_000, spurtStart: 0, voiceEnd: 3_000)
        _ = receive(&c, Fixture.responseCreated)
        c.press(now: at(0))
        #expect(try truncate(drain(&c)) == nil)  // no item id to name yet
        let t = try #require(try truncate(receive(&c, Self.itemAdded)))
        #expect(t["item_id"]?.string == Fixture.replyItem && t["audio_end_ms"]?.int64 == 0)
    }

    @Test("a cut before the reply's first audible sound played truncates at 0")
    func cutBeforeTheVoice() throws {
        var c = opened(settings(.ptt))
        // The response began at 5 s of the stream; the voice heard last ended at 4.2 s
        // (the reply before): nothing of this item has sounded yet.
        replying(&c, eventAt: 5_000, spurt: 5_000, played: 300)
        c.downlink(heard: 5_300, spurtStart: 5_000, voiceEnd: 4_200)
        c.press(now: at(0))
        #expect(try truncate(drain(&c))?["audio_end_ms"]?.int64 == 0)
    }

    @Test("Linnet's voice flag in voice mode truncates too")
    func localSpeechTruncates() throws {
        var c = opened(settings(.vad))
        replying(&c, eventAt: 2_000, spurt: 2_000, played: 750)
        let cut = c.localSpeech(now: at(0))
        #expect(cut)
        let t = try #require(try truncate(drain(&c)))
        #expect(t["audio_end_ms"]?.int64 == 750)
    }

    @Test("the server's own VAD cut (output_audio_buffer.cleared) is told what was heard")
    func serverClearTruncates() throws {
        var c = opened(settings(.vad))
        replying(&c, eventAt: 2_000, spurt: 2_000, played: 1_200)
        _ = receive(&c, Self.speechStarted)
        let out = receive(&c, Fixture.audioCleared)
        #expect(out.contains(.cutPlayback))
        #expect(try truncate(out)?["audio_end_ms"]?.int64 == 1_200)
    }

    @Test("a route that does not truncate still logs only the heard part")
    func noTruncateRoute() throws {
        var c = opened(settings(.ptt, truncates: false))
        replying(&c, eventAt: 0, spurt: 0, played: 400)
        c.press(now: at(0))
        let out = drain(&c)
        #expect(try truncate(out) == nil)
        #expect(events(out).contains(.interrupted(text: "Hi,…", heardMilliseconds: 400, itemID: Fixture.replyItem)))
    }

    @Test("a reply played to its end: its whole line when its audio ends, and the speaking rate learnt from it")
    func playedToTheEnd() throws {
        var c = opened(settings(.ptt))
        replying(&c, eventAt: 0, spurt: 0, played: 0)
        // The whole line waits for the audio: nothing final yet.
        c.downlink(heard: 1_000, spurtStart: 0)
        #expect(events(receive(&c, Fixture.responseDone)).isEmpty)
        // 30 characters in 3 s: 10 a second.
        c.downlink(heard: 3_000, spurtStart: 0)
        let end = receive(&c, Fixture.audioStopped)
        #expect(events(end) == [.transcript(role: .assistant, text: Fixture.reply, final: true, itemID: Fixture.replyItem), .speaking(false)])
        #expect(try truncate(end) == nil)
        // The next reply, cut after 1.5 s: 15 characters at the learnt rate ("Hi, this is
        // the"), not 22 at the initial one ("Hi, this is the test").
        let second = Fixture.responseCreated.replacingOccurrences(of: "resp_5a6b", with: "resp_6a6b")
        c.downlink(heard: 10_000, spurtStart: 10_000)
        _ = receive(&c, second)
        _ = receive(&c, Self.itemAdded.replacingOccurrences(of: "item_9e0f", with: "item_8e0f").replacingOccurrences(of: "resp_5a6b", with: "resp_6a6b"))
        _ = receive(&c, Fixture.audioStarted.replacingOccurrences(of: "resp_5a6b", with: "resp_6a6b"))
        _ = receive(&c, Fixture.done().replacingOccurrences(of: "item_9e0f", with: "item_8e0f").replacingOccurrences(of: "resp_5a6b", with: "resp_6a6b"))
        c.downlink(heard: 11_500, spurtStart: 10_000)
        c.press(now: at(0))
        let out = drain(&c)
        #expect(try truncate(out)?["item_id"]?.string == "item_8e0f1a2b3c4d5e6f7a8b9c0d")
        #expect(events(out).contains(.interrupted(text: "Hi, this is the…", heardMilliseconds: 1_500, itemID: "item_8e0f1a2b3c4d5e6f7a8b9c0d")))
    }

    @Test("a cut before the first word ended logs no line")
    func nothingHeard() throws {
        var c = opened(settings(.ptt))
        replying(&c, eventAt: 0, spurt: 0, played: 100)
        c.press(now: at(0))
        let out = drain(&c)
        #expect(try truncate(out)?["audio_end_ms"]?.int64 == 100)
        let lines = events(out).filter { e in
            if case .interrupted = e { return true }
            return false
        }
        #expect(lines.isEmpty)
    }
}
