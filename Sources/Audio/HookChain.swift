import Synchronization
import Wire

/// A capture (or playback) hook: sees every 10 ms frame before it is encoded and sent
/// (or before it reaches the speaker), may change the samples in place, never the format.
///
/// All three methods run on the real-time audio thread, in the order
/// `captureDidStart`, `process`…, `captureDidStop`, for every session in which the hook
/// is enabled. They must not block, lock, allocate, log or call async code. The buffer
/// is valid only during the call; keep no pointer to it.
public protocol AudioHook: AnyObject {
    /// Before the hook's first frame of a session (or of the stretch of a session after
    /// it was enabled or added while audio ran).
    func captureDidStart(_ format: AudioFormat)
    /// One frame: interleaved samples, `info.sampleCount` of them. `.pass` sends the
    /// frame, changed or not; `.silence` sends silence instead.
    func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict
    /// After the hook's last frame of a session (or when it is disabled or removed while
    /// audio runs).
    func captureDidStop(_ format: AudioFormat)
}

extension AudioHook {
    public func captureDidStart(_ format: AudioFormat) {}
    public func captureDidStop(_ format: AudioFormat) {}
}

/// Playback hooks have the same shape: on a playback chain, "capture did start/stop"
/// means the playback stream started or stopped, and `captureTime` is when the frame is
/// due at the speaker.
public typealias PlaybackHook = AudioHook

/// The strong reference to a hook (kept by the chain's registrations and live
/// snapshots); the audio thread calls it through a `Borrowed` view.
final class HookBox {
    let hook: any AudioHook
    /// A built-in hook that reads and keeps the chain's level cache correctly
    /// (FrameLevels). Others (user hooks, which may also run built-in hooks inside
    /// themselves, and hooks that hand frames to other threads) get no cache.
    let sharesLevels: Bool
    init(_ hook: any AudioHook) {
        self.hook = hook
        sharesLevels = hook is HighPassFilter || hook is AutomaticGainControl || hook is NoiseGate
            || hook is Limiter || hook is LevelMeter || hook is MuteGate
    }
}

// The calls into user hooks are the one place the audio thread leaves code the compiler
// can check: the callee is chosen at run time. `no_performance_analysis` excludes exactly
// these three trampolines from the `@_noLocks` audit of `HookChain` (-D RT_AUDIT); the
// built-in hooks are audited themselves. The box is borrowed (`Borrowed.use`) and its
// `let hook` is read without a retain in the generated code.
@_semantics("no_performance_analysis") @inline(never)
func callProcess(_ box: HookBox, _ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
    box.hook.process(samples, info)
}

@_semantics("no_performance_analysis") @inline(never)
func callStart(_ box: HookBox, _ format: AudioFormat) {
    box.hook.captureDidStart(format)
}

@_semantics("no_performance_analysis") @inline(never)
func callStop(_ box: HookBox, _ format: AudioFormat) {
    box.hook.captureDidStop(format)
}

/// One hook in a published snapshot. Everything but `started` is immutable once
/// published; `started` belongs to the audio thread alone.
struct ChainEntry {
    let box: Borrowed<HookBox>
    let enabled: Bool
    let sharesLevels: Bool
    var started: Bool
}

/// An immutable hook order, published to the audio thread through one atomic pointer.
struct ChainSnapshot {
    let generation: UInt64
    let count: Int
    let entries: UnsafeMutablePointer<ChainEntry>
}

/// Audio-thread state, behind a pointer so the hot path has no exclusivity checks.
struct ChainAudioState {
    var current: UnsafeMutablePointer<ChainSnapshot>
    var running: Bool
    var format: AudioFormat
    /// The last stamp handed to a hook (FrameLevels); only ever grows.
    var stamp: UInt64
}

/// An ordered list of hooks run on the audio thread, edited from another thread while
/// audio runs, with no lock on the audio thread.
///
/// Publication and retirement ("acknowledged generations"):
/// 1. Every edit on the control side builds a new immutable `ChainSnapshot` with the next
///    generation number, keeps it (and strong references to its hooks) in `live`, and
///    stores its address into `published` with release ordering.
/// 2. At the start of every audio call (`start`, `process`, `stop`), the audio thread
///    loads `published` with acquire ordering. If it differs from the snapshot it used
///    last, it moves over (stopping hooks that were removed or disabled, carrying the
///    started state of the others), stops touching the old snapshot, and then stores the
///    new generation into `acknowledged` with release ordering.
/// 3. The control side frees a retired snapshot only when its generation is *below* the
///    acknowledged one (acquire load). The audio thread dereferences a snapshot only
///    between loading its address and acknowledging a later generation, so a snapshot
///    older than the acknowledged one is never touched again; one it may have loaded but
///    not yet acknowledged has a generation ≥ the acknowledged one and is kept.
/// Freeing (and releasing the hooks of removed entries) therefore always happens on the
/// control thread (`reclaim()`, run by every edit). While audio is stopped the
/// acknowledged generation does not move, so retired snapshots wait for the next frame
/// or for the chain's deinit.
///
/// Threads: the control methods (`add`, `insert`, `remove`, `setEnabled`, `move`,
/// `reclaim`, `hooks`) must be called from one thread at a time (the loop thread); the
/// audio methods (`start`, `process`, `stop`) from the one audio thread.
public final class HookChain: @unchecked Sendable {
    private let published: Atomic<UInt>
    private let acknowledged = Atomic<UInt64>(0)
    private let audio: UnsafeMutablePointer<ChainAudioState>
    /// The per-frame level cache the hooks share (see FrameLevels).
    private let levels: UnsafeMutablePointer<FrameLevels>

