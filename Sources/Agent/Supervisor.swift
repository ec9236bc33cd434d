// The session supervisor: which provider sessions exist, which one carries the audio,
// when to try again after a failure, and when to roll over before the provider's
// session limit. Pure: the IO layer creates and closes sessions when told to and
// reports what happened to them; time is an argument.
//
// Design (ARCHITECTURE.md "Sessions"):
// - At most two sessions exist: the *primary* (carries the audio) and a *candidate*
//   (being set up to replace it: the first session, a reconnect, or a rollover).
//   The candidate becomes primary when it connects; only then is the old primary
//   closed, so neither a rollover nor a reconnect that overlaps a still-working call
//   leaves a gap a person would hear.
// - Consent loss (RFC 7675) makes the primary `disconnected`. Where the route can do
//   an ICE restart (WHIP with an ETag, RFC 9725 §4.4), that is tried first for
//   `iceRestartTimeout`; otherwise, or when it does not help, a candidate is started
//   while the primary is kept (it may yet come back).
// - Failed attempts back off exponentially with full jitter (0.5 s doubling to 30 s,
//   the "Exponential Backoff And Jitter" scheme), forever. Authorization failures
//   (401/403) back off long: the token will not fix itself in half a second. A
//   `Retry-After` is honoured as a floor, up to `maximumRetryAfter`; a capped one is
//   reported with the wait that will really be done (the asked one beside it).
// - A rollover switches at a quiet moment: a rollover candidate that
//   connects while the conversation is busy (the button held, the user speaking, the
//   assistant answering: `setBusy`) waits, connected, until it is quiet, at the
//   latest `switchGuard` before the primary's limit. The five-minute margin is the
//   time there is to find that moment. The limit is the session's own `expires_at`
//   where the provider gave it (`sessionExpires`), else `maximumSessionAge`.
// - `max-attempts` runs (scripts) are bounded in time as well as in attempts
//   (`AttemptLimit`): a long Retry-After or the 401/403 back-off ends them at once
//   rather than making them sit for minutes.
import Wire

/// A session's state as app SDKs name them (ARCHITECTURE.md "Sessions").
///
/// `paused`: no session, by decision rather than failure (a daily cap is reached); one
/// starts again when the core resumes the supervisor.
public enum SessionState: String, Sendable, Equatable {
    case new, connecting, connected, disconnected, failed, closed, paused
}

/// Why setting up (or keeping) a session failed, as far as retrying is concerned.
public enum SessionFailure: Sendable, Equatable, CustomStringConvertible {
    /// 5xx, timeouts, refused connections, garbage answers, ICE or DTLS failure.
    case transient(String)
    /// 401/403: the token is wrong or expired.
    case unauthorized(String)
    /// Something only a person can fix: a certificate that does not verify, a CA file
    /// that cannot be read. Backs off as long as `unauthorized`.
    case configuration(String)
    /// The server asked for a pause (`Retry-After`, RFC 9110 §10.2.3): the wait, and
    /// what the server asked for when the supervisor capped it (`maximumRetryAfter`).
    case retryAfter(Duration, String, asked: Duration? = nil)
    /// The provider refused the request itself (a 4xx with an error body, 400
    /// `invalid_offer`): the same request fails again. Backs off as long as
    /// `unauthorized`.
    case rejected(String)
    /// The account has no quota left (429 `insufficient_quota`): not a rate limit.
    /// Backs off as long as `unauthorized`.
    case quota(String)

    public var description: String {
        switch self {
        case .transient(let m): return m
        case .unauthorized(let m): return m + " (check the token)"
        case .configuration(let m), .rejected(let m), .quota(let m): return m
        case .retryAfter(let d, let m, let asked):
            guard let asked else { return m + " (retry after \(spokenSeconds(d)))" }
            return m + " (retry after \(spokenSeconds(d)), the cap; the server asked for \(spokenSeconds(asked)))"
        }
    }
}

