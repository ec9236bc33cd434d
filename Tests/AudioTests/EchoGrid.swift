// The echo grid of simulated rooms, shared by the tests (EchoGridTests) and the bench
// (bench/LinnetBench, kernel aec_grid; bench/build.sh compiles this file too): the scene,
// the product's capture path through it, and the measures. Pure Swift on the Audio
// module's public API, no Foundation.
import Audio
import Wire

/// One cell: where the echo comes from and how loud it is against the talker.
struct GridCell: Sendable {
    /// The echo's bulk delay (device buffers and air, after the live alignment).
    var delayMS: Int
    var rt60: Double
    /// Echo at the microphone against the talker, dB: the far end's level over its active
    /// speech plus the echo path's energy gain, less the talker's level over its active
    /// speech (`GridScene.nearDBFS`).
    var echoToTalkerDB: Double
    /// The playback clock against the capture clock (positive: the speaker plays fast).
    var driftPPM: Double

    var name: String {
        func signed(_ x: Int) -> String { x < 0 ? "m" + String(-x) : (x > 0 ? "p" + String(x) : "0") }
        return "d" + String(delayMS) + "_rt" + String(Int((rt60 * 10).rounded())) + "_etr" + signed(Int(echoToTalkerDB.rounded()))
            + "_ppm" + signed(Int(driftPPM.rounded()))
    }
}

/// The scene every cell plays, on one timeline. The far end (the assistant) speaks from
/// the start to the end; the canceller has it alone for 8 s (convergence), is measured
/// on it alone for the next 4 s (ERLE), then the near end (the user) talks over it in
/// four spurts of 2 s that start 3 s apart (double talk; the gaps between them are far
/// end alone again, where false voice flags are counted).
///
/// Levels: the far end at −20 dBFS, the talker at −32 dBFS (RMS over active speech), the
/// microphone's noise at −80 dBFS. With the echo 10 dB over the talker the microphone
/// peaks at −0.4 dBFS without clipping (at −26 dBFS for the talker it clipped, and the
/// clipped echo no canceller can model); the noise is 38 dB under the quietest echo, so
/// it does not cap the ERLE measured.
enum GridScene {
    static let seconds = 24.0
    static let erleFrom = 8.0, erleTo = 12.0
    static let spurtStarts = [12.0, 15.0, 18.0, 21.0]
    static let spurtSeconds = 2.0
    static let farDBFS = -20.0, nearDBFS = -32.0
    static let noiseDBFS = -80.0
    /// Timestamp jitter of the two device threads' measurements, ± (EchoDriftTests).
    static let jitterNanoseconds = 250_000.0

    /// The 3 × 3 × 3 × 3 grid of the goals' ranges: both ends and the middle of each.
    static var cells: [GridCell] {
        var all: [GridCell] = []
        for delay in [10, 120, 300] {
            for rt60 in [0.2, 0.4, 0.6] {
                for etr in [-10.0, 0, 10] {
                    for ppm in [-100.0, 0, 100] { all.append(GridCell(delayMS: delay, rt60: rt60, echoToTalkerDB: etr, driftPPM: ppm)) }
                }
            }
        }
        return all
    }
}

struct GridSignals {
    /// What the speaker is sent (the playback side's samples).
    var reference: [Int16]
    /// Echo + near end + noise.
    var mic: [Int16]
    /// Near end + noise: the microphone without the echo.
    var clean: [Int16]
    var near: [Int16]
    /// The near end's spurts, first to last non-zero sample.
    var spurts: [Range<Int>]
    /// Where each spurt becomes audible: the first 10 ms whose level comes within 20 dB
    /// of the talker's (the speech-like source opens some spurts with an unvoiced
    /// syllable 36 dB under its vowels, which nothing would call speech).
    var onsets: [Int]
}

