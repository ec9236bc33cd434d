/// Which of the samples queued for the speaker were the far end's stream, so that what
/// the speaker has played can be told in the stream's own time: how much of a reply the
/// user heard before cutting in (`conversation.item.truncate`'s `audio_end_ms`).
///
/// The loop queues audio for the playback thread in stretches (one `playout` each: a
/// decoded or concealed frame of the stream, or silence while nothing is buffered) and
/// records each here with the ring position it ends at. The playback side says up to
/// which ring position the speaker has played (Devices' `PlaybackPipeline
/// .heardPosition`, by the device's own clock); this turns that into stream samples.
///
/// A "spurt" is a stretch of audible stream after at least `spurtGap` of silence: where a
/// reply's audio began (its data-channel events race the RTP, so the stretch marks the
/// start better than the event). Silence is nothing to play, or stream the caller marks
/// inaudible: a provider may send silent frames between replies rather than nothing.
///
/// The "voice end" is where the last audible stream the speaker played ended. A reply's
/// audio is over there even if its end event is late (the data channel retransmits on a
/// lossy path, RTP does not wait), so a cut after it must not count the silence that
/// followed as heard reply.
///
/// Pure: positions and counts in, counts out; time enters only through the positions.
public struct PlayoutLedger: Sendable {
    /// The pipeline rate (samples a second).
    public let rate: Int
    /// Silence that ends a spurt: 200 ms (a reply's own pauses are shorter, and the gap
    /// between two replies is longer).
    public let spurtGap: Int
    /// The stream's samples queued so far.
    public private(set) var streamTotal = 0
    /// `streamTotal` at the first sample of the current spurt (nil: no stream yet).
    public private(set) var spurtStart: Int? = nil
    /// `streamTotal` at the end of the newest audible stretch queued.
    public private(set) var voiceEndTotal = 0
    var silentRun = 0
    /// The newest stretches (end position, samples, stream samples, stream total after
    /// it, whether it was audible, `voiceEndTotal` after it); older ones have been heard
    /// (the queue is some tens of ms).
    var ends: [Int]
    var lengths: [Int]
    var streams: [Int]
    var totals: [Int]
    var audibles: [Bool]
    var voiceEnds: [Int]
    var next = 0
    var count = 0
    static let kept = 64

    public init(rate: Int) {
        self.rate = rate
        spurtGap = rate / 5
        ends = [Int](repeating: 0, count: PlayoutLedger.kept)
        lengths = ends
        streams = ends
        totals = ends
        voiceEnds = ends
        audibles = [Bool](repeating: false, count: PlayoutLedger.kept)
    }

    /// A stretch of `samples` was queued, ending at ring position `end`; the first
    /// `stream` of them are the far end's stream (0 or all of them: one playout each),
    /// `audible` unless the caller found them silent.
    public mutating func queued(end: Int, samples: Int, stream: Int, audible: Bool = true) {
        let stream = max(0, min(stream, samples))
        let voiced = stream > 0 && audible
        if voiced {
            if spurtStart == nil || silentRun >= spurtGap { spurtStart = streamTotal }
            silentRun = 0
        } else {
            silentRun += samples
        }
        streamTotal += stream
        if voiced { voiceEndTotal = streamTotal }
        ends[next] = end
        lengths[next] = samples
        streams[next] = stream
        totals[next] = streamTotal
        audibles[next] = voiced
        voiceEnds[next] = voiceEndTotal
        next = (next + 1) % PlayoutLedger.kept
        count = min(count + 1, PlayoutLedger.kept)
    }

    /// Stream samples the speaker has played when it has played up to ring `position`.
    /// A position older than every stretch kept answers where the oldest kept one
    /// began: at most what was heard.
    public func heardStream(atRing position: Int) -> Int {
        // Oldest first: the first stretch that ends past the position is being played.
        for k in 0..<count {
            let i = slot(k)
            guard ends[i] > position else { continue }
            let before = totals[i] - streams[i]
            let start = ends[i] - lengths[i]
            return before + max(0, min(streams[i], position - start))
        }
        return streamTotal
    }

    /// Where the audible stream the speaker has played up to ring `position` ended, in
    /// stream samples: `heardStream(atRing:)` while a voiced stretch plays, else the end
    /// of the last one before it.
    public func heardVoiceEnd(atRing position: Int) -> Int {
        for k in 0..<count {
            let i = slot(k)
            guard ends[i] > position else { continue }
            let start = ends[i] - lengths[i]
            let into = max(0, min(streams[i], position - start))
            if audibles[i] { return totals[i] - streams[i] + into }
            // Silent: a silent stretch leaves the voice's end where the ones before it did.
            return voiceEnds[i]
        }
        return voiceEndTotal
    }

    /// A flush: whatever was queued past ring `position` (not yet heard) will not be
    /// played, so it is no longer audible and the voice's end stays where it was
    /// heard. (Its stream samples still count: the stream's clock moved on by them.)
    public mutating func dropped(atRing position: Int) {
        let v = heardVoiceEnd(atRing: position)
        for k in 0..<count {
            let i = slot(k)
            guard ends[i] > position else { continue }
            audibles[i] = false
            voiceEnds[i] = v
        }
        voiceEndTotal = v
    }

    /// The slot of the `k`th stretch kept, oldest first.
    private func slot(_ k: Int) -> Int { (next - count + k + PlayoutLedger.kept) % PlayoutLedger.kept }

    public func milliseconds(_ samples: Int) -> Int { samples * 1000 / max(rate, 1) }
}