/// "7 s", "600 s"; a wait that is not whole seconds as `Duration` prints it.
func spokenSeconds(_ d: Duration) -> String {
    d.nanoseconds % 1_000_000_000 == 0 ? "\(d.nanoseconds / 1_000_000_000) s" : d.description
}

/// The supervisor's timing.
public struct SupervisorPolicy: Sendable, Equatable {
    /// The first retry waits up to this long (full jitter) …
    public var initialBackoff = Duration.milliseconds(500)
    /// … doubling per failed attempt up to this.
    public var maximumBackoff = Duration.seconds(30)
    /// After 401/403 the wait starts here and doubles up to `maximumAuthBackoff`.
    public var authBackoff = Duration.seconds(30)
    public var maximumAuthBackoff = Duration.seconds(600)
    /// A `Retry-After` longer than this is capped (a misconfigured server must not park
    /// a kiosk for a day).
    public var maximumRetryAfter = Duration.seconds(600)
    /// A session not connected this long after it was started has failed.
    public var connectTimeout = Duration.seconds(20)
    /// How long an ICE restart may take before a fresh session is started instead.
    public var iceRestartTimeout = Duration.seconds(4)
    /// The provider's session limit (OpenAI: 60 minutes).
    public var maximumSessionAge = Duration.seconds(3_600)
    /// Whether the route supports ICE restart at all.
    public var iceRestart = false
    /// A rollover waiting for a quiet moment switches this long before the primary's
    /// limit whatever is going on (a cut sentence beats a dropped session).
    public var switchGuard = Duration.seconds(10)

    public init() {}

    /// The least a session lives before a rollover replaces it, whatever the provider
    /// says its limit is: a `session.expires_at` in the past, a device clock an hour
    /// fast, or a provider that lies must not start a new (billed) session every few
    /// seconds. A minute, or the configured rollover point when that is sooner (tests).
    public var minimumSessionAge: Duration { min(Duration.seconds(60), maximumSessionAge - rolloverMargin) }

    /// How long before the limit the next session is started (a tenth of it, at most
    /// five minutes).
    public var rolloverMargin: Duration { min(Duration.seconds(300), maximumSessionAge / 10) }

    /// `switchGuard`, but at most half the margin (short test limits).
    public var forcedSwitchLead: Duration { min(switchGuard, rolloverMargin / 2) }

    /// When the next session is started: before the limit by a tenth of it, at most
    /// five minutes (55 minutes for a 60-minute limit) — time enough for a few slow
    /// attempts while the old session still carries the audio.
    public var rolloverAge: Duration {
        let margin = min(Duration.seconds(300), maximumSessionAge / 10)
        return maximumSessionAge - margin
    }
}

/// What the IO layer is asked to do.
public enum SupervisorAction: Sendable, Equatable {
    /// Create session `id` through the route (offer, answer, connect).
    case startSession(id: Int, reason: StartReason)
    /// Try an ICE restart on session `id` (new credentials through the route).
    case restartICE(id: Int)
    /// Send the microphone to, and play the voice of, session `id` from now on.
    case switchAudio(to: Int)
    /// Close session `id`: provider-side close (best effort), then the peer.
    case closeSession(id: Int)
    /// The public state changed (log it, write it to --events and STATUS=).
    case stateChanged(SessionState, reason: String?)
    /// The next attempt waits `delay` (attempt counts failures since the last connect).
    case retryScheduled(delay: Duration, attempt: Int, failure: SessionFailure)
}

public enum StartReason: String, Sendable, Equatable {
    /// The first session.
    case initial
    /// The previous one failed or was lost.
    case reconnect
    /// The primary is near the provider's session limit.
    case rollover
    /// The first after a pause (a new day under a daily cap).
    case resume
    /// A press, with sessions on demand.
    case demand
}

