import Foundation
import Synchronization
import CAllocCounter
import Wire
import Platform
@testable import Devices

/// The sound in the room, one sample per frame instant on a timeline shared by a fake
/// speaker and a fake microphone: index k is the instant `start + k / rate` on a
/// `VirtualClock` (give the threads `clock.device`). What the speaker plays lands at the
/// index it is heard; the microphone digitizes index j from what was heard
/// `acousticDelay` frames earlier.
final class FakeAir: @unchecked Sendable {
    let clock: VirtualClock
    let rate: Int
    let start: Int64
    let count: Int
    let samples: UnsafeMutablePointer<Int16>
    /// Held by the speaker while it changes `samples` and by the microphone while it
    /// reads them. The speaker normally writes an instant long before the microphone
    /// hears it, but a flush zeroes everything not yet heard, from "now" on, while the
    /// microphone (woken at the same virtual instant) may be reading. A pthread mutex,
    /// which ThreadSanitizer sees (it does not see `Synchronization.Mutex`, which waits
    /// on a futex of its own).
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init(clock: VirtualClock = VirtualClock(), rate: Int = 48_000, seconds: Int = 30) {
        self.clock = clock
        self.rate = rate
        count = rate * seconds
        samples = .allocate(capacity: count)
        samples.initialize(repeating: 0, count: count)
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        start = clock.nanoseconds
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        samples.deallocate()
    }

    func withSamples<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// The frame instant being heard at a time, and now.
    func index(at nanoseconds: Int64) -> Int { Int((nanoseconds - start) * Int64(rate) / 1_000_000_000) }
    var now: Int { index(at: clock.nanoseconds) }
    /// When frame instant `k` begins: rounded up to the nanosecond, so `index(at:)` of
    /// it is k (rounded down, a wait for k would wake at k − 1 and wait again forever,
    /// virtual time standing still until someone waits).
    func time(ofIndex k: Int) -> Int64 {
        let ns = Int64(k) * 1_000_000_000
        return start + (ns >= 0 ? (ns + Int64(rate) - 1) / Int64(rate) : ns / Int64(rate))
    }

    /// Waits (in the audio thread that called) until frame instant `k`; false if the
    /// test is ending (the clock was let go), and the device should return at once.
    func sleep(until k: Int) -> Bool { clock.wait(until: time(ofIndex: k)) }
}

/// Counts allocations made by the audio thread between two calls into a fake device:
/// everything the thread does for one period (timeline, pipeline, hooks, rings, the
/// eventfd write), none of the fake's own work.
final class ThreadAllocations: @unchecked Sendable {
    let counted = Atomic<Int>(0)
    let periods = Atomic<Int>(0)
    /// Periods to let pass before counting (lazy metadata on the first calls).
    let warmUp: Int
    var open = false
    init(warmUp: Int = 20) { self.warmUp = warmUp }

    /// At the top of a device call: close the period that ended.
    func enterDevice() {
        if open { counted.add(alloc_counter_end(), ordering: .relaxed) }
        open = false
    }

    /// At the end of a device call: open the next period.
    func leaveDevice() {
        if periods.add(1, ordering: .relaxed).newValue > warmUp {
            alloc_counter_begin()
            open = true
        }
    }
}

/// A speaker with a buffer of `bufferFrames` and `latencyFrames` between its buffer
/// and the air (the DAC path). Writes block, as ALSA's do, until there is room; a frame
/// written when the buffer holds q frames is heard q frames later, and `delayFrames`
/// says exactly that (the `snd_pcm_delay` contract). Running dry makes the next write
/// start `latencyFrames` after "now", as a restarted device does.
final class FakeSpeaker: PCMDevice, @unchecked Sendable {
    let device = "fake-speaker"
    let format: DeviceFormat
    let air: FakeAir
    let bufferFrames: Int
    let latencyFrames: Int
    let allocations: ThreadAllocations?
    /// The air index the next written frame lands at.
    var nextHeard: Int? = nil
    /// Per write: the air index its first frame was heard at (audio thread only; read
    /// after the thread stopped).
    var writes: [Int] = []
    /// Per write: the frames already queued (written, not yet past the DAC path) when it
    /// came (audio thread only; read after the thread stopped).
    var queuedAtWrite: [Int] = []
    let underruns = Atomic<Int>(0)
    /// What the last discard dropped, and the air index it happened at.
    let discarded = Atomic<Int>(0)
    let discardedAt = Atomic<Int>(-1)

    init(air: FakeAir, bufferFrames: Int, latencyFrames: Int, allocations: ThreadAllocations? = nil) {
        self.air = air
        self.bufferFrames = bufferFrames
        self.latencyFrames = latencyFrames
        self.allocations = allocations
        format = DeviceFormat(sampleFormat: .s16LE, sampleRate: air.rate, channels: 1, periodFrames: air.rate / 100)
        writes.reserveCapacity(air.count / format.periodFrames + 16)
        queuedAtWrite.reserveCapacity(air.count / format.periodFrames + 16)
    }

