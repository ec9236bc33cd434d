import Testing
import Foundation
import Wire
import RTP
import Codec
@testable import Media

/// Speech-like test audio: a few partials under a syllable envelope (150–250 ms bursts,
/// 40–120 ms of silence between), seeded. The pauses are what the jitter buffer's drift
/// control needs: a frame dropped or repeated there is not heard.
func speechLike(samples count: Int, rate: Int, seed: UInt64 = 11) -> [Int16] {
    var rng = SeededRandom(seed: seed)
    func uniform(_ a: Double, _ b: Double) -> Double { a + (b - a) * Double(rng.next() % 1_000_000) / 1_000_000 }
    let partials = (0..<6).map { _ in (uniform(200, 3000), uniform(0.3, 1.0)) }
    var out = [Int16](repeating: 0, count: count)
    var i = 0
    while i < count {
        let on = Int(Double(rate) * uniform(0.15, 0.25)), off = Int(Double(rate) * uniform(0.04, 0.12))
        for j in 0..<on where i + j < count {
            let env = sin(Double.pi * Double(j) / Double(on))
            let s = partials.reduce(0.0) { $0 + $1.1 * sin(2 * .pi * $1.0 * Double(i + j) / Double(rate)) }
            out[i + j] = Int16(max(-32_000, min(32_000, 3_000 * s * env)))
        }
        i += on + off
    }
    return out
}

func tone(_ count: Int, rate: Int, frequency: Double = 440, amplitude: Double = 8_000) -> [Int16] {
    (0..<count).map { Int16(amplitude * sin(2 * .pi * frequency * Double($0) / Double(rate))) }
}

@Suite struct FrameClockTests {
    /// RTP time moves 48 ticks a millisecond whatever the pipeline rate (RFC 7587 §4.1).
    @Test(arguments: [(10, 16_000, 160, 480), (20, 24_000, 480, 960), (40, 48_000, 1_920, 1_920), (60, 48_000, 2_880, 2_880)])
    func frameLengths(ms: Int, rate: Int, samples: Int, ticks: UInt32) throws {
        let c = try FrameClock(milliseconds: ms, sampleRate: rate)
        #expect(c.samples == samples && c.rtpTicks == ticks && c.duration == .milliseconds(Int64(ms)))
        #expect(c.maxPacketSamples == rate * 120 / 1000)
    }

    @Test func unsupportedLengthsAndRatesAreErrors() {
        #expect(throws: MediaError.unsupportedFrameLength(milliseconds: 30)) { try FrameClock(milliseconds: 30) }
        #expect(throws: MediaError.unsupportedFrameLength(milliseconds: 5)) { try FrameClock(milliseconds: 5) }
        #expect(throws: MediaError.unsupportedSampleRate(44_100)) { try FrameClock(milliseconds: 20, sampleRate: 44_100) }
        #expect(throws: MediaError.unsupportedFrameLength(milliseconds: 25)) { try MediaPath(MediaSettings(frameMilliseconds: 25)) }
    }
}