public enum SupervisorOutput: Sendable, Equatable {
    case action(SupervisorAction)
    /// Call `handleTimeout` at this instant (`.distantFuture`: nothing pending).
    case timeout(Instant)
}

public final class Supervisor {
    struct Slot {
        var id: Int
        var connected = false
        var startedAt: Instant
        var connectedAt: Instant? = nil
        /// Set while an ICE restart is running.
        var restartDeadline: Instant? = nil
        var lostAt: Instant? = nil
        /// When the provider ends it (its session limit).
        var limit: Instant? = nil
    }

    public let policy: SupervisorPolicy
    public private(set) var state = SessionState.new
    /// Failed attempts since the last connected session.
    public private(set) var attempts = 0
    var primary: Slot?
    var candidate: Slot?
    var candidateReason = StartReason.initial
    var retryAt: Instant?
    var rolloverAt: Instant?
    var nextID = 1
    var random: SeededRandom
    var outputs = OutputQueue<SupervisorAction>()
    var closing = false
    /// The conversation is not at a quiet moment (see `setBusy`).
    public private(set) var busy = false

    public init(policy: SupervisorPolicy, seed: UInt64) {
        self.policy = policy
        random = SeededRandom(seed: seed)
    }

    /// The session carrying the audio, if any.
    public var activeSession: Int? { primary?.id }
    /// The session being set up, if any.
    public var pendingSession: Int? { candidate?.id }

    // MARK: Inputs

    public func start(now: Instant) {
        guard state == .new else { return }
        set(.connecting, nil)
        startCandidate(.initial, now: now)
    }

    /// Session `id` has media flowing (DTLS-SRTP up, or consent fresh again).
    public func connected(_ id: Int, now: Instant) {
        guard !closing else { return }
        if candidate?.id == id, var c = candidate {
            c.connected = true
            c.connectedAt = now
            c.limit = now + policy.maximumSessionAge
            attempts = 0
            retryAt = nil
            if candidateReason == .rollover, busy, primary?.connected == true {
                // Wait for a quiet moment (or the guard before the primary's limit).
                candidate = c
                return
            }
            promote(c, now: now)
        } else if primary?.id == id, var p = primary {
            // Back after a disconnection (consent answered again, or an ICE restart).
            p.connected = true
            p.restartDeadline = nil
            p.lostAt = nil
            if p.connectedAt == nil { p.connectedAt = now }
            primary = p
            attempts = 0
            // A reconnect started for it is no longer needed; a rollover still is.
            if let c = candidate, candidateReason == .reconnect {
                emit(.closeSession(id: c.id))
                candidate = nil
            }
            retryAt = nil
            set(.connected, nil)
        }
    }

    /// Make before break: audio moves to the new session first, then the old one is
    /// closed (the IO layer sees which session the audio came from).
    func promote(_ c: Slot, now: Instant) {
        candidate = nil
        let old = primary
        primary = c
        emit(.switchAudio(to: c.id))
        if let old { emit(.closeSession(id: old.id)) }
        rolloverAt = plannedRollover(c, limit: c.limit ?? now + policy.maximumSessionAge, now: now)
        set(.connected, nil)
    }

    /// Whether the conversation is at a quiet moment (false) or not: the button held,
    /// the user speaking, the assistant answering. A rollover switches only when quiet.
    public func setBusy(_ on: Bool, now: Instant) {
        busy = on
        if !on { switchIfReady(now: now) }
    }

    /// The provider says when session `id` ends (OpenAI's `session.expires_at`, on the
    /// monotonic clock): the rollover is planned from the earlier of that and
    /// `maximumSessionAge`, and never sooner than `minimumSessionAge` after the session
    /// connected.
    public func sessionExpires(_ id: Int, at limit: Instant, now: Instant) {
        if primary?.id == id, var p = primary {
            let l = min(limit, p.limit ?? limit)
            p.limit = l
            primary = p
            if candidate == nil || candidateReason != .rollover { rolloverAt = plannedRollover(p, limit: l, now: now) }
        } else if candidate?.id == id, var c = candidate {
            c.limit = min(limit, c.limit ?? limit)
            candidate = c
        }
    }

