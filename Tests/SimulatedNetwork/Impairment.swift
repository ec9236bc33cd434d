import Wire

/// Gilbert–Elliott burst loss: a two-state Markov chain stepped once per datagram. In
/// Good a packet is lost with `lossInGood`, in Bad with `lossInBad`; `p` is P(Good→Bad),
/// `r` is P(Bad→Good). Stationary P(Bad) = p / (p + r); mean burst (Bad sojourn)
/// 1 / r packets.
public struct GilbertElliott: Equatable, Sendable {
    public var p: Double
    public var r: Double
    public var lossInGood = 0.0
    public var lossInBad = 1.0
    public var bad = false

    public init(p: Double, r: Double, lossInGood: Double = 0.0, lossInBad: Double = 1.0) {
        self.p = p
        self.r = r
        self.lossInGood = lossInGood
        self.lossInBad = lossInBad
    }

    /// Long-run loss rate, for checking the model against its definition.
    public var expectedLoss: Double { (p * lossInBad + r * lossInGood) / (p + r) }
}

/// What one direction of the path does to datagrams. All randomness comes from the
/// network's seeded generator, so a seed replays the same run exactly.
public struct Impairment: Sendable {
    /// Independent (Bernoulli) loss probability.
    public var loss = 0.0
    /// Burst loss on top of `loss`.
    public var burst: GilbertElliott? = nil
    /// Fixed one-way delay plus a uniform jitter in [0, jitter).
    public var delay: Duration = .milliseconds(1)
    public var jitter: Duration = .zero
    /// With this probability a datagram is held back an extra `reorderDelay` (others
    /// overtake it).
    public var reorder = 0.0
    public var reorderDelay: Duration = .milliseconds(30)
    /// With this probability a datagram is delivered twice (the copy after `jitter`
    /// more).
    public var duplicate = 0.0

    public init(loss: Double = 0.0, burst: GilbertElliott? = nil, delay: Duration = .milliseconds(1), jitter: Duration = .zero,
                reorder: Double = 0.0, reorderDelay: Duration = .milliseconds(30), duplicate: Double = 0.0) {
        self.loss = loss
        self.burst = burst
        self.delay = delay
        self.jitter = jitter
        self.reorder = reorder
        self.reorderDelay = reorderDelay
        self.duplicate = duplicate
    }
}

/// Counters per direction.
public struct PathCounters: Equatable, Sendable, CustomStringConvertible {
    public var sent = 0
    public var delivered = 0
    public var lost = 0
    public var blackholed = 0
    public var duplicated = 0
    public var reordered = 0
    /// Datagrams addressed to a NAT mapping (or a socket) that no longer exists.
    public var staleMapping = 0

    public init() {}

    public var description: String {
        "PathCounters(sent: \(sent), delivered: \(delivered), lost: \(lost), blackholed: \(blackholed), duplicated: \(duplicated), reordered: \(reordered), staleMapping: \(staleMapping))"
    }
}