/// The far end, the near end and the noise are the same in every cell (seed 1); the room
/// is seeded by the cell, so no two cells share a room.
func gridSignals(_ cell: GridCell, rate: Int, seed: UInt64 = 1) -> GridSignals {
    let n = Int(GridScene.seconds * Double(rate))
    let far = speechLike(seconds: GridScene.seconds, rate: rate, seed: seed &* 7 &+ 1, rmsDBFS: GridScene.farDBFS)
    var near = [Double](repeating: 0, count: n)
    var spurts: [Range<Int>] = [], onsets: [Int] = []
    let block = rate / 100
    let audible = 32768.0 * 32768.0 * simExp((GridScene.nearDBFS - 20) / 10 * 2.302585092994046) * Double(block)
    for (k, start) in GridScene.spurtStarts.enumerated() {
        let s = speechLike(seconds: GridScene.spurtSeconds, rate: rate, seed: seed &* 7 &+ 100 &+ UInt64(k), rmsDBFS: GridScene.nearDBFS)
        let at = Int(start * Double(rate))
        var first = -1, last = -1, onset = -1
        for i in 0..<s.count where at + i < n {
            near[at + i] = s[i]
            if s[i] != 0 { if first < 0 { first = at + i }; last = at + i }
        }
        var b = 0
        while onset < 0 && b + block <= s.count {
            var e = 0.0
            for i in b..<(b + block) { e += s[i] * s[i] }
            if e >= audible { onset = at + b }
            b += block
        }
        if first >= 0 {
            spurts.append(first..<(last + 1))
            onsets.append(max(onset, first))
        }
    }
    let played = cell.driftPPM == 0 ? far : drifted(far, ppm: cell.driftPPM)
    let roomSeed = UInt64(cell.delayMS) &* 1_000_003 &+ UInt64(cell.rt60 * 10) &* 1009
        &+ UInt64(bitPattern: Int64(cell.echoToTalkerDB + 50)) &* 31 &+ UInt64(bitPattern: Int64(cell.driftPPM + 1000))
    let gain = cell.echoToTalkerDB + GridScene.nearDBFS - GridScene.farDBFS
    let echo = EchoPath(rt60: cell.rt60, delay: Double(cell.delayMS) / 1000, gainDB: gain, rate: rate, seed: roomSeed).apply(played)
    let noise = whiteNoise(count: n, rmsDBFS: GridScene.noiseDBFS, seed: seed &* 7 &+ 4)
    var mic = [Double](repeating: 0, count: n), clean = mic
    for i in 0..<n {
        clean[i] = near[i] + noise[i]
        mic[i] = echo[i] + clean[i]
    }
    return GridSignals(reference: toInt16(far), mic: toInt16(mic), clean: toInt16(clean), near: toInt16(near), spurts: spurts, onsets: onsets)
}

/// How the capture path is built for a run.
struct GridPipeline {
    var rate: SampleRate = .hz48000
    /// `aec-filter-ms`; nil: EchoCanceller's default.
    var filterMilliseconds: Int? = nil
    /// `aec-suppress-db`; 0: no preprocessor at all.
    var suppressDB = 40
    /// Called with the canceller before the run (tests switch internals).
    var configure: (EchoCanceller) -> Void = { _ in }
}

/// What a run produced, lined up with its input.
struct GridRun {
    var out: [Int16]
    /// Per 10 ms frame, after it was processed: the preprocessor's voiceHeld (ms).
    var held: [Int]
    var restarts: Int
    var selfResets: Int
    var delayMS: Double
}

