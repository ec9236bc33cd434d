import Wire

/// A received packet handed to the decoder.
public struct JitterPacket: Equatable, Sendable {
    /// Extended sequence number (as given to `insert`).
    public var sequence: Int64
    public var timestamp: UInt32
    public var payload: [UInt8]

    public init(sequence: Int64, timestamp: UInt32, payload: [UInt8]) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.payload = payload
    }
}

/// What the decoder should do for the next frame.
public enum JitterBufferOutput: Equatable, Sendable {
    /// Decode this packet.
    case packet(JitterPacket)
    /// The packet for this frame is lost. When `useFECFromNext` is true the packet after
    /// it is in the buffer (`nextPayload`): decode its in-band FEC (Opus `decode_fec`),
    /// else conceal (PLC).
    case lost(useFECFromNext: Bool)
    /// Nothing to decode now: still buffering, a timestamp gap (DTX silence), an
    /// underrun, or one frame inserted to absorb clock drift. Play comfort noise/PLC.
    case empty
}

/// Counters for logs and tests.
public struct JitterBufferCounters: Equatable, Sendable {
    /// Packets stored.
    public var inserted = 0
    /// Arrived after their frame was played or declared lost.
    public var late = 0
    /// Same sequence number already in the buffer.
    public var duplicate = 0
    /// `.lost` outputs (= concealed + fec).
    public var lost = 0
    /// `.lost(useFECFromNext: false)`: the decoder must conceal.
    public var concealed = 0
    /// `.lost(useFECFromNext: true)`.
    public var fec = 0
    /// Oldest packets dropped because the buffer was full.
    public var overflowDropped = 0
    /// Payloads larger than the configured maximum, refused.
    public var oversize = 0
    /// Frames dropped (or silence shortened) to reduce delay during quiet periods.
    public var driftDropped = 0
    /// Frames inserted to add delay during quiet periods.
    public var driftInserted = 0
    /// Pops that found nothing at all to play (network stall or DTX silence).
    public var starved = 0
}

/// Tuning of `JitterBuffer`.
public struct JitterBufferConfiguration: Sendable {
    /// Packets held at most; beyond that the oldest are dropped (counted).
    public var capacity: Int
    /// Largest payload accepted (Opus: 1275 bytes per frame, RFC 6716 §3.2.1).
    public var maxPayloadBytes: Int
    public var minDelay: Duration
    public var maxDelay: Duration
    public var clockRate: Int64
    /// Frame length assumed until two consecutive packets show the real one.
    public var defaultFrameTicks: Int64
    /// Jitter is the largest lateness over the last one to two windows of this length.
    public var window: Duration
    /// At most one drift correction per interval.
    public var adjustInterval: Duration

    public init(capacity: Int = 64, maxPayloadBytes: Int = 1500, minDelay: Duration = .milliseconds(20),
                maxDelay: Duration = .milliseconds(200), clockRate: Int64 = 48_000, defaultFrameTicks: Int64 = 960,
                window: Duration = .seconds(2), adjustInterval: Duration = .seconds(1)) {
        self.capacity = max(2, capacity)
        self.maxPayloadBytes = maxPayloadBytes
        self.minDelay = minDelay
        self.maxDelay = max(minDelay, maxDelay)
        self.clockRate = clockRate
        self.defaultFrameTicks = defaultFrameTicks
        self.window = window
        self.adjustInterval = adjustInterval
    }
}

