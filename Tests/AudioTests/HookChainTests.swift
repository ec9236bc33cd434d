import Foundation
import Synchronization
import Testing
import Wire
@testable import Audio

/// Records what the chain does to it (test-only: allocates freely).
final class Recorder: AudioHook, @unchecked Sendable {
    let id: Int16
    var verdict: HookVerdict
    var events: [String] = []
    var sequences: [UInt64] = []
    var sawSamples: [[Int16]] = []
    init(id: Int16, verdict: HookVerdict = .pass) { self.id = id; self.verdict = verdict }
    func captureDidStart(_ format: AudioFormat) { events.append("start") }
    func captureDidStop(_ format: AudioFormat) { events.append("stop") }
    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        events.append("frame \(info.sequence)")
        sequences.append(info.sequence)
        sawSamples.append(Array(samples.prefix(4)))
        return verdict
    }
}

/// Appends its id to a trace in the frame: samples[0] counts entries, samples[1…] are ids.
/// Allocation-free; counts starts and stops in atomics.
final class Stamp: AudioHook, @unchecked Sendable {
    let id: Int16
    let starts = Atomic<Int>(0)
    let stops = Atomic<Int>(0)
    let running = Atomic<Int>(0)
    init(id: Int16) { self.id = id }
    func captureDidStart(_ format: AudioFormat) {
        starts.add(1, ordering: .relaxed)
        running.add(1, ordering: .relaxed)
    }
    func captureDidStop(_ format: AudioFormat) {
        stops.add(1, ordering: .relaxed)
        running.subtract(1, ordering: .relaxed)
    }
    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        let n = Int(samples[0])
        samples[1 + n] = id
        samples[0] = Int16(n + 1)
        return .pass
    }
}

@Suite struct HookChainTests {
    func runFrame(_ chain: HookChain, seq: UInt64, fill: Int16 = 7) -> ([Int16], HookVerdict) {
        var f = [Int16](repeating: fill, count: 480)
        let v = f.withUnsafeMutableBufferPointer { chain.process($0, frameInfo(seq: seq)) }
        return (f, v)
    }

    @Test func silenceVerdictZeroesAndLaterHooksSeeSilence() throws {
        let chain = HookChain()
        let a = Recorder(id: 1), b = Recorder(id: 2, verdict: .silence), c = Recorder(id: 3)
        for h in [a, b, c] { try chain.add(h) }
        let (out, v) = runFrame(chain, seq: 0)
        #expect(v == .silence)
        #expect(out.allSatisfy { $0 == 0 })
        #expect(a.sawSamples == [[7, 7, 7, 7]])
        #expect(c.sawSamples == [[0, 0, 0, 0]])
        b.verdict = .pass
        #expect(runFrame(chain, seq: 1) == ([Int16](repeating: 7, count: 480), .pass))
    }

    @Test func orderFollowsEdits() throws {
        let chain = HookChain()
        let h = (1...4).map { Stamp(id: Int16($0)) }
        for s in h { try chain.add(s) }
        func trace() -> [Int16] {
            var f = [Int16](repeating: 0, count: 480)
            _ = f.withUnsafeMutableBufferPointer { chain.process($0, frameInfo()) }
            return Array(f[1...Int(f[0])].prefix(Int(f[0])))
        }
        #expect(trace() == [1, 2, 3, 4])
        try chain.move(h[3], to: 0)
        #expect(trace() == [4, 1, 2, 3])
        try chain.setEnabled(h[1], false)
        #expect(trace() == [4, 1, 3])
        try chain.remove(h[0])
        #expect(trace() == [4, 3])
        try chain.insert(h[0], at: 1)
        try chain.setEnabled(h[1], true)
        #expect(trace() == [4, 1, 2, 3])
        #expect(chain.hooks.map { ($0 as! Stamp).id } == [4, 1, 2, 3])
        #expect(throws: AudioError.hookAlreadyInChain) { try chain.add(h[2]) }
        #expect(throws: AudioError.hookNotInChain) { try chain.remove(Stamp(id: 9)) }
        #expect(throws: AudioError.indexOutOfRange(index: 4, count: 3)) { try chain.move(h[2], to: 4) }
    }

