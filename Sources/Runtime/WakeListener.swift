// The wake word's detector on a low-priority thread of its own: the capture thread only
// copies frames into the tap's ring (`WakeTap`), so the detector can never delay the
// capture hooks' deadline; a wake reaches the loop through an eventfd.
import CSystem
import Synchronization
import Wire
import JSON
import Audio
import Platform
import Settings
import Wake
import Agent

/// A model as `wake-word` / `wake-model` name it: the `.tflite` and what its `.json`
/// says (pymicro-wakeword's format: `micro.probability_cutoff`, `micro.sliding_window_size`).
struct WakeModelFiles {
    let path: String
    let bytes: [UInt8]
    let cutoff: Double
    let window: Int

    /// The cutoff the detector uses: the model's own, moved by `wake-sensitivity` (down
    /// wakes more easily), kept inside (0, 1) so no setting makes it always or never wake.
    func cutoff(sensitivity: Double) -> Double {
        max(0.01, min(0.999, cutoff - sensitivity))
    }

    static func load(_ path: String) throws(CLIFailure) -> WakeModelFiles {
        guard path.utf8.count > 7, path.utf8.suffix(7).elementsEqual(".tflite".utf8) else {
            throw CLIFailure(.config, "wake-model '\(path)': a microWakeWord model is a .tflite file, with its .json beside it")
        }
        let json = String(decoding: path.utf8.dropLast(7), as: UTF8.self) + ".json"
        // Models are some 50–80 KB; 4 MB is far past any microWakeWord model, and keeps a
        // wrong path (a recording, a log) from being read whole.
        let model: [UInt8]
        do throws(FileReadError) { model = try readRegularFile(path, limit: 4 << 20).bytes } catch {
            throw CLIFailure(error.isMissing ? .unavailable : .config, "wake model: \(error)")
        }
        let text: [UInt8]
        do throws(FileReadError) { text = try readRegularFile(json, limit: 64 << 10).bytes } catch {
            throw CLIFailure(error.isMissing ? .unavailable : .config, "wake model's settings: \(error)")
        }
        guard let v = try? JSONValue.parse(text), let micro = v["micro"],
              let cutoff = micro["probability_cutoff"]?.double, cutoff > 0, cutoff < 1,
              let window = micro["sliding_window_size"]?.double, window >= 1, window <= 100, window == window.rounded() else {
            throw CLIFailure(.config, "\(json): not a microWakeWord model's settings (micro.probability_cutoff between 0 and 1, micro.sliding_window_size from 1 to 100)")
        }
        return WakeModelFiles(path: path, bytes: model, cutoff: cutoff, window: Int(window))
    }
}

/// The detector's thread: tap → 16 kHz → TFLite Micro's features → the model → a wake.
final class WakeListener: @unchecked Sendable {
    let tap: WakeTap
    let frontend: WakeFrontend
    let detector: WakeDetector
    /// The pipeline's rate to the models' 16 kHz: 48 kHz by the wake path's own
    /// decimator, 24 kHz by Audio's resampler, 16 kHz as it is.
    let decimator: WakeDecimator?
    let resampler: Resampler?
    let notify: EventFD
    let cutoff: Double
    /// The score of the last wake, in ten-thousandths (read by the loop after `notify`).
    private let lastScore = Atomic<Int>(0)
    private let running = Atomic<Bool>(false)
    private var thread: pthread_t? = nil
    /// After a wake the mean stays over the cutoff for some inferences (pymicro-wakeword
    /// reports each of them): one wake per this many 10 ms steps.
    static let refractorySteps = 150

    /// - sensitivity: `wake-sensitivity`, moving the model's cutoff down (more wakes).
    init(files: WakeModelFiles, sensitivity: Double, tap: WakeTap, rate: SampleRate) throws(CLIFailure) {
        self.tap = tap
        cutoff = files.cutoff(sensitivity: sensitivity)
        do throws(WakeModelError) {
            detector = try WakeDetector(modelBytes: files.bytes, probabilityCutoff: cutoff, slidingWindowSize: files.window)
        } catch {
            throw CLIFailure(.config, "wake model \(files.path): not a model Linnet can run (\(wakeModelErrorText(error)))")
        }
        guard detector.featuresPerFrame == WakeFrontend.featureCount else {
            throw CLIFailure(.config, "wake model \(files.path): its input takes \(detector.featuresPerFrame) features a frame, not the frontend's \(WakeFrontend.featureCount)")
        }
        frontend = WakeFrontend()
        do throws(AudioError) {
            decimator = rate == .hz48000 ? WakeDecimator(maxInput: WakeListener.chunk) : nil
            resampler = rate == .hz24000 ? try Resampler(inputRate: rate.hertz, outputRate: .hz16000, maxInputFrames: WakeListener.chunk) : nil
        } catch {
            throw CLIFailure(.config, "wake word: \(error)")
        }
        do throws(SystemError) { notify = try EventFD() } catch { throw CLIFailure(.software, "wake word: \(error)") }
    }

