// The OpenAI Realtime conversation's state machine (`RealtimeConversation`): inputs,
// the drive loop, the server events and the transcript order. Its session.update
// bodies are in SessionUpdate.swift, its settings, events and outputs in
// RealtimeSettings.swift and RealtimeEvents.swift.

/// The OpenAI Realtime conversation on the `oai-events` data channel (PROTOCOLS.md
/// "OpenAI Realtime over WebRTC"): what the device sends to configure the session and
/// run push-to-talk turns, and what it makes of the server's events.
///
/// Design decisions:
/// - Sans-IO: inputs are method calls with `now`, outputs are queued and drained with
///   `pollOutput()` until `.none` (ARCHITECTURE.md "Drive loop"); `nextDeadline` is
///   when `handleTimeout(now:)` is due (the ptt tail, the wait for `session.updated`,
///   for `committed`, for a transcription that orders the lines).
///   `.send(text)` is a JSON text for `oai-events`; `.event(e)` is for the log and the
///   supervisor; `.cutPlayback` empties the local playback. Outputs come out in the
///   order the inputs caused them.
/// - One `RealtimeConversation` per provider session (a reconnect or a rollover makes a
///   new one), so no state of an old session can leak into the next.
/// - The commit rule ("a commit with less than 100 ms of audio is an error: do not send
///   it") is measured by audio actually sent, not by how long the button was held: the
///   caller reports each uplink frame with `audioSent(milliseconds:)`. The mute gate
///   sends silence as frames, and the server counts those as audio too, so they count
///   here as well; frames that are not sent (DTX) are not counted, because the server
///   never receives them. Only frames sent after the press count: audio sent before it
///   is what the press's `input_audio_buffer.clear` removes. RTP and the data channel
///   are separate paths (and the server's jitter buffer delays audio, not events), so
///   the last frames before a release may reach the server's buffer after the commit;
///   `RealtimeSettings.minimumCommitMilliseconds` can be raised above 100 to keep a
///   margin: audio lagging the channel by N ms needs 100 + N (RealtimeSimulationTests).
/// - Press while the assistant speaks: `response.cancel` only while a response is in
///   progress (`response.created` … `response.done`; after `response.done` the server
///   answers a cancel with `response_cancel_not_active`) or requested (our
///   `response.create` is sent but its `response.created` has not come back: a quick
///   press after a release), then `output_audio_buffer.clear` while a response is in
///   progress or its audio is still playing (`output_audio_buffer.started` …
///   `stopped`/`cleared`). The state is marked silent at once (`.speaking(false)`) so
///   the caller can flush its playback, and late `output_audio_buffer.started` events
///   of the cancelled response are ignored. A cancel that crosses the server's
///   `response.done` on the wire is still refused with `response_cancel_not_active`;
///   that harmless error is reported like any other.
/// - "Speaking" is `response in progress || audio playing`, so a server (or a backend
///   relay) that sends no `output_audio_buffer.*` events still drives it through
///   `response.created`/`done`.
/// - Voice activity detection mode (`turnDetection == .vad`): the server detects turns,
///   creates responses and interrupts itself; `press`/`release` send nothing (the
///   caller may still use the button as a microphone mute). With echo cancellation
///   and Linnet's own voice flag, `localSpeech` cuts the assistant as a press does
///   (`response.cancel` while a response is in progress, `output_audio_buffer.clear`,
///   `.cutPlayback`) without waiting for the server's VAD to hear it over the network.
/// - Before the channel is open nothing can be sent: `press`/`release`/`audioSent` are
///   ignored until `channelOpened`.
/// - Server events are parsed with tight `JSONLimits` (depth 32, 1 MiB, 256 KiB strings);
///   anything the parser refuses, a text that is not an object, a missing `type`, or a
///   known event with a field of the wrong type becomes `.malformed(reason)`. Unknown
///   event types (`rate_limits.updated`, `conversation.item.added`, …) are ignored, as
///   the API adds new ones. The reason never echoes the peer's text.
/// - Transcripts: deltas are accumulated per item (at most `maxOpenTranscripts` items,
///   each capped at `maxTranscriptBytes`), and each delta gives a `.transcript(final:
///   false)` with the text so far (what a UI shows). The final line comes from the
///   `completed`/`done` event's `transcript` (authoritative), else from what the deltas
///   accumulated, else from `response.done` (its output items' transcripts, for a relay
///   that only forwards `response.done`; else the deltas of that response, for a
///   response cancelled mid-sentence: the line is what was said until the cut). An item
///   gives at most one final line; empty finals are dropped. Both event generations are
///   read: `response.output_audio_transcript.*` (GA) and `response.audio_transcript.*`
///   (beta), and the text-only `response.output_text.*` / `response.text.*`.
/// - The app backend route relays the same events on its data channel; events from a
///   relay may lack `event_id`, `item_id` or `response_id`, which are all optional here.
/// - Client events carry our own `event_id` (`linnet-1`, `linnet-2`, …) so an `error`
///   naming one can be reported with the client event type that caused it.
import JSON
import Wire
import Settings

/// The client side of one Realtime session's event channel.
///
/// Drive: call an input (`channelOpened`, `press`, `release`, `audioSent`,
/// `received`, `handleTimeout` at `nextDeadline`), then drain `pollOutput()` until it
/// returns `.none`.
///
/// Turn rules (OpenAI's Agents SDK does the same):
/// - A release starts the `pttTailMilliseconds` tail; then the commit goes out. A press
///   during the tail continues the same turn (nothing was committed yet).
/// - `response.create` follows `input_audio_buffer.committed`, never the commit itself:
///   a commit the server refused (an `error` naming its `event_id`) gets no response,
///   so the assistant never answers the old context as if it were the new turn.
/// - While a response exists on the server (requested, or created and not yet
///   `response.done`, cancelled ones included) a new `response.create` is held until
///   its `response.done`: the server refuses a second one with
///   `conversation_already_has_active_response`, and the user's turn would be lost.
///   A create refused that way is held and sent again at the next `response.done`.
/// - Until every `session.update` is confirmed by `session.updated` (`isConfigured`),
///   the caller sends silence and the held `lines` (the `send` key) wait: audio and
///   text the server handles with its defaults would be answered in the default voice
///   and with the default turn detection. After `sessionUpdateWarning` the wait ends
///   with `.sessionNotConfirmed`.
/// - Final transcript lines come out in conversation order: a user item's place is
///   fixed by `input_audio_buffer.committed` (`previous_item_id`), and later lines
///   wait for its transcription (completion events of different turns can arrive out
///   of order), at most `transcriptHold`.
public struct RealtimeConversation: Sendable {
    public let settings: RealtimeSettings
    /// Text lines (the `send` key) sent as they are once the session is configured.
    public let lines: [String]
    /// Earlier turns given to the new session before the microphone opens.
    public let carried: [CarriedTurn]