    /// When the rollover of `s` starts: a margin before its limit, but not before it
    /// has lived `minimumSessionAge`.
    func plannedRollover(_ s: Slot, limit: Instant, now: Instant) -> Instant {
        let floor = (s.connectedAt ?? s.startedAt) + policy.minimumSessionAge
        return max(now, limit - policy.rolloverMargin, floor)
    }

    /// A rollover candidate that waited is switched to, if it is quiet (or time is up).
    func switchIfReady(now: Instant) {
        guard !closing, let c = candidate, c.connected else { return }
        let forced = primary?.limit.map { now >= $0 - policy.forcedSwitchLead } ?? false
        guard !busy || forced || primary?.connected != true else { return }
        promote(c, now: now)
    }

    /// Session `id` lost consent (ICE `disconnected`): it may come back.
    public func disconnected(_ id: Int, now: Instant) {
        guard !closing, var p = primary, p.id == id, p.connected else { return }
        p.connected = false
        p.lostAt = now
        if let c = candidate, c.connected {
            // A rollover was waiting for a quiet moment: it is the way out now.
            primary = p
            promote(c, now: now)
            return
        }
        set(.disconnected, "no answer to consent checks")
        if policy.iceRestart {
            p.restartDeadline = now + policy.iceRestartTimeout
            primary = p
            emit(.restartICE(id: id))
        } else {
            primary = p
            replacePrimarySoon(now: now)
        }
    }

    /// The ICE restart asked for cannot be done (the route refused it or offers none):
    /// go straight to a fresh session.
    public func restartFailed(_ id: Int, now: Instant) {
        guard !closing, var p = primary, p.id == id, p.restartDeadline != nil else { return }
        p.restartDeadline = nil
        primary = p
        replacePrimarySoon(now: now)
    }

    /// Session `id` failed: setup (HTTP, SDP), ICE failure or consent expiry, DTLS.
    public func failed(_ id: Int, _ reported: SessionFailure, now: Instant) {
        guard !closing else { return }
        // What is logged and reported is the wait that will be done.
        var failure = reported
        if case .retryAfter(let asked, let m, _) = reported, asked > policy.maximumRetryAfter {
            failure = .retryAfter(policy.maximumRetryAfter, m, asked: asked)
        }
        if candidate?.id == id {
            emit(.closeSession(id: id))
            candidate = nil
            scheduleRetry(after: failure, now: now)
            if primary == nil { set(.failed, failure.description) }
        } else if primary?.id == id {
            if let c = candidate, c.connected {
                primary = nil
                emit(.closeSession(id: id))
                promote(c, now: now)
                return
            }
            emit(.closeSession(id: id))
            primary = nil
            rolloverAt = nil
            set(.disconnected, failure.description)
            if candidate == nil {
                // The call was up: the first retry goes straight away (jittered).
                scheduleRetry(after: failure, now: now)
            }
        }
    }

    /// The provider ended session `id` (BYE, session limit, hang-up on its side).
    public func ended(_ id: Int, now: Instant) {
        guard !closing else { return }
        if primary?.id == id {
            if let c = candidate, c.connected {
                primary = nil
                emit(.closeSession(id: id))
                promote(c, now: now)
                return
            }
            emit(.closeSession(id: id))
            primary = nil
            rolloverAt = nil
            set(.disconnected, "the provider ended the session")
            if candidate == nil { startCandidate(.reconnect, now: now) }
        } else if candidate?.id == id {
            failed(id, .transient("the provider ended the session before it connected"), now: now)
        }
    }

