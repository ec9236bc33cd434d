// The wake word's cost per 10 ms of capture, as the detector's thread spends it: the
// pipeline's 48 kHz to the models' 16 kHz, TFLite Micro's features, and the model every
// third frame (okay_nabu, the largest of the four; LINNET_WAKE_MODEL names the file).
import Audio
import CSystem
import Wake

/// A whole file's bytes (the bench has no Foundation).
func readWholeFile(_ path: String) -> [UInt8]? {
    guard let f = fopen(path, "rb") else { return nil }
    defer { fclose(f) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, 65536, f) }
        if n == 0 { return ferror(f) != 0 ? nil : bytes }
        bytes += chunk[0..<n]
    }
}

@inline(never)
func measuredWake(_ decimator: WakeDecimator, _ frontend: WakeFrontend, _ detector: WakeDetector,
                  _ frame: UnsafeBufferPointer<Int16>, _ step: UnsafeMutableBufferPointer<Int16>,
                  _ features: UnsafeMutableBufferPointer<Int8>) -> Bool {
    let n = decimator.process(frame, into: step)
    guard n == WakeFrontend.stepSamples,
          frontend.step(UnsafeBufferPointer(rebasing: step[0..<n]), into: features) else { return false }
    return detector.pushFrame(UnsafeBufferPointer(features)).detected
}

func runWake(_ signal: TestSignal, frames: Int) -> Bool {
    let path = getenv("LINNET_WAKE_MODEL").map { String(cString: $0) } ?? "build/third_party/wake/okay_nabu.tflite"
    guard let model = readWholeFile(path) else {
        print("linnet-bench: cannot read the wake model " + path)
        return false
    }
    guard let detector = try? WakeDetector(modelBytes: model, probabilityCutoff: 0.85, slidingWindowSize: 5) else { return false }
    let decimator = WakeDecimator(maxInput: 480)
    let frontend = WakeFrontend()
    let frame = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    let step = UnsafeMutableBufferPointer<Int16>.allocate(capacity: 480)
    let features = UnsafeMutableBufferPointer<Int8>.allocate(capacity: WakeFrontend.featureCount)
    defer { frame.deallocate(); step.deallocate(); features.deallocate() }
    var wakes = 0
    for seq in 0..<frames {
        signal.fill(frame, frame: seq)
        if measuredWake(decimator, frontend, detector, UnsafeBufferPointer(frame), step, features) { wakes += 1 }
    }
    print("wakes " + String(wakes))
    return true
}

/// Wakes on a recording (LINNET_WAKE_INPUT: raw s16le 16 kHz mono) with LINNET_WAKE_MODEL
/// at LINNET_WAKE_CUTOFF / LINNET_WAKE_WINDOW, counted as the product's listener counts
/// them (one wake, then 1.5 s in which the detector's further detections are not new
/// wakes). Prints "wakes <n> seconds <s>" (bench/wake.sh).
func runWakeFile() -> Bool {
    guard let m = getenv("LINNET_WAKE_MODEL"), let i = getenv("LINNET_WAKE_INPUT"),
          let c = getenv("LINNET_WAKE_CUTOFF"), let w = getenv("LINNET_WAKE_WINDOW"),
          let model = readWholeFile(String(cString: m)), let raw = readWholeFile(String(cString: i)) else {
        print("linnet-bench: wake_file needs LINNET_WAKE_MODEL, LINNET_WAKE_INPUT, LINNET_WAKE_CUTOFF and LINNET_WAKE_WINDOW")
        return false
    }
    guard let detector = try? WakeDetector(modelBytes: model, probabilityCutoff: Double(atof(c)), slidingWindowSize: Int(atoi(w))) else { return false }
    let frontend = WakeFrontend()
    let step = UnsafeMutableBufferPointer<Int16>.allocate(capacity: WakeFrontend.stepSamples)
    let features = UnsafeMutableBufferPointer<Int8>.allocate(capacity: WakeFrontend.featureCount)
    defer { step.deallocate(); features.deallocate() }
    var wakes = 0, quiet = 0, steps = 0
    var at = 0
    while at + 2 * WakeFrontend.stepSamples <= raw.count {
        for k in 0..<WakeFrontend.stepSamples {
            step[k] = Int16(bitPattern: UInt16(raw[at + 2 * k]) | UInt16(raw[at + 2 * k + 1]) << 8)
        }
        at += 2 * WakeFrontend.stepSamples
        steps += 1
        guard frontend.step(UnsafeBufferPointer(step), into: features) else { continue }
        let s = detector.pushFrame(UnsafeBufferPointer(features))
        if quiet > 0 { quiet -= 1; continue }
        if s.detected { wakes += 1; quiet = 150 }
    }
    print("wakes " + String(wakes) + " seconds " + String(steps / 100))
    return true
}

/// This process's peak resident memory (VmHWM, kB), for bench/audio.sh's memory figure:
/// measured inside, since a wrapper's fork would count the wrapper's own pages.
func peakResidentKB() -> Int {
    guard let f = fopen("/proc/self/status", "r") else { return -1 }
    defer { fclose(f) }
    var line = [CChar](repeating: 0, count: 256)
    while fgets(&line, 256, f) != nil {
        let text = String(cString: line)
        if text.utf8.starts(with: "VmHWM:".utf8) {
            return Int(atoi(String(text.utf8.dropFirst(6).drop { $0 == 32 || $0 == 9 })!)) 
        }
    }
    return -1
}
