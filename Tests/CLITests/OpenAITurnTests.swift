import Testing
import Foundation
import Glibc

/// "Turns that get lost or answered wrongly", end to end: push-to-talk turns
/// against the aiortc stand-in's OpenAI route where the service's timing is the
/// awkward one, and what Linnet sent (as the stand-in recorded it, with times) and
/// printed.
@Suite(.serialized) struct OpenAITurnTests {
    struct Run {
        let peer: InteropPeer
        let agent: LineProcess
        let log: String
        let cleanup: [String]
    }

    func start(_ extra: [String], name: String) throws -> Run? {
        guard let python = InteropPeer.require() else { return nil }
        let peer = try InteropPeer(python: python, mode: "openai", extra: ["--ephemeral", "--token", "device-secret"] + extra, name: name)
        let token = temporary("\(name)-token"), input = temporary("\(name)-in.wav"), log = temporary("\(name)-run.log")
        try "device-secret\n".write(toFile: token, atomically: true, encoding: .utf8)
        try WAVFile.write(input, rate: 48_000, channels: 1, bits: 16,
                          samples: Signal.tone(300, amplitude: 0.2, seconds: 2, rate: 48_000).map { Int32($0 * 32_767) })
        let base = "http://127.0.0.1:\(peer.port)"
        let agent = try LineProcess(Linnet.executable.path,
                                    ["run", "--openai", "--token-url", base + "/token", "--openai-url", base + "/v1/realtime/calls",
                                     "--token-file", token, "--turn-detection", "ptt", "--input", input, "--loop-input", "--playback", "none",
                                     "--events", "-", "--stats-seconds", "1"], stderr: log)
        return Run(peer: peer, agent: agent, log: log, cleanup: [token, input, log])
    }

    func type(_ t: String, _ extra: (([String: Any]) -> Bool)? = nil) -> (String) -> Bool {
        { line in
            guard let e = event(line), e["type"] as? String == t else { return false }
            return extra?(e) ?? true
        }
    }

    func finalTranscript(_ role: String, _ text: String? = nil) -> (String) -> Bool {
        type("transcript") { $0["role"] as? String == role && $0["final"] as? Bool == true && (text == nil || $0["text"] as? String == text) }
    }

    /// A turn: press, a second of audio (a stats tick), release.
    func talk(_ agent: LineProcess) {
        agent.signal(SIGUSR1)
        #expect(agent.waitFor(type("ptt") { $0["talking"] as? Bool == true }) != nil)
        #expect(agent.waitFor(type("stats")) != nil)
        agent.signal(SIGUSR1)
    }

    func end(_ r: Run) throws -> [String: Any] {
        r.agent.signal(SIGTERM)
        #expect(r.agent.waitFor { isState($0, "closed") } != nil)
        r.agent.process.waitUntilExit()
        #expect(r.agent.process.terminationStatus == 0)
        let report = try r.peer.stop()
        return (report["sessions"] as? [[String: Any]])?.first ?? [:]
    }