    func readRaw(_ buffer: UnsafeMutableRawPointer, frames: Int) -> Int { -Int(EBADFD) }

    func writeRaw(_ buffer: UnsafeRawPointer, frames: Int) -> Int {
        allocations?.enterDevice()
        defer { allocations?.leaveDevice() }
        if air.clock.isReleased { return -Int(EINTR) }
        var now = air.now
        if queuedAtWrite.count < queuedAtWrite.capacity { queuedAtWrite.append(max(0, (nextHeard ?? now) - latencyFrames - now)) }
        var next = nextHeard ?? (now + latencyFrames)
        if next < now + latencyFrames {
            // Ran dry: the device restarts with this write.
            if nextHeard != nil { underruns.add(1, ordering: .relaxed) }
            next = now + latencyFrames
        }
        // Queued frames are those not yet past the DAC path.
        while next - latencyFrames - now > bufferFrames - frames {
            guard air.sleep(until: next - latencyFrames - (bufferFrames - frames)) else { return -Int(EINTR) }
            now = air.now
        }
        let src = buffer.assumingMemoryBound(to: Int16.self)
        air.withSamples {
            for i in 0..<frames where next + i < air.count && next + i >= 0 { air.samples[next + i] = src[i] }
        }
        if writes.count < writes.capacity { writes.append(next) }
        nextHeard = next + frames
        return frames
    }

    func recover(_ code: Int32) -> Int32 { 0 }

    func delayFrames() -> Int? {
        let now = air.now
        guard let next = nextHeard, next > now + latencyFrames else { return latencyFrames }
        return next - now
    }

    func bufferedFrames() -> Int? {
        let now = air.now
        guard let next = nextHeard else { return 0 }
        return max(0, next - latencyFrames - now)
    }

    func discardPending() -> Int32 {
        air.withSamples {
            let now = air.now
            if let next = nextHeard, next > now + latencyFrames {
                // Never heard: take it out of the air again.
                for k in (now + latencyFrames)..<min(next, air.count) { air.samples[k] = 0 }
                discarded.store(next - now - latencyFrames, ordering: .relaxed)
            } else {
                discarded.store(0, ordering: .relaxed)
            }
            discardedAt.store(now, ordering: .releasing)
        }
        nextHeard = nil
        return 0
    }

    func drain() {}
}

/// A microphone `acousticDelayFrames` from the speaker, with `latencyFrames` between
/// the ADC and the read. A read of n frames blocks until they have been digitized and
/// come through; `delayFrames` then says how long ago the next unread frame was
/// digitized (the `snd_pcm_delay` contract for capture).
final class FakeMicrophone: PCMDevice, @unchecked Sendable {
    let device = "fake-microphone"
    let format: DeviceFormat
    let air: FakeAir
    let latencyFrames: Int
    let acousticDelayFrames: Int
    let allocations: ThreadAllocations?
    var nextRead: Int? = nil

    init(air: FakeAir, latencyFrames: Int, acousticDelayFrames: Int, allocations: ThreadAllocations? = nil) {
        self.air = air
        self.latencyFrames = latencyFrames
        self.acousticDelayFrames = acousticDelayFrames
        self.allocations = allocations
        format = DeviceFormat(sampleFormat: .s16LE, sampleRate: air.rate, channels: 1, periodFrames: air.rate / 100)
    }

    func readRaw(_ buffer: UnsafeMutableRawPointer, frames: Int) -> Int {
        allocations?.enterDevice()
        defer { allocations?.leaveDevice() }
        if air.clock.isReleased { return -Int(EINTR) }
        let first = nextRead ?? air.now
        // Digitized at first + frames − 1, readable latencyFrames later.
        if air.now < first + frames + latencyFrames {
            guard air.sleep(until: first + frames + latencyFrames) else { return -Int(EINTR) }
        }
        let dst = buffer.assumingMemoryBound(to: Int16.self)
        air.withSamples {
            for i in 0..<frames {
                let k = first + i - acousticDelayFrames
                dst[i] = k >= 0 && k < air.count ? air.samples[k] : 0
            }
        }
        nextRead = first + frames
        return frames
    }

    func writeRaw(_ buffer: UnsafeRawPointer, frames: Int) -> Int { -Int(EBADFD) }
    func recover(_ code: Int32) -> Int32 { 0 }

    func delayFrames() -> Int? {
        guard let next = nextRead else { return latencyFrames }
        return air.now - next
    }

    func bufferedFrames() -> Int? { nil }
    func discardPending() -> Int32 { 0 }
    func drain() {}
}