@Suite struct FrameLengthRoundTripTests {
    /// frame-ms 10, 20 and 40 (Config allows 10 and 20; 40 is what Opus and the media
    /// path take beyond that): PCM → Opus written straight into the RTP packet → parse →
    /// jitter buffer → decode. Timestamps step by 48 × frame-ms, each playout is one
    /// frame of the right length, and a tone comes through at its level.
    @Test(arguments: [10, 20, 40])
    func encodeRTPDecode(ms: Int) throws {
        let rate = 48_000
        let sender = try MediaPath(MediaSettings(rate: rate, frameMilliseconds: ms, bitrate: 48_000))
        let receiver = try MediaPath(MediaSettings(rate: rate, frameMilliseconds: ms))
        var rng = SeededRandom(seed: 4)
        var rtp = RTPSender(using: &rng)
        let n = sender.clock.samples
        let frames = 2_000 / ms
        let input = tone(n * frames, rate: rate)
        var packet = [UInt8](repeating: 0, count: 1500)
        var timestamps: [UInt32] = []
        var output: [Int16] = []
        var lengths = Set<Int>()
        var out = [Int16](repeating: 0, count: receiver.clock.maxPacketSamples)
        for k in 0..<frames {
            let now = Instant(nanoseconds: Int64(k * ms) * 1_000_000)
            let length = try packet.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) throws(RTPError) -> Int in
                let room = UnsafeMutableRawBufferPointer(rebasing: buffer[12...])
                let payload = input.withUnsafeBufferPointer { sender.encode(UnsafeBufferPointer(rebasing: $0[(k * n)..<((k + 1) * n)]), into: room) }
                return try rtp.packetize(payloadLength: payload ?? 0, samples: sender.clock.rtpTicks, now: now, into: buffer)
            }
            let parsed = try RTPPacket.parse(Array(packet[0..<length]))
            timestamps.append(parsed.header.timestamp)
            receiver.received(sequence: Int64(k), timestamp: parsed.header.timestamp, payload: Array(packet[parsed.payload]),
                              arrival: now + .milliseconds(5))
            // The speaker asks once per frame of the far end's length.
            let m = out.withUnsafeMutableBufferPointer { receiver.playout(now: now + .milliseconds(6), into: $0) }
            lengths.insert(m)
            output += out[0..<m]
        }
        for k in 1..<timestamps.count { #expect(timestamps[k] &- timestamps[k - 1] == UInt32(48 * ms)) }
        #expect(lengths == [n], "playout lengths \(lengths) for \(ms) ms frames")
        #expect(receiver.stats.framesDecoded >= frames - 3)
        #expect(receiver.stats.concealed == 0)
        // Steady state: the tone at its level (−1 dB…+1 dB).
        let tail = output.suffix(24_000)
        let rms = (tail.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(tail.count)).squareRoot()
        let level = 20 * log10(rms / (8_000 / 2.0.squareRoot()))
        #expect(abs(level) < 1, "level \(level) dB at \(ms) ms")
    }
}

/// The far end sends a 20 ms frame every 20 ms of its clock; the network delays each by
/// 40 ms plus up to 20 ms of jitter; our speaker consumes 10 ms periods on a clock `skew`
/// faster (or slower) than the far end's, and after each period the loop tops its ring
/// up to 30 ms from `playout` — what Devices' `DuplexAudio.topUp` does on the device's
/// signal. All on simulated time.
struct DriftRun {
    var buffered: [(seconds: Double, delay: Duration)] = []
    var stats = MediaStats()
    var underruns = 0

    init(skew: Double, seconds: Int) throws {
        let far = try MediaPath(MediaSettings(frameMilliseconds: 20, bitrate: 32_000))
        let near = try MediaPath(MediaSettings(frameMilliseconds: 20))
        let voice = speechLike(samples: 48_000 * 10, rate: 48_000)
        var rng = SeededRandom(seed: 21)
        var packet = [UInt8](repeating: 0, count: 1275)
        // Packets in flight: (arrival ns, sequence, payload).
        var arrivals: [(Int64, Int64, [UInt8])] = []
        var sent: Int64 = 0
        var ring = 0
        let target = 1_440
        var out = [Int16](repeating: 0, count: near.clock.maxPacketSamples)
        let period = Int64(10_000_000.0 / (1 + skew))
        var t: Int64 = 0
        var nextSend: Int64 = 0
        let end = Int64(seconds) * 1_000_000_000
        while t < end {
            // Everything sent up to now, in arrival order.
            while nextSend <= t {
                let k = Int(sent % Int64(voice.count / 960))
                let n = voice.withUnsafeBufferPointer { v in
                    packet.withUnsafeMutableBytes { far.encode(UnsafeBufferPointer(rebasing: v[(k * 960)..<((k + 1) * 960)]), into: $0) }
                } ?? 0
                arrivals.append((nextSend + 40_000_000 + Int64(rng.next() % 20_000_000), sent, Array(packet[0..<n])))
                sent += 1
                nextSend += 20_000_000
            }
            arrivals.sort { $0.0 < $1.0 }
            while let a = arrivals.first, a.0 <= t {
                near.received(sequence: a.1, timestamp: UInt32(truncatingIfNeeded: a.1 * 960), payload: a.2, arrival: Instant(nanoseconds: a.0))
                arrivals.removeFirst()
            }
            // One period consumed, then topped up.
            if ring < 480 { underruns += 1 }
            ring = max(0, ring - 480)
            while ring < target {
                let m = out.withUnsafeMutableBufferPointer { near.playout(now: Instant(nanoseconds: t), into: $0) }
                ring += m > 0 ? m : 960
            }
            buffered.append((Double(t) / 1e9, near.jitter.bufferedDuration))
            t += period
        }
        stats = near.stats
    }