    /// Closes every session and starts none until `resume`: the core decided that no
    /// session may run now (a daily cap). Pending retries and rollovers are dropped, and
    /// the failures counted so far with them (the pause is not a failure).
    public func pause(_ reason: String, now: Instant) {
        guard !closing, state != .paused else { return }
        if let c = candidate { emit(.closeSession(id: c.id)) }
        if let p = primary { emit(.closeSession(id: p.id)) }
        candidate = nil
        primary = nil
        retryAt = nil
        rolloverAt = nil
        attempts = 0
        set(.paused, reason)
    }

    /// Starts a session again after `pause`.
    public func resume(now: Instant, reason: StartReason = .resume) {
        guard !closing, state == .paused else { return }
        startCandidate(reason, now: now)
    }

    /// Closes everything for good (SIGTERM, --seconds).
    public func close(now: Instant) {
        guard !closing else { return }
        closing = true
        if let c = candidate { emit(.closeSession(id: c.id)) }
        if let p = primary { emit(.closeSession(id: p.id)) }
        candidate = nil
        primary = nil
        retryAt = nil
        rolloverAt = nil
        set(.closed, nil)
    }

    public func handleTimeout(now: Instant) {
        guard !closing else { return }
        switchIfReady(now: now)
        if let c = candidate, !c.connected, c.startedAt + policy.connectTimeout <= now {
            failed(c.id, .transient("no media connection within \(policy.connectTimeout)"), now: now)
        }
        if let p = primary, let d = p.restartDeadline, d <= now {
            var q = p
            q.restartDeadline = nil
            primary = q
            replacePrimarySoon(now: now)
        }
        if let r = retryAt, r <= now, candidate == nil {
            retryAt = nil
            startCandidate(primary == nil || !(primary!.connected) ? .reconnect : .rollover, now: now)
        }
        if let r = rolloverAt, r <= now {
            rolloverAt = nil
            if candidate == nil, retryAt == nil { startCandidate(.rollover, now: now) }
        }
    }

    public func pollOutput() -> SupervisorOutput {
        if let a = outputs.popFirst() { return .action(a) }
        return .timeout(nextDeadline)
    }

    public var nextDeadline: Instant {
        var t = Instant.distantFuture
        if let c = candidate {
            if !c.connected { t = min(t, c.startedAt + policy.connectTimeout) }
            else if let limit = primary?.limit { t = min(t, limit - policy.forcedSwitchLead) }
        }
        if let d = primary?.restartDeadline { t = min(t, d) }
        if let r = retryAt { t = min(t, r) }
        if let r = rolloverAt { t = min(t, r) }
        return t
    }

    // MARK: Internals

    func emit(_ a: SupervisorAction) { outputs.append(a) }

    func set(_ s: SessionState, _ reason: String?) {
        // `failed` repeats (each attempt's reason is news); the others only on change.
        guard s != state || s == .failed else { return }
        state = s
        emit(.stateChanged(s, reason: reason))
    }

    func startCandidate(_ reason: StartReason, now: Instant) {
        let id = nextID
        nextID += 1
        candidate = Slot(id: id, startedAt: now)
        candidateReason = reason
        if primary == nil { set(.connecting, nil) }
        emit(.startSession(id: id, reason: reason))
    }

    /// The primary is not coming back by itself: start a replacement now, unless one is
    /// running or a backoff is pending.
    func replacePrimarySoon(now: Instant) {
        guard candidate == nil else { return }
        if let r = retryAt, r > now { return }
        retryAt = nil
        startCandidate(.reconnect, now: now)
    }

    func scheduleRetry(after failure: SessionFailure, now: Instant) {
        attempts += 1
        var delay: Duration
        switch failure {
        case .transient:
            delay = fullJitter(ceiling: exponential(policy.initialBackoff, policy.maximumBackoff))
        case .unauthorized, .configuration, .rejected, .quota:
            // Half fixed, half jittered: long, but a fleet does not come back in step.
            let d = exponential(policy.authBackoff, policy.maximumAuthBackoff)
            delay = d / 2 + fullJitter(ceiling: d / 2)
        case .retryAfter(let asked, _, _):
            let backoff = fullJitter(ceiling: exponential(policy.initialBackoff, policy.maximumBackoff))
            delay = max(backoff, min(asked, policy.maximumRetryAfter))
        }
        retryAt = now + delay
        emit(.retryScheduled(delay: delay, attempt: attempts, failure: failure))
    }