    /// Samples read from the tap at a time: 100 ms at 48 kHz.
    static let chunk = 4800

    var score: Double { Double(lastScore.load(ordering: .acquiring)) / 10_000 }

    /// Starts the thread (at the lowest priority: SCHED_IDLE would starve under load, so
    /// nice 10 within the normal class); `onWake` runs on the loop.
    func start(loop: EventLoop, onWake: @escaping (Double) -> Void) throws(CLIFailure) {
        _ = loop.watch(fd: notify.fd) { [unowned(unsafe) self] _ in
            self.notify.drain()
            onWake(self.score)
        }
        running.store(true, ordering: .releasing)
        let entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
            let me = Unmanaged<WakeListener>.fromOpaque(context!).takeUnretainedValue()
            me.run()
            return nil
        }
        var t = pthread_t()
        let r = pthread_create(&t, nil, entry, Unmanaged.passUnretained(self).toOpaque())
        guard r == 0 else { throw CLIFailure(.software, "wake word: pthread_create: error \(r)") }
        thread = t
    }

    func stop() {
        guard let t = thread else { return }
        running.store(false, ordering: .releasing)
        pthread_join(t, nil)
        thread = nil
    }

    deinit { stop() }

    private func run() {
        // who 0 is the calling thread: Linux keeps a nice value per thread (setpriority(2)).
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)
        // Every buffer is made here, before the loop: nothing is allocated per frame.
        let input = UnsafeMutableBufferPointer<Int16>.allocate(capacity: WakeListener.chunk)
        let outCap = resampler?.maxOutputSamples(forInputFrames: WakeListener.chunk) ?? WakeListener.chunk
        let resampled = UnsafeMutableBufferPointer<Int16>.allocate(capacity: outCap)
        let step = UnsafeMutableBufferPointer<Int16>.allocate(capacity: WakeFrontend.stepSamples)
        let features = UnsafeMutableBufferPointer<Int8>.allocate(capacity: WakeFrontend.featureCount)
        defer { input.deallocate(); resampled.deallocate(); step.deallocate(); features.deallocate() }
        var filled = 0
        var quiet = 0
        while running.load(ordering: .acquiring) {
            let n = tap.read(into: input)
            if n == 0 {
                var ts = timespec(tv_sec: 0, tv_nsec: 30_000_000)
                nanosleep(&ts, nil)
                continue
            }
            var count = n
            var source = UnsafeBufferPointer(rebasing: input[0..<n])
            if let decimator {
                count = decimator.process(source, into: resampled)
                source = UnsafeBufferPointer(rebasing: resampled[0..<count])
            } else if let resampler {
                do throws(AudioError) {
                    count = try resampler.process(source, into: resampled)
                } catch {
                    count = 0
                }
                source = UnsafeBufferPointer(rebasing: resampled[0..<count])
            }
            var i = 0
            while i < count {
                let take = min(count - i, WakeFrontend.stepSamples - filled)
                for k in 0..<take { step[filled + k] = source[i + k] }
                filled += take
                i += take
                guard filled == WakeFrontend.stepSamples else { break }
                filled = 0
                guard frontend.step(UnsafeBufferPointer(step), into: features) else { continue }
                let s = detector.pushFrame(UnsafeBufferPointer(features))
                if quiet > 0 { quiet -= 1; continue }
                if s.detected {
                    quiet = WakeListener.refractorySteps
                    lastScore.store(Int(s.probability * 10_000), ordering: .releasing)
                    notify.signal()
                }
            }
        }
    }
}

/// `linnet check`'s wake line: the model loaded and planned as `run` would.
public func checkWakeModel(config: Config) -> Result<String, CLIFailure>? {
    guard config.wakeEnabled, let path = config.wakeModelPath else { return nil }
    do throws(CLIFailure) {
        let files = try WakeModelFiles.load(path)
        let cutoff = files.cutoff(sensitivity: config.wakeSensitivity)
        let model: WakeModel
        do throws(WakeModelError) { model = try WakeModel(bytes: files.bytes) } catch {
            throw CLIFailure(.config, "wake model \(path): not a model Linnet can run (\(wakeModelErrorText(error)))")
        }
        return .success("\(path): \(model.operatorCount) operators, \(model.arenaBytes) bytes of working memory; wakes when \(files.window) inferences average over \(Int((cutoff * 100).rounded())) %")
    } catch {
        return .failure(error)
    }
}

/// A model's refusal in words (Embedded Swift has no reflection to print the case).
func wakeModelErrorText(_ e: WakeModelError) -> String {
    switch e {
    case .notATFLiteFile: return "not a TensorFlow Lite file"
    case .unsupportedOperator(let op, let code): return "operator \(op) is builtin operator \(code), which Linnet does not run"
    case .customOperator(let op): return "operator \(op) is a custom operator"
    case .tooLarge: return "over Linnet's limits for a wake model"
    case .unsupportedSchemaVersion(let v): return "schema version \(v), not 3"
    default: return "a malformed or unsupported model"
    }
}
