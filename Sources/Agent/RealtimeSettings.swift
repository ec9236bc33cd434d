// What the device asks of the provider's Realtime session: the figures `session.update`
// is built from (SessionUpdate.swift) and the conversation's own timing (the commit's
// floor, the push-to-talk tail, the wait for `session.updated`). A plain value, filled
// from `Config` or by tests, so the conversation itself never reads configuration.
import Wire
import JSON
import Settings

/// What the device asks of the provider's session (`session.update`).
public struct RealtimeSettings: Sendable, Equatable {
    /// System instructions; nil leaves the server's (or the backend's) instructions.
    public var instructions: String?
    /// The output voice (`marin`, `alloy`, …); nil leaves the server's.
    public var voice: String?
    /// The input transcription model (`gpt-4o-mini-transcribe`, `whisper-1`); nil sends
    /// no transcription setting, and the server then sends no user transcripts.
    public var transcriptionModel: String?
    /// Push-to-talk (`turn_detection: null`) or the server's VAD (`server_vad`).
    public var turnDetection: TurnDetection
    /// The least audio (ms, as sent) a release commits; shorter presses are `.tooShort`.
    /// Values below 100 (the service's floor) act as 100.
    public var minimumCommitMilliseconds: Int
    /// How long after a release the commit waits (`ptt-tail-ms`): the last 100–200 ms
    /// of speech are still in the capture pipeline and on the network when the button
    /// comes up, and a commit that overtakes them cuts the end of the sentence (or
    /// finds less than 100 ms). The microphone stays open for the tail.
    public var pttTailMilliseconds: Int
    /// How long after our `session.update` a `session.updated` may take before a warning
    /// (and before the device stops waiting for it: see `isConfigured`).
    public var sessionUpdateWarning: Duration
    /// Voice mode: the kind of detection asked for; nil (with no threshold or silence
    /// set either) sends no `turn_detection`, so what the backend chose survives.
    public var vadType: VADType? = nil
    /// Function declarations offered in `session.update` (`tools`, with `tool_choice`
    /// "auto"); empty: none are sent, so a backend's own tools stay.
    public var tools: [JSONValue] = []
    /// `server_vad` only: `threshold` (0–1) and `silence_duration_ms`; nil: not sent.
    public var vadThreshold: Double? = nil
    public var vadSilenceMilliseconds: Int? = nil
    /// `audio.input.noise_reduction`; nil: not sent, `.off`: null.
    public var noiseReduction: NoiseReduction? = nil
    /// Whether a cut of the assistant (a press, Linnet's voice flag, the server's own
    /// VAD clearing its output) is followed by `conversation.item.truncate` with what the
    /// speaker actually played. The direct OpenAI route: a backend may not relay it.
    public var truncatesHeardAudio = false
    /// How fast the assistant is taken to speak, in characters a second, until replies
    /// played to their end have measured it (`heardText`): about 150 words a minute.
    public var initialCharactersPerSecond = 15.0

    public init(instructions: String? = nil, voice: String? = nil, transcriptionModel: String? = nil,
                turnDetection: TurnDetection = .ptt, minimumCommitMilliseconds: Int = 100,
                pttTailMilliseconds: Int = 0, sessionUpdateWarning: Duration = .seconds(2)) {
        self.instructions = instructions
        self.voice = voice
        self.transcriptionModel = transcriptionModel
        self.turnDetection = turnDetection
        self.minimumCommitMilliseconds = minimumCommitMilliseconds
        self.pttTailMilliseconds = pttTailMilliseconds
        self.sessionUpdateWarning = sessionUpdateWarning
    }

    /// The provider keys of `linnet run`'s config; turn detection is the effective one
    /// (`ptt` with a button, else `vad`).
    public init(config: Config) {
        self.init(instructions: config.instructions, voice: config.voice,
                  transcriptionModel: config.transcriptionModel,
                  turnDetection: config.effectiveTurnDetection, pttTailMilliseconds: config.pttTailMS)
        vadType = config.vadType
        vadThreshold = config.vadThreshold
        vadSilenceMilliseconds = config.vadSilenceMS
        noiseReduction = config.noiseReduction
    }
}