    /// The largest jitter-buffer delay over [from, to) seconds.
    func peak(_ from: Double, _ to: Double) -> Duration {
        buffered.filter { $0.seconds >= from && $0.seconds < to }.map(\.delay).max() ?? .zero
    }
}

@Suite struct DeviceClockDriftTests {
    /// A speaker 1 % slower than the far end: without correction the buffered delay would
    /// grow 10 ms a second (1.2 s after two minutes). The jitter buffer drops quiet frames
    /// instead, so the delay stays where it was, and the drops are counted.
    @Test func aSlowDeviceDoesNotBuildUpDelay() throws {
        let run = try DriftRun(skew: -0.01, seconds: 120)
        let early = run.peak(10, 30), late = run.peak(100, 120)
        #expect(late <= early + .milliseconds(40), "delay peak \(early.milliseconds) ms early, \(late.milliseconds) ms late")
        #expect(late <= .milliseconds(200))
        // 1.1 s of far-end audio more than the device played: about 55 frames of 20 ms.
        #expect(run.stats.driftDropped >= 40, "\(run.stats.driftDropped) frames dropped")
        #expect(run.stats.driftInserted <= 5)
    }

    /// A speaker 1 % faster: without correction the buffer would run dry every couple of
    /// seconds (a stall and a concealed gap each time). The jitter buffer repeats quiet
    /// frames instead; it never starves once started.
    @Test func aFastDeviceDoesNotRunTheBufferDry() throws {
        let run = try DriftRun(skew: 0.01, seconds: 120)
        let early = run.peak(10, 30), late = run.peak(100, 120)
        #expect(late + .milliseconds(40) >= early, "delay peak \(early.milliseconds) ms early, \(late.milliseconds) ms late")
        #expect(run.stats.driftInserted >= 40, "\(run.stats.driftInserted) frames inserted")
        #expect(run.stats.starved <= 3, "\(run.stats.starved) pulls found the buffer empty")
        #expect(run.stats.concealed <= 3)
    }

    /// The same clocks: nothing to correct, nothing corrected.
    @Test func matchedClocksNeedNoCorrection() throws {
        let run = try DriftRun(skew: 0, seconds: 60)
        #expect(run.stats.driftDropped + run.stats.driftInserted <= 4)
        #expect(run.stats.starved <= 1)
    }
}

@Suite struct MediaPathTests {
    /// The receive side takes whatever frame length the far end sends (here 40 ms while
    /// we send 20 ms): a playout is one far-end frame, and concealment is as long.
    @Test func farEndFrameLengthIsLearnt() throws {
        let far = try MediaPath(MediaSettings(frameMilliseconds: 40))
        let near = try MediaPath(MediaSettings(frameMilliseconds: 20))
        let input = tone(1_920 * 20, rate: 48_000)
        var out = [Int16](repeating: 0, count: near.clock.maxPacketSamples)
        var lengths: [Int] = []
        var concealedAt: [Int] = []
        for k in 0..<20 where k != 12 {
            let payload = input.withUnsafeBufferPointer { far.encode(Array($0[(k * 1920)..<((k + 1) * 1920)])) }!
            near.received(sequence: Int64(k), timestamp: UInt32(k * 1920), payload: payload, arrival: Instant(nanoseconds: Int64(k) * 40_000_000))
        }
        for k in 0..<19 {
            lengths.append(out.withUnsafeMutableBufferPointer { near.playout(now: Instant(nanoseconds: Int64(k) * 40_000_000 + 100_000_000), into: $0) })
            if near.lastConcealed { concealedAt.append(k) }
        }
        #expect(lengths.allSatisfy { $0 == 1_920 }, "\(lengths)")
        #expect(near.stats.fecRecovered + near.stats.concealed == 1)
        // The lost frame, if concealed rather than recovered, is the one said so.
        #expect(concealedAt == (near.stats.concealed == 1 ? [12] : []))
    }

