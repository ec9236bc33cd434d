// What the provider says each response cost: OpenAI Realtime's `response.done` carries
// `usage` (input and output tokens by modality, and the cached part of the input;
// platform.openai.com, Realtime server events, `response.done`). Counted per run for
// the stats line, the status file and the metrics. Pure.
import Wire
import JSON

public struct ProviderUsage: Sendable, Equatable {
    public var inputTextTokens = 0
    public var inputAudioTokens = 0
    public var inputCachedTokens = 0
    public var outputTextTokens = 0
    public var outputAudioTokens = 0
    /// Responses that reported usage.
    public var responses = 0

    public init() {}

    public var inputTokens: Int { inputTextTokens + inputAudioTokens }
    public var outputTokens: Int { outputTextTokens + outputAudioTokens }
    public var totalTokens: Int { inputTokens + outputTokens }

    /// One response's `usage`, or nil when it has none that can be used. A count that
    /// is not a whole number from 0 to `maxTokens` (a relay's junk, a lie) makes the
    /// whole report unusable: a cap must not be moved by nonsense.
    public static func parse(_ usage: JSONValue?) -> ProviderUsage? {
        guard let usage, usage.object != nil else { return nil }
        func count(_ v: JSONValue?) -> Int?? {
            guard let v else { return .some(nil) }
            guard let n = v.int, n >= 0, n <= maxTokens else { return nil }
            return .some(n)
        }
        let inDetails = usage["input_token_details"], outDetails = usage["output_token_details"]
        guard let inText = count(inDetails?["text_tokens"]), let inAudio = count(inDetails?["audio_tokens"]),
              let cached = count(inDetails?["cached_tokens"]), let outText = count(outDetails?["text_tokens"]),
              let outAudio = count(outDetails?["audio_tokens"]), let input = count(usage["input_tokens"]),
              let output = count(usage["output_tokens"]) else { return nil }
        var u = ProviderUsage()
        u.responses = 1
        // By modality where the details say; otherwise the totals count as text.
        u.inputTextTokens = inText ?? (inAudio == nil ? input ?? 0 : 0)
        u.inputAudioTokens = inAudio ?? 0
        u.inputCachedTokens = min(cached ?? 0, u.inputTokens)
        u.outputTextTokens = outText ?? (outAudio == nil ? output ?? 0 : 0)
        u.outputAudioTokens = outAudio ?? 0
        return u
    }

    /// More than any single response could report (a Realtime session's context is
    /// some 32 thousand tokens).
    public static let maxTokens = 10_000_000

    public static func += (a: inout ProviderUsage, b: ProviderUsage) {
        a.inputTextTokens += b.inputTextTokens
        a.inputAudioTokens += b.inputAudioTokens
        a.inputCachedTokens += b.inputCachedTokens
        a.outputTextTokens += b.outputTextTokens
        a.outputAudioTokens += b.outputAudioTokens
        a.responses += b.responses
    }
}
