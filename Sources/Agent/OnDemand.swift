// Sessions on demand (`session = on-demand`): no provider session while nobody talks. A
// press starts one; what the microphone hears from the press on is kept (the backlog)
// and sent once the session's conversation is configured, so the provider hears the
// utterance from its first syllable although it was spoken before the connection
// existed; `idle-seconds` with no speech either way closes the session again.
//
// How the backlog is sent: in order, on the session's own RTP clock (timestamps
// contiguous, 20 ms apart as always), two frames for each live frame captured, so it
// catches up at twice real time and then the live audio flows as usual. The provider's
// receiver sees a burst whose timestamps run ahead of their arrival, which a jitter
// buffer absorbs (OpenAI's input goes to its recogniser and VAD, not to a speaker);
// sending all at once would put seconds of audio in one burst, and sending it paced
// would keep the whole reply a backlog's length late. The press reaches the
// conversation (`input_audio_buffer.clear`) before the first backlog frame, and a
// release that came while the backlog was still being sent reaches it (the commit)
// once the backlog is out.
import Wire
import JSON

/// The audio kept from a press until its session takes it.
struct UplinkBacklog {
    private(set) var frames: [[Int16]] = []
    private var head = 0
    private(set) var samples = 0
    /// Frames dropped because the backlog was full (the connection took longer than
    /// `maxSamples` of speech).
    private(set) var dropped = 0
    /// Collecting (from the press) or being sent; false: the live audio flows as usual.
    var active = false
    var startedAt = Instant.zero
    /// 15 s at 48 kHz: 1.4 MB. A connection that takes longer loses the oldest audio.
    static let maxSamples = 15 * 48_000

    var isEmpty: Bool { head == frames.count }

    mutating func start(now: Instant) {
        frames = []
        head = 0
        samples = 0
        dropped = 0
        active = true
        startedAt = now
    }

    mutating func append(_ frame: UnsafeBufferPointer<Int16>) {
        frames.append(Array(frame))
        samples += frame.count
        while samples > UplinkBacklog.maxSamples, !isEmpty {
            samples -= frames[head].count
            frames[head] = []
            head += 1
            dropped += 1
        }
    }

    mutating func popFirst() -> [Int16]? {
        guard !isEmpty else { return nil }
        let f = frames[head]
        frames[head] = []
        head += 1
        samples -= f.count
        if isEmpty {
            frames = []
            head = 0
        }
        return f
    }

    mutating func stop() {
        frames = []
        head = 0
        samples = 0
        active = false
    }
}

extension AgentCore {
    /// Why there is no session while nobody talks.
    static let waitingForPress = "on demand: no session until the button is pressed"

    /// A press with no session: start one, and keep the audio from now on.
    func startOnDemand(now: Instant) {
        guard capped == nil else {
            log(.info, "the button was pressed, but \(capped!): no session until the next day")
            return
        }
        keepAudioFromPress(now: now)
        lastActivity = now
        record("on_demand", [("start", .bool(true))])
        supervisor.resume(now: now, reason: .demand)
        syncMic()
        driveSupervisor()
    }

    /// How long after its release a kept press may still be sent. A request that waited
    /// longer for its session (the provider or the network down) is stale: "open the
    /// door" acted on a minute later is worse than a request the user can see was lost
    /// and repeat.
    static let keptPressLimit = Duration.seconds(10)

    /// Forgets a press kept too long for a session that did not come, and says so.
    func dropKeptPress(released: Instant, now: Instant) {
        let seconds = (now - released).milliseconds / 1000
        log(.warning, "the button's request was not sent: no session took it within \(seconds) s of the release; press and say it again")
        record("press_dropped", [("seconds_since_release", .number(JSONNumber(Int(seconds)))),
                                 ("audio_ms", .number(JSONNumber(backlog.samples / 48)))])
        backlog.stop()
        demandPress = nil
        backlogReleasedAt = nil
        syncMic()
    }

    /// From this press on the microphone's audio is kept (the backlog), the press and
    /// any release wait for it, and the wait for the first packet is timed again.
    func keepAudioFromPress(now: Instant) {
        backlog.start(now: now)
        demandPress = now
        backlogReleasedAt = nil
        pressToFirstPacket = nil
    }

    /// A press while the session exists but cannot take a turn yet (connecting, or its
    /// data channel not yet open and configured: under loss SCTP's handshake can take
    /// seconds after the media flows): what is said is kept as on demand and sent once
    /// the conversation is configured, instead of the turn being lost with its words.
    func keepPressForSession(now: Instant) {
        keepAudioFromPress(now: now)
        log(.info, "the button was pressed before the session could take a turn: what is said is kept and sent once it can")
        record("press_kept", [("state", .string(supervisor.state.rawValue))])
    }

    /// Sends what the backlog holds once the session's conversation is configured: the
    /// press first, then two frames per call (the caller appends the live frame first).
    func sendBacklog(now: Instant) {
        // Only while the press still waits for its session: once its audio is going out
        // (the press given to the conversation), it is sent to the end.
        if demandPress != nil, let released = backlogReleasedAt, now - released > AgentCore.keptPressLimit {
            dropKeptPress(released: released, now: now)
            return
        }
        guard let s = activeSession, s.wasConnected, !s.closing, let media = s.media, conversation.isConfigured else { return }
        if demandPress != nil {
            demandPress = nil
            conversation.press(now: now)
            drainConversation()
        }
        var sent = 0
        while sent < 2, let f = backlog.popFirst() {
            f.withUnsafeBufferPointer { s.sendAudio($0, media: media, now: now) }
            apply(s)
            conversation.audioSent(milliseconds: Int(media.frameTicks / 48))
            sent += 1
        }
        if sent > 0, pressToFirstPacket == nil {
            let waited = now - backlog.startedAt
            pressToFirstPacket = waited
            log(.info, "on demand: the press's first audio went \(waited.milliseconds) ms after the press")
            record("on_demand", [("first_packet_ms", .number(JSONNumber(Int(waited.milliseconds)))),
                                 ("backlog_dropped", .number(JSONNumber(backlog.dropped)))])
        }
        if backlog.isEmpty {
            backlog.stop()
            if backlogReleasedAt != nil {
                backlogReleasedAt = nil
                conversation.release(now: now)
            }
            syncMic()
        }
        drainConversation()
    }

    /// When the session on demand has been idle long enough to close: no press held, no
    /// backlog, the assistant silent, no tool running, nothing said for `idleTimeout`.
    var idleDeadline: Instant? {
        guard settings.onDemand, supervisor.state == .connected, !talking, !backlog.active, !assistantSpeaking,
              tools.running == 0, !conversation.isBusy else { return nil }
        return lastActivity + settings.idleTimeout
    }

    func closeIfIdle(now: Instant) {
        guard let d = idleDeadline, now >= d else { return }
        log(.info, "on demand: idle for \(settings.idleTimeout.milliseconds / 1000) s, closing the session")
        record("on_demand", [("idle", .bool(true))])
        supervisor.pause(AgentCore.waitingForPress, now: now)
        driveSupervisor()
    }
}