    /// A cut: the reply's packets that still arrive after it (the server streams until it
    /// hears the clear) are not played; once released, the next packets are, from a
    /// talkspurt of their own. Unreleased, the hold ends after `cutHold`.
    @Test func aCutDropsWhatArrivesUntilReleased() throws {
        let far = try MediaPath(MediaSettings(frameMilliseconds: 20))
        let input = tone(960 * 200, rate: 48_000)
        func run(release: Int?) throws -> [Int] {
            let near = try MediaPath()
            var out = [Int16](repeating: 0, count: near.clock.maxPacketSamples)
            var audible: [Int] = []
            for k in 0..<200 {
                let now = Instant(nanoseconds: Int64(k) * 20_000_000)
                let payload = input.withUnsafeBufferPointer { far.encode(Array($0[(k * 960)..<((k + 1) * 960)])) }!
                near.received(sequence: Int64(k), timestamp: UInt32(k * 960), payload: payload, arrival: now)
                if k == 20 { near.cutPlayback(now: now) }
                if k == release { near.releasePlayback() }
                let n = out.withUnsafeMutableBufferPointer { near.playout(now: now + .milliseconds(5), into: $0) }
                if n > 0 && out[0..<n].contains(where: { abs(Int($0)) > 1_000 }) { audible.append(k) }
            }
            return audible
        }
        let released = try run(release: 30)
        let heldQuiet = released.allSatisfy { !(20..<30).contains($0) }
        #expect(released.contains(19) && heldQuiet && released.contains(40), "audible pulls: \(released)")
        let capped = try run(release: nil)
        let until = Int(MediaPath.cutHold.milliseconds / 20)
        let cappedQuiet = capped.allSatisfy { !(20..<(20 + until)).contains($0) }
        #expect(cappedQuiet && capped.contains(20 + until + 10), "audible pulls: \(capped)")
    }

    /// A duck silences playout without dropping or holding anything: the stream's
    /// clock runs on (the same samples handed out as without it), and the reply is
    /// heard again at the first pull after it ends. A cut ends a duck.
    @Test func aDuckSilencesButTheReplyPlaysOn() throws {
        let far = try MediaPath(MediaSettings(frameMilliseconds: 20))
        let input = tone(960 * 60, rate: 48_000)
        let payloads = input.withUnsafeBufferPointer { b in
            (0..<60).map { k in far.encode(Array(b[(k * 960)..<((k + 1) * 960)]))! }
        }
        func run(duck: Range<Int>?) throws -> (audible: [Int], stream: Int) {
            let near = try MediaPath()
            var out = [Int16](repeating: 0, count: near.clock.maxPacketSamples)
            var audible: [Int] = []
            for k in 0..<60 {
                let now = Instant(nanoseconds: Int64(k) * 20_000_000)
                near.received(sequence: Int64(k), timestamp: UInt32(k * 960), payload: payloads[k], arrival: now)
                if let duck { near.duckPlayback(duck.contains(k)) }
                let n = out.withUnsafeMutableBufferPointer { near.playout(now: now + .milliseconds(5), into: $0) }
                if n > 0 && out[0..<n].contains(where: { abs(Int($0)) > 1_000 }) { audible.append(k) }
            }
            return (audible, near.streamSamples)
        }
        let plain = try run(duck: nil)
        let ducked = try run(duck: 20..<25)
        #expect(plain.audible.contains(20) && plain.audible.contains(25), "audible pulls: \(plain.audible)")
        #expect(ducked.audible.allSatisfy { !(20..<25).contains($0) }, "audible pulls: \(ducked.audible)")
        // Heard again at once, and nothing else changed.
        #expect(ducked.audible.contains(25) && ducked.audible.filter { !(20..<25).contains($0) } == plain.audible.filter { !(20..<25).contains($0) })
        #expect(ducked.stream == plain.stream && ducked.stream > 0)
        let m = try MediaPath()
        m.duckPlayback(true)
        m.cutPlayback(now: .zero)
        #expect(!m.ducked && m.cutUntil != nil)
    }

