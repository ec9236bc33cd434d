import Wire
import Codec
import RTP

/// Encodes uplink frames and decodes downlink packets for one call.
///
/// Drive contract: `encode` once per uplink frame (`clock.samples` samples); `received`
/// for every packet the peer hands over; `playout(now:into:)` whenever the speaker side
/// has room for another frame. Nothing here reads a clock or touches a device.
public final class MediaPath {
    public let clock: FrameClock
    let encoder: OpusEncoder
    let decoder: OpusDecoder
    public private(set) var jitter: JitterBuffer
    public private(set) var stats = MediaStats()
    /// Opus payload bytes encoded (for the bitrate in stats lines).
    public private(set) var bytesSent = 0
    /// The jitter buffer's target delay now (for the stats line).
    public var jitterTarget: Duration { jitter.targetDelay }
    /// Whether any packet has arrived (before it, `playout` has nothing to give).
    public private(set) var receiving = false
    /// Samples of the far end's stream handed out by `playout`: decoded, recovered and
    /// concealed frames (a lost packet's time is still the stream's), not the silence
    /// played while nothing is buffered. What a barge-in measures the reply's audio in.
    public private(set) var streamSamples = 0
    /// Whether the last `playout` frame was concealment of a lost packet (not decoded,
    /// nor recovered by FEC): the stream's time, but not the far end's sound, so what
    /// the speaker played of a reply does not end on it.
    public private(set) var lastConcealed = false
    /// While set, a cut's hold (`cutPlayback`): until then what arrives is not played.
    public private(set) var cutUntil: Instant? = nil
    /// While set, a duck (`duckPlayback`): the user may be cutting in, so what plays is
    /// silenced, but the reply goes on and is heard again when the duck ends.
    public private(set) var ducked = false
    /// Frames played since the last quiet one.
    var sinceQuiet = 0
    var lastQuiet = false
    // For the old array API.
    var uplinkPacket = [UInt8](repeating: 0, count: 1275)
    var downlink: [Int16]

    /// A decoded frame whose RMS is below this (−40 dBFS) is quiet: a frame dropped or
    /// repeated there is not heard as a cut (the jitter buffer corrects drift only then).
    public static let quietMeanSquare: Int64 = 328 * 328
    /// After this long without a quiet frame (continuous music, a tone) the drift
    /// correction is let through anyway: one cut a second at most, against a delay that
    /// would otherwise grow without bound.
    public static let forceCorrectionAfter: Duration = .seconds(5)

    public init(_ settings: MediaSettings = MediaSettings()) throws(MediaError) {
        clock = try FrameClock(milliseconds: settings.frameMilliseconds, sampleRate: settings.rate)
        do throws(CodecError) {
            encoder = try OpusEncoder(sampleRate: Int32(settings.rate), channels: 1)
            try encoder.setBitrate(settings.bitrate)
            try encoder.setComplexity(settings.complexity)
            // FEC costs bits only when the receiver reports loss (RFC 6716 §2.1.7); 10 % is
            // the loss it is tuned for until RTCP says otherwise.
            try encoder.setFEC(settings.fec, expectedLossPercent: settings.fec ? 10 : 0)
            try encoder.setDTX(settings.dtx)
            decoder = try OpusDecoder(sampleRate: Int32(settings.rate), channels: 1)
        } catch {
            throw .codec(error)
        }
        // The far end's frame length is learnt from its timestamps; ours is the guess.
        jitter = JitterBuffer(configuration: JitterBufferConfiguration(defaultFrameTicks: Int64(clock.rtpTicks)))
        downlink = [Int16](repeating: 0, count: clock.maxPacketSamples)
    }

    // MARK: Uplink

    /// Encodes one frame (`clock.samples` samples) into `packet`; the payload length,
    /// or nil when the encoder refused (the frame is then skipped: RTP time moves on).
    public func encode(_ frame: UnsafeBufferPointer<Int16>, into packet: UnsafeMutableRawBufferPointer) -> Int? {
        guard let n = try? encoder.encode(frame, into: packet) else {
            stats.encodeErrors += 1
            return nil
        }
        stats.framesSent += 1
        bytesSent += n
        return n
    }

    /// The same into an array of its own (tests, tools).
    public func encode(_ frame: [Int16]) -> [UInt8]? {
        let n: Int? = frame.withUnsafeBufferPointer { f in uplinkPacket.withUnsafeMutableBytes { encode(f, into: $0) } }
        return n.map { Array(uplinkPacket[0..<$0]) }
    }

    // MARK: Downlink

    /// A cut's hold lasts until the next reply's audio starts, and at most this long: a
    /// provider that never says so is heard again after it, rather than never. A next
    /// reply comes after the words that cut this one and the server's end-of-turn
    /// silence (500 ms by default), so no reply starts within it.
    public static let cutHold: Duration = .seconds(1)

    /// After a pull that found nothing to play (0 samples), the next comes this much
    /// later: AudioIO plays a 10 ms piece of silence and asks again.
    public static let idlePull: Duration = .milliseconds(10)

    /// Barge-in: drops what the jitter buffer holds, so the cut is heard at once, and
    /// silences whatever arrives until `releasePlayback` (or `cutHold`): the rest of the
    /// reply the server streams until it hears the clear. Packets still go through the
    /// jitter buffer and the decoder, so both are where the stream is when the next
    /// reply's audio starts.
    public func cutPlayback(now: Instant) {
        jitter.discardBuffered()
        cutUntil = now + MediaPath.cutHold
        ducked = false
    }

