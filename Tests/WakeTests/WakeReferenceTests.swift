import Foundation
import Testing
import Glibc
@testable import Wake

/// Linnet's wake word against its independent judge: pymicro-wakeword 2.5.0 itself
/// (its features from pymicro-features, its model on its own TensorFlow Lite C runtime),
/// run from Python on the same synthesized recordings (Tests/Wake/reference.py). Every
/// inference's output byte, and the inferences at which each model fires, must agree.
@Suite(.serialized) struct WakeReferenceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let models = ["okay_nabu", "hey_jarvis", "alexa", "hey_mycroft"]

    /// The speech venv's python (SPEECH_PYTHON, else build/speech-venv), or nil to skip;
    /// on CI a missing one is a failure.
    static func python() -> String? {
        if let p = ProcessInfo.processInfo.environment["SPEECH_PYTHON"], FileManager.default.isExecutableFile(atPath: p) { return p }
        let venv = root + "/build/speech-venv/bin/python"
        if FileManager.default.isExecutableFile(atPath: venv) { return venv }
        if ProcessInfo.processInfo.environment["CI"] != nil {
            Issue.record("the speech venv is not installed (run Tests/Speech/setup.sh or set SPEECH_PYTHON)")
        }
        return nil
    }

    /// The models' folder, fetched first (scripts/fetch-wake-models.sh: once, under a
    /// lock, whichever test asks first).
    static func modelDirectory() throws -> String {
        let dir = root + "/build/third_party/wake"
        _ = try run("/bin/bash", [root + "/scripts/fetch-wake-models.sh", dir])
        return dir
    }

    /// Runs a tool to its exit and returns its stdout (stderr goes to the test's own).
    static func run(_ exe: String, _ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "\(exe) \(args.prefix(2)) exited \(p.terminationStatus)"]) }
        return String(decoding: data, as: UTF8.self)
    }

    struct Verdict: Equatable {
        var outputs: [Int]
        var fired: [Int]
    }

    /// Linnet's pipeline on one recording: 10 ms steps into the frontend, every feature
    /// frame into the detector; the output byte of each inference, and where it fired.
    static func linnet(_ audio: [Int16], model: [UInt8], cutoff: Double, window: Int) throws -> Verdict {
        let frontend = WakeFrontend()
        let detector = try WakeDetector(modelBytes: model, probabilityCutoff: cutoff, slidingWindowSize: window)
        var features = [Int8](repeating: 0, count: WakeFrontend.featureCount)
        var v = Verdict(outputs: [], fired: [])
        var i = 0
        while i + WakeFrontend.stepSamples <= audio.count {
            let produced = audio.withUnsafeBufferPointer { a in
                features.withUnsafeMutableBufferPointer { f in
                    frontend.step(UnsafeBufferPointer(rebasing: a[i..<(i + WakeFrontend.stepSamples)]), into: f)
                }
            }
            i += WakeFrontend.stepSamples
            guard produced else { continue }
            let s = features.withUnsafeBufferPointer { detector.pushFrame($0) }
            if s.ranInference {
                v.outputs.append(Int(s.output))
                if s.detected { v.fired.append(v.outputs.count - 1) }
            }
        }
        return v
    }

    @Test func everyInferenceAndEveryWakeAsPymicroWakeword() throws {
        guard let python = WakeReferenceTests.python() else { return }
        let script = WakeReferenceTests.root + "/Tests/Wake/reference.py"
        let modelDir = try WakeReferenceTests.modelDirectory()
        let clips = NSTemporaryDirectory() + "linnet-wake-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: clips) }
        _ = try WakeReferenceTests.run(python, [script, "clips", clips])
        let listing = try String(contentsOfFile: clips + "/clips.txt", encoding: .utf8)
        let names = listing.split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
        try #require(names.count > 50)
        let raws = names.map { clips + "/\($0).raw" }
        let audio: [String: [Int16]] = try Dictionary(uniqueKeysWithValues: names.map { name in
            let d = try Data(contentsOf: URL(fileURLWithPath: clips + "/\(name).raw"))
            return (name + ".raw", d.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) })
        })
        var inferences = 0, differing = 0, maxDiff = 0, referenceWakes = 0
        for m in WakeReferenceTests.models {
            let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: "\(modelDir)/\(m).json"))) as? [String: Any]
            let micro = try #require(json?["micro"] as? [String: Any])
            let cutoff = try #require(micro["probability_cutoff"] as? Double)
            let window = try #require(micro["sliding_window_size"] as? Int)
            let model = try [UInt8](Data(contentsOf: URL(fileURLWithPath: "\(modelDir)/\(m).tflite")))
            let lines = try WakeReferenceTests.run(python, [script, "judge", "\(modelDir)/\(m).json"] + raws).split(separator: "\n")
            try #require(lines.count == names.count)
            var firedFiles = 0
            for line in lines {
                let o = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let file = try #require(o["file"] as? String)
                let reference = Verdict(outputs: try #require(o["outputs"] as? [Int]), fired: try #require(o["fired"] as? [Int]))
                let ours = try WakeReferenceTests.linnet(try #require(audio[file]), model: model, cutoff: cutoff, window: window)
                #expect(ours.outputs.count == reference.outputs.count, "\(m) \(file): \(ours.outputs.count) inferences, the reference \(reference.outputs.count)")
                for (a, b) in zip(ours.outputs, reference.outputs) where a != b {
                    differing += 1
                    maxDiff = max(maxDiff, abs(a - b))
                }
                inferences += reference.outputs.count
                // The decisions are the judge's: the same inferences fire.
                #expect(ours.fired == reference.fired, "\(m) \(file): fired at \(ours.fired), the reference at \(reference.fired)")
                if !reference.fired.isEmpty { firedFiles += 1 }
            }
            referenceWakes += firedFiles
            print("WAKE reference \(m): \(firedFiles) of \(names.count) recordings fire in both")
        }
        print("WAKE reference: \(inferences) inferences over \(names.count) recordings × 4 models, \(differing) output bytes differ (largest difference \(maxDiff))")
        // Bit for bit: the kernels follow TFLite's integer arithmetic (Sources/Wake/Ops.swift).
        #expect(differing == 0)
        #expect(referenceWakes > 10, "the recordings must make the reference fire, or the comparison proves little")
    }
}