    /// Most items with deltas but no final line kept at once; the oldest is dropped.
    public static let maxOpenTranscripts = 8
    /// Longest accumulated transcript of one item, in UTF-8 bytes.
    public static let maxTranscriptBytes = 16 * 1024
    /// Limits for server events: depth 32, 1 MiB documents, 256 KiB strings.
    public static let eventLimits = JSONLimits(maxDepth: 32, maxBytes: 1 << 20, maxStringBytes: 256 << 10)
    /// The longest a final line waits for the transcription of the user item before it.
    public static let transcriptHold = Duration.seconds(5)
    /// The longest a commit waits for `committed` (or an error) before the response is
    /// asked for anyway.
    public static let commitAnswerTimeout = Duration.seconds(3)
    /// Most final lines waiting for their place at once.
    public static let maxOrderedLines = 16

    // Channel and session.
    public private(set) var isChannelOpen = false
    /// A `session.created` or `session.updated` was seen.
    public private(set) var isSessionReady = false
    /// Every `session.update` we sent is confirmed (or the wait for it timed out): the
    /// microphone may open and the held lines have gone out.
    public private(set) var isConfigured = false
    private var updatesSent = 0
    /// Voice mode found the session without voice detection and asked for server_vad.
    private var askedForVoiceDetection = false
    private var updatesConfirmed = 0
    private var updateWarningAt: Instant? = nil
    /// When the last server message arrived.
    public private(set) var lastReceived: Instant? = nil
    private var now = Instant.zero

    // Push-to-talk.
    /// Between a press and its release (push-to-talk mode only).
    public private(set) var isTalking = false
    /// Audio sent since the press, in ms.
    public private(set) var sentMilliseconds = 0
    private var pressedAt = Instant.zero
    /// After a release, when the tail ends and the commit goes out.
    private var commitAt: Instant? = nil
    /// The release came and its tail is running: the microphone stays open.
    public var isInTail: Bool { commitAt != nil }
    /// Our commits not yet answered (`committed` or an error), oldest first; `create`:
    /// ask for a response once it is committed.
    private var pendingCommits: [(id: String, create: Bool, sentAt: Instant)] = []

    // The assistant.
    private var responseActive = false
    private var audioPlaying = false
    /// A cut (`.cutPlayback`) holds the downlink until the next reply's audio starts
    /// (`.releasePlayback`).
    private var playbackCut = false
    private var currentResponseID: String? = nil
    private var cancelledResponseID: String? = nil
    /// We sent `response.create` and have not seen its `response.created` yet.
    private var responseRequested = false
    /// A press cancelled the requested response before it was created: the next
    /// `response.created` is that one.
    private var ignoreNextResponse = false
    /// A response exists on the server (created, cancelled or not, and not yet done).
    private var serverResponseOpen = false
    /// A `response.create` waits for the open response's `response.done`.
    public private(set) var createHeld = false
    /// Function calls the model made that have no output yet: the response that
    /// reads them is asked for once the last is answered.
    public private(set) var openToolCalls: [String] = []
    /// Call ids already taken (a call comes in `response.output_item.done` and again in
    /// `response.done`), the most recent `seenToolCallLimit`.
    private var seenToolCalls: [String] = []
    static let seenToolCallLimit = 64
    /// A response is in progress or its audio is playing.
    public var isAssistantSpeaking: Bool { responseActive || audioPlaying }
    /// The server's VAD hears the user (`speech_started` … `speech_stopped`).
    public private(set) var isUserSpeaking = false
    /// Not a quiet moment: the user is talking (button, tail or VAD), or a turn is
    /// being answered (committed and waiting, a response asked for or playing).
    public var isBusy: Bool {
        isTalking || isInTail || isUserSpeaking || isAssistantSpeaking || responseRequested || createHeld
            || pendingCommits.contains { $0.create }
    }
    private var expiresReported = false

    // What the speaker played of the assistant (barge-in, truncate).
    /// The provider's audio heard out of the speaker so far, in ms of its stream, and
    /// where the current stretch of it began (`downlink(heard:spurtStart:)`).
    private var heardMilliseconds = 0
    private var spurtStartMilliseconds: Int? = nil
    /// Where the audible part of what was heard ended (nil: the caller cannot tell).
    private var voiceEndMilliseconds: Int? = nil
    /// The assistant message whose audio plays (from `response.output_item.added`).
    private struct AudioItem {
        var id: String
        var contentIndex: Int
        var responseID: String?
        /// `heardMilliseconds` when its response or its audio started (the start of its
        /// audio when no stretch of received audio began near then).
        var startedAt: Int?
        /// Where its audio began: the first stretch of received audio that began no
        /// more than 500 ms before `startedAt` (RTP and the channel's events race), or
        /// after it. Kept once found: a pause inside the reply starts a later stretch,
        /// which is not where the item began.
        var spurt: Int? = nil
        /// `audio_end_ms` sent for it.
        var truncatedAt: Int?
        /// Its final line, held until its audio has played (or is cut): the server
        /// sends the whole transcript long before the speaker has said it.
        var finalText: String?
    }
    private var audioItem: AudioItem? = nil
    /// Items cut off, and at how many ms of their audio (most recent last, bounded).
    private var truncatedItems: [(id: String, ms: Int)] = []
    /// Characters and seconds of replies played to their end: the speaking rate.
    private var spokenCharacters = 0
    private var spokenMilliseconds = 0

