import Testing
import Wire
@testable import Audio

/// The echo goals on part of the grid (EchoGrid.swift; `make bench` prints all 81
/// cells, aec_grid_*), at the product's pipeline rate (48 kHz, the canceller working at
/// 16 kHz inside), through the live reference path with clock drift and timestamp jitter:
/// ERLE ≥ 25 dB over far end alone after 8 s of it, and the near end kept at ≥ 10 dB SNR
/// in double talk (against the same pipeline's output for the microphone without echo and
/// with a silent speaker; see GridFigures).
@Suite struct EchoGridTests {
    /// One corner of each kind: the loudest echo in the longest room 300 ms late with the
    /// speaker's clock slow (the grid's worst double-talk SNR); the loudest echo in the
    /// middle room with the clock fast; a quiet echo under a loud talker, 10 ms late; and
    /// the middle echo in the longest room with the clock slow (the worst ERLE before the
    /// search's changes, 17.3 dB with two restarts). Measured (dB, ERLE / SNR): 33.1 /
    /// 10.2, 36.2 / 11.4, 42.7 / 21.5, 29.3 / 18.9; "1 restarts" in the first two is the
    /// delay search's first lock (from no delay to the echo's), not speexdsp resetting
    /// itself (its own resets: 0). `make bench` (aec_grid) measures the same figures, and
    /// all 81 cells at the goals (worst SNR 10.2 dB, this first cell; worst ERLE 26.5 dB,
    /// d300_rt4_etrp10_ppm0).
    @Test(arguments: [GridCell(delayMS: 300, rt60: 0.6, echoToTalkerDB: 10, driftPPM: -100),
                      GridCell(delayMS: 120, rt60: 0.4, echoToTalkerDB: 10, driftPPM: 100),
                      GridCell(delayMS: 10, rt60: 0.2, echoToTalkerDB: -10, driftPPM: 100),
                      GridCell(delayMS: 10, rt60: 0.6, echoToTalkerDB: 0, driftPPM: -100)])
    func meetsTheGoals(cell: GridCell) throws {
        var clean = GridCleanRuns()
        let f = try measureCell(cell, pipeline: GridPipeline(), clean: &clean)
        print("AEC grid \(cell.name): ERLE \(tenths(f.erle)) dB, double-talk SNR \(tenths(f.snr)) dB (against the output with the speaker on and no echo \(tenths(f.snrReferencePlaying)) dB, against the near end itself \(tenths(f.snrRaw)) dB); \(f.restarts) restarts, voice flag onsets \(f.onsets.map { $0.map { String($0) } ?? "-" }) ms")
        #expect(f.erle >= 25)
        #expect(f.snr >= 10)
    }

    /// The test can fail: without its double-talk detector (every frame with far end
    /// counted as echo alone) the canceller suppresses the talker with the echo when the
    /// echo is 10 dB over the talker. Measured: SNR 12.7 dB with the detector, 3.1 dB
    /// without.
    @Test func withoutTheDetectorTheTalkerIsLost() throws {
        let cell = GridCell(delayMS: 120, rt60: 0.4, echoToTalkerDB: 10, driftPPM: 0)
        var clean = GridCleanRuns()
        var pipeline = GridPipeline()
        let with = try measureCell(cell, pipeline: pipeline, clean: &clean)
        pipeline.configure = { $0.detectsDoubleTalk = false }
        let without = try measureCell(cell, pipeline: pipeline, clean: &clean)
        print("AEC grid \(cell.name): double-talk SNR \(tenths(with.snr)) dB with the double-talk detector, \(tenths(without.snr)) dB without")
        #expect(with.snr >= 10)
        #expect(without.snr < 10)
    }
}

/// `EchoCanceller.echoAudible`, the measurement the agent's half duplex can rest on:
/// with no echo it is false within 500 ms of far-end signal (and stays so
/// while the user talks over the far end); with a loud echo it is true until the
/// canceller cancels it, then false; a new echo path makes it true again.
@Suite struct EchoAudibleTests {
    /// The first frame (10 ms) at and after `from` where `audible` is `value`; nil: none.
    func first(_ audible: [Bool], _ value: Bool, from: Int = 0) -> Int? {
        var k = from
        while k < audible.count { if audible[k] == value { return k }; k += 1 }
        return nil
    }

    func run(_ s: GridSignals, rate: SampleRate = .hz16000, perFrame: (Int, EchoCanceller) -> Void = { _, _ in }) throws -> [Bool] {
        var audible = [Bool](repeating: false, count: s.mic.count / rate.samplesPerFrame)
        var pipeline = GridPipeline()
        pipeline.rate = rate
        _ = try runGrid(reference: s.reference, mic: s.mic, driftPPM: 0, pipeline: pipeline) { k, aec in
            audible[k] = aec.echoAudible
            perFrame(k, aec)
        }
        return audible
    }

    /// The far end's first frame with signal (the scene's far end starts within 100 ms).
    func farOnset(_ s: GridSignals, rate: SampleRate) -> Int {
        let n = rate.samplesPerFrame
        var k = 0
        while (k + 1) * n <= s.reference.count {
            var e = 0
            for i in (k * n)..<((k + 1) * n) { e += Int(s.reference[i]) * Int(s.reference[i]) }
            if e > n * 32 * 32 { return k }
            k += 1
        }
        return 0
    }