    @Test func startStopOrdering() throws {
        let chain = HookChain()
        let a = Recorder(id: 1), b = Recorder(id: 2), c = Recorder(id: 3)
        try chain.add(a)
        try chain.add(b, enabled: false)
        chain.start(.standard)
        _ = runFrame(chain, seq: 0)
        try chain.setEnabled(b, true)   // starts before its first frame
        try chain.add(c)
        _ = runFrame(chain, seq: 1)
        try chain.setEnabled(a, false)  // stops before the next frame
        try chain.remove(c)             // likewise
        _ = runFrame(chain, seq: 2)
        try chain.setEnabled(a, true)
        _ = runFrame(chain, seq: 3)
        chain.stop()
        _ = runFrame(chain, seq: 4)     // a frame without start begins a new session
        chain.stop()
        #expect(a.events == ["start", "frame 0", "frame 1", "stop", "start", "frame 3", "stop",
                             "start", "frame 4", "stop"])
        #expect(b.events == ["start", "frame 1", "frame 2", "frame 3", "stop", "start", "frame 4", "stop"])
        #expect(c.events == ["start", "frame 1", "stop"])
    }

    @Test func retiredSnapshotsAreFreedAfterAcknowledgement() throws {
        let chain = HookChain()
        weak var weakHook: Stamp?
        do {
            let h = Stamp(id: 1)
            weakHook = h
            try chain.add(h)
            _ = runFrame(chain, seq: 0)
            try chain.remove(h)
        }
        // The audio thread has not seen the removal: the hook must stay alive.
        #expect(chain.reclaim() >= 1)
        #expect(weakHook != nil)
        _ = runFrame(chain, seq: 1)
        #expect(chain.reclaim() == 0)
        #expect(weakHook == nil)
    }

    /// Edits from this thread while a real audio thread runs frames: every frame must
    /// show exactly one published configuration (never a torn mix), and every started
    /// hook must be stopped.
    @Test func editsWhileAudioRuns() throws {
        let chain = HookChain()
        let stamps = (1...5).map { Stamp(id: Int16($0)) }
        let frames = 20000
        let traces = UnsafeMutablePointer<Int16>.allocate(capacity: frames * 8)
        defer { traces.deallocate() }
        let shared = SendablePointer(pointer: traces)
        let finished = Atomic<Bool>(false)
        var configurations: Set<[Int16]> = [[]]
        // Local model of the chain to know every configuration it can publish.
        var model: [(Int16, Bool)] = []
        func record() { configurations.insert(model.filter { $0.1 }.map { $0.0 }) }

        let audio = TestThread { [chain] in
            chain.start(.standard)
            let f = UnsafeMutablePointer<Int16>.allocate(capacity: 480)
            for seq in 0..<frames {
                f.initialize(repeating: 0, count: 480)
                _ = chain.process(UnsafeMutableBufferPointer(start: f, count: 480), frameInfo(seq: UInt64(seq)))
                for j in 0..<8 { shared.pointer[seq * 8 + j] = f[j] }
            }
            chain.stop()
            f.deallocate()
        }
        var rng = SeededRandom(seed: 42)
        var edits = 0
        while edits < 3000 {
            let s = stamps[Int.random(in: 0..<5, using: &rng)]
            let present = model.firstIndex { $0.0 == s.id }
            switch Int.random(in: 0..<4, using: &rng) {
            case 0 where present == nil:
                let at = Int.random(in: 0...model.count, using: &rng)
                try chain.insert(s, at: at); model.insert((s.id, true), at: at)
            case 1 where present != nil:
                try chain.remove(s); model.remove(at: present!)
            case 2 where present != nil:
                let e = !model[present!].1
                try chain.setEnabled(s, e); model[present!].1 = e
            case 3 where present != nil:
                let to = Int.random(in: 0..<model.count, using: &rng)
                try chain.move(s, to: to); let m = model.remove(at: present!); model.insert(m, at: to)
            default: continue
            }
            record()
            edits += 1
            chain.reclaim()
        }
        audio.join()
        finished.store(true, ordering: .relaxed)
        chain.reclaim()
        var torn = 0
        for seq in 0..<frames {
            let n = Int(traces[seq * 8])
            let t = (0..<n).map { traces[seq * 8 + 1 + $0] }
            if !configurations.contains(t) { torn += 1 }
        }
        #expect(torn == 0)
        for s in stamps {
            #expect(s.running.load(ordering: .relaxed) == 0)
            #expect(s.starts.load(ordering: .relaxed) == s.stops.load(ordering: .relaxed))
        }
    }
}