/// The product's capture path over a whole scene: the playback side stamps each frame
/// it plays on its own clock (`driftPPM` fast), the capture side aligns the reference to
/// each capture frame (PlaybackReference, LiveReference: the drift is taken out there,
/// a sample at a time), both timelines fed with times that jitter by ±0.25 ms, as
/// EchoDriftTests does; then the canceller and its attached preprocessor, as
/// AudioSetup builds them. The output is shifted back by the pipeline's delay (the
/// resamplers' `latencySamples`, and the preprocessor's frame). `perFrame` sees the
/// canceller after each frame.
func runGrid(reference: [Int16], mic: [Int16], driftPPM: Double, pipeline: GridPipeline, seed: UInt64 = 11,
             perFrame: (Int, EchoCanceller) -> Void = { _, _ in }) throws(AudioError) -> GridRun {
    let configure = pipeline.configure
    let rate = pipeline.rate
    let fs = rate.hertz, n = rate.samplesPerFrame
    let format = try AudioFormat(sampleRate: rate, channels: 1)
    let playback = try PlaybackReference(format: format, slots: 64)
    let live = LiveReference(source: playback)
    let aec: EchoCanceller
    if let ms = pipeline.filterMilliseconds {
        aec = try EchoCanceller(rate: rate, filterMilliseconds: ms, reference: live)
    } else {
        aec = try EchoCanceller(rate: rate, reference: live)
    }
    configure(aec)
    let pre: SpeexPreprocessor? = pipeline.suppressDB > 0 ? try SpeexPreprocessor(rate: rate, echoSuppressDB: pipeline.suppressDB, echo: aec) : nil
    var playTimeline = FrameTimeline(sampleRate: fs), captureTimeline = FrameTimeline(sampleRate: fs)
    var rng = SimRandom(seed: seed)
    let playNS = 1e9 * Double(n) / (Double(fs) * (1 + driftPPM * 1e-6))
    let captureNS = Int64(1e9 * Double(n) / Double(fs))
    var out = mic
    let frames = mic.count / n
    var held = [Int](repeating: 0, count: frames)
    var j = 0
    aec.captureDidStart(format)
    reference.withUnsafeBufferPointer { ref in
        out.withUnsafeMutableBufferPointer { p in
            for k in 0..<frames {
                let t = Int64(k) * captureNS
                // The playback thread runs 40 ms ahead (its buffer).
                while j * n + n <= ref.count && Int64(Double(j) * playNS) <= t + 40_000_000 {
                    let jitter = Int64(rng.symmetric() * GridScene.jitterNanoseconds)
                    let heard = playTimeline.time(measured: Instant(nanoseconds: Int64(Double(j) * playNS) + jitter), frames: n)
                    playback.played(UnsafeBufferPointer(rebasing: ref[(j * n)..<(j * n + n)]), at: heard)
                    j += 1
                }
                let jitter = Int64(rng.symmetric() * GridScene.jitterNanoseconds)
                let captured = captureTimeline.time(measured: Instant(nanoseconds: t + jitter), frames: n)
                playback.align(to: captured)
                _ = aec.process(UnsafeMutableBufferPointer(rebasing: p[(k * n)..<(k * n + n)]),
                                FrameInfo(format: format, sequence: UInt64(k), captureTime: captured))
                held[k] = Int(pre?.voiceHeld.milliseconds ?? 0)
                perFrame(k, aec)
            }
        }
    }
    var lag = Int(aec.latencySamples.rounded())
    if pre != nil { lag += n }
    out = Array(out[lag...]) + [Int16](repeating: 0, count: lag)
    return GridRun(out: out, held: held, restarts: aec.restartCount, selfResets: aec.selfResetCount, delayMS: aec.delayMilliseconds)
}

/// A cell's figures.
struct GridFigures {
    /// ERLE: 10·log10(Σ mic² / Σ out²) over 8–12 s, the far end alone after 8 s of it
    /// (what is sent: canceller and residual suppressor together).
    var erle: Double
    /// The near end kept in double talk: 10·log10(Σ r² / Σ (out − r)²) over the near
    /// end's spurts, where r is the same pipeline's output for the microphone without the
    /// echo and with a silent speaker. The fixed filtering (speexdsp's DC notch, the
    /// 16 kHz work rate's band limit, the resamplers' and the preprocessor's delays) is
    /// in r and so does not count; the residual echo and whatever the canceller and the
    /// suppressor take off the near end do.
    var snr: Double
    /// The same against the output for the microphone without the echo but with the far
    /// end playing (the speaker on, nothing heard of it): this reference also holds what
    /// the canceller does to a talker whenever the far end plays, so it would hide a
    /// suppressor that ducks the near end under any far end; reported, not the goal's.
    var snrReferencePlaying: Double
    /// Against the near end itself (lined up): the fixed filtering counts as noise.
    var snrRaw: Double
    /// The voice flag: per spurt, ms from its audible onset (`GridSignals.onsets`) to the
    /// end of the first frame after which voiceHeld > 0 (nil: not within the spurt).
    var onsets: [Int?]
    /// Far end alone after convergence (8 s on, outside the spurts and 300 ms after
    /// each): how often voiceHeld came on, how often it reached 20 ms (a duck,
    /// AgentCore.duckAfter) and 100 ms (a cut, barge-in-ms), over how many seconds.
    var falseOn: Int
    var falseHeld20: Int
    var falseHeld100: Int
    var falseSeconds: Double
    var restarts: Int
    var selfResets: Int
    var delayMS: Double
}

