import Testing
import Foundation
import Glibc

/// Hands-free, end to end: `linnet run` with okay_nabu and no button, against the aiortc
/// stand-in's OpenAI route. The microphone (a WAV paced in real time) says nothing for
/// a second, then "okay nabu", then "turn on the kitchen light". Linnet must wake on the
/// word, play the earcon on its speaker, open the microphone only after it, end the turn
/// on the silence after the request, and get the answer; what the stand-in received must
/// be understood by the speech judge as the request and nothing else (the wake word was
/// said to a closed microphone, and the earcon is not sent).
@Suite(.serialized) struct WakeCallTests {
    @Test func wakeEarconQuestionAnswer() throws {
        guard let python = InteropPeer.require(), let speech = DuplexRoomTests.speechPython() else { return }
        let root = DuplexRoomTests.root
        _ = try DuplexRoomTests.tool("/bin/bash", [root + "/scripts/fetch-wake-models.sh", root + "/build/third_party/wake"])
        let input = temporary("wake-call-in.wav"), output = temporary("wake-call-out.wav")
        let token = temporary("wake-call-token"), log = temporary("wake-call-run.log")
        defer { for f in [input, output, token, log] { unlink(f) } }
        let made = try DuplexRoomTests.tool(speech, [root + "/Tests/Wake/reference.py", "hands-free", input])
        try #require(made.status == 0, "\(made.err)")
        try "device-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        let peer = try InteropPeer(python: python, mode: "openai",
                                   extra: ["--ephemeral", "--token", "device-secret", "--reply", "The kitchen light is now on."], name: "wake-call")
        let base = "http://127.0.0.1:\(peer.port)"
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--openai", "--token-url", base + "/token", "--openai-url", base + "/v1/realtime/calls",
                                     "--token-file", token, "--wake-model", root + "/build/third_party/wake/okay_nabu.tflite",
                                     "--input", input, "--output", output, "--events", "-", "--stats-seconds", "1"], stderr: log)
        func type(_ t: String, _ extra: (([String: Any]) -> Bool)? = nil) -> (String) -> Bool {
            { line in
                guard let e = event(line), e["type"] as? String == t else { return false }
                return extra?(e) ?? true
            }
        }
        let wake = try #require(agent.waitFor(type("wake")).flatMap(event), "no wake (log: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))")
        let open = try #require(agent.waitFor(type("wake_turn") { $0["open"] as? Bool == true }).flatMap(event))
        let close = try #require(agent.waitFor(type("wake_turn") { $0["open"] as? Bool == false }).flatMap(event))
        #expect(close["spoke"] as? Bool == true)
        #expect(agent.waitFor { line in
            guard let e = event(line), e["type"] as? String == "transcript" else { return false }
            return e["role"] as? String == "assistant" && e["final"] as? Bool == true && e["text"] as? String == "The kitchen light is now on."
        } != nil)
        agent.signal(SIGTERM)
        #expect(agent.waitFor { isState($0, "closed") } != nil)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 0)
        let report = try peer.stop()
        let session = (report["sessions"] as? [[String: Any]])?.first ?? [:]
        let t = { (e: [String: Any]) in e["t"] as? Double ?? 0 }
        // The microphone opened once the earcon had played (WakeTurn: 200 ms).
        #expect(t(open) - t(wake) >= 0.19, "wake \(t(wake)) s, open \(t(open)) s")
        // The turn: the request (about 1.6 s) and the 900 ms of silence that ends it.
        let turn = t(close) - t(open)
        #expect(turn > 1.5, "a \(turn) s turn")
        let sent = session["openai_events_sent_log"] as? [[String: Any]] ?? []
        let committed = sent.first { $0["type"] as? String == "conversation.item.input_audio_transcription.completed" }?["seconds"] as? Double ?? 0
        #expect(committed > 1.2, "committed \(committed) s")
        // What the stand-in heard, judged by the recogniser: the request, and no word
        // more (the wake word went to a closed microphone).
        let heard = try DuplexRoomTests.tool(speech, [root + "/Tests/Speech/speech.py", "recognize", peer.record, "--set", "user"])
        let words = heard.out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(words == "turn on the kitchen light", "the stand-in heard '\(words)'")
        // The earcon on the speaker (the output file): its two notes, E6 and B6, right
        // after the wake, with nothing else playing then.
        let played = try WAVFile.read16(output)
        let notes = [1318.5, 1975.5].map { hz in goertzelPeak(played.samples, hz: hz, rate: played.rate) }
        #expect(notes.allSatisfy { $0 > 0.1 }, "earcon notes at \(notes) of full scale")
        print("wake call: wake → open \(Int((t(open) - t(wake)) * 1000)) ms, turn \(String(format: "%.2f", turn)) s, committed \(String(format: "%.2f", committed)) s, heard '\(words)', earcon \(notes.map { String(format: "%.2f", $0) })")
    }
}

/// The largest amplitude (of full scale) of a sine at `hz` over 20 ms windows of `x`.
func goertzelPeak(_ x: [Int16], hz: Double, rate: Int) -> Double {
    let n = rate / 50
    let k = 2 * cos(2 * .pi * hz / Double(rate))
    var best = 0.0
    var start = 0
    while start + n <= x.count {
        var s1 = 0.0, s2 = 0.0
        for i in start..<(start + n) {
            let s0 = Double(x[i]) / 32768 + k * s1 - s2
            s2 = s1
            s1 = s0
        }
        let power = s1 * s1 + s2 * s2 - k * s1 * s2
        best = max(best, 2 * power.squareRoot() / Double(n))
        start += n / 2
    }
    return best
}