    /// No echo at all (a headset, or the speaker far away): the reference plays, the
    /// microphone hears noise, then the user talking over the far end (12 s on). Measured:
    /// false 460 ms after the far end's onset, and false from then on, through the user's
    /// speech; ERL reported as 57.8 dB (the far end over the noise).
    @Test func noEchoIsNotAudibleWithinHalfASecond() throws {
        let cell = GridCell(delayMS: 120, rt60: 0.3, echoToTalkerDB: -200, driftPPM: 0)
        let s = gridSignals(cell, rate: 16_000)
        var erl: Double? = nil
        let audible = try run(s) { k, aec in if k == 1199 { erl = aec.echoReturnLossDB } }
        let onset = farOnset(s, rate: .hz16000)
        let off = try #require(first(audible, false, from: onset + 1))
        print("echoAudible, no echo: false \((off - onset) * 10) ms after the far end's onset; audible in \(audible[off...].filter { $0 }.count) frames after that; ERL \(erl.map { tenths($0) } ?? "-") dB")
        #expect(audible[onset], "before it knows, it assumes the echo is audible")
        #expect((off - onset) * 10 <= 700)
        #expect(!audible[off...].contains(true), "never audible again, even while the user talks (12 s on)")
        #expect((erl ?? 0) >= 40)
    }

    /// A loud echo (10 dB over the talker, RT60 0.3 s, 120 ms): audible from the far end's
    /// onset until the canceller has cancelled it to under −50 dBFS, then not; the ERLE
    /// reported then is what was measured. Measured: false after 7.4 s (the test's limit is 8),
    /// ERL 1.7 dB, ERLE 32.3 dB at 11.99 s.
    @Test func loudEchoIsAudibleUntilCancelled() throws {
        let cell = GridCell(delayMS: 120, rt60: 0.3, echoToTalkerDB: 10, driftPPM: 0)
        let s = gridSignals(cell, rate: 16_000)
        var erl: Double? = nil, erle: Double? = nil
        let audible = try run(s) { k, aec in
            if k == 1199 { erl = aec.echoReturnLossDB; erle = aec.echoReturnLossEnhancementDB }
        }
        let onset = farOnset(s, rate: .hz16000)
        let cancelled = try #require(first(audible, false, from: onset + 1))
        print("echoAudible, loud echo: true from the far end's onset until \(tenths(Double(cancelled) / 100)) s; audible again in \(audible[cancelled..<1200].filter { $0 }.count) frames before the user talks; ERL \(erl.map { tenths($0) } ?? "-") dB, ERLE \(erle.map { tenths($0) } ?? "-") dB")
        #expect(audible[onset..<(onset + 100)].allSatisfy { $0 }, "the first second: echo not yet cancelled")
        #expect(cancelled <= 800, "cancelled within 8 s")
        #expect(audible[1000..<1200].allSatisfy { !$0 }, "10–12 s: cancelled")
        #expect(abs((erl ?? 99) - 2) <= 4, "ERL: the far end at −20 dBFS, the echo at −22 dBFS")
        #expect((erle ?? 0) >= 25)
    }

    /// The echo path changes (the board is moved: another room, 200 ms instead of 60 ms,
    /// 6 dB louder) at 12 s, the far end alone throughout: audible again within 5 s, then
    /// cancelled again. Measured: audible 4.2 s after the change, false again 4.3 s after.
    /// (It would be 1.6 s if a user talking over the echo did not open the microphone: a
    /// changed path looks like double talk until the detector learns again, and a moved
    /// board is rare where a barge-in is not.)
    @Test func echoPathChangeIsAudibleAgain() throws {
        let fs = 16_000
        let a = gridSignals(GridCell(delayMS: 60, rt60: 0.3, echoToTalkerDB: 0, driftPPM: 0), rate: fs)
        let b = gridSignals(GridCell(delayMS: 200, rt60: 0.3, echoToTalkerDB: 6, driftPPM: 0), rate: fs)
        // The far end alone: the microphone is the echo and the noise (mic − near).
        let change = 12 * fs
        var s = a
        for i in 0..<s.mic.count {
            let from = i < change ? a : b
            s.mic[i] = Int16(clamping: Int(from.mic[i]) - Int(from.near[i]))
        }
        let audible = try run(s)
        let onset = farOnset(s, rate: .hz16000)
        let cancelled = try #require(first(audible, false, from: onset + 1))
        let again = try #require(first(audible, true, from: 1200), "never audible after the change")
        let recancelled = first(audible, false, from: again)
        print("echoAudible, path change at 12 s: cancelled at \(tenths(Double(cancelled) / 100)) s, audible again \(tenths(Double(again - 1200) / 100)) s after the change, false again \(recancelled.map { tenths(Double($0 - 1200) / 100) + " s" } ?? "never") after it")
        #expect(audible[1000..<1200].allSatisfy { !$0 }, "cancelled before the change")
        #expect(again - 1200 <= 500)
    }
}