    /// A tentative barge-in (`AgentCore.localVoice`): while on, frames are played out
    /// as usual (decoded, the jitter buffer's clock moving on) and silenced, so the
    /// speaker falls quiet as soon as the user's voice is flagged. Off again, the reply
    /// plays on from where it has got to; the frames played silent are not replayed
    /// (a duck lasts less than the barge-in debounce, a syllable at most).
    public func duckPlayback(_ on: Bool) { ducked = on }

    public func releasePlayback() { cutUntil = nil }

    /// A received packet (extended sequence number, RTP timestamp, its Opus payload,
    /// which the jitter buffer keeps as it is).
    public func received(sequence: Int64, timestamp: UInt32, payload: [UInt8], arrival: Instant) {
        receiving = true
        jitter.insert(sequence: sequence, timestamp: timestamp, payload: payload, arrival: arrival)
    }

    /// The next frame to play (decoded, FEC-recovered or concealed) into `out`, which
    /// must hold `clock.maxPacketSamples`; returns the samples written, 0 before the
    /// first packet.
    public func playout(now: Instant, into out: UnsafeMutableBufferPointer<Int16>) -> Int {
        guard receiving else {
            // The speaker side plays 10 ms of silence of its own and asks again (AudioIO's
            // piece): the pulls' phase for the first packet's place.
            jitter.idle(now: now, nextPullIn: MediaPath.idlePull)
            return 0
        }
        // Held after a cut: decoded as usual, then silenced. Skipping the decoding would
        // leave the decoder's state at the cut reply's last frame, and the first frame
        // decoded after the hold would carry a blip of it (heard: 50 ms, a second after
        // the cut).
        if let until = cutUntil, now >= until { cutUntil = nil }
        let held = cutUntil != nil || ducked
        let decoder = self.decoder
        // A concealed (or FEC-recovered) frame is as long as the far end's frames, which
        // the jitter buffer learns from their timestamps.
        let conceal = max(1, min(Int(jitter.frameLength) * clock.sampleRate / FrameClock.rtpClockRate, out.count))
        // What a pop with no packet plays: a frame of concealment, half a frame for a
        // half pull (`JitterBuffer.halfPull`). Read after the pop.
        func silenceLength() -> Int { jitter.lastPopWasHalf ? max(1, conceal / 2) : conceal }
        // Nil when the decoder refused: each caller below counts it or falls back to
        // concealment, and to silence when even that is refused.
        func decode(_ payload: [UInt8]?, fec: Bool) -> Int? {
            if let payload {
                // A packet's own length (FEC recovers the previous frame: the length of
                // a concealed one).
                let length = fec ? conceal : min(payload.withUnsafeBytes { opusPacketSamples($0) }.map { $0 * clock.sampleRate / 48_000 } ?? conceal, out.count)
                return try? payload.withBytes { (b: UnsafeRawBufferPointer) throws(CodecError) in
                    try decoder.decode(b, into: UnsafeMutableBufferPointer(rebasing: out[0..<length]), fec: fec)
                }
            }
            return try? decoder.decode(nil, into: UnsafeMutableBufferPointer(rebasing: out[0..<silenceLength()]))
        }
        let quiet = lastQuiet || sinceQuiet >= Int(MediaPath.forceCorrectionAfter.milliseconds) / clock.milliseconds
        let before = jitter.counters
        var n: Int
        var stream = true
        lastConcealed = false
        switch jitter.pop(now: now, quiet: quiet) {
        case .packet(let p):
            if let m = decode(p.payload, fec: false) {
                n = m
                stats.framesDecoded += 1
            } else {
                stats.decodeErrors += 1
                n = decode(nil, fec: false) ?? 0
            }
        case .lost(let useFEC):
            if useFEC, let next = jitter.nextPayload, let m = decode(next, fec: true) {
                n = m
                stats.fecRecovered += 1
            } else {
                n = decode(nil, fec: false) ?? 0
                stats.concealed += 1
                lastConcealed = true
            }
        case .empty:
            n = decode(nil, fec: false) ?? 0
            stream = false
        }
        if n == 0 {
            // The decoder refused even concealment: play silence of a frame's length.
            n = silenceLength()
            for i in 0..<n { out[i] = 0 }
        }
        if held {
            for i in 0..<n { out[i] = 0 }
            lastConcealed = false
        }
        if stream { streamSamples += n }
        let after = jitter.counters
        stats.driftDropped += after.driftDropped - before.driftDropped
        stats.driftInserted += after.driftInserted - before.driftInserted
        stats.starved += after.starved - before.starved
        noteLevel(UnsafeBufferPointer(rebasing: out[0..<n]))
        return n
    }

    /// Decodes one packet straight into `out`, without the jitter buffer: for offline
    /// conversion, where packets come in order and on time by construction. Returns the
    /// samples written, nil when the decoder refused.
    public func decode(_ packet: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<Int16>) -> Int? {
        guard let n = try? decoder.decode(packet, into: out) else {
            stats.decodeErrors += 1
            return nil
        }
        stats.framesDecoded += 1
        return n
    }

    /// The same as a new array (tests, tools); nil before the first packet.
    public func playout(now: Instant) -> [Int16]? {
        let n = downlink.withUnsafeMutableBufferPointer { playout(now: now, into: $0) }
        return n == 0 ? nil : Array(downlink[0..<n])
    }

    /// Whether the frame just played was quiet (the next pull may then correct drift).
    func noteLevel(_ frame: UnsafeBufferPointer<Int16>) {
        var sum: Int64 = 0
        for s in frame { sum &+= Int64(s) &* Int64(s) }
        lastQuiet = frame.isEmpty || sum / Int64(frame.count) < MediaPath.quietMeanSquare
        sinceQuiet = lastQuiet ? 0 : sinceQuiet + 1
    }
}