/// Jitter buffer for received Opus packets: pure logic, no decoding.
///
/// Drive it with `insert` for every packet (extended sequence numbers from
/// `RTPReceiveStatistics`) and `pop(now:quiet:)` once per frame the playback needs.
///
/// Policy:
/// - **Playout clock.** Playout follows RTP timestamps: a packet is due when its
///   timestamp reaches the playout position, which advances one frame per pop. A
///   timestamp gap (DTX) yields `.empty` until the next packet is due. A missing packet
///   is declared lost once its estimated timestamp is due and a later packet is in the
///   buffer; `.lost(useFECFromNext:)` is true exactly when the packet right after it
///   is present. Packets arriving after their frame went by are `late` and dropped.
/// - **Delay.** Each packet's lateness is its transit time minus the smallest transit
///   of the last one to two windows (the window minimum also follows clock drift).
///   The target delay is the largest lateness over the same span plus one frame,
///   clamped to [minDelay, maxDelay]: it grows at once when packets come late and
///   shrinks a window or two after they stop.
/// - **Reaching the target.** When the buffer runs dry it holds the playout position
///   (a stall); the next packet then re-anchors playout about `target` before its
///   timestamp, on the playback's pull nearest to it in half frames (`anchor`). So
///   every talkspurt (and every recovery) starts within a quarter frame of the target.
/// - **Clock drift.** Within a talkspurt the delay a packet actually waits (pop time
///   minus its earliest possible arrival) is averaged. If it stays more than one frame
///   above target the buffer drops one frame; more than half a frame below, it inserts
///   one (`.empty`; half a frame, `lastPopWasHalf`, with frames of 20 ms or more when
///   no insert came in the last four intervals: a target that grew a few ms after a
///   spurt started then costs 10 ms of delay, not 20). Both happen only when the
///   caller says the audio is quiet (`quiet:`, from its level meter, or in a DTX gap) and at most once per `adjustInterval`, so
///   speech is never cut or stretched. Inserting sooner than dropping is deliberate:
///   the target already holds only the largest lateness plus one frame, so a playout
///   clock that runs fast (a speaker faster than the far end) would otherwise reach the
///   latest packets' lateness, and run dry mid-speech, at the moment it may first
///   insert (measured: a stall every 2 s at 1 % and 20 ms of jitter; none with this).
/// - **Memory.** A fixed ring of `capacity` slots, each payload at most
///   `maxPayloadBytes`; a packet too far ahead pushes the oldest out (`overflowDropped`).
public struct JitterBuffer: Sendable {
    struct Slot: Sendable {
        var sequence: Int64
        var tsExt: Int64
        var timestamp: UInt32
        var payload: [UInt8]
    }

    public let configuration: JitterBufferConfiguration
    public private(set) var counters = JitterBufferCounters()
    var slots: [Slot?]

    /// Sequence number of the next frame to play; nil before the first packet.
    public private(set) var nextSequence: Int64? = nil
    var playoutTs: Int64 = 0
    var highestSequence: Int64 = 0
    var highestTs: Int64 = 0
    var referenceTimestamp: UInt32 = 0
    var frameTicks: Int64
    var stalled = false
    var started = false

    // Lateness windows (nanoseconds).
    var windowStart: Instant? = nil
    var minTransit: (current: Int64, previous: Int64) = (.max, .max)
    var maxLateness: (current: Int64, previous: Int64) = (0, 0)
    public private(set) var targetDelay: Duration

    // Drift control.
    var delayAverage: Int64? = nil      // nanoseconds, exponential average
    var lastAdjust: Instant? = nil
    var lastInsert: Instant? = nil

    // The playback's pulls: when the last pop came, and the lateness of the newest packet
    // (nanoseconds), to place a talkspurt's first packet on the pull nearest its target.
    var lastPull: Instant? = nil
    var lastLateness: Int64 = 0
    /// A talkspurt placed half a frame off the pulls' phase starts with a pull of half a
    /// frame (`lastPopWasHalf`), which moves every pull after it by that half.
    var leadIn = false
    /// Whether the last pop was a half pull (a lead-in, or drift control's insert of
    /// half a frame): the caller plays half a frame of silence (concealment) for it,
    /// not a whole one.
    public private(set) var lastPopWasHalf = false
    /// How long after `lastPull` the next one comes: a frame after a pop (half a frame
    /// after a half pull), what the caller said after an idle pull (`idle`).
    var pullSpan: Int64 = 0

    public init(configuration: JitterBufferConfiguration = JitterBufferConfiguration()) {
        self.configuration = configuration
        slots = [Slot?](repeating: nil, count: configuration.capacity)
        frameTicks = configuration.defaultFrameTicks
        targetDelay = configuration.minDelay
    }

    var frameDuration: Duration { ticksToDuration(frameTicks) }

    /// The far end's frame length in RTP ticks, as learnt from consecutive packets
    /// (`defaultFrameTicks` until then): the length of a frame to conceal.
    public var frameLength: Int64 { frameTicks }

    func ticksToDuration(_ t: Int64) -> Duration {
        Duration(nanoseconds: t / configuration.clockRate * 1_000_000_000 + t % configuration.clockRate * 1_000_000_000 / configuration.clockRate)
    }

    func durationToTicks(_ d: Duration) -> Int64 {
        d.nanoseconds / 1_000_000_000 * configuration.clockRate + d.nanoseconds % 1_000_000_000 * configuration.clockRate / 1_000_000_000
    }

    func index(_ seq: Int64) -> Int {
        let c = Int64(configuration.capacity)
        return Int(((seq % c) + c) % c)
    }

    func slot(_ seq: Int64) -> Slot? {
        guard let s = slots[index(seq)], s.sequence == seq else { return nil }
        return s
    }