func snrDB(reference r: [Int16], _ out: [Int16], spans: [Range<Int>]) -> Double {
    var s = 0.0, d = 0.0
    for span in spans {
        for i in span {
            let x = Double(r[i]), e = Double(out[i]) - x
            s += x * x; d += e * e
        }
    }
    return simDB(s / max(d, 1e-9))
}

/// The outputs for the echo-free microphone depend only on the pipeline and the drift:
/// computed once per pipeline (silent speaker) and per drift (speaker playing).
struct GridCleanRuns {
    var silent: GridRun?
    var playing: [Int: GridRun] = [:]
}

func measureCell(_ cell: GridCell, pipeline: GridPipeline, clean: inout GridCleanRuns) throws(AudioError) -> GridFigures {
    let fs = pipeline.rate.hertz
    let s = gridSignals(cell, rate: fs)
    let run = try runGrid(reference: s.reference, mic: s.mic, driftPPM: cell.driftPPM, pipeline: pipeline)
    let silentRun: GridRun
    if let r = clean.silent { silentRun = r } else {
        silentRun = try runGrid(reference: [Int16](repeating: 0, count: s.reference.count), mic: s.clean, driftPPM: 0, pipeline: pipeline)
        clean.silent = silentRun
    }
    let drift = Int(cell.driftPPM.rounded())
    let playingRun: GridRun
    if let r = clean.playing[drift] { playingRun = r } else {
        playingRun = try runGrid(reference: s.reference, mic: s.clean, driftPPM: cell.driftPPM, pipeline: pipeline)
        clean.playing[drift] = playingRun
    }
    let erleRange = Int(GridScene.erleFrom * Double(fs))..<Int(GridScene.erleTo * Double(fs))
    let erle = erleDB(mic: s.mic, out: run.out, erleRange)
    let snr = snrDB(reference: silentRun.out, run.out, spans: s.spurts)
    let snrPlaying = snrDB(reference: playingRun.out, run.out, spans: s.spurts)
    let snrRaw = snrDB(reference: s.near, run.out, spans: s.spurts)
    // The voice flag, frame by frame.
    let n = pipeline.rate.samplesPerFrame
    var onsets: [Int?] = []
    for (span, onset) in zip(s.spurts, s.onsets) {
        var found: Int? = nil
        var f = onset / n
        while f < run.held.count && f * n < span.upperBound {
            if run.held[f] > 0 { found = ((f + 1) * n - onset) * 1000 / fs; break }
            f += 1
        }
        onsets.append(found)
    }
    var falseOn = 0, falseHeld = 0, falseHeld20 = 0, falseFrames = 0
    let hangover = 30 * n
    var wasOn = false, was20 = false, was100 = false
    for f in Int(GridScene.erleFrom * Double(fs)) / n..<run.held.count {
        let i = f * n
        let on = run.held[f] > 0, on20 = run.held[f] >= 20, on100 = run.held[f] >= 100
        defer { wasOn = on; was20 = on20; was100 = on100 }
        if s.spurts.contains(where: { i + n > $0.lowerBound && i < $0.upperBound + hangover }) { continue }
        falseFrames += 1
        if on && !wasOn { falseOn += 1 }
        if on20 && !was20 { falseHeld20 += 1 }
        if on100 && !was100 { falseHeld += 1 }
    }
    return GridFigures(erle: erle, snr: snr, snrReferencePlaying: snrPlaying, snrRaw: snrRaw, onsets: onsets,
                       falseOn: falseOn, falseHeld20: falseHeld20, falseHeld100: falseHeld, falseSeconds: Double(falseFrames * n) / Double(fs),
                       restarts: run.restarts, selfResets: run.selfResets, delayMS: run.delayMS)
}