    /// A talkspurt whose due time falls half-way between two 20 ms pulls starts with a
    /// pull of half a frame (10 ms of concealment), so its first frame waits the jitter
    /// buffer's target, not 10 ms more or less for the whole spurt. The playback here
    /// pulls again when it has played what the last pull gave, as AudioIO does.
    @Test func aSpurtOffThePullsPhaseStartsWithAHalfPull() throws {
        let far = try MediaPath(MediaSettings(frameMilliseconds: 20))
        let input = tone(960 * 20, rate: 48_000)
        // Spurt A: frames 0-9 sent from 0 ms; spurt B: frames 10-19 sent from 805 ms
        // (RTP time too: a DTX pause of a frame count and a quarter). Each arrives 30 ms
        // after it was sent.
        var packets: [(seq: Int64, ts: UInt32, payload: [UInt8], at: Int64)] = []
        for k in 0..<20 {
            let frame = Array(input[(k * 960)..<((k + 1) * 960)])
            let sent: Int64 = k < 10 ? Int64(k) * 20_000_000 : 805_000_000 + Int64(k - 10) * 20_000_000
            packets.append((Int64(k), UInt32(sent / 1_000_000 * 48), far.encode(frame)!, sent + 30_000_000))
        }
        let near = try MediaPath()
        var out = [Int16](repeating: 0, count: near.clock.maxPacketSamples)
        var t: Int64 = 5_000_000, next = 0
        var pulls: [(at: Int64, samples: Int, audible: Bool)] = []
        while t < 1_300_000_000 {
            while next < packets.count && packets[next].at <= t {
                let p = packets[next]
                near.received(sequence: p.seq, timestamp: p.ts, payload: p.payload, arrival: Instant(nanoseconds: p.at))
                next += 1
            }
            let n = out.withUnsafeMutableBufferPointer { near.playout(now: Instant(nanoseconds: t), into: $0) }
            pulls.append((t, n, n > 0 && out[0..<n].contains(where: { abs(Int($0)) > 1_000 })))
            t += n > 0 ? Int64(n) * 1_000_000_000 / 48_000 : MediaPath.idlePull.nanoseconds
        }
        let target = near.jitter.targetDelay.nanoseconds
        // Spurt B's first frame arrives at 835 ms, due at 855 with a 20 ms target; the
        // pulls so far come at 845 and 865 (5 + 20k ms).
        guard let first = pulls.first(where: { $0.at > 800_000_000 && $0.audible }) else {
            Issue.record("spurt B never played: \(pulls.filter { $0.at > 800_000_000 }.prefix(8))")
            return
        }
        let waited = first.at - 835_000_000
        #expect(abs(waited - target) <= 5_000_000, "waited \(waited / 1_000_000) ms against a \(target / 1_000_000) ms target")
        // The pull before it was the half one; whole ones before that (spurt A's
        // concealment fading out, then silence).
        let before = pulls.filter { $0.at > 700_000_000 && $0.at < first.at }
        #expect(before.last?.samples == 480 && before.dropLast().allSatisfy { $0.samples == 960 },
                "pulls before spurt B: \(before.map { ($0.at / 1_000_000, $0.samples) })")
        // Spurt A's first packet too is placed on the pulls, which came every 10 ms
        // while nothing had arrived (`idle`): it arrived at 30 ms, due at 50, between
        // the pulls at 45 and 55 of a 35 ms half pull.
        let startA = pulls.first(where: { $0.audible })
        #expect(startA.map { abs($0.at - 30_000_000 - target) <= 5_000_000 } == true, "spurt A first heard at \(startA.map { $0.at / 1_000_000 } ?? -1) ms")
        // Both spurts played whole.
        #expect(pulls.filter(\.audible).count >= 19)
    }

    /// Nothing before the first packet: the speaker side plays silence of its own.
    @Test func nothingBeforeTheFirstPacket() throws {
        let m = try MediaPath()
        var out = [Int16](repeating: 0, count: m.clock.maxPacketSamples)
        #expect(out.withUnsafeMutableBufferPointer { m.playout(now: .zero, into: $0) } == 0)
        #expect(m.playout(now: .zero) == nil)
    }
}

/// The ledger turns "the speaker has played up to ring position p" into "this much of
/// the far end's stream has been heard", and marks where a stretch of stream began.
@Suite struct PlayoutLedgerTests {
    @Test func heardStreamFollowsThePlayedPosition() {
        var l = PlayoutLedger(rate: 48_000)
        // 300 ms of silence (nothing buffered), then 20 ms frames of stream.
        var end = 0
        for _ in 0..<15 { end += 960; l.queued(end: end, samples: 960, stream: 0) }
        let silenceEnd = end
        for _ in 0..<50 { end += 960; l.queued(end: end, samples: 960, stream: 960) }
        #expect(l.streamTotal == 48_000 && l.spurtStart == 0)
        // Played into the silence: nothing of the stream heard.
        #expect(l.heardStream(atRing: silenceEnd - 100) == 0)
        // 250 ms into the stream, mid-frame.
        #expect(l.heardStream(atRing: silenceEnd + 12_000) == 12_000)
        #expect(l.milliseconds(l.heardStream(atRing: silenceEnd + 12_000)) == 250)
        // Past everything queued: all of it.
        #expect(l.heardStream(atRing: end + 5_000) == 48_000)
    }