    /// The payload of the packet after the one just reported lost (for FEC decoding),
    /// without taking it out of the buffer.
    public var nextPayload: [UInt8]? {
        guard let n = nextSequence else { return nil }
        return slot(n)?.payload
    }

    /// Audio buffered ahead of the playout position.
    public var bufferedDuration: Duration {
        guard let n = nextSequence, highestSequence >= n else { return .zero }
        return ticksToDuration(max(0, highestTs + frameTicks - playoutTs))
    }

    // MARK: Insert

    /// Stores a packet, taking `payload` as it is: the array is kept, not copied (the
    /// receive path hands over the one copy it made out of the datagram).
    public mutating func insert(sequence seq: Int64, timestamp: UInt32, payload: [UInt8], arrival: Instant) {
        guard payload.count <= configuration.maxPayloadBytes else {
            counters.oversize += 1
            return
        }
        // Extend the timestamp relative to the newest packet (wraps every 24.8 h at 48 kHz).
        let tsExt: Int64
        if nextSequence == nil {
            tsExt = Int64(timestamp)
        } else {
            tsExt = highestTs + Int64(Int32(bitPattern: timestamp &- referenceTimestamp))
        }
        if let s = slot(seq), s.sequence == seq {
            counters.duplicate += 1
            return
        }
        measureLateness(tsExt: tsExt, arrival: arrival)

        guard let next = nextSequence else {
            nextSequence = seq
            playoutTs = tsExt - anchor(arrival: arrival)
            store(seq: seq, tsExt: tsExt, timestamp: timestamp, payload: payload)
            return
        }
        if seq < next {
            // Before playout started a reordered early packet may still move the start.
            let c = Int64(configuration.capacity)
            if !started && next - seq < c && highestSequence - seq < c {
                nextSequence = seq
                let wasLeadIn = leadIn
                let start = tsExt - anchor(arrival: arrival)
                if start <= playoutTs { playoutTs = start } else { leadIn = wasLeadIn }
                store(seq: seq, tsExt: tsExt, timestamp: timestamp, payload: payload)
            } else {
                counters.late += 1
            }
            return
        }
        let c = Int64(configuration.capacity)
        if seq >= next + c {
            // Full: drop the oldest to make room; playout resumes at the new head.
            let newNext = seq - c + 1
            var s = next
            while s < newNext {
                if slot(s) != nil {
                    slots[index(s)] = nil
                    counters.overflowDropped += 1
                }
                s += 1
            }
            nextSequence = newNext
            if let head = slot(newNext) { playoutTs = max(playoutTs, head.tsExt) }
        }
        if stalled {
            // Playout ran dry: start again at the target before this packet's frame (its
            // timestamp minus the frames still missing before it; `anchor`).
            let expectedNext = tsExt - (seq - nextSequence!) * frameTicks
            let start = expectedNext - anchor(arrival: arrival)
            if start >= playoutTs { playoutTs = start } else { leadIn = false }
            stalled = false
            delayAverage = nil
        }
        store(seq: seq, tsExt: tsExt, timestamp: timestamp, payload: payload)
    }

    /// The same from a borrowed buffer (copied once into the slot).
    public mutating func insert(sequence: Int64, timestamp: UInt32, payload: UnsafeRawBufferPointer, arrival: Instant) {
        insert(sequence: sequence, timestamp: timestamp, payload: Array(payload), arrival: arrival)
    }

    mutating func store(seq: Int64, tsExt: Int64, timestamp: UInt32, payload: [UInt8]) {
        slots[index(seq)] = Slot(sequence: seq, tsExt: tsExt, timestamp: timestamp, payload: payload)
        counters.inserted += 1
        if seq >= highestSequence || counters.inserted == 1 {
            highestSequence = seq
            highestTs = tsExt
            referenceTimestamp = timestamp
        }
        // Learn the frame length from a neighbour (10, 20, 40, 60 ms; ≤ 120 ms).
        let limit = 120 * configuration.clockRate / 1000
        if let before = slot(seq - 1), tsExt - before.tsExt > 0, tsExt - before.tsExt <= limit {
            frameTicks = tsExt - before.tsExt
        } else if let after = slot(seq + 1), after.tsExt - tsExt > 0, after.tsExt - tsExt <= limit {
            frameTicks = after.tsExt - tsExt
        }
    }

