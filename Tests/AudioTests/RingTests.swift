import Foundation
import Synchronization
import Testing
import Wire
@testable import Audio

@Suite struct RingTests {
    @Test func capacityMustBePowerOfTwo() {
        #expect(throws: AudioError.capacityNotPowerOfTwo(1000)) { try SampleRing(capacity: 1000) }
        #expect(throws: AudioError.capacityNotPowerOfTwo(0)) { try FrameRing(slotCount: 0, slotSamples: 480) }
    }

    @Test func wrapsAndReportsPartialWrites() throws {
        let ring = try SampleRing(capacity: 8)
        var out = [Int16](repeating: 0, count: 8)
        let a: [Int16] = [1, 2, 3, 4, 5, 6]
        #expect(a.withUnsafeBufferPointer { ring.push($0) } == 6)
        #expect(out.withUnsafeMutableBufferPointer { ring.pop(into: UnsafeMutableBufferPointer(rebasing: $0[0..<4])) } == 4)
        #expect(Array(out[0..<4]) == [1, 2, 3, 4])
        let b: [Int16] = [7, 8, 9, 10, 11, 12, 13]
        #expect(b.withUnsafeBufferPointer { ring.push($0) } == 6) // only 6 free
        #expect(out.withUnsafeMutableBufferPointer { ring.pop(into: $0) } == 8)
        #expect(out == [5, 6, 7, 8, 9, 10, 11, 12])
        #expect(ring.availableToRead == 0)
    }

    /// One million samples through a 256-sample ring between two threads, in chunk sizes
    /// from a seeded generator on both sides: every sample arrives once and in order.
    @Test func twoThreadsMillionSamplesInOrder() throws {
        let ring = try SampleRing(capacity: 256)
        let total = 1_000_000
        let producer = TestThread { [ring] in
            var rng = SeededRandom(seed: 1)
            var chunk = [Int16](repeating: 0, count: 97)
            var next = 0
            while next < total {
                let n = min(Int.random(in: 1...97, using: &rng), total - next)
                for i in 0..<n { chunk[i] = Int16(truncatingIfNeeded: next + i) }
                var sent = 0
                while sent < n {
                    sent += chunk.withUnsafeBufferPointer { ring.push(UnsafeBufferPointer(rebasing: $0[sent..<n])) }
                }
                next += n
            }
        }
        var rng = SeededRandom(seed: 2)
        var buffer = [Int16](repeating: 0, count: 113)
        var received = 0
        var errors = 0
        while received < total {
            let want = Int.random(in: 1...113, using: &rng)
            let n = buffer.withUnsafeMutableBufferPointer { ring.pop(into: UnsafeMutableBufferPointer(rebasing: $0[0..<want])) }
            for i in 0..<n where buffer[i] != Int16(truncatingIfNeeded: received + i) { errors += 1 }
            received += n
        }
        producer.join()
        #expect(errors == 0)
        #expect(received == total)
        #expect(ring.availableToRead == 0)
    }

    /// 100,000 frames through an 8-slot frame ring between two threads: sequence numbers
    /// and contents arrive in order.
    @Test func twoThreadsFramesInOrder() throws {
        let ring = try FrameRing(slotCount: 8, slotSamples: 480)
        let total = 100_000
        let producer = TestThread { [ring] in
            var f = [Int16](repeating: 0, count: 160)
            for seq in 0..<total {
                for i in 0..<160 { f[i] = Int16(truncatingIfNeeded: seq &+ i) }
                let info = frameInfo(.hz16000, seq: UInt64(seq))
                while !f.withUnsafeBufferPointer({ ring.push($0, info: info) }) {}
            }
        }
        var buffer = [Int16](repeating: 0, count: 480)
        var expected = 0
        var errors = 0
        while expected < total {
            guard let info = buffer.withUnsafeMutableBufferPointer({ ring.pop(into: $0) }) else { continue }
            if info.sequence != UInt64(expected) || info.sampleCount != 160 { errors += 1 }
            if buffer[0] != Int16(truncatingIfNeeded: expected) || buffer[159] != Int16(truncatingIfNeeded: expected + 159) { errors += 1 }
            expected += 1
        }
        producer.join()
        #expect(errors == 0)
    }
}