    /// Barge-in while a long answer is being generated: Linnet cancels it, and the
    /// stand-in (`--cancel-done-after 1.5`) keeps the cancelled response active for
    /// 1.5 s, refusing any `response.create` before its `response.done` with
    /// `conversation_already_has_active_response`. The second turn is committed inside
    /// that window; Linnet holds its create until the `response.done` and the turn is
    /// answered, with no error on the wire.
    @Test func createWaitsForTheCancelledResponsesDone() throws {
        let reply = Array(repeating: "word", count: 40).joined(separator: " ")  // 2 s of deltas
        guard let r = try start(["--cancel-done-after", "1.5", "--reply", reply], name: "oai-race") else { return }
        defer { r.cleanup.forEach { unlink($0) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        #expect(r.agent.waitFor(finalTranscript("user")) != nil)
        #expect(r.agent.waitFor(type("speaking") { $0["role"] as? String == "assistant" && $0["on"] as? Bool == true }) != nil)
        talk(r.agent)  // over the answer
        #expect(r.agent.waitFor(finalTranscript("assistant", reply)) != nil, "the second turn was answered")
        let call = try end(r)
        let received = call["openai_events_received"] as? [[String: Any]] ?? []
        let sent = call["openai_events_sent_log"] as? [[String: Any]] ?? []
        func at(_ list: [[String: Any]], _ match: ([String: Any]) -> Bool) -> [Double] { list.filter(match).compactMap { $0["t"] as? Double } }
        let cancels = at(received) { $0["type"] as? String == "response.cancel" }
        let commits = at(received) { $0["type"] as? String == "input_audio_buffer.commit" }
        let creates = at(received) { $0["type"] as? String == "response.create" }
        let cancelledDone = at(sent) { $0["type"] as? String == "response.done" && $0["status"] as? String == "cancelled" }
        #expect(cancels.count == 1 && commits.count == 2 && creates.count == 2 && cancelledDone.count == 1,
                "cancel \(cancels) commit \(commits) create \(creates) done(cancelled) \(cancelledDone)")
        // The race happened: the second turn was committed while the cancelled response
        // was still active, and its create went out only after that response's done.
        if commits.count == 2, creates.count == 2, let done = cancelledDone.first {
            #expect(commits[1] < done, "second commit at \(commits[1]) s, cancelled response done at \(done) s")
            #expect(creates[1] >= done, "second create at \(creates[1]) s, before the done at \(done) s")
        }
        let refusals = sent.filter { $0["type"] as? String == "error" }.compactMap { $0["code"] as? String }
        #expect(refusals.isEmpty, "the stand-in refused: \(refusals)")
        // The press cut the first answer's voice: the stand-in was told how much of its
        // item the speaker had played (the press comes as it starts: little or nothing),
        // never more than it had sent (it refuses more).
        let truncates = call["openai_truncates"] as? [[String: Any]] ?? []
        #expect(truncates.count == 1, "\(truncates)")
        if let t = truncates.first, let end = t["audio_end_ms"] as? Int, let sentMS = t["sent_ms"] as? Int {
            #expect(end >= 0 && end <= sentMS + 20, "audio_end_ms \(end), \(sentMS) ms sent")
        }
    }

    /// The user's transcription completes after the assistant has answered it
    /// (`--late-transcript 1`: OpenAI's guide says completions may come in any order).
    /// Linnet still prints `user:` before the `assistant:` line answering it, in its
    /// events and in its log.
    @Test func userLineComesBeforeTheAnswerToIt() throws {
        guard let r = try start(["--late-transcript", "1"], name: "oai-late") else { return }
        defer { r.cleanup.forEach { unlink($0) } }
        #expect(r.agent.waitFor(type("provider_session") { $0["state"] as? String == "updated" }) != nil)
        talk(r.agent)
        let user = r.agent.waitFor(finalTranscript("user"))
        #expect(user.flatMap { event($0)?["text"] as? String } == "hello linnet")
        #expect(!r.agent.lines.contains(where: finalTranscript("assistant")), "an assistant line came before the user line")
        #expect(r.agent.waitFor(finalTranscript("assistant", "Hi, this is the test provider.")) != nil)
        let call = try end(r)
        // On the wire the answer did come first.
        let sent = call["openai_events_sent_log"] as? [[String: Any]] ?? []
        let answered = sent.firstIndex { ($0["type"] as? String)?.hasSuffix("output_audio_transcript.done") == true }
        let transcribed = sent.firstIndex { $0["type"] as? String == "conversation.item.input_audio_transcription.completed" }
        #expect(answered != nil && transcribed != nil && answered! < transcribed!, "\(sent.map { $0["type"] ?? "" })")
        let text = (try? String(contentsOfFile: r.log, encoding: .utf8)) ?? ""
        let u = text.range(of: "user: hello linnet"), a = text.range(of: "assistant: Hi, this is the test provider.")
        #expect(u != nil && a != nil && u!.lowerBound < a!.lowerBound, "\(text)")
    }
}