    /// How far before a talkspurt's first frame the playout position starts, in ticks;
    /// sets `leadIn` when the spurt should start with a half pull.
    ///
    /// Playout moves a whole frame at each pull of the playback, so the wait a frame gets
    /// is a whole number of pulls: started `target` ahead in ticks, a frame would wait
    /// for the pull after the one at or past its target, up to a frame more than the
    /// target (a 21 ms target: 40 ms held on one call, 22 ms on the next, by the phase
    /// alone, until drift control dropped a frame). Once the pulls' phase is known (a pop
    /// less than two frames ago), the frame is placed on the pull nearest to its earliest
    /// possible arrival plus the target, in steps of half a frame: when the nearest
    /// place is half-way between two pulls, the spurt starts with a pull of half a frame
    /// (`leadIn`), which shifts the pulls' phase onto it. The frame then waits within a
    /// quarter of a frame of the target (5 ms with 20 ms frames; whole steps left up to
    /// 10 ms, fixed for the call, which the downlink's latency showed from run to run).
    /// Frames of 10 ms or less keep whole steps: the playback takes 10 ms pieces.
    mutating func anchor(arrival: Instant) -> Int64 {
        leadIn = false
        let frame = frameDuration.nanoseconds
        guard frame > 0, let pull = lastPull, arrival >= pull, arrival - pull < frameDuration + frameDuration else {
            return durationToTicks(targetDelay)
        }
        // The next pull comes `pullSpan` after the last one, and every frame after that.
        let next = pull.nanoseconds + pullSpan
        let due = max(0, arrival.nanoseconds - lastLateness + targetDelay.nanoseconds - next)
        guard halfPulls else {
            return (due + frame / 2) / frame * frameTicks
        }
        // Half frames from the next pull to the due time, nearest (a tie goes to the
        // earlier place: the shorter wait).
        let halves = (2 * due + frame / 2 - 1) / frame
        leadIn = halves % 2 == 1
        // Each whole pull before the delivering one moves playout a frame on; a half
        // pull does not move it.
        return halves / 2 * frameTicks
    }

    /// Lateness = transit − the smallest transit of the last one to two windows.
    mutating func measureLateness(tsExt: Int64, arrival: Instant) {
        let transit = arrival.nanoseconds - ticksToDuration(tsExt).nanoseconds
        if let start = windowStart {
            if arrival - start >= configuration.window {
                minTransit = (.max, minTransit.current)
                maxLateness = (0, maxLateness.current)
                windowStart = arrival
            }
        } else {
            windowStart = arrival
        }
        minTransit.current = min(minTransit.current, transit)
        let base = min(minTransit.current, minTransit.previous)
        let lateness = max(0, transit - base)
        lastLateness = lateness
        maxLateness.current = max(maxLateness.current, lateness)
        let wanted = Duration(nanoseconds: max(maxLateness.current, maxLateness.previous)) + frameDuration
        targetDelay = min(max(wanted, configuration.minDelay), configuration.maxDelay)
    }

    // MARK: Flush

    /// Drops every packet buffered ahead of the playout position (a barge-in: what the
    /// assistant was still going to say must not play on). Playout then holds, as when
    /// it runs dry, and the next packet starts a talkspurt at the target delay. Returns
    /// how many packets were dropped.
    @discardableResult
    public mutating func discardBuffered() -> Int {
        guard let next = nextSequence, highestSequence >= next else { return 0 }
        var dropped = 0
        var s = next
        while s <= highestSequence && s < next + Int64(configuration.capacity) {
            if slot(s) != nil {
                slots[index(s)] = nil
                dropped += 1
            }
            s += 1
        }
        nextSequence = highestSequence + 1
        playoutTs = max(playoutTs, highestTs + frameTicks)
        stalled = true
        delayAverage = nil
        return dropped
    }

    // MARK: Pop

    /// A pull of the playback that did not pop (its caller had nothing to play yet, so
    /// played silence of its own), and when the next pull will come: the pulls' phase,
    /// so a call's first packet is placed on them too (`anchor`), not only the spurts
    /// after it.
    public mutating func idle(now: Instant, nextPullIn: Duration) {
        lastPull = now
        lastPopWasHalf = false
        pullSpan = nextPullIn.nanoseconds
    }

