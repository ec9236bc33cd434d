import Testing
import Wire
import JSON
import Settings
@testable import Agent

/// Barge-in by Linnet's own voice flag: voice mode, full duplex, the OpenAI
/// route's events. The world reports the flag before every uplink frame (20 ms) as
/// linnet's Runtime does; the scripted provider starts responses on the events channel
/// and records what the device sends. Time is the world's manual clock.
@Suite struct LocalBargeInTests {
    struct Setup {
        var pushToTalk = false
        var hold = MicHold.whileEchoAudible
        var bargeIn: Duration? = .milliseconds(200)
        /// The canceller measures echo it does not cancel.
        var echoAudible = false
    }

    func types(_ messages: ArraySlice<String>) -> [String] {
        messages.compactMap { (try? JSONValue.parse(Array($0.utf8)))?["type"]?.string }
    }

    func world(_ setup: Setup = Setup()) throws -> (ProviderWorld, WorldProvider.Session) {
        var o = ProviderWorld.Options()
        o.route = .openai
        o.pushToTalk = setup.pushToTalk
        o.configure = {
            $0.micHold = setup.hold
            $0.localBargeIn = setup.bargeIn
        }
        let w = try ProviderWorld(o)
        w.echoAudible = setup.echoAudible
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        w.run(for: .milliseconds(100))
        return (w, try #require(w.provider.sessionOfCore[1]))
    }

    /// The provider says `events` on the events channel (they land 10 ms later).
    func say(_ w: ProviderWorld, _ s: WorldProvider.Session, _ events: [String]) throws {
        let peer = try #require(s.peer), channel = try #require(s.channel)
        for e in events { try peer.send(channel: channel, text: e, now: w.now) }
        w.provider.drain(s)
    }

    func speaking(_ id: String) -> [String] {
        [#"{"type":"response.created","response":{"id":"\#(id)","status":"in_progress","output":[]}}"#,
         #"{"type":"output_audio_buffer.started","response_id":"\#(id)"}"#]
    }

    /// Voice held for `on`, then off, reported frame by frame.
    func voice(_ w: ProviderWorld, for on: Duration) {
        w.voice(true)
        w.run(for: on)
        w.voice(false)
    }

    @Test func voiceOverTheAssistantCutsItOnceAtTheDebounce() throws {
        let (w, p) = try world()
        try say(w, p, speaking("resp_1"))
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking)
        let base = p.messages.count
        w.voice(true)
        let on = w.now
        w.run(for: .milliseconds(180))
        #expect(w.flushes.isEmpty && types(p.messages[base...]).isEmpty, "not before the debounce")
        // But the speaker is ducked from the flag's first 10 ms frame, reported with
        // the next uplink frame: silent within 40 ms, and nothing dropped yet.
        let media = try #require(w.media[1])
        let duck = try #require(w.duckFlushes.first)
        #expect(w.duckFlushes.count == 1 && duck.session == 1 && media.ducks == [true] && media.flushes == 0)
        #expect(duck.at - on >= AgentCore.duckAfter && duck.at - on <= .milliseconds(40), "\(duck.at - on)")
        w.run(for: .milliseconds(820))  // the voice goes on for a second in all
        #expect(types(p.messages[base...]) == ["response.cancel", "output_audio_buffer.clear"])
        let cut = try #require(w.records("barge_in").first)
        #expect(w.records("barge_in").count == 1 && cut["source"]?.string == "voice_flag")
        // The playback is flushed at the same instant the cancel goes, within one
        // uplink frame of the 200 ms.
        #expect(w.flushes.count == 1 && w.flushes.first?.at == cut.at && w.flushes.first?.session == 1)
        // The session's own jitter buffer is emptied by the core, which owns the media.
        #expect(w.media[1]?.flushes == 1 && w.core.playing === w.media[1])
        // The cut ended the duck (the hold takes over).
        #expect(!media.ducked && media.ducks == [true] && w.core.ducks == 1)
        #expect(cut.at - on >= .milliseconds(200) && cut.at - on <= .milliseconds(220), "\(cut.at - on)")
        #expect(!w.core.assistantSpeaking)
        // A late started of the cancelled response does not bring it back.
        try say(w, p, [#"{"type":"output_audio_buffer.started","response_id":"resp_1"}"#])
        w.run(for: .milliseconds(100))
        #expect(!w.core.assistantSpeaking)
        // The user pauses; the next response is cut by the next stretch of voice.
        w.voice(false)
        w.run(for: .milliseconds(100))
        try say(w, p, speaking("resp_2"))
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking)
        voice(w, for: .milliseconds(300))
        #expect(types(p.messages[base...]) == ["response.cancel", "output_audio_buffer.clear", "response.cancel", "output_audio_buffer.clear"])
        #expect(w.flushes.count == 2 && w.records("barge_in").count == 2)
        #expect(w.problems.isEmpty, "\(w.problems)")
    }

    @Test func blipsShorterThanTheDebounceDoNothing() throws {
        let (w, p) = try world()
        try say(w, p, speaking("resp_1"))
        w.run(for: .milliseconds(100))
        let base = p.messages.count
        for _ in 0..<5 {
            voice(w, for: .milliseconds(150))
            w.run(for: .milliseconds(40))
        }
        #expect(types(p.messages[base...]).isEmpty && w.flushes.isEmpty && w.records("barge_in").isEmpty)
        #expect(w.core.assistantSpeaking)
        // Each blip ducked the speaker and gave it back: the reply plays on.
        let media = try #require(w.media[1])
        #expect(media.ducks == Array(repeating: [true, false], count: 5).flatMap { $0 } && !media.ducked && media.flushes == 0)
        #expect(w.duckFlushes.count == 5)
    }

    @Test func afterResponseDoneOnlyTheAudioIsCleared() throws {
        let (w, p) = try world()
        try say(w, p, speaking("resp_1") + [#"{"type":"response.done","response":{"id":"resp_1","status":"completed","output":[]}}"#])
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking, "its audio still plays")
        let base = p.messages.count
        voice(w, for: .milliseconds(300))
        #expect(types(p.messages[base...]) == ["output_audio_buffer.clear"], "no response.cancel: no response is active")
        #expect(w.flushes.count == 1 && !w.core.assistantSpeaking)
    }

    @Test func nothingWhileTheAssistantIsSilent() throws {
        let (w, p) = try world()
        let base = p.messages.count
        voice(w, for: .seconds(1))
        #expect(types(p.messages[base...]).isEmpty && w.flushes.isEmpty && w.records("barge_in").isEmpty)
        #expect(w.duckFlushes.isEmpty && w.media[1]?.ducks == [])
    }

    @Test(arguments: ["half duplex", "push-to-talk", "muted", "off", "echo uncancelled"])
    func neverWhere(_ case_: String) throws {
        var setup = Setup()
        switch case_ {
        case "half duplex": setup.hold = .whileAssistantSpeaks
        case "push-to-talk": setup.pushToTalk = true
        case "off": setup.bargeIn = nil
        case "echo uncancelled": setup.echoAudible = true
        default: break
        }
        let (w, p) = try world(setup)
        if case_ == "muted" {
            w.core.talk(true, now: w.now)  // voice mode: the button mutes
            w.drive()
            #expect(w.core.muted)
        }
        try say(w, p, speaking("resp_1"))
        w.run(for: .milliseconds(100))
        #expect(w.core.assistantSpeaking)
        let base = p.messages.count
        voice(w, for: .seconds(1))
        #expect(types(p.messages[base...]).isEmpty && w.flushes.isEmpty && w.records("barge_in").isEmpty, "\(case_)")
        #expect(w.duckFlushes.isEmpty && w.media[1]?.ducks == [], "\(case_)")
        #expect(w.core.assistantSpeaking)
    }

    @Test func voiceFromBeforeTheAnswerCountsFromItsStart() throws {
        let (w, p) = try world()
        w.voice(true)
        w.run(for: .seconds(1))
        let base = p.messages.count
        try say(w, p, speaking("resp_1"))
        let started = try #require(w.run(within: .milliseconds(100)) { w.core.assistantSpeaking })
        w.run(for: .milliseconds(400))
        #expect(types(p.messages[base...]) == ["response.cancel", "output_audio_buffer.clear"])
        let cut = try #require(w.flushes.first?.at)
        #expect(cut - started >= .milliseconds(200) && cut - started <= .milliseconds(220), "\(cut - started)")
    }

    /// The cut tells OpenAI what the speaker played of the reply, by the device's own
    /// count (reported before each uplink frame), and the next session is given only
    /// the heard part, marked as cut off: never the whole reply.
    @Test func theCutTruncatesAtWhatWasHeardAndCarriesOnlyThat() throws {
        let (w, p) = try world()
        w.speaker(true)
        w.run(for: .milliseconds(500))  // earlier audio: the stream's clock runs on
        w.speaker(false)
        w.run(for: .milliseconds(500))
        try say(w, p, speaking("resp_1") + [
            #"{"type":"response.output_item.added","response_id":"resp_1","output_index":0,"item":{"id":"item_r1","type":"message","role":"assistant","content":[]}}"#,
            #"{"type":"response.output_audio_transcript.done","response_id":"resp_1","item_id":"item_r1","content_index":0,"transcript":"The kitchen light is on now and the door is open."}"#])
        // The reply's audio reaches the speaker 60 ms after its events.
        w.run(for: .milliseconds(60))
        w.speaker(true)
        w.run(for: .milliseconds(1_500))
        let base = p.messages.count
        voice(w, for: .milliseconds(300))
        let sent = p.messages[base...].compactMap { try? JSONValue.parse(Array($0.utf8)) }
        #expect(sent.map { $0["type"]?.string ?? "?" } == ["response.cancel", "output_audio_buffer.clear", "conversation.item.truncate"])
        let t = try #require(sent.last)
        #expect(t["item_id"]?.string == "item_r1" && t["content_index"]?.int64 == 0)
        // 1.5 s played, then the 200 ms debounce (one uplink frame of slack): the
        // speaker played on until the cut.
        let ms = try #require(t["audio_end_ms"]?.int64)
        #expect(ms >= 1_700 && ms <= 1_720, "\(ms)")
        w.speaker(false)
        let line = try #require(w.records("transcript").last)
        #expect(line["interrupted"]?.bool == true && line["text"]?.string == "The kitchen light is on…")
        #expect(w.core.history.last == CarriedTurn(role: .assistant, text: "The kitchen light is on…"))
        // A new conversation (the long press): the next session hears only that.
        w.core.newConversation(now: w.now)
        w.drive()
        let next = try #require(w.run(within: .seconds(5)) { w.provider.sessionOfCore[2]?.messages.contains { $0.contains("conversation.item.create") } == true } != nil ? w.provider.sessionOfCore[2] : nil)
        let carried = next.messages.filter { $0.contains("conversation.item.create") }
        #expect(carried.contains { $0.contains("The kitchen light is on…") } && !carried.contains { $0.contains("door is open") }, "\(carried)")
    }
}
