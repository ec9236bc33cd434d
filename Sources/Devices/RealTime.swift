// Real-time scheduling for the audio threads: memory locking, the SCHED_FIFO priority
// the process may ask for, and starting a thread with it (or without it when refused).
import CSystem
import Platform

/// Scheduling set-up for the audio threads.
public enum RealTime {
    /// Locks current and future pages in RAM so a page fault never stalls audio;
    /// false when not permitted (no CAP_IPC_LOCK / LimitMEMLOCK too low).
    public static func lockMemory() -> Bool {
        mlockall(Int32(MCL_CURRENT | MCL_FUTURE)) == 0
    }

    final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// The SCHED_FIFO priority the audio threads ask for: `wanted`, or the process's
    /// RLIMIT_RTPRIO when that is lower (systemd's `LimitRTPRIO=`, PAM's `rtprio`): a
    /// thread that asks for more than the limit gets no real-time scheduling at all
    /// (EPERM), whereas one at the limit is granted it. Root (CAP_SYS_NICE) may exceed
    /// the limit: with a limit of 0 it asks for `wanted`, and the kernel decides.
    public static func priority(wanted: Int32 = 60) -> Int32 {
        let limit = csystem_rtprio_limit()
        if limit < 0 || limit == 0 { return wanted }
        return min(wanted, Int32(limit))
    }

    /// Starts a thread running `body`, with SCHED_FIFO at `priority` when permitted.
    /// Returns the thread and whether it got real-time scheduling.
    static func spawn(priority: Int32, _ body: @escaping () -> Void) throws(SystemError) -> (pthread_t, Bool) {
        let entry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { context in
            let box = Unmanaged<Box>.fromOpaque(context!).takeRetainedValue()
            box.body()
            return nil
        }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        var param = sched_param()
        param.sched_priority = priority
        pthread_attr_setinheritsched(&attributes, Int32(PTHREAD_EXPLICIT_SCHED))
        pthread_attr_setschedpolicy(&attributes, SCHED_FIFO)
        pthread_attr_setschedparam(&attributes, &param)
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        if pthread_create(&thread, &attributes, entry, context) == 0 {
            return (thread, true)
        }
        // EPERM without CAP_SYS_NICE / LimitRTPRIO: run at normal priority instead.
        let r = pthread_create(&thread, nil, entry, context)
        guard r == 0 else {
            Unmanaged<Box>.fromOpaque(context).release()
            throw SystemError("pthread_create", code: r)
        }
        return (thread, false)
    }
}