    // Transcripts.
    private struct OpenTranscript {
        var role: RealtimeRole
        var itemID: String
        var text: String
        /// The response the deltas belong to (assistant items), when the server said.
        var responseID: String?
    }
    private var openTranscripts: [OpenTranscript] = []
    /// Items whose final line was given (most recent last), so a later `response.done`
    /// does not repeat them.
    private var finishedItems: [String] = []
    /// Final lines in conversation order: user items wait (from `committed`) for their
    /// transcription; lines behind a waiting item wait for it.
    private struct OrderedLine {
        var role: RealtimeRole
        var itemID: String
        /// nil: the user item's transcription has not come yet.
        var text: String?
        var since: Instant
        /// An assistant item cut off after this many ms of its audio.
        var heard: Int? = nil
    }
    private var ordered: [OrderedLine] = []

    // Client events we sent: (event_id, type), most recent last.
    private var nextEventNumber = 1
    private var recentSent: [(id: String, type: String)] = []

    private var queue: [RealtimeOutput] = []
    private var head = 0

    public init(settings: RealtimeSettings, lines: [String] = [], carried: [CarriedTurn] = []) {
        self.settings = settings
        self.lines = lines
        self.carried = carried
    }

    public init(config: Config) {
        self.init(settings: RealtimeSettings(config: config))
    }

    // MARK: Drive