    private struct Registration {
        let box: HookBox
        var enabled: Bool
    }

    private struct LiveSnapshot {
        let pointer: UnsafeMutablePointer<ChainSnapshot>
        let boxes: [HookBox]
    }

    private var order: [Registration] = []
    private var live: [LiveSnapshot] = []
    private var nextGeneration: UInt64 = 0

    public init() {
        let first = HookChain.makeSnapshot(generation: 0, registrations: [])
        published = Atomic<UInt>(UInt(bitPattern: first))
        live.append(LiveSnapshot(pointer: first, boxes: []))
        nextGeneration = 1
        audio = .allocate(capacity: 1)
        audio.initialize(to: ChainAudioState(current: first, running: false, format: .standard, stamp: 0))
        levels = .allocate(capacity: 1)
        levels.initialize(to: FrameLevels(stamp: 0, peak: 0, energy: 0))
    }

    /// The audio thread must have stopped calling the chain.
    deinit {
        for s in live { HookChain.free(s.pointer) }
        audio.deallocate()
        levels.deallocate()
    }

    private static func makeSnapshot(generation: UInt64, registrations: [Registration]) -> UnsafeMutablePointer<ChainSnapshot> {
        let entries = UnsafeMutablePointer<ChainEntry>.allocate(capacity: max(registrations.count, 1))
        for (i, r) in registrations.enumerated() {
            (entries + i).initialize(to: ChainEntry(box: Borrowed(r.box), enabled: r.enabled,
                                                        sharesLevels: r.box.sharesLevels, started: false))
        }
        let s = UnsafeMutablePointer<ChainSnapshot>.allocate(capacity: 1)
        s.initialize(to: ChainSnapshot(generation: generation, count: registrations.count, entries: entries))
        return s
    }

    private static func free(_ s: UnsafeMutablePointer<ChainSnapshot>) {
        s.pointee.entries.deallocate()
        s.deallocate()
    }

    // MARK: control side

    /// The hooks in processing order.
    public var hooks: [any AudioHook] { order.map { $0.box.hook } }

    /// Whether `hook` is enabled; nil when it is not in the chain.
    public func isEnabled(_ hook: any AudioHook) -> Bool? {
        guard let i = index(of: hook) else { return nil }
        return order[i].enabled
    }

    /// Appends a hook (it runs after the others).
    public func add(_ hook: any AudioHook, enabled: Bool = true) throws(AudioError) {
        try insert(hook, at: order.count, enabled: enabled)
    }

    /// Inserts a hook at `index` (0 = runs first).
    public func insert(_ hook: any AudioHook, at index: Int, enabled: Bool = true) throws(AudioError) {
        guard self.index(of: hook) == nil else { throw .hookAlreadyInChain }
        guard index >= 0 && index <= order.count else { throw .indexOutOfRange(index: index, count: order.count) }
        order.insert(Registration(box: HookBox(hook), enabled: enabled), at: index)
        publish()
    }

    /// Removes a hook. If audio runs and the hook had started, the audio thread calls its
    /// `captureDidStop` before its next frame; the chain keeps the hook alive until the
    /// audio thread is done with it.
    public func remove(_ hook: any AudioHook) throws(AudioError) {
        guard let i = index(of: hook) else { throw .hookNotInChain }
        order.remove(at: i)
        publish()
    }

    /// Enables or disables a hook. A disabled hook gets no frames; disabling it while
    /// audio runs ends its session (`captureDidStop`), enabling starts a new one.
    public func setEnabled(_ hook: any AudioHook, _ enabled: Bool) throws(AudioError) {
        guard let i = index(of: hook) else { throw .hookNotInChain }
        if order[i].enabled == enabled { return }
        order[i].enabled = enabled
        publish()
    }

    /// Moves a hook to position `index` (0 = runs first).
    public func move(_ hook: any AudioHook, to index: Int) throws(AudioError) {
        guard let i = self.index(of: hook) else { throw .hookNotInChain }
        guard index >= 0 && index < order.count else { throw .indexOutOfRange(index: index, count: order.count &- 1) }
        if i == index { return }
        let r = order.remove(at: i)
        order.insert(r, at: index)
        publish()
    }

