// The echo grid (Tests/AudioTests/EchoGrid.swift): every cell's ERLE and double-talk
// SNR, the worst of each, how many cells meet the goals (ERLE ≥ 25 dB, SNR ≥ 10 dB), and
// the voice flag's onset latency and false triggers. Prints `BENCH` lines itself
// (bench/audio.sh adds the mode's suffix).
//
// Knobs (environment), for looking closer: AEC_GRID_RATE (48000; 16000 or 24000 run the
// pipeline at that rate), AEC_GRID_FILTER (aec-filter-ms), AEC_GRID_SUPPRESS
// (aec-suppress-db, 40), AEC_GRID_MATCH (comma-separated parts of cell names: only those
// cells), AEC_GRID_VERBOSE=1 (per cell: the other SNR references, restarts, the delay,
// the voice flag's onsets and false triggers).
import Audio
import CSystem

func oneDecimal(_ x: Double) -> String {
    let t = Int((x * 10).rounded())
    return (t < 0 ? "-" : "") + String(abs(t) / 10) + "." + String(abs(t) % 10)
}

/// An environment variable as a number, or `fallback`.
func knob(_ name: String, _ fallback: Double) -> Double {
    guard let v = getenv(name) else { return fallback }
    return atof(v)
}

/// Whether `part` occurs in `name` (the Embedded subset has no `String.contains(String)`).
func hasPart(_ name: String, _ part: String) -> Bool {
    let n = Array(name.utf8), p = Array(part.utf8)
    if p.isEmpty { return true }
    if p.count > n.count { return false }
    for i in 0...(n.count - p.count) where Array(n[i..<(i + p.count)]) == p { return true }
    return false
}

func percentile(_ sorted: [Int], _ p: Int) -> Int {
    sorted.isEmpty ? -1 : sorted[min(sorted.count - 1, sorted.count * p / 100)]
}

/// The whole grid: 81 cells at 48 kHz (the product's pipeline rate; the canceller works
/// at 16 kHz inside), about 2 minutes on one x86-64 core.
func runEchoGrid() throws(AudioError) {
    var pipeline = GridPipeline()
    pipeline.rate = SampleRate(rawValue: Int(knob("AEC_GRID_RATE", 48_000))) ?? .hz48000
    pipeline.suppressDB = Int(knob("AEC_GRID_SUPPRESS", 40))
    if getenv("AEC_GRID_FILTER") != nil { pipeline.filterMilliseconds = Int(knob("AEC_GRID_FILTER", 300)) }
    let verbose = knob("AEC_GRID_VERBOSE", 0) > 0
    var match: [String] = []
    if let m = getenv("AEC_GRID_MATCH") { match = String(cString: m).split(separator: ",").map(String.init) }
    var clean = GridCleanRuns()
    var worstERLE = 1000.0, worstSNR = 1000.0, worstERLECell = "", worstSNRCell = ""
    var met = 0, metERLE = 0, metSNR = 0, cells = 0
    var onsets: [Int] = [], missed = 0
    var falseOn = 0, falseHeld20 = 0, falseHeld = 0, falseSeconds = 0.0
    for cell in GridScene.cells where match.isEmpty || match.contains(where: { hasPart(cell.name, $0) }) {
        let f = try measureCell(cell, pipeline: pipeline, clean: &clean)
        cells += 1
        let tag = "aec_grid_" + cell.name
        print("BENCH " + tag + "_erle " + oneDecimal(f.erle) + " dB")
        print("BENCH " + tag + "_dt_snr " + oneDecimal(f.snr) + " dB")
        if verbose {
            var o = ""
            for x in f.onsets { o += (x.map { String($0) } ?? "-") + " " }
            print("  " + cell.name + ": snr playing " + oneDecimal(f.snrReferencePlaying) + " raw " + oneDecimal(f.snrRaw)
                  + " restarts " + String(f.restarts) + " resets " + String(f.selfResets) + " delay " + oneDecimal(f.delayMS)
                  + " onsets " + o + "false on " + String(f.falseOn) + " held100 " + String(f.falseHeld100))
        }
        if f.erle < worstERLE { worstERLE = f.erle; worstERLECell = cell.name }
        if f.snr < worstSNR { worstSNR = f.snr; worstSNRCell = cell.name }
        if f.erle >= 25 { metERLE += 1 }
        if f.snr >= 10 { metSNR += 1 }
        if f.erle >= 25 && f.snr >= 10 { met += 1 }
        for o in f.onsets { if let o { onsets.append(o) } else { missed += 1 } }
        falseOn += f.falseOn
        falseHeld20 += f.falseHeld20
        falseHeld += f.falseHeld100
        falseSeconds += f.falseSeconds
    }
    print("BENCH aec_grid_worst_erle " + oneDecimal(worstERLE) + " dB (" + worstERLECell + ")")
    print("BENCH aec_grid_worst_dt_snr " + oneDecimal(worstSNR) + " dB (" + worstSNRCell + ")")
    print("BENCH aec_grid_cells_meeting_erle " + String(metERLE) + " of " + String(cells))
    print("BENCH aec_grid_cells_meeting_dt_snr " + String(metSNR) + " of " + String(cells))
    print("BENCH aec_grid_cells_meeting_goals " + String(met) + " of " + String(cells))
    onsets.sort()
    print("BENCH aec_grid_voice_onset_median " + String(percentile(onsets, 50)) + " ms")
    print("BENCH aec_grid_voice_onset_p90 " + String(percentile(onsets, 90)) + " ms")
    print("BENCH aec_grid_voice_onset_max " + String(onsets.last ?? -1) + " ms")
    print("BENCH aec_grid_voice_onset_missed " + String(missed) + " of " + String(onsets.count + missed) + " spurts")
    let minutes = falseSeconds / 60
    print("BENCH aec_grid_voice_false_on_per_minute " + oneDecimal(Double(falseOn) / max(minutes, 1e-9)) + " count")
    print("BENCH aec_grid_voice_false_held20_per_minute " + oneDecimal(Double(falseHeld20) / max(minutes, 1e-9)) + " count")
    print("BENCH aec_grid_voice_false_held100_per_minute " + oneDecimal(Double(falseHeld) / max(minutes, 1e-9)) + " count")
}