@Suite struct DeferredHookTests {
    func frame(_ seq: Int) -> [Int16] { (0..<480).map { Int16(truncatingIfNeeded: seq * 1000 + $0) } }

    @Test func putBackInTimeIsSentAfterTheDeadline() throws {
        let hook = try DeferredHook(deadlineFrames: 2)
        hook.captureDidStart(.standard)
        var got = [Int16](repeating: 0, count: 960)
        var outputs: [[Int16]] = []
        var verdicts: [HookVerdict] = []
        for seq in 0..<10 {
            var f = frame(seq)
            verdicts.append(f.withUnsafeMutableBufferPointer { hook.process($0, frameInfo(seq: UInt64(seq))) })
            outputs.append(f)
            // The consumer inverts the frame and puts it back at once.
            let info = try #require(got.withUnsafeMutableBufferPointer { hook.receive(into: $0) })
            #expect(info.sequence == UInt64(seq))
            let changed = got[0..<480].map { 0 &- $0 }
            #expect(changed.withUnsafeBufferPointer { hook.putBack($0, info) })
        }
        #expect(verdicts[0] == .silence && verdicts[1] == .silence)
        #expect(outputs[0].allSatisfy { $0 == 0 })
        for seq in 2..<10 {
            #expect(verdicts[seq] == .pass)
            #expect(outputs[seq] == frame(seq - 2).map { 0 &- $0 })
        }
        #expect(hook.counters == DeferredCounters(hooked: 10, putBack: 8, late: 0, dropped: 0))
    }

    @Test func lateFrameBecomesSilenceAndIsCounted() throws {
        let hook = try DeferredHook(deadlineFrames: 2)
        hook.captureDidStart(.standard)
        var got = [Int16](repeating: 0, count: 960)
        var held: (FrameInfo, [Int16])?
        var outputs: [[Int16]] = []
        for seq in 0..<10 {
            var f = frame(seq)
            _ = f.withUnsafeMutableBufferPointer { hook.process($0, frameInfo(seq: UInt64(seq))) }
            outputs.append(f)
            let info = try #require(got.withUnsafeMutableBufferPointer { hook.receive(into: $0) })
            if seq == 5 { held = (info, Array(got[0..<480])); continue } // consumer stalls on 5
            #expect(Array(got[0..<480]).withUnsafeBufferPointer { hook.putBack($0, info) })
            if seq == 8, let (i, s) = held { _ = s.withUnsafeBufferPointer { hook.putBack($0, i) } } // too late
        }
        #expect(outputs[7].allSatisfy { $0 == 0 })      // slot of frame 5
        #expect(outputs[6] == frame(4) && outputs[8] == frame(6) && outputs[9] == frame(7))
        #expect(hook.counters == DeferredCounters(hooked: 10, putBack: 7, late: 1, dropped: 0))
    }

    @Test func fullRingDropsAndStalledConsumerCountsLate() throws {
        let hook = try DeferredHook(deadlineFrames: 2, slotCount: 8)
        hook.captureDidStart(.standard)
        for seq in 0..<20 {
            var f = frame(seq)
            let v = f.withUnsafeMutableBufferPointer { hook.process($0, frameInfo(seq: UInt64(seq))) }
            #expect(v == .silence)
            #expect(f.allSatisfy { $0 == 0 })
        }
        // Frames 0…7 reached the consumer, 8…19 did not; slots 0…17 came due, of which
        // 0…7 were delivered and so are late.
        #expect(hook.counters == DeferredCounters(hooked: 8, putBack: 0, late: 8, dropped: 12))
        #expect(throws: AudioError.self) { try DeferredHook(deadlineFrames: 0) }
        #expect(throws: AudioError.self) { try DeferredHook(deadlineFrames: 8, slotCount: 8) }
    }
}