    /// base · 2^(attempts−1), capped.
    func exponential(_ base: Duration, _ cap: Duration) -> Duration {
        let shift = min(attempts - 1, 30)
        let d = Duration(nanoseconds: base.nanoseconds.multipliedReportingOverflow(by: Int64(1) << Int64(max(0, shift))).partialValue)
        return d > cap || d < .zero ? cap : d
    }

    /// Uniform in [0, ceiling] ("full jitter").
    func fullJitter(ceiling: Duration) -> Duration {
        guard ceiling.nanoseconds > 0 else { return .zero }
        return Duration(nanoseconds: Int64(random.next() % UInt64(ceiling.nanoseconds + 1)))
    }
}

/// `max-attempts N`: a run for scripts gives up after N failed attempts in a row — and,
/// so that a long `Retry-After` (up to 10 minutes) or the 401/403 back-off cannot make
/// it sit for many minutes, as soon as the waits between its attempts would pass
/// `waitPerRetry` for each retry it allows: 30 s · (N − 1) in all with the default
/// policy. The ordinary back-off (0.5 s doubling to 30 s) never reaches that, so only
/// waits a script would not want end a run early, and the message says which.
public struct AttemptLimit: Sendable, Equatable {
    public let maximumAttempts: Int
    public let maximumTotalWait: Duration
    /// The waits scheduled since the last connected session.
    public private(set) var waited = Duration.zero

    public enum Verdict: Sendable, Equatable {
        /// Wait and try again.
        case retry
        /// Stop now; why, in words ("giving up after 1 failed attempt: …").
        case giveUp(String)
    }

    /// `maximumAttempts` 0: never give up (and no limit on waiting).
    public init(maximumAttempts: Int, waitPerRetry: Duration = SupervisorPolicy().maximumBackoff) {
        self.maximumAttempts = maximumAttempts
        maximumTotalWait = waitPerRetry * Int64(max(0, maximumAttempts - 1))
    }

    /// What a run says at its start, so that a script's author knows the bound.
    public var summary: String? {
        guard maximumAttempts > 0 else { return nil }
        return "max-attempts \(maximumAttempts): gives up after \(maximumAttempts) failed attempt\(maximumAttempts == 1 ? "" : "s") in a row, "
            + "or sooner if the waits between them would pass \(spokenSeconds(maximumTotalWait)) in all"
    }

    /// Failed attempt `attempt` (counted since the last connect) with `delay` before the
    /// next one.
    public mutating func failed(attempt: Int, delay: Duration) -> Verdict {
        guard maximumAttempts > 0 else { return .retry }
        let attempts = "\(attempt) failed attempt\(attempt == 1 ? "" : "s")"
        if attempt >= maximumAttempts { return .giveUp("giving up after \(attempts) (max-attempts \(maximumAttempts))") }
        if waited + delay > maximumTotalWait {
            return .giveUp("giving up after \(attempts): the next would wait \(spokenSeconds(delay.roundedUpToSeconds)), and a max-attempts \(maximumAttempts) run waits at most \(spokenSeconds(maximumTotalWait)) in all")
        }
        waited = waited + delay
        return .retry
    }

    /// A session connected: the waiting starts again (as the attempt count does).
    public mutating func connected() { waited = .zero }
}

extension Duration {
    /// Whole seconds, rounded up (for "would wait 45 s").
    var roundedUpToSeconds: Duration {
        let s = (nanoseconds + 999_999_999) / 1_000_000_000
        return .seconds(s)
    }
}