    public mutating func pollOutput() -> RealtimeOutput {
        guard head < queue.count else { return .none }
        let out = queue[head]
        head &+= 1
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        }
        return out
    }

    /// When `handleTimeout` is due (nil: no timer).
    public var nextDeadline: Instant? {
        var t: Instant? = commitAt
        func earliest(_ u: Instant?) { if let u { t = t.map { min($0, u) } ?? u } }
        if !isConfigured { earliest(updateWarningAt) }
        if let first = pendingCommits.first(where: { $0.create }) { earliest(first.sentAt + Self.commitAnswerTimeout) }
        if let head = ordered.first, head.text == nil, ordered.count > 1 { earliest(head.since + Self.transcriptHold) }
        return t
    }

    public mutating func handleTimeout(now: Instant) {
        self.now = now
        if let t = commitAt, now >= t {
            commitAt = nil
            commit()
        }
        if !isConfigured, let t = updateWarningAt, now >= t {
            updateWarningAt = nil
            emit(.sessionNotConfirmed(waited: settings.sessionUpdateWarning))
            configured()
        }
        if let i = pendingCommits.firstIndex(where: { $0.create }), now >= pendingCommits[i].sentAt + Self.commitAnswerTimeout {
            let waited = now - pendingCommits[i].sentAt
            pendingCommits[i].create = false
            emit(.commitUnconfirmed(waited: waited))
            requestResponse()
        }
        if let head = ordered.first, head.text == nil, ordered.count > 1, now >= head.since + Self.transcriptHold {
            // Its transcription is not coming (or is very late): the lines behind it go.
            ordered[0].text = ""
            flushOrdered()
        }
    }

    // MARK: Inputs

    /// The `oai-events` channel is open: configure the session.
    public mutating func channelOpened(now: Instant) {
        guard !isChannelOpen else { return }
        self.now = now
        isChannelOpen = true
        for update in sessionUpdates() {
            send(update)
            updatesSent += 1
        }
        if updatesSent == 0 {
            configured()  // nothing to configure: the session is as the backend made it
        } else {
            updateWarningAt = now + settings.sessionUpdateWarning
        }
    }

    /// The push-to-talk button went down (or a toggle turned talking on).
    public mutating func press(now: Instant) {
        guard settings.turnDetection == .ptt, isChannelOpen, !isTalking else { return }
        self.now = now
        isTalking = true
        if commitAt != nil {
            // Down again within the tail: the same turn goes on (nothing was committed).
            commitAt = nil
            return
        }
        pressedAt = now
        sentMilliseconds = 0
        // The buffer holds whatever was sent since the last turn (the mute gate's
        // silence): this turn starts empty.
        send(["type": "input_audio_buffer.clear"])
        // A turn still waiting for its commit to be confirmed, or for an open response
        // to end, is talked over: it gets no response.
        for i in pendingCommits.indices { pendingCommits[i].create = false }
        createHeld = false
        interruptAssistant()
    }

    /// Linnet's own voice flag heard the user talk over the assistant (voice mode, full
    /// duplex; the caller debounces the flag and checks the duplex mode, the mute and
    /// the setting). Cuts the response as a press does, without touching the input
    /// buffer: in voice mode the server's VAD owns it, and the user's words are in it.
    /// The server's own VAD may cut the same response a moment later
    /// (`interrupt_response`); a cancel that crosses its `response.done` is refused with
    /// the harmless `response_cancel_not_active`. Returns whether anything was cut
    /// (false: the assistant was not speaking, nothing was sent).
    @discardableResult
    public mutating func localSpeech(now: Instant) -> Bool {
        guard settings.turnDetection == .vad, isChannelOpen, isAssistantSpeaking || responseRequested else { return false }
        self.now = now
        interruptAssistant()
        return true
    }

    /// The wake word heard over the assistant (push-to-talk turns, `AgentCore.wake`):
    /// cuts it as a press does, at the word rather than when the earcon has played and
    /// the turn's press follows (that press clears the input buffer).
    @discardableResult
    public mutating func wakeOverAssistant(now: Instant) -> Bool {
        guard settings.turnDetection == .ptt, isChannelOpen, isAssistantSpeaking || responseRequested else { return false }
        self.now = now
        interruptAssistant()
        return true
    }

    /// Stops the assistant (a press, or local speech over it): `response.cancel` only
    /// while a response is in progress or requested, `output_audio_buffer.clear`, the
    /// state silent at once and the local playback flushed.
    private mutating func interruptAssistant() {
        let requested = responseRequested
        guard isAssistantSpeaking || requested else { return }
        if responseActive || requested {
            // A requested response is cancelled too: the server handles our events in
            // order, so it creates that response and then cancels it.
            send(["type": "response.cancel"])
        }
        // WebRTC only: stop the audio the server is still streaming to us.
        send(["type": "output_audio_buffer.clear"])
        if responseActive || audioPlaying { cancelledResponseID = currentResponseID }
        if requested {
            responseRequested = false
            ignoreNextResponse = true
        }
        let wasPlaying = audioPlaying, wasResponding = responseActive
        setSpeaking(response: false, audio: false)
        queue.append(.cutPlayback)
        playbackCut = true
        // A response cut before its audio began to play was heard not at all: its item
        // is truncated at 0, so the model's context does not hold a reply nobody heard.
        if wasPlaying || wasResponding { truncateHeard(played: wasPlaying) }
    }

    /// The assistant's audio was cut (a barge-in here, or the server's VAD): tell the
    /// server how much of the item the user heard (`conversation.item.truncate`, FIELD:
    /// it also drops the transcript nobody heard from the model's context), once per
    /// item, and give its held final line as the heard part.
    private mutating func truncateHeard(played: Bool = true) {
        guard var item = audioItem, item.truncatedAt == nil else { return }
        let ms = played ? heardOf(item) : 0
        item.truncatedAt = ms
        if truncatedItems.count >= 16 { truncatedItems.removeFirst() }
        truncatedItems.append((item.id, ms))
        if settings.truncatesHeardAudio && !item.id.isEmpty {
            send(["type": "conversation.item.truncate", "item_id": .string(item.id),
                  "content_index": JSONValue(item.contentIndex), "audio_end_ms": JSONValue(ms)])
            emit(.truncated(itemID: item.id, audioEndMilliseconds: ms))
        }
        let held = item.finalText
        item.finalText = nil
        audioItem = item
        if let held { finalLine(role: .assistant, text: held, itemID: item.id) }
    }

    /// Milliseconds of `item`'s audio the speaker has played. Its start is where the
    /// stretch of received audio began when that was near its response's start (RTP
    /// and the channel's events race), else the moment the response or its audio began
    /// (a provider that streams without pause). Its end is where the audible audio
    /// heard ended, when that is known: the event that cuts a reply can come a second
    /// late (the data channel retransmits over a lossy path) while the provider's RTP
    /// goes on with silence, and that silence is not the item's audio. The server
    /// refuses an `audio_end_ms` past what it sent.
    private func heardOf(_ item: AudioItem) -> Int {
        guard let started = item.startedAt else { return 0 }
        let start = item.spurt ?? started
        var end = heardMilliseconds
        if let v = voiceEndMilliseconds { end = min(end, v) }
        return max(0, end - start)
    }

    /// The item's audio begins at the first stretch near or after its start
    /// (`AudioItem.spurt`); called when either changes. A later stretch replaces it
    /// only while nothing has been heard since the start: the one before was the end
    /// of the audio before this item, not its beginning.
    private mutating func placeItemStart() {
        guard var item = audioItem, item.truncatedAt == nil, let started = item.startedAt,
              let s = spurtStartMilliseconds, s >= started - 500, s != item.spurt else { return }
        if item.spurt != nil && heardMilliseconds > started + 200 { return }
        item.spurt = s
        audioItem = item
    }

    /// What was heard of `text` in `ms` of its audio: the words up to the point the
    /// speaking rate puts there (measured on replies played to their end, else
    /// `initialCharactersPerSecond`), cut at a word's end, with "…".
    func heardText(_ text: String, milliseconds ms: Int) -> String {
        let rate = spokenMilliseconds >= 3_000 && spokenCharacters > 0
            ? min(30, max(6, Double(spokenCharacters) * 1000 / Double(spokenMilliseconds)))
            : settings.initialCharactersPerSecond
        let scalars = Array(text.unicodeScalars)
        let want = Int((Double(ms) / 1000 * rate).rounded())
        guard want < scalars.count else { return text }
        var end = want
        // Back to the end of the last whole word heard.
        while end > 0 && scalars[end] != " " { end -= 1 }
        while end > 0 && scalars[end - 1] == " " { end -= 1 }
        guard end > 0 else { return "" }
        var out = ""
        for c in scalars[0..<end] { out.unicodeScalars.append(c) }
        return out + "…"
    }

    /// The push-to-talk button came up (or a toggle turned talking off).
    public mutating func release(now: Instant) {
        guard settings.turnDetection == .ptt, isChannelOpen, isTalking else { return }
        self.now = now
        isTalking = false
        // 100 ms is the service's floor (PROTOCOLS.md); a setting can only raise it.
        guard sentMilliseconds >= max(100, settings.minimumCommitMilliseconds) else {
            // Nothing is sent: the next press clears the buffer anyway, and the server
            // acts on nothing in it without turn detection.
            emit(.tooShort(sentMilliseconds: sentMilliseconds, held: now - pressedAt))
            return
        }
        if settings.pttTailMilliseconds > 0 {
            commitAt = now + .milliseconds(Int64(settings.pttTailMilliseconds))
        } else {
            commit()
        }
    }

    /// A hands-free turn nobody spoke in (`WakeTurn`'s `.abandon`): the press ends with
    /// nothing committed, and what the buffer got (the room's silence) is dropped, so
    /// no answer is made to it.
    public mutating func abandon(now: Instant) {
        guard settings.turnDetection == .ptt, isChannelOpen, isTalking else { return }
        self.now = now
        isTalking = false
        send(["type": "input_audio_buffer.clear"])
    }

    private mutating func commit() {
        let id = send(["type": "input_audio_buffer.commit"])
        if pendingCommits.count >= 8 { pendingCommits.removeFirst() }
        pendingCommits.append((id, true, now))
    }

    /// Asks for a response now, or once the server's open response is done.
    private mutating func requestResponse() {
        if serverResponseOpen || responseRequested {
            createHeld = true
            return
        }
        createHeld = false
        send(["type": "response.create"])
        responseRequested = true
    }

    /// The session is set up as asked (or the wait ended): earlier turns, then the
    /// held lines; the caller opens the microphone after.
    private mutating func configured() {
        guard !isConfigured else { return }
        isConfigured = true
        for turn in carried {
            let content: JSONValue = turn.role == .user ? ["type": "input_text", "text": .string(turn.text)]
                                                        : ["type": "output_text", "text": .string(turn.text)]
            send(["type": "conversation.item.create",
                  "item": ["type": "message", "role": .string(turn.role.rawValue), "content": [content]]])
        }
        for line in lines { queue.append(.send(line)) }
    }

    /// The uplink sent `milliseconds` of audio (one RTP packet's worth, silence
    /// included) toward the provider.
    public mutating func audioSent(milliseconds: Int) {
        guard isTalking, milliseconds > 0 else { return }
        // Saturating: a caller's bad count cannot wrap it negative.
        sentMilliseconds += min(milliseconds, Int(Int32.max) - sentMilliseconds)
    }

    /// How much of the provider's audio the speaker has played out so far (`heard`, ms of
    /// its stream as the device's playback clock counts it) and where the stretch now
    /// playing began (nil: none yet); the caller reports it before each uplink frame.
    public mutating func downlink(heard: Int, spurtStart: Int?, voiceEnd: Int? = nil) {
        heardMilliseconds = max(heardMilliseconds, heard)
        spurtStartMilliseconds = spurtStart
        voiceEndMilliseconds = voiceEnd
        placeItemStart()
    }

    /// A text message arrived on the channel.
    public mutating func received(text: String, now: Instant) {
        received(utf8: Array(text.utf8), now: now)
    }

    /// A message as the data channel delivers it (`DataChannelEvent.message`): text is
    /// parsed from its bytes, so invalid UTF-8 is refused rather than repaired; a binary
    /// message is refused (the protocol has none).
    public mutating func received(message: [UInt8], isText: Bool, now: Instant) {
        if isText {
            received(utf8: message, now: now)
        } else {
            self.now = now
            lastReceived = now
            emit(.malformed("a binary message of \(message.count) bytes (events are JSON text)"))
        }
    }

    private mutating func received(utf8: [UInt8], now: Instant) {
        self.now = now
        lastReceived = now
        let event: JSONValue
        do throws(JSONError) {
            event = try JSONValue.parse(utf8, limits: Self.eventLimits)
        } catch {
            emit(.malformed("invalid JSON: \(error.description)"))
            return
        }
        guard case .object = event else {
            emit(.malformed("the event is not a JSON object"))
            return
        }
        guard let type = event["type"]?.string else {
            emit(.malformed("the event has no string 'type'"))
            return
        }
        handle(type: type, event: event)
    }


    // MARK: Server events

    /// Event types, ids and codes are JSON strings, matched as their bytes (RFC 8259
    /// §8.3): the `switch` through Wire's `~=`, the rest with `bytesEqual`/`sameText`.
    private mutating func handle(type: String, event: JSONValue) {
        switch type {
        case "session.created", "session.updated":
            isSessionReady = true
            emit(.sessionReady(updated: type.bytesEqual("session.updated")))
            if !expiresReported, let at = event["session"]?["expires_at"]?.int64, at > 0 {
                expiresReported = true
                emit(.expires(at: at))
            }
            checkTurnDetection(event, created: type.bytesEqual("session.created"))
            if type.bytesEqual("session.updated") {
                updatesConfirmed += 1
                if updatesConfirmed >= updatesSent { configured() }
            }

        case "error":
            handleError(event)

        case "input_audio_buffer.speech_started":
            isUserSpeaking = true
            emit(.userSpeech(true))
        case "input_audio_buffer.speech_stopped":
            isUserSpeaking = false
            emit(.userSpeech(false))

        case "response.created":
            let id = event["response"]?["id"]?.string
            responseRequested = false
            serverResponseOpen = true
            if ignoreNextResponse {
                // The response a press cancelled before the server had created it.
                ignoreNextResponse = false
                cancelledResponseID = id
                return
            }
            currentResponseID = id
            // Its message item is not named yet (a relay may never name it): its audio
            // is counted from here, or from the stretch of audio that follows.
            audioItem = AudioItem(id: "", contentIndex: 0, responseID: id, startedAt: heardMilliseconds)
            placeItemStart()
            if id == nil || !bytesEqual(id, cancelledResponseID) { setSpeaking(response: true, audio: audioPlaying) }
        case "response.done":
            for item in event["response"]?["output"]?.array ?? [] { functionCall(item) }
            if let u = ProviderUsage.parse(event["response"]?["usage"]) { queue.append(.event(.usage(u))) }
            handleResponseDone(event)
        case "response.output_item.done":
            functionCall(event["item"])
        case "output_audio_buffer.started":
            let id = event["response_id"]?.string
            if id != nil && bytesEqual(id, cancelledResponseID) { return }  // late, we already stopped it
            if var item = audioItem, item.truncatedAt == nil, id == nil || item.responseID == nil || bytesEqual(id, item.responseID) {
                item.startedAt = heardMilliseconds
                item.spurt = nil  // placed again from the audio's own start
                audioItem = item
                placeItemStart()
            }
            if playbackCut {
                playbackCut = false
                queue.append(.releasePlayback)
            }
            setSpeaking(response: responseActive, audio: true)
        case "output_audio_buffer.stopped":
            // The held line first: it is what was just said ("assistant: …", then silent).
            playedToTheEnd()
            setSpeaking(response: responseActive, audio: false)
        case "output_audio_buffer.cleared":
            // The server dropped what it had not sent yet (VAD interruption, or our
            // clear): what is already here must not play on either, nor what it sent
            // before it stopped and is still on its way (a cut, as ours).
            let wasPlaying = audioPlaying
            setSpeaking(response: responseActive, audio: false)
            queue.append(.cutPlayback)
            playbackCut = true
            if wasPlaying { truncateHeard() }

        case "response.output_item.added":
            // The assistant's message: the item a truncate names (its audio is content 0
            // unless a content part says otherwise).
            let item = event["item"]
            guard bytesEqual(item?["type"]?.string, "message"), bytesEqual(item?["role"]?.string, "assistant"),
                  let id = item?["id"]?.string else { return }
            let response = event["response_id"]?.string
            if response != nil && bytesEqual(response, cancelledResponseID) {
                // Cut before its item was named: the truncate goes now, at what was heard.
                if var current = audioItem, current.id.isEmpty, let ms = current.truncatedAt,
                   bytesEqual(response, current.responseID), settings.truncatesHeardAudio {
                    current.id = id
                    audioItem = current
                    send(["type": "conversation.item.truncate", "item_id": .string(id),
                          "content_index": JSONValue(current.contentIndex), "audio_end_ms": JSONValue(ms)])
                    emit(.truncated(itemID: id, audioEndMilliseconds: ms))
                }
                return
            }
            if var current = audioItem, current.id.isEmpty, current.truncatedAt == nil,
               response == nil || current.responseID == nil || bytesEqual(response, current.responseID) {
                // The response's own item: its audio start stays where the response began.
                current.id = id
                audioItem = current
            } else {
                audioItem = AudioItem(id: id, contentIndex: 0, responseID: response, startedAt: heardMilliseconds)
                placeItemStart()
            }
        case "response.content_part.added":
            let kind = event["part"]?["type"]?.string
            if bytesEqual(kind, "audio") || bytesEqual(kind, "output_audio"), var item = audioItem,
               bytesEqual(event["item_id"]?.string, item.id), let index = event["content_index"]?.int64, index >= 0, index < 1024 {
                item.contentIndex = Int(index)
                audioItem = item
            }

        case "input_audio_buffer.committed":
            committed(event)

        case "conversation.item.input_audio_transcription.delta":
            transcriptDelta(event, role: .user, type: type, field: "delta")
        case "conversation.item.input_audio_transcription.completed":
            transcriptDone(event, role: .user, type: type, field: "transcript")
        case "conversation.item.input_audio_transcription.failed":
            if let item = event["item_id"]?.string, let i = ordered.firstIndex(where: { $0.role == .user && $0.itemID.bytesEqual(item) }) {
                ordered[i].text = ""  // nothing to say for it: the lines behind it go on
                flushOrdered()
            }
            let error = event["error"]
            emit(.providerError(code: error?["code"]?.string ?? "transcription_failed",
                                message: error?["message"]?.string ?? "input transcription failed",
                                clientEvent: nil))

        case "response.output_audio_transcript.delta", "response.audio_transcript.delta":
            transcriptDelta(event, role: .assistant, type: type, field: "delta")
        case "response.output_audio_transcript.done", "response.audio_transcript.done":
            transcriptDone(event, role: .assistant, type: type, field: "transcript")
        case "response.output_text.delta", "response.text.delta":
            transcriptDelta(event, role: .assistant, type: type, field: "delta")
        case "response.output_text.done", "response.text.done":
            transcriptDone(event, role: .assistant, type: type, field: "text")

        default:
            break  // rate_limits.updated, conversation.item.*, input_audio_buffer.committed, …
        }
    }

    /// Push-to-talk only works with the server's turn detection off (it would commit and
    /// answer on its own, and our commit would find the buffer empty), and voice mode
    /// only with it on: say so when `session.updated` shows otherwise. (Only the GA
    /// place, `session.audio.input.turn_detection`, is read; absent says nothing.)
    ///
    /// Voice mode that configured no detection of its own keeps the session's, and a
    /// backend (or its client secret) may have made it with none: nothing would ever be
    /// answered. Then it asks for `server_vad` once, from `session.created` or a
    /// `session.updated`, and says so. (`session.created` is the server's state before
    /// our updates, so it is not otherwise judged.)
    private mutating func checkTurnDetection(_ event: JSONValue, created: Bool) {
        guard let td = event["session"]?["audio"]?["input"]?["turn_detection"] else { return }
        switch settings.turnDetection {
        case .ptt where !td.isNull && !created:
            let kind = utf8Prefix(td["type"]?.string ?? "set", maxBytes: 40)
            emit(.settingIgnored("turn_detection is \(kind), push-to-talk asked for null"))
        case .vad where td.isNull:
            if turnDetectionValue() == nil && !askedForVoiceDetection && isChannelOpen {
                askedForVoiceDetection = true
                var input = JSONObject()
                input["turn_detection"] = ["type": .string(VADType.serverVAD.rawValue), "create_response": true, "interrupt_response": true]
                send(Self.update(audioInput: input))
                updatesSent += 1
                emit(.settingIgnored("the session has no voice detection (turn_detection null, as its backend or client secret made it): asked for server_vad, which voice mode needs"))
            } else if !created {
                emit(.settingIgnored("turn_detection is null, VAD mode asked for server_vad"))
            }
        default:
            break
        }
    }

    private mutating func handleError(_ event: JSONValue) {
        guard let error = event["error"], case .object = error else {
            emit(.malformed("error: no 'error' object"))
            return
        }
        let code = error["code"]?.string
        let message = error["message"]?.string ?? ""
        var clientEvent: String? = nil
        if let id = error["event_id"]?.string {
            clientEvent = recentSent.last(where: { $0.id.bytesEqual(id) })?.type
        }
        emit(.providerError(code: code, message: message, clientEvent: clientEvent))
        if bytesEqual(clientEvent, "response.create") {
            // No response will come of it.
            responseRequested = false
            ignoreNextResponse = false
            // Another response is still open (a cancelled one not yet done): ask
            // again when it is, or the user's turn is never answered.
            if bytesEqual(code, "conversation_already_has_active_response") && !isTalking { createHeld = true }
        }
        if bytesEqual(clientEvent, "input_audio_buffer.commit"), let id = error["event_id"]?.string {
            // The commit failed (too little audio, …): no response for the old context.
            pendingCommits.removeAll { $0.id.bytesEqual(id) }
        }
        if bytesEqual(code, "session_expired") {
            emit(.sessionExpired(message: message))
        }
    }

    /// A `function_call` item the model completed (GA: `response.output_item.done`, and
    /// again in `response.done`'s output): reported once per call id. One cut off
    /// (`status` other than completed: the response was cancelled mid-arguments) is not
    /// a call.
    private mutating func functionCall(_ item: JSONValue?) {
        guard let item, bytesEqual(item["type"]?.string, "function_call") else { return }
        if let status = item["status"]?.string, !bytesEqual(status, "completed") { return }
        guard let callID = item["call_id"]?.string, !callID.utf8.isEmpty, callID.utf8.count <= 128,
              let name = item["name"]?.string, name.utf8.count <= 128 else {
            return emit(.malformed("a function_call item without a usable call_id and name"))
        }
        guard !seenToolCalls.containsBytes(equalTo: callID) else { return }
        seenToolCalls.append(callID)
        if seenToolCalls.count > Self.seenToolCallLimit { seenToolCalls.removeFirst() }
        openToolCalls.append(callID)
        emit(.toolCall(callID: callID, name: name, arguments: item["arguments"]?.string ?? ""))
    }

    /// The answer to a function call (the tool's result, or an error object): sent as a
    /// `function_call_output` item; once no call of the model's is left open, a
    /// response is asked for so the model reads them (held while one is in progress).
    /// A call from an earlier session (a rollover while the tool ran) is not this one's.
    public mutating func toolOutput(callID: String, output: String, now: Instant) {
        self.now = now
        guard isChannelOpen, let i = openToolCalls.firstIndex(where: { $0.bytesEqual(callID) }) else { return }
        openToolCalls.remove(at: i)
        send(["type": "conversation.item.create",
              "item": ["type": "function_call_output", "call_id": .string(callID), "output": .string(output)]])
        if openToolCalls.isEmpty { requestResponse() }
    }

    private mutating func handleResponseDone(_ event: JSONValue) {
        let response = event["response"]
        // Finish what the response said (a relay forwarding only response.done, or a
        // response cancelled before its transcript's done event).
        if let output = response?["output"]?.array {
            for item in output {
                guard bytesEqual(item["role"]?.string, "assistant"), let id = item["id"]?.string else { continue }
                var said = ""
                for part in item["content"]?.array ?? [] {
                    if let t = part["transcript"]?.string ?? part["text"]?.string { said += t }
                }
                finish(role: .assistant, itemID: id, text: said.isEmpty ? nil : said)
            }
        }
        // What a response said before it was cancelled or cut short, when its items'
        // transcripts did not come with it.
        if let id = response?["id"]?.string {
            let pending = openTranscripts.filter { $0.role == .assistant && bytesEqual($0.responseID, id) }
            for t in pending { finish(role: .assistant, itemID: t.itemID, text: nil) }
        }
        if bytesEqual(response?["status"]?.string, "failed") {
            let error = response?["status_details"]?["error"]
            emit(.providerError(code: error?["code"]?.string ?? "response_failed",
                                message: error?["message"]?.string ?? "the response failed", clientEvent: nil))
        }
        let id = response?["id"]?.string
        // A done for an older response than the current one leaves the current one on.
        if id == nil || currentResponseID == nil || bytesEqual(id, currentResponseID) {
            setSpeaking(response: false, audio: audioPlaying)
        }
        if id == nil || currentResponseID == nil || bytesEqual(id, currentResponseID) || bytesEqual(id, cancelledResponseID) {
            serverResponseOpen = false
            if createHeld && !responseRequested {
                createHeld = false
                requestResponse()
            }
        }
    }

    /// `input_audio_buffer.committed`: our oldest pending commit is in (a commit the
    /// server made itself, in VAD mode, matches none), and the user item takes its
    /// place in the transcript order.
    private mutating func committed(_ event: JSONValue) {
        if settings.turnDetection == .ptt, !pendingCommits.isEmpty {
            let c = pendingCommits.removeFirst()
            if c.create { requestResponse() }
        }
        // Only where user transcripts will come (a transcription model is set), or a
        // line would wait for nothing.
        guard settings.transcriptionModel != nil, let item = event["item_id"]?.string, !item.isEmpty,
              !finishedItems.containsBytes(equalTo: item), !ordered.contains(where: { $0.itemID.bytesEqual(item) }) else { return }
        if ordered.count >= Self.maxOrderedLines {
            ordered[0].text = ordered[0].text ?? ""
            flushOrdered()
        }
        let line = OrderedLine(role: .user, itemID: item, text: nil, since: now)
        if let previous = event["previous_item_id"]?.string, let i = ordered.firstIndex(where: { $0.itemID.bytesEqual(previous) }) {
            ordered.insert(line, at: i + 1)
        } else {
            ordered.append(line)
        }
    }

    // MARK: Transcripts

    private mutating func transcriptDelta(_ event: JSONValue, role: RealtimeRole, type: String, field: String) {
        // An input transcription delta may come without text (`delta` absent or null):
        // nothing new, not a broken event.
        if role == .user, event[field] == nil || event[field]?.isNull == true { return }
        guard let delta = event[field]?.string else {
            emit(.malformed("\(type): no string '\(field)'"))
            return
        }
        let itemID = event["item_id"]?.string ?? ""
        if finishedItems.containsBytes(equalTo: itemID) && !itemID.isEmpty { return }
        if role == .assistant, !itemID.isEmpty, var item = audioItem, item.id.isEmpty, item.truncatedAt == nil {
            item.id = itemID  // a relay that names the item only here
            audioItem = item
        }
        let index: Int
        if let i = openTranscripts.firstIndex(where: { $0.role == role && $0.itemID.bytesEqual(itemID) }) {
            index = i
        } else {
            if openTranscripts.count >= Self.maxOpenTranscripts { openTranscripts.removeFirst() }
            openTranscripts.append(OpenTranscript(role: role, itemID: itemID, text: "",
                                                  responseID: event["response_id"]?.string))
            index = openTranscripts.count - 1
        }
        let room = Self.maxTranscriptBytes - openTranscripts[index].text.utf8.count
        let piece = utf8Prefix(delta, maxBytes: room)
        guard !piece.isEmpty else { return }  // full, or an empty delta: nothing new to show
        openTranscripts[index].text += piece
        emit(.transcript(role: role, text: openTranscripts[index].text, final: false, itemID: itemID))
    }

    private mutating func transcriptDone(_ event: JSONValue, role: RealtimeRole, type: String, field: String) {
        var text: String? = nil
        if let value = event[field] {
            guard let s = value.string else {
                emit(.malformed("\(type): '\(field)' is not a string"))
                return
            }
            text = s
        }
        finish(role: role, itemID: event["item_id"]?.string ?? "", text: text)
    }

    /// The one final line of an item: `text` when given, else what its deltas said.
    private mutating func finish(role: RealtimeRole, itemID: String, text: String?) {
        if !itemID.isEmpty && finishedItems.containsBytes(equalTo: itemID) { return }
        var line = text
        if let i = openTranscripts.firstIndex(where: { $0.role == role && $0.itemID.bytesEqual(itemID) }) {
            if line == nil { line = openTranscripts[i].text }
            openTranscripts.remove(at: i)
        }
        guard let found = line else { return }
        let capped = utf8Prefix(found, maxBytes: Self.maxTranscriptBytes)
        if !itemID.isEmpty {
            if finishedItems.count >= 32 { finishedItems.removeFirst() }
            finishedItems.append(itemID)
        }
        guard capped.utf8.contains(where: { $0 > 32 }) else {
            // Empty or blank: no line, but a user item waiting for it is done.
            if role == .user, let i = ordered.firstIndex(where: { $0.role == .user && $0.itemID.bytesEqual(itemID) && $0.text == nil }) {
                ordered[i].text = ""
                flushOrdered()
            }
            return
        }
        if role == .assistant, !itemID.isEmpty, var item = audioItem, item.id.bytesEqual(itemID), item.truncatedAt == nil, audioPlaying {
            // Still being said: the line waits for the end of its audio, or for a cut.
            item.finalText = capped
            audioItem = item
            return
        }
        finalLine(role: role, text: capped, itemID: itemID)
    }

    /// The assistant's audio played to its end (`output_audio_buffer.stopped`): its held
    /// line goes out whole, and its length and duration tune the speaking rate.
    private mutating func playedToTheEnd() {
        guard var item = audioItem, item.truncatedAt == nil else { return }
        let ms = heardOf(item)
        if let text = item.finalText {
            item.finalText = nil
            audioItem = item
            // Audio still in the device's buffer is not yet counted: a rate from a
            // reply under a second would be mostly that error.
            if ms >= 1000 {
                spokenCharacters += text.unicodeScalars.count
                spokenMilliseconds += ms
            }
            finalLine(role: .assistant, text: text, itemID: item.id)
        }
    }

    /// A final line takes its place: a user item's own, else after everything so far.
    /// An assistant item the user cut off gives only what was heard of it.
    private mutating func finalLine(role: RealtimeRole, text: String, itemID: String) {
        var heard: Int? = nil
        var text = text
        if role == .assistant, !itemID.isEmpty, let cut = truncatedItems.last(where: { $0.id.bytesEqual(itemID) }) {
            heard = cut.ms
            text = heardText(text, milliseconds: cut.ms)
            // Cut before its first word ended: the user heard nothing of it to log.
            if text.isEmpty { return }
        }
        if role == .user, !itemID.isEmpty, let i = ordered.firstIndex(where: { $0.role == .user && $0.itemID.bytesEqual(itemID) && $0.text == nil }) {
            ordered[i].text = text
        } else if ordered.isEmpty {
            emitLine(role: role, text: text, itemID: itemID, heard: heard)
            return
        } else {
            if ordered.count >= Self.maxOrderedLines {
                ordered[0].text = ordered[0].text ?? ""
                flushOrdered()
            }
            ordered.append(OrderedLine(role: role, itemID: itemID, text: text, since: now, heard: heard))
        }
        flushOrdered()
    }

    private mutating func emitLine(role: RealtimeRole, text: String, itemID: String, heard: Int?) {
        if let heard {
            emit(.interrupted(text: text, heardMilliseconds: heard, itemID: itemID))
        } else {
            emit(.transcript(role: role, text: text, final: true, itemID: itemID))
        }
    }

    /// Gives the lines from the front whose turn it is.
    private mutating func flushOrdered() {
        while let first = ordered.first, let text = first.text {
            ordered.removeFirst()
            if !text.isEmpty { emitLine(role: first.role, text: text, itemID: first.itemID, heard: first.heard) }
        }
        // A front item that has waited its time holds nothing back any more.
        if let first = ordered.first, first.text == nil, ordered.count > 1, now >= first.since + Self.transcriptHold {
            ordered[0].text = ""
            flushOrdered()
        }
    }

    // MARK: Helpers

    private mutating func setSpeaking(response: Bool, audio: Bool) {
        let was = isAssistantSpeaking
        responseActive = response
        audioPlaying = audio
        if isAssistantSpeaking != was { emit(.speaking(isAssistantSpeaking)) }
    }

    @discardableResult
    private mutating func send(_ event: JSONValue) -> String {
        let type = event["type"]?.string ?? ""
        let id = "linnet-\(nextEventNumber)"
        nextEventNumber &+= 1
        // `type` first, then our id, then the event's own members.
        var object = JSONObject()
        object["type"] = .string(type)
        object["event_id"] = .string(id)
        for member in event.object ?? JSONObject() where !member.key.bytesEqual("type") {
            object[member.key] = member.value
        }
        if recentSent.count >= 16 { recentSent.removeFirst() }
        recentSent.append((id, type))
        queue.append(.send(JSONValue.object(object).serializedString()))
        return id
    }

    private mutating func emit(_ event: RealtimeEvent) {
        queue.append(.event(event))
    }
}

/// The longest prefix of `s` of at most `maxBytes` UTF-8 bytes that ends on a scalar
/// boundary.
public func utf8Prefix(_ s: String, maxBytes: Int) -> String {
    if s.utf8.count <= maxBytes { return s }
    var out = ""
    var used = 0
    for scalar in s.unicodeScalars {
        let n = UTF8.width(scalar)
        if used + n > maxBytes { break }
        out.unicodeScalars.append(scalar)
        used += n
    }
    return out
}