    /// Frees the snapshots the audio thread has moved past (and so releases hooks that
    /// were removed). Returns how many retired snapshots still wait.
    @discardableResult
    public func reclaim() -> Int {
        let ack = acknowledged.load(ordering: .acquiring)
        var kept: [LiveSnapshot] = []
        for s in live {
            if s.pointer.pointee.generation < ack {
                HookChain.free(s.pointer)
            } else {
                kept.append(s)
            }
        }
        live = kept
        return live.count &- 1
    }

    private func index(of hook: any AudioHook) -> Int? {
        for (i, r) in order.enumerated() where r.box.hook === hook { return i }
        return nil
    }

    private func publish() {
        let s = HookChain.makeSnapshot(generation: nextGeneration, registrations: order)
        nextGeneration &+= 1
        live.append(LiveSnapshot(pointer: s, boxes: order.map { $0.box }))
        published.store(UInt(bitPattern: s), ordering: .releasing)
        reclaim()
    }

    // MARK: audio side

    /// Begins a session: every enabled hook gets `captureDidStart(format)`. (A session
    /// already running is stopped first.)
    #if RT_AUDIT
    @_noLocks
    #endif
    public func start(_ format: AudioFormat) {
        if audio.pointee.running { stop() }
        let snap = adopt()
        audio.pointee.running = true
        audio.pointee.format = format
        let e = snap.pointee.entries
        for i in 0..<snap.pointee.count where e[i].enabled {
            e[i].box.use { callStart($0, format) }
            e[i].started = true
        }
    }

    /// Runs one frame through the enabled hooks in order. A `.silence` verdict zeroes the
    /// frame at once; later hooks still run (on the zeroed frame, so meters and gain
    /// controls keep continuous time), and the chain returns `.silence` with the frame
    /// zeroed at the end. Without a prior `start`, the first frame starts a session in
    /// its own format.
    #if RT_AUDIT
    @_noLocks
    #endif
    @_optimize(speed)
    public func process(_ samples: UnsafeMutableBufferPointer<Int16>, _ info: FrameInfo) -> HookVerdict {
        if !audio.pointee.running { start(info.format) }
        let snap = adopt()
        let format = audio.pointee.format
        let e = snap.pointee.entries
        var verdict = HookVerdict.pass
        // Each hook gets the next stamp: the cache, written under no stamp yet handed
        // out, is invalid for the first hook of the frame.
        var hookInfo = info
        let cache = levels
        var stamp = audio.pointee.stamp
        for i in 0..<snap.pointee.count where e[i].enabled {
            let box = e[i].box
            if !e[i].started {
                box.use { callStart($0, format) }
                e[i].started = true
            }
            stamp &+= 1
            hookInfo.levelCache.stamp = stamp
            hookInfo.levelCache.slot = e[i].sharesLevels ? cache : nil
            if box.use({ callProcess($0, samples, hookInfo) }) == .silence {
                zeroFrame(samples)
                verdict = .silence
                levels.pointee = FrameLevels(stamp: stamp &+ 1, peak: 0, energy: 0)
            }
        }
        // Past the last hook's stamp, so nothing written this frame is valid in the next.
        audio.pointee.stamp = stamp &+ 1
        if verdict == .silence { zeroFrame(samples) }
        return verdict
    }

    /// Ends the session: every hook that started gets `captureDidStop(format)`.
    #if RT_AUDIT
    @_noLocks
    #endif
    public func stop() {
        let snap = adopt()
        guard audio.pointee.running else { return }
        let format = audio.pointee.format
        let e = snap.pointee.entries
        for i in 0..<snap.pointee.count where e[i].started {
            e[i].box.use { callStop($0, format) }
            e[i].started = false
        }
        audio.pointee.running = false
    }

    /// Moves the audio thread to the newest published snapshot (see the type's comment).
    #if RT_AUDIT
    @_noLocks
    #endif
    @inline(__always)
    private func adopt() -> UnsafeMutablePointer<ChainSnapshot> {
        let old = audio.pointee.current
        let bits = published.load(ordering: .acquiring)
        if bits == UInt(bitPattern: old) { return old }
        let new = UnsafeMutablePointer<ChainSnapshot>(bitPattern: bits).unsafelyUnwrapped
        let oe = old.pointee.entries
        let ne = new.pointee.entries
        let on = old.pointee.count
        let nn = new.pointee.count
        if audio.pointee.running {
            let format = audio.pointee.format
            // Hooks that started and are gone or disabled now: end their session.
            for i in 0..<on where oe[i].started {
                var stays = false
                for j in 0..<nn where ne[j].enabled && ne[j].box.isSame(as: oe[i].box) { stays = true }
                if !stays { oe[i].box.use { callStop($0, format) } }
            }
            // Hooks that stay enabled keep their session.
            for j in 0..<nn where ne[j].enabled {
                for i in 0..<on where oe[i].started && oe[i].box.isSame(as: ne[j].box) { ne[j].started = true }
            }
        }
        audio.pointee.current = new
        acknowledged.store(new.pointee.generation, ordering: .releasing)
        return new
    }
}
