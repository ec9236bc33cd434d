// What the capture and playback threads share: start, stop, the interruptible sleeps
// and the reopening backoff (`ThreadControl`), and the timing of a device's delay.
import CSystem
import Synchronization
import Wire
import Platform

/// Start, stop and the interruptible sleeps shared by the capture and playback threads,
/// and the clock they read and sleep on.
final class ThreadControl {
    let clock: DeviceClock
    let running = Atomic<Bool>(false)
    /// Test seam: while set, the thread delivers nothing (a driver stuck in a read), so
    /// the watchdog's reaction to a stalled audio thread can be shown.
    let frozen = Atomic<Bool>(false)
    var thread: pthread_t? = nil
    var realtime = false

    init(clock: DeviceClock) { self.clock = clock }

    var isRunning: Bool { running.load(ordering: .relaxed) }

    /// Runs `body` on a new (real-time when permitted) thread.
    func start(_ body: @escaping () -> Void) throws(DeviceError) {
        guard thread == nil else { return }
        running.store(true, ordering: .releasing)
        do throws(SystemError) {
            let (t, rt) = try RealTime.spawn(priority: RealTime.priority(), body)
            thread = t
            realtime = rt
        } catch {
            running.store(false, ordering: .releasing)
            throw .thread(error)
        }
    }

    /// Asks the thread to end and waits for it; false if it was not running.
    @discardableResult
    func stop() -> Bool {
        guard let t = thread else { return false }
        running.store(false, ordering: .releasing)
        pthread_join(t, nil)
        thread = nil
        return true
    }

    /// Sleeps in short steps so `stop()` is honoured within 50 ms.
    func sleep(nanoseconds: Int64) {
        let end = clock.now().nanoseconds &+ nanoseconds
        while isRunning {
            let now = clock.now().nanoseconds
            if now >= end { return }
            clock.wait(until: min(end, now &+ 50_000_000))
        }
    }

    /// Retries `attempt` with backoff (0.25 s doubling to 4 s) until it succeeds or the
    /// thread is stopped; the device is gone meanwhile, so no audio deadline is missed.
    func reopen(_ counters: AudioThreadCounters, _ attempt: () -> Bool) {
        counters.set(.reopening)
        var delay: Int64 = 250_000_000
        while isRunning {
            if attempt() {
                counters.reopenings.add(1, ordering: .relaxed)
                counters.set(.running)
                return
            }
            sleep(nanoseconds: delay)
            delay = min(delay * 2, 4_000_000_000)
        }
    }
}

/// The device's delay and the instant it held: the clock is read on both sides of
/// `snd_pcm_delay` and the midpoint taken. A thread pre-empted between the two (the
/// clock reads more than 0.5 ms apart) cannot say which instant the delay belongs to:
/// the measurement is not trusted, and the timeline counts on instead of following it.
@inline(__always)
func measureDelay(_ pcm: any PCMDevice, on clock: DeviceClock) -> (now: Instant, delay: Int, trusted: Bool) {
    let before = clock.now().nanoseconds
    let delay = pcm.delayFrames()
    let after = clock.now().nanoseconds
    let trusted = delay != nil && after &- before <= 500_000
    return (Instant(nanoseconds: before &+ (after &- before) / 2), delay ?? 0, trusted)
}

/// Frames as nanoseconds at `rate`.
@inline(__always)
func framesToNanoseconds(_ frames: Int, rate: Int) -> Int64 {
    Int64(frames) &* 1_000_000_000 / Int64(max(rate, 1))
}