    @Test func aStretchAfterAGapStartsASpurtAndAShortPauseDoesNot() {
        var l = PlayoutLedger(rate: 48_000)
        var end = 0
        func queue(_ frames: Int, stream: Bool) {
            for _ in 0..<frames { end += 960; l.queued(end: end, samples: 960, stream: stream ? 960 : 0) }
        }
        queue(10, stream: true)
        queue(5, stream: false)  // 100 ms: a pause inside a reply
        queue(10, stream: true)
        #expect(l.spurtStart == 0)
        queue(10, stream: false)  // 200 ms: between replies
        queue(3, stream: true)
        #expect(l.spurtStart == 20 * 960)
        #expect(l.streamTotal == 23 * 960)
    }

    /// A provider that streams silent frames between replies: the silence is stream, but
    /// neither starts a spurt nor moves where the voice heard ended.
    @Test func silentStreamIsNotVoice() {
        var l = PlayoutLedger(rate: 48_000)
        var end = 0
        func queue(_ pieces: Int, audible: Bool) {
            for _ in 0..<pieces { end += 480; l.queued(end: end, samples: 480, stream: 480, audible: audible) }
        }
        queue(100, audible: true)  // a 1 s reply
        let replyEnd = end
        queue(30, audible: false)  // 300 ms of silent frames
        #expect(l.streamTotal == 130 * 480 && l.voiceEndTotal == 100 * 480)
        // Played 150 ms into the silence: 1.15 s of stream heard, the voice ended at 1 s.
        #expect(l.heardStream(atRing: replyEnd + 7_200) == 48_000 + 7_200)
        #expect(l.heardVoiceEnd(atRing: replyEnd + 7_200) == 48_000)
        // Mid-reply (within the stretches kept) the voice's end is the played position.
        #expect(l.heardVoiceEnd(atRing: 43_300) == 43_300)
        // The next reply starts a spurt where it becomes audible, after 300 ms of silence.
        queue(10, audible: true)
        #expect(l.spurtStart == 130 * 480)
        #expect(l.heardVoiceEnd(atRing: end) == 140 * 480)
        // A 100 ms quiet moment inside a reply does not.
        queue(10, audible: false)
        queue(5, audible: true)
        #expect(l.spurtStart == 130 * 480)
    }

    /// A flush (a duck, then the cut) drops what was queued but not yet played: the
    /// speaker moving on past those ring positions is not the reply heard, so a
    /// truncate after it says where the sound stopped, not where the queue ended.
    @Test func whatAFlushDroppedIsNotHeard() {
        var l = PlayoutLedger(rate: 48_000)
        var end = 0
        func queue(_ pieces: Int, audible: Bool) {
            for _ in 0..<pieces { end += 480; l.queued(end: end, samples: 480, stream: 480, audible: audible) }
        }
        queue(100, audible: true)
        // The speaker has played 950 ms (a piece and a half short of the 40 ms queued).
        let played = 100 * 480 - 1_920
        l.dropped(atRing: played)
        #expect(l.voiceEndTotal == played)
        queue(10, audible: false)  // ducked frames
        // Past every position the voice ended where the speaker stopped.
        #expect(l.heardVoiceEnd(atRing: end) == played && l.heardVoiceEnd(atRing: 100 * 480) == played)
        // Before the drop's position, unchanged.
        #expect(l.heardVoiceEnd(atRing: played - 480) == played - 480)
        // Without it, the dropped 40 ms would count as heard.
        var m = PlayoutLedger(rate: 48_000)
        for k in 1...100 { m.queued(end: k * 480, samples: 480, stream: 480) }
        #expect(m.heardVoiceEnd(atRing: 100 * 480) == 100 * 480)
    }

    @Test func onlyTheNewestStretchesAreKept() {
        var l = PlayoutLedger(rate: 16_000)
        var end = 0
        for _ in 0..<1_000 { end += 320; l.queued(end: end, samples: 320, stream: 320) }
        #expect(l.heardStream(atRing: end - 160) == l.streamTotal - 160)
        // A position older than the oldest stretch kept (1.28 s of 20 ms frames, far more
        // than a speaker's queue) answers where that stretch began: never more than heard.
        #expect(l.heardStream(atRing: 10) == l.streamTotal - 64 * 320)
    }
}