    /// The next frame. Call once per frame period of the playback; `quiet` says the
    /// recent output was low-level, which allows a drift correction.
    public mutating func pop(now: Instant, quiet: Bool = false) -> JitterBufferOutput {
        lastPull = now
        lastPopWasHalf = false
        pullSpan = frameDuration.nanoseconds
        guard let next = nextSequence else { return .empty }
        if leadIn {
            // A talkspurt's half pull (`anchor`): nothing is due, playout does not move.
            leadIn = false
            return halfPull()
        }
        let wanted = quiet ? wantedAdjustment(now: now) : 0
        if wanted < 0 && halfPulls && !insertingOften(now: now) {
            // A lone insert is half a frame (a half pull; nothing consumed, playout does
            // not move): it follows a target that grew a few ms after a spurt began.
            // Inserts that come one after another are a speaker whose clock runs fast,
            // and take whole frames: half frames at one insert a second would only just
            // keep up with a 1 % faster clock (10 ms a second), and let the wait sink
            // to the latest packets' lateness (measured: 13 stalls in two minutes).
            commitAdjustment(wanted, now: now, half: true)
            return halfPull()
        }
        if let p = slot(next) {
            if p.tsExt > playoutTs {
                // Not due yet: initial buffering or a DTX gap; silence is the cheapest
                // place to drop or insert a frame.
                if wanted != 0 { commitAdjustment(wanted, now: now) }
                playoutTs += frameTicks * Int64(1 + wanted)
                return .empty
            }
            if wanted < 0 {
                commitAdjustment(wanted, now: now)
                return .empty                          // insert one frame; nothing consumed
            }
            if wanted > 0, let following = slot(next + 1) {
                // Drop this quiet frame and play the following one in its place.
                commitAdjustment(wanted, now: now)
                slots[index(next)] = nil
                return deliver(following, now: now)
            }
            return deliver(p, now: now)
        }
        // The next packet is missing. Is there anything after it?
        var q = next + 1
        while q <= highestSequence && q < next + Int64(configuration.capacity) {
            if let later = slot(q) {
                let estimated = later.tsExt - (q - next) * frameTicks
                playoutTs += frameTicks
                if estimated + frameTicks > playoutTs { return .empty }   // its time has not come
                nextSequence = next + 1
                started = true
                let fec = slot(next + 1) != nil
                counters.lost += 1
                if fec { counters.fec += 1 } else { counters.concealed += 1 }
                return .lost(useFECFromNext: fec)
            }
            q += 1
        }
        // Nothing buffered: hold the playout position until packets come.
        counters.starved += 1
        stalled = true
        return .empty
    }

    /// A pop of half a frame of silence (a lead-in or a lone insert): playout does not
    /// move, and the next pull comes half a frame sooner.
    mutating func halfPull() -> JitterBufferOutput {
        lastPopWasHalf = true
        pullSpan /= 2
        return .empty
    }

    mutating func deliver(_ p: Slot, now: Instant) -> JitterBufferOutput {
        slots[index(p.sequence)] = nil
        nextSequence = p.sequence + 1
        playoutTs = max(playoutTs, p.tsExt) + frameTicks
        started = true
        // How long this frame waited beyond its earliest possible arrival.
        let base = min(minTransit.current, minTransit.previous)
        if base != .max {
            let waited = now.nanoseconds - ticksToDuration(p.tsExt).nanoseconds - base
            delayAverage = delayAverage.map { $0 + (waited - $0) / 16 } ?? waited
        }
        return .packet(JitterPacket(sequence: p.sequence, timestamp: p.timestamp, payload: p.payload))
    }

    /// +1 to drop a frame, −1 to insert one, 0 to leave the delay alone.
    func wantedAdjustment(now: Instant) -> Int {
        guard !stalled, let average = delayAverage else { return 0 }
        if let last = lastAdjust, now - last < configuration.adjustInterval { return 0 }
        let frame = frameDuration.nanoseconds
        let target = targetDelay.nanoseconds
        if average > target + frame { return 1 }
        if average < target - frame / 2 { return -1 }
        return 0
    }

    /// Whether an insert and a lead-in are half a frame: frames of 20 ms or more (the
    /// playback takes 10 ms pieces, so a half of 10 ms frames would not be one).
    var halfPulls: Bool { frameDuration.nanoseconds >= 20_000_000 }

    /// Whether the last insert came less than four adjustment intervals ago.
    func insertingOften(now: Instant) -> Bool {
        guard let last = lastInsert else { return false }
        return now - last < configuration.adjustInterval * 4
    }

    mutating func commitAdjustment(_ direction: Int, now: Instant, half: Bool = false) {
        lastAdjust = now
        if direction < 0 { lastInsert = now }
        // The change is known: move the average with it rather than wait to re-measure.
        let step = half ? frameDuration.nanoseconds / 2 : frameDuration.nanoseconds
        if let average = delayAverage { delayAverage = average - Int64(direction) * step }
        if direction > 0 { counters.driftDropped += 1 } else { counters.driftInserted += 1 }
    }
}