import CAllocCounter

/// The detector's thread allocates nothing per frame: the frontend's step and the
/// model's inference, counted by the allocation counter over 3 s of speech-like noise.
@Suite struct WakeAllocationTests {
    @Test(.enabled(if: alloc_counter_available() != 0, "sanitizer build: the sanitizer owns malloc"))
    func stepsAndInferencesDoNotAllocate() throws {
        let model = try [UInt8](Data(contentsOf: URL(fileURLWithPath: try WakeReferenceTests.modelDirectory() + "/okay_nabu.tflite")))
        let frontend = WakeFrontend()
        let detector = try WakeDetector(modelBytes: model, probabilityCutoff: 0.85, slidingWindowSize: 5)
        var seed: UInt32 = 1
        let audio = (0..<48_000).map { _ -> Int16 in
            seed = seed &* 1_664_525 &+ 1_013_904_223
            return Int16(truncatingIfNeeded: Int32(bitPattern: seed) >> 20)
        }
        let features = UnsafeMutableBufferPointer<Int8>.allocate(capacity: WakeFrontend.featureCount)
        defer { features.deallocate() }
        var inferences = 0
        var frontendAllocations = 0, detectorAllocations = 0
        audio.withUnsafeBufferPointer { a in
            var i = 0
            while i + WakeFrontend.stepSamples <= a.count {
                let samples = UnsafeBufferPointer(rebasing: a[i..<(i + WakeFrontend.stepSamples)])
                alloc_counter_begin()
                let produced = frontend.step(samples, into: features)
                frontendAllocations += alloc_counter_end()
                if produced {
                    alloc_counter_begin()
                    let s = detector.pushFrame(UnsafeBufferPointer(features))
                    detectorAllocations += alloc_counter_end()
                    if s.ranInference { inferences += 1 }
                }
                i += WakeFrontend.stepSamples
            }
        }
        #expect(frontendAllocations == 0)
        #expect(detectorAllocations == 0)
        #expect(inferences == 99)
    }
}
