import Glibc
import Wire
import JSON
import Signaling
import ICE
import DTLS
import SDP
import SimulatedNetwork
@testable import Peer
@testable import SCTP
@testable import Agent

/// The agent core in a world of its own: one `AgentCore` on a manual clock, its sockets
/// bound at fixed addresses, its HTTP exchanges answered by an in-memory provider that
/// serves the route through Signaling's `RouteServer` (what `linnet answer` serves) and
/// runs a real answerer `Peer` per offer, and its datagrams carried over the shared
/// seeded network (Tests/SimulatedNetwork) with delay, loss, black holes and NAT
/// rebinding. Nothing reads a wall clock: every time asserted on is simulated.
///
/// Drive: `run(for:)`, `run(until:)` or `run(within:until:)` advance the clock from one
/// event to the next (a core deadline, a datagram landing, an HTTP leg, a provider
/// peer's timer, an uplink frame, a scheduled fault); after each input the core's
/// outputs are carried out until it asks for a timer, as linnet's Runtime does.
final class ProviderWorld {
    enum RouteKind { case whip, backend, openai }

    /// How the world is set up; the defaults are `linnet run --whip …` with a token.
    struct Options {
        var route = RouteKind.whip
        var seed: UInt64 = 1
        var token: String? = "device-token"
        var maxAttempts = 0
        var runFor: Duration? = nil
        var maximumSessionAge = Duration.seconds(3_600)
        var pushToTalk = false
        var statsInterval: Duration? = nil
        var sendOnOpen: [String] = []
        /// An uplink frame this often (nil: no audio), of `frameSamples` 48 kHz ticks.
        var uplinkEvery: Duration? = .milliseconds(20)
        var frameSamples: UInt32 = 960
        /// One way, both directions: `delay` plus a uniform jitter in [0, `jitter`).
        var delay = Duration.milliseconds(10)
        var jitter = Duration.zero
        var loss = 0.0
        /// An HTTP exchange's round trip, drawn per exchange (ms).
        var httpRTT: ClosedRange<Int64> = 40...40
        /// Keep every output in `records`, `logs` and `statuses` (the soak does not).
        var keepHistory = true
        /// The device sits behind a NAT (its host candidates are not reachable; its
        /// mapped address is learned as peer-reflexive). Off: its sockets are public, as
        /// on loopback with relay.py.
        var deviceNAT = true
        /// Anything else of the settings (after the runtime's defaults are applied).
        /// How far the device's wall clock is off the true time (seconds): an RTC kept in
        /// local time, a board with no NTP yet.
        var deviceClockOffset: Int64 = 0
        var configure: (inout AgentSettings) -> Void = { _ in }
        init() {}
    }

    struct Record {
        let at: Instant
        let type: String
        let fields: [(String, JSONValue)]
        subscript(_ key: String) -> JSONValue? { fields.first { $0.0 == key }?.1 }
    }

    let options: Options
    let core: AgentCore
    let net: DatagramNetwork
    let provider: WorldProvider
    let start: Instant
    var now: Instant { net.now }
    var rng: SeededRandom

    // The device's sockets: one per session, behind the board's NAT.
    let deviceIP = SocketAddress("192.0.2.1:1")!.ip
    var deviceHosts: [Int: SocketAddress] = [:]
    var sessionOfHost: [SocketAddress: Int] = [:]
    var deviceEpoch = 0
    /// `.bind` is answered with `socketsUnavailable` while set.
    var bindFails = false
    var media: [Int: FakeMedia] = [:]
    /// `.runTool` and `.cancelTool` outputs: the test answers with `core.toolFinished`.
    var toolRuns: [(at: Instant, run: ToolRun)] = []
    var toolCancels: [(at: Instant, id: Int)] = []

    // HTTP in flight.
    final class Exchange {
        enum Leg {
            case toProvider
            case toDevice(Result<HTTPResponse, HTTPTransportFailure>)
            /// Nothing will come back; only the client's deadline (if any) ends it.
            case silent
        }
        let id: RequestID
        let request: HTTPRequest
        let session: Int?
        let purpose: SessionMachine.Purpose?
        let order: Int
        let rtt: Duration
        var deadline: Instant?
        var at: Instant
        var leg = Leg.toProvider
        init(id: RequestID, request: HTTPRequest, session: Int?, purpose: SessionMachine.Purpose?, order: Int, rtt: Duration,
             deadline: Instant?, at: Instant) {
            self.id = id
            self.request = request
            self.session = session
            self.purpose = purpose
            self.order = order
            self.rtt = rtt
            self.deadline = deadline
            self.at = at
        }
        var next: Instant {
            var t = deadline ?? .distantFuture
            if case .silent = leg {} else { t = min(t, at) }
            return t
        }
    }
    var exchanges: [RequestID: Exchange] = [:]
    var order = 0
    /// Every request the core sent, in order (method, URL, session).
    var requestsSent: [(at: Instant, request: HTTPRequest, session: Int?)] = []

    // What the core said.
    var records: [Record] = []
    var logs: [(at: Instant, level: AgentLogLevel, text: String)] = []
    /// The log lines with journald fields.
    var journal: [(at: Instant, text: String, fields: [(String, String)])] = []
    var statuses: [(at: Instant, status: AgentStatus)] = []
    var mutes: [(at: Instant, muted: Bool)] = []
    /// ICE servers the answers named (`.iceServers`), in order.
    /// TURN servers the core decided to use from answers (`.addRelay`), and names it
    /// asked to resolve (`.resolveRelay`).
    var learnedRelays: [(server: TURNServer, address: SocketAddress)] = []
    var resolveRequests: [TURNServer] = []
    /// What the core asked to keep on disk for each open session (`.pendingClose`).
    var pendingCloses: [Int: PendingClose] = [:]
    /// `.flushPlayback` outputs: when, for which session.
    var flushes: [(at: Instant, session: Int)] = []
    /// `.duckPlayback` outputs: when, for which session.
    var duckFlushes: [(at: Instant, session: Int)] = []
    var exited: (at: Instant, status: ExitStatus)?
    var coreDeadline = Instant.distantFuture
    /// The session the core sends audio to (its last `.switchAudio`).
    var audioSession: Int?
    /// Called for every output after the world carried it out (the soak counts there).
    var onOutput: ((AgentOutput) -> Void)?
    /// Called with each HTTP result just before the core gets it.
    var onHTTPResult: ((Exchange, Result<HTTPResponse, HTTPTransportFailure>) -> Void)?
    /// Called when a session's media gets a packet from the provider (session id).
    var onDeviceAudio: ((Int) -> Void)?
    /// Called after every step of the clock.
    var onStep: (() -> Void)?
    /// The longest the core's output queue was when the world came to drain it.
    var outputQueuePeak = 0
    /// Things that must not happen; a test expects this empty.
    var problems: [String] = []
    /// With WORLD_TRACE set, every log line, record and request is printed as it comes
    /// (simulated seconds since the start).
    let trace = getenv("WORLD_TRACE") != nil

    /// Datagrams toward the device this says yes to vanish at its socket (e.g. only
    /// DTLS: ICE connects, DTLS never does).
    var dropToDevice: (([UInt8]) -> Bool)?
    /// When the last datagram reached one of the device's sockets.
    var lastToDevice: Instant?

    // Audio.
    var nextUplink = Instant.distantFuture
    var frameIndex = 0
    /// Frames the core sent on while a session carried the audio.
    var framesOffered = 0
    /// Linnet's voice flag, on since then (nil: off): reported before each uplink frame
    /// as linnet's Runtime does (`localVoice`), held for the time it has been on.
    var voiceSince: Instant?
    func voice(_ on: Bool) { voiceSince = on ? (voiceSince ?? now) : nil }
    /// The speaker: while it plays the provider's stream, that stream is heard in real
    /// time; reported before each uplink frame as linnet's Runtime does (`downlink`).
    var speakerSince: Instant?
    var heardBefore = 0
    var spurtStart: Int?
    var heardNow: Int { heardBefore + (speakerSince.map { Int((now - $0).milliseconds) } ?? 0) }
    func speaker(_ on: Bool) {
        if on, speakerSince == nil {
            spurtStart = heardBefore
            speakerSince = now
        } else if !on, speakerSince != nil {
            heardBefore = heardNow
            speakerSince = nil
        }
    }
    /// The echo canceller's measure, reported before each uplink frame when set.
    var echoAudible: Bool?

    // Scheduled actions (faults, presses) in time order.
    var scheduled: [(at: Instant, order: Int, action: (ProviderWorld) -> Void)] = []
    /// When the core asked for the wake word's earcon.
    var earcons: [Instant] = []

    init(_ options: Options = Options()) throws {
        self.options = options
        net = DatagramNetwork(seed: options.seed)
        net.up = Impairment(loss: options.loss, delay: options.delay, jitter: options.jitter)
        net.down = Impairment(loss: options.loss, delay: options.delay, jitter: options.jitter)
        // Mappings move far enough that a new session's socket never lands on an old
        // mapping's port.
        net.rebindStep = 1_000
        rng = SeededRandom(seed: options.seed ^ 0x5EED_0F_7E57)
        start = net.now
        let crypto = try CryptoRandom()
        provider = try WorldProvider(route: options.route, net: net, crypto: crypto, token: options.token)
        core = AgentCore(settings: ProviderWorld.settings(options), identity: try Identity(random: crypto), crypto: crypto, seed: rng.next())
        provider.world = self
        let samples = options.frameSamples
        core.makeMedia = { [unowned self] id in
            let m = FakeMedia(session: id, samples: samples)
            m.onReceived = { [unowned self] in self.onDeviceAudio?(id) }
            self.media[id] = m
            return m
        }
    }

    /// The settings `linnet run` gives the core (`AgentSettings(config:…)`: the ICE
    /// timings that notice a vanished provider within 3 s, WHIP's ICE restart, the
    /// OpenAI transcription model, the 150 ms commit floor, the 200 ms ptt tail). CLITests'
    /// RuntimeSettingsTests pins the runtime to the same values.
    static func settings(_ o: Options) -> AgentSettings {
        var policy = SupervisorPolicy()
        policy.maximumSessionAge = o.maximumSessionAge
        let route = WorldProvider.route(o.route)
        policy.iceRestart = route.restartsICE
        var peer = PeerConfiguration(hostAddresses: [])
        peer.ice.useVoiceCallConsent()
        var realtime = RealtimeSettings(turnDetection: o.pushToTalk ? .ptt : .vad)
        if o.route == .openai {
            realtime.transcriptionModel = "gpt-4o-mini-transcribe"
            realtime.truncatesHeardAudio = true
        }
        realtime.minimumCommitMilliseconds = 150
        realtime.pttTailMilliseconds = 200
        var s = AgentSettings(route: route, token: o.token, policy: policy, maxAttempts: o.maxAttempts, runFor: o.runFor,
                              eventsChannel: "oai-events", sendOnOpen: o.sendOnOpen, statsInterval: o.statsInterval,
                              pushToTalk: o.pushToTalk, turnDetectionName: o.pushToTalk ? "ptt" : "vad", realtime: realtime, peer: peer)
        o.configure(&s)
        return s
    }

    // MARK: Starting and stopping

    func startCore() {
        core.start(now: now)
        if let every = options.uplinkEvery { nextUplink = now + every }
        drive()
    }

    func stop(_ status: ExitStatus = .ok) {
        core.stop(status, now: now)
        drive()
    }

    /// Runs `action` at `t` (a fault, a press, a provider that dies).
    func schedule(at t: Instant, _ action: @escaping (ProviderWorld) -> Void) {
        scheduled.append((t, order, action))
        order += 1
        scheduled.sort { ($0.at, $0.order) < ($1.at, $1.order) }
    }

    func schedule(after d: Duration, _ action: @escaping (ProviderWorld) -> Void) { schedule(at: now + d, action) }

    // MARK: Carrying out the core's outputs

    func drive() {
        outputQueuePeak = max(outputQueuePeak, core.outputs.count)
        while true {
            let output = core.pollOutput()
            switch output {
            case .bind(let id): bind(id)
            case .unbind(let id):
                if let host = deviceHosts.removeValue(forKey: id) {
                    net.detach(host)
                    sessionOfHost[host] = nil
                }
                media[id] = nil
            case .transmit(_, let bytes, let from, let to):
                net.send(bytes, from: from, to: to)
            case .http(let id, let request, let timeout):
                let owner = core.requests[id]
                let rtt = Duration.milliseconds(options.httpRTT.lowerBound
                                                + Int64(rng.next() % UInt64(options.httpRTT.upperBound - options.httpRTT.lowerBound + 1)))
                let x = Exchange(id: id, request: request, session: owner?.session, purpose: owner?.purpose, order: order, rtt: rtt,
                                 deadline: now + timeout, at: now + rtt / 2)
                order += 1
                exchanges[id] = x
                if options.keepHistory { requestsSent.append((now, request, owner?.session)) }
            case .cancelHTTP(let id):
                exchanges[id] = nil
            case .mute(let on):
                if options.keepHistory { mutes.append((now, on)) }
            case .flushPlayback(let id):
                if options.keepHistory { flushes.append((now, id)) }
            case .duckPlayback(let id):
                if options.keepHistory { duckFlushes.append((now, id)) }
            case .earcon:
                earcons.append(now)
            case .switchAudio(let id):
                audioSession = id
            case .runTool(let run):
                toolRuns.append((now, run))
            case .cancelTool(let id):
                toolCancels.append((now, id))
            case .pendingClose(let id, let close):
                pendingCloses[id] = close
            case .addRelay(let server, let address):
                learnedRelays.append((server, address))
            case .resolveRelay(let server):
                resolveRequests.append(server)
            case .refreshRelays:
                break
            case .record(let type, let fields):
                if options.keepHistory { records.append(Record(at: now, type: type, fields: fields)) }
            case .log(let level, let text):
                if options.keepHistory { logs.append((now, level, text)) }
            case .journal(let level, let text, let fields):
                if options.keepHistory {
                    logs.append((now, level, text))
                    journal.append((now, text, fields))
                }
            case .notify:
                break
            case .status(let s):
                if options.keepHistory { statuses.append((now, s)) }
            case .exit(let status):
                if exited != nil { problems.append("a second .exit(\(status))") }
                exited = (now, status)
                nextUplink = .distantFuture
            case .timeout(let t):
                coreDeadline = t
                onOutput?(output)
                return
            }
            if trace { traceOutput(output) }
            onOutput?(output)
        }
    }

    func traceOutput(_ output: AgentOutput) {
        let t = now - start
        switch output {
        case .transmit, .timeout: return
        case .log(let level, let text), .journal(let level, let text, _): print("world \(t): log \(level) \(text)")
        case .record(let type, let fields):
            print("world \(t): record \(type) " + fields.map { "\($0.0)=" + String(decoding: $0.1.serialized(), as: UTF8.self) }.joined(separator: " "))
        case .http(let id, let r, let timeout): print("world \(t): http \(id) \(r.method) \(r.url) (timeout \(timeout))")
        default: print("world \(t): \(output)")
        }
    }

    func bind(_ id: Int) {
        if bindFails {
            core.socketsUnavailable(session: id, reason: "no usable network address (the world's bind fails)", now: now)
            return
        }
        let host = SocketAddress(ip: deviceIP, port: UInt16(5_000 + id % 1_000))
        let mapped = SocketAddress(ip: deviceIP, port: UInt16(20_000 + id % 1_000 + 1_000 * (deviceEpoch % 40)))
        net.attach(host, side: .device, mapped: options.deviceNAT ? mapped : nil)
        deviceHosts[id] = host
        sessionOfHost[host] = id
        core.socketsBound(session: id, addresses: [host], now: now)
    }

    /// The board's router picks new public ports for every mapping.
    func rebindDevice() {
        deviceEpoch += 1
        net.rebind(.device)
    }

    // MARK: The clock

    var nextEvent: Instant {
        var t = min(coreDeadline, net.nextDue, provider.nextDeadline, nextUplink)
        if let s = scheduled.first { t = min(t, s.at) }
        for x in exchanges.values { t = min(t, x.next) }
        return t
    }

    var sameInstantSteps = 0

    /// Advances to the next event (at most `limit`) and handles everything due then.
    func step(limit: Instant) {
        let t = max(now, min(limit, nextEvent))
        if t == now { sameInstantSteps += 1 } else { sameInstantSteps = 0 }
        if sameInstantSteps > 10_000 {
            problems.append("stuck at \(now - start): core deadline \(coreDeadline - start)")
            sameInstantSteps = 0
            net.now = now + .milliseconds(1)
            return
        }
        net.now = t
        while let s = scheduled.first, s.at <= now {
            scheduled.removeFirst()
            s.action(self)
        }
        if nextUplink <= now, let every = options.uplinkEvery {
            nextUplink = nextUplink + every
            uplinkFrame()
        }
        let dueExchanges = exchanges.values.filter { $0.next <= now }.sorted { ($0.next, $0.order) < ($1.next, $1.order) }
        for x in dueExchanges where exchanges[x.id] === x { advance(x) }
        for d in net.takeDue() { deliver(d) }
        provider.handleTimeouts()
        if coreDeadline <= now {
            coreDeadline = .distantFuture
            core.handleTimeout(now: now)
            drive()
        }
        onStep?()
    }

    func run(until end: Instant) {
        while now < end { step(limit: end) }
    }

    func run(for d: Duration) { run(until: now + d) }

    /// Runs until `condition` holds (checked after every step) or `limit` passes; when
    /// it held (nil: never).
    @discardableResult
    func run(within limit: Duration, until condition: () -> Bool) -> Instant? {
        let end = now + limit
        while now < end {
            if condition() { return now }
            step(limit: end)
        }
        return condition() ? now : nil
    }

    // MARK: Audio

    /// One uplink frame; its index rides in the first two samples, and the fake codec
    /// puts it in the packet, so the provider can tell which frames reached it.
    func uplinkFrame() {
        var frame = [Int16](repeating: 0, count: 960)
        frame[0] = Int16(truncatingIfNeeded: frameIndex & 0xFFFF)
        frame[1] = Int16(truncatingIfNeeded: frameIndex >> 16)
        frameIndex += 1
        let before = core.activePeer?.stats.rtpSent ?? 0
        let active = core.activeID
        core.downlink(heard: heardNow, spurtStart: spurtStart)
        if let echoAudible { core.echo(audible: echoAudible, now: now) }
        core.localVoice(heldFor: voiceSince.map { now - $0 } ?? .zero, now: now)
        frame.withUnsafeBufferPointer { core.uplink($0, now: now) }
        if let active, core.activeID == active, let p = core.activePeer, p.stats.rtpSent > before { framesOffered += 1 }
        drive()
    }

    // MARK: Datagrams

    func deliver(_ d: DatagramNetwork.InFlight) {
        guard let (host, side) = net.route(d) else { return }
        switch side {
        case .device:
            guard let id = sessionOfHost[host] else { return }
            if let drop = dropToDevice, drop(d.bytes) { return }
            lastToDevice = now
            // In a receive buffer the core borrows, as the runtime hands datagrams over.
            var buffer = d.bytes
            buffer.withUnsafeMutableBytes { core.handleDatagram(session: id, $0, from: d.from, local: host, now: now) }
            drive()
        case .provider:
            provider.datagram(d.bytes, from: d.from, to: host)
        }
    }

    // MARK: HTTP

    /// Unix seconds the world's wall would show (for `Retry-After` dates).
    var wallClock: Int64 { 1_800_000_000 + (now - start).nanoseconds / 1_000_000_000 }

    func advance(_ x: Exchange) {
        if let deadline = x.deadline, deadline <= now {
            // The runtime's client gives up at the request's timeout.
            exchanges[x.id] = nil
            let failure = HTTPTransportFailure(.noAnswer, "\(x.request.method) \(x.request.url): timed out")
            onHTTPResult?(x, .failure(failure))
            core.httpFailed(x.id, failure, now: now)
            drive()
            return
        }
        // In a black hole TCP keeps retransmitting: the leg goes through when it ends.
        if net.blackholed, let until = net.blackholeUntil {
            x.at = until
            return
        }
        switch x.leg {
        case .toProvider:
            switch provider.handle(x) {
            case .some(.respond(var r, let extra)):
                // As real servers do (RFC 9110 §6.6.1), by the provider's true clock.
                if r.headers["Date"] == nil { r.headers.add("Date", imfFixdate(wallClock)) }
                x.leg = .toDevice(.success(r))
                x.at = now + x.rtt / 2 + extra
            case .some(.fail(let f)):
                x.leg = .toDevice(.failure(f))
                x.at = now + x.rtt / 2
            case .some(.never):
                x.leg = .silent
                x.deadline = nil
            case .none:
                x.leg = .silent
            }
        case .toDevice(let result):
            exchanges[x.id] = nil
            onHTTPResult?(x, result)
            switch result {
            case .success(let r): core.httpResponse(x.id, r, wallClock: wallClock + options.deviceClockOffset, now: now)
            case .failure(let f): core.httpFailed(x.id, f, now: now)
            }
            drive()
        case .silent:
            break
        }
    }

    // MARK: What happened

    func records(_ type: String) -> [Record] { records.filter { $0.type == type } }

    /// The public states in order (the `state` records).
    var states: [String] { records("state").compactMap { $0["state"]?.string } }

    func stateTimes(_ state: String) -> [Instant] { records("state").filter { $0["state"]?.string == state }.map(\.at) }

    /// Sessions the core started: id, reason, when.
    var sessionsStarted: [(id: Int, reason: String, at: Instant)] {
        records("session").compactMap { r in
            guard let id = r["id"]?.int64, let reason = r["reason"]?.string else { return nil }
            return (Int(id), reason, r.at)
        }
    }

    /// Retries scheduled: attempt, delay, when.
    var retries: [(attempt: Int, delay: Duration, at: Instant)] {
        records("retry").compactMap { r in
            guard let n = r["attempt"]?.int64, let ms = r["delay_ms"]?.int64 else { return nil }
            return (Int(n), .milliseconds(ms), r.at)
        }
    }

    func logged(_ text: String) -> Bool { logs.contains { $0.text.contains(text) } }

    func requests(_ method: String) -> [(at: Instant, request: HTTPRequest, session: Int?)] {
        requestsSent.filter { $0.request.method == method }
    }

    func seconds(_ d: Duration) -> Double { Double(d.nanoseconds) / 1e9 }
}

/// A codec that is no codec: each frame becomes a small packet carrying the frame's
/// index (from its first two samples), so what reached the provider can be counted
/// frame by frame. Counters as the stats line reads them.
final class FakeMedia: CallMedia {
    let session: Int
    let samples: UInt32
    var encoded = 0
    var receivedCount = 0
    var counters = MediaCounters()

    init(session: Int, samples: UInt32) {
        self.session = session
        self.samples = samples
    }

    var frameTicks: UInt32 { samples }

    func encode(_ frame: UnsafeBufferPointer<Int16>, into room: UnsafeMutableRawBufferPointer) -> Int? {
        let index = UInt32(UInt16(bitPattern: frame[0])) | UInt32(UInt16(bitPattern: frame[1])) << 16
        var packet: [UInt8] = [0xFC]
        for k in 0..<4 { packet.append(UInt8(truncatingIfNeeded: index >> (8 * UInt32(k)))) }
        packet += [UInt8](repeating: 0, count: 15)
        guard packet.count <= room.count else { return nil }
        packet.withUnsafeBytes { room.copyMemory(from: $0) }
        encoded += 1
        counters.bytesSent += packet.count
        return packet.count
    }

    var onReceived: (() -> Void)?

    func received(_ audio: ReceivedAudio) {
        receivedCount += 1
        onReceived?()
        counters.framesDecoded += 1
    }

    /// Playout is the runtime's business with real media; the world counts flushes.
    var flushes = 0
    var streamSamples: Int { 0 }
    var lastConcealed: Bool { false }
    func playout(now: Instant, into out: UnsafeMutableBufferPointer<Int16>) -> Int { 0 }
    func cutPlayback(now: Instant) { flushes += 1; ducked = false }
    var releases = 0
    /// Duck changes, in order (true: silenced).
    var ducks: [Bool] = []
    private(set) var ducked = false
    func duckPlayback(_ on: Bool) { ducked = on; ducks.append(on) }
    func releasePlayback() { releases += 1 }

    /// The frame index a fake packet carries.
    static func index(_ payload: [UInt8]) -> Int? {
        guard payload.count >= 5, payload[0] == 0xFC else { return nil }
        return (1...4).reduce(0) { $0 | Int(payload[$1]) << (8 * ($1 - 1)) }
    }
}

/// The provider's side: the route's HTTP server (Signaling's `RouteServer`, the token URL
/// and hang-up for OpenAI) and one answerer `Peer` per offer, like `linnet answer`
/// (echo mode: audio and data-channel messages come back as they came). What it does
/// can be changed per test: dead, a status instead of the answer, garbage, lost answers.
final class WorldProvider {
    enum RequestKind: Equatable { case token, offer, restart, close, other }

    struct Request {
        let kind: RequestKind
        let method: String
        let url: HTTPURL
        let headers: HTTPHeaders
        /// The core's session that sent it.
        let session: Int?
        /// 1 for the first request of this kind, 2 for the next…
        let count: Int
    }

    enum Reply {
        /// What the route's server does.
        case normal
        /// This response instead (nothing is done on the provider's side).
        case respond(HTTPResponse)
        /// The client sees this failure (refused: `.noAnswer`; garbage bytes: `.badData`).
        case fail(HTTPTransportFailure)
        /// Nothing comes back; the client gives up at the request's timeout.
        case timeout
        /// Nothing comes back and the client never gives up.
        case never
        /// The provider acts on it (a session is made, a restart applied) but the
        /// response is lost; the client gives up at the request's timeout.
        case lose
        /// What the route's server does, answered this much later (a slow provider).
        case slow(Duration)
    }

    enum Outcome {
        case respond(HTTPResponse, after: Duration = .zero)
        case fail(HTTPTransportFailure)
        case never
    }

    final class Session {
        let id: String
        let host: SocketAddress
        var peer: Peer?
        let coreSession: Int?
        let createdAt: Instant
        var deadline = Instant.distantFuture
        /// How it ended: "close" (DELETE, close route, hang-up), "goodbye" (the device's
        /// peer closed), "failed", "killed".
        var endedBy: String?
        var endedAt: Instant?
        var restarts = 0
        var everConnected = false
        /// Text messages received on the data channel, in order.
        var messages: [String] = []
        /// When each of `messages` arrived.
        var messageTimes: [Instant] = []
        var channel: UInt16?
        /// Uplink frame indices received, with when.
        var audio: [(index: Int, at: Instant)] = []
        var audioCount = 0
        init(id: String, host: SocketAddress, peer: Peer, coreSession: Int?, createdAt: Instant) {
            self.id = id
            self.host = host
            self.peer = peer
            self.coreSession = coreSession
            self.createdAt = createdAt
        }
    }

    let route: RouteKind
    let net: DatagramNetwork
    let crypto: CryptoRandom
    let identity: Identity
    weak var world: ProviderWorld?
    let ip = SocketAddress("198.51.100.2:1")!.ip
    /// The token every request but OpenAI's calls must carry (nil: any).
    var requiredToken: String?
    let ephemeralKey = "ek_world_key"
    /// Refuses every connection and has no sessions (a killed `linnet answer`).
    private(set) var down = false
    /// WHIP: give an ETag (ICE restarts welcome, RFC 9725 §4.3.1).
    var etag = true
    /// `Link` fields the WHIP endpoint adds to its 201 (ice-servers, RFC 9725 §4.6).
    var linkHeaders: [String] = []
    /// WHIP: answer a PATCH (else 405).
    var acceptsRestarts = true
    var echoAudio = true
    /// What the provider sends back for a text message on the data channel (default:
    /// the same text, as `linnet answer --mode echo` does).
    var onMessage: (Session, String) -> [String] = { _, text in [text] }
    var reply: (Request) -> Reply = { _ in .normal }
    /// Per-peer events the provider saw, for a test that wants them.
    var onPeerEvent: ((Session, PeerEvent) -> Void)?

    var sessions: [String: Session] = [:]
    var byHost: [SocketAddress: Session] = [:]
    /// Keep what each session received (`audio`, `messages`) and every request in
    /// `handled` (the soak does not: a day of it would grow without bound).
    var keepHistory = true
    var counts: [RequestKind: Int] = [:]
    var nextNumber = 1
    /// The provider's session that each core session's offer made.
    var sessionOfCore: [Int: Session] = [:]
    /// Offers, restarts… that got here (after `reply`), by kind.
    var handled: [(kind: RequestKind, request: Request)] = []

    init(route: RouteKind, net: DatagramNetwork, crypto: CryptoRandom, token: String?) throws {
        self.route = route
        self.net = net
        self.crypto = crypto
        identity = try Identity(random: crypto)
        requiredToken = token
    }

    static let whipURL = try! HTTPURL("https://provider.test/whip")
    static let backendURL = try! HTTPURL("https://backend.test/api")
    static let callsURL = try! HTTPURL("https://api.provider.test/v1/realtime/calls")
    static let tokenURL = try! HTTPURL("https://backend.test/token")

    static func route(_ kind: RouteKind) -> Route {
        switch kind {
        case .whip: return .whip(whipURL)
        case .backend: return .backend(base: backendURL, chat: "c1")
        case .openai: return .openai(calls: callsURL, tokenURL: tokenURL)
        }
    }

    var now: Instant { net.now }

    // MARK: Life and death

    /// Gone without a goodbye (SIGKILL): no peer answers, every connection refused.
    func kill() {
        down = true
        for s in Array(sessions.values) { end(s, by: "killed", goodbye: false) }
    }

    /// Back (on the same address), with no memory of its sessions.
    func revive() { down = false }

    // MARK: HTTP

    func kind(of r: HTTPRequest) -> RequestKind {
        if route == .openai {
            if r.url.target == Self.tokenURL.target { return .token }
            if r.method == "POST" && r.url.target.hasSuffix("/" + RoutePath.hangup) { return .close }
        }
        switch RouteServer.parse(method: r.method, target: r.url.target, headers: r.headers, body: r.body) {
        case .request(.whipOffer), .request(.backendOffer): return .offer
        case .request(.whipRestart): return .restart
        case .request(.whipDelete), .request(.backendClose): return .close
        case .refuse: return .other
        }
    }

    /// One request arrived; what goes back (nil: nothing, the client's deadline ends it).
    func handle(_ x: ProviderWorld.Exchange) -> Outcome? {
        let r = x.request
        let k = kind(of: r)
        counts[k, default: 0] += 1
        let request = Request(kind: k, method: r.method, url: r.url, headers: r.headers, session: x.session, count: counts[k]!)
        if down { return .fail(HTTPTransportFailure(.noAnswer, "connect to \(r.url.hostHeader): connection refused")) }
        let choice = reply(request)
        if keepHistory { handled.append((k, request)) }
        switch choice {
        case .respond(let response): return .respond(response)
        case .fail(let f): return .fail(f)
        case .timeout: return nil
        case .never: return .never
        case .normal: return .respond(serve(r, request))
        case .slow(let d): return .respond(serve(r, request), after: d)
        case .lose:
            _ = serve(r, request)
            return nil
        }
    }

    func authorized(_ r: HTTPRequest, _ kind: RequestKind) -> Bool {
        let got = r.headers["Authorization"]
        if route == .openai && kind != .token { return got == "Bearer " + ephemeralKey }
        guard let requiredToken else { return true }
        return got == "Bearer " + requiredToken
    }

    /// What `linnet answer` (or the OpenAI service) answers.
    func serve(_ r: HTTPRequest, _ request: Request) -> HTTPResponse {
        guard authorized(r, request.kind) else { return RouteServer.text(401, "unauthorized") }
        if request.kind == .token {
            let body: JSONValue = ["value": .string(ephemeralKey)]
            return HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", RouteMediaType.json)]), body: body.serialized())
        }
        if route == .openai && request.kind == .close {
            let parts = r.url.target.split(separator: "/").map(String.init)
            guard parts.count >= 2, let s = sessions[parts[parts.count - 2]] else { return RouteServer.text(404, "no such call") }
            end(s, by: "close", goodbye: true)
            return HTTPResponse(status: 200)
        }
        switch RouteServer.parse(method: r.method, target: r.url.target, headers: r.headers, body: r.body) {
        case .refuse(let response):
            return response
        case .request(.whipOffer(let sdp)):
            return offer(sdp, session: request.session) { id, answer in
                switch self.route {
                case .openai:
                    return HTTPResponse(status: 201, headers: HTTPHeaders([("Content-Type", RouteMediaType.sdp),
                                                                           ("Location", "/v1/realtime/calls/" + id)]), body: Array(answer.utf8))
                default:
                    var created = RouteServer.whipCreated(id: id, answer: answer, etag: "\"\(id)-1\"")
                    if !self.etag { created.headers.remove("ETag") }
                    for l in self.linkHeaders { created.headers.add("Link", l) }
                    return created
                }
            }
        case .request(.backendOffer(_, let sdp)):
            return offer(sdp, session: request.session) { id, answer in RouteServer.backendAnswered(id: id, answer: answer) }
        case .request(.whipRestart(let id, let fragment)):
            guard acceptsRestarts else { return RouteServer.text(405, "no ICE restarts here") }
            guard let s = sessions[id], let peer = s.peer else { return RouteServer.text(404, "no such session") }
            do {
                let ours = try peer.acceptRestartFragment(fragment, now: now)
                drain(s)
                s.restarts += 1
                return RouteServer.restarted(fragment: ours, etag: "\"\(id)-\(s.restarts + 1)\"")
            } catch {
                return RouteServer.text(400, "\(error)")
            }
        case .request(.whipDelete(let id)):
            guard let s = sessions[id] else { return RouteServer.text(404, "no such session") }
            end(s, by: "close", goodbye: true)
            return HTTPResponse(status: 200)
        case .request(.backendClose(_, let id)):
            guard let s = sessions[id] else { return RouteServer.text(404, "no such voice") }
            end(s, by: "close", goodbye: true)
            return RouteServer.backendClosed(seconds: Int((now - s.createdAt).nanoseconds / 1_000_000_000))
        }
    }

    func offer(_ sdp: String, session: Int?, _ created: (String, String) -> HTTPResponse) -> HTTPResponse {
        let n = nextNumber
        nextNumber += 1
        let id = route == .openai ? "rtc_\(n)" : (route == .backend ? "v\(n)" : "s\(n)")
        let host = SocketAddress(ip: ip, port: UInt16(6_000 + n % 1_000))
        do {
            let peer = try Peer(role: .answerer, configuration: PeerConfiguration(hostAddresses: [host]), identity: identity, crypto: crypto,
                                seed: UInt64(n) &* 0x9E37_79B9_7F4A_7C15)
            net.attach(host, side: .provider)
            let s = Session(id: id, host: host, peer: peer, coreSession: session, createdAt: now)
            sessions[id] = s
            byHost[host] = s
            if let session { sessionOfCore[session] = s }
            peer.start(now: now)
            let answer = try peer.acceptOffer(sdp, now: now)
            drain(s)
            return created(id, answer)
        } catch {
            return RouteServer.text(400, "\(error)")
        }
    }

    /// The session is over on the provider's side: its peer closes (sending its goodbye
    /// unless it was killed) and its socket goes.
    func end(_ s: Session, by why: String, goodbye: Bool) {
        guard s.endedBy == nil else { return }
        s.endedBy = why
        s.endedAt = now
        if goodbye, let p = s.peer {
            p.close(now: now)
            drain(s)
        }
        sessions[s.id] = nil
        byHost[s.host] = nil
        net.detach(s.host)
        s.peer = nil
        s.deadline = .distantFuture
        if let c = s.coreSession, sessionOfCore[c] === s, !keepHistory { sessionOfCore[c] = nil }
    }

    // MARK: Peers

    var nextDeadline: Instant {
        var t = Instant.distantFuture
        for s in sessions.values where s.deadline < t { t = s.deadline }
        return t
    }

    func datagram(_ bytes: [UInt8], from: SocketAddress, to host: SocketAddress) {
        guard let s = byHost[host], let p = s.peer else { return }
        p.handleInput(bytes, from: from, local: host, now: now)
        drain(s)
    }

    func handleTimeouts() {
        for s in sessions.values.sorted(by: { $0.createdAt < $1.createdAt }) where s.deadline <= now {
            s.peer?.handleTimeout(now: now)
            drain(s)
        }
    }

    func drain(_ s: Session) {
        guard let p = s.peer else { return }
        while true {
            switch p.pollOutput() {
            case .transmit(let bytes, let from, let to):
                net.send(bytes, from: from, to: to)
            case .event(let e):
                event(e, s)
                if s.peer == nil { return }
            case .timeout(let t):
                s.deadline = t
                return
            }
        }
    }

    func event(_ e: PeerEvent, _ s: Session) {
        onPeerEvent?(s, e)
        guard let p = s.peer else { return }
        switch e {
        case .connected:
            s.everConnected = true
        case .audio(let a):
            s.audioCount += 1
            if keepHistory, let i = FakeMedia.index(a.payload) { s.audio.append((i, now)) }
            if echoAudio {
                a.payload.withUnsafeBytes { p.sendAudio($0, samples: world?.options.frameSamples ?? 960, now: now) }
            }
        case .dataChannel(.opened(let channel, _, _)):
            s.channel = channel
        case .dataChannel(.message(let channel, let data, let isText)):
            guard isText else { return }
            let text = String(decoding: data, as: UTF8.self)
            if keepHistory {
                s.messages.append(text)
                s.messageTimes.append(now)
            }
            for out in onMessage(s, text) {
                do { try p.send(channel: channel, text: out, now: now) } catch {
                    world?.problems.append("provider session \(s.id) cannot reply: \(error)")
                }
            }
        case .failed:
            // `linnet answer` ends a session whose peer failed.
            end(s, by: "failed", goodbye: false)
        case .closed:
            end(s, by: "goodbye", goodbye: false)
        default:
            break
        }
    }

    /// The scripted Realtime service (the interop peer's `openai` mode): a session.update
    /// is confirmed; a commit is transcribed as "hello linnet"; a response.create is
    /// answered "Hi, this is the test provider.".
    static func realtimeScript(_ s: Session, _ text: String) -> [String] {
        guard let event = try? JSONValue.parse(Array(text.utf8)), let type = event["type"]?.string else { return [] }
        switch type {
        case "session.update":
            let session = event["session"] ?? .object(JSONObject())
            let updated: JSONValue = ["type": "session.updated", "session": session]
            return [String(decoding: updated.serialized(), as: UTF8.self)]
        case "input_audio_buffer.commit":
            // Ids are unique per message, as the service's are.
            let n = s.messages.count
            return [#"{"type":"input_audio_buffer.committed","item_id":"item_user_\#(n)"}"#,
                    #"{"type":"conversation.item.input_audio_transcription.completed","item_id":"item_user_\#(n)","content_index":0,"transcript":"hello linnet"}"#]
        case "response.create":
            let n = s.messages.count
            return [#"{"type":"response.created","response":{"id":"resp_\#(n)","status":"in_progress","output":[]}}"#,
                    #"{"type":"response.output_audio_transcript.done","response_id":"resp_\#(n)","item_id":"item_reply_\#(n)","output_index":0,"content_index":0,"transcript":"Hi, this is the test provider."}"#,
                    #"{"type":"response.done","response":{"id":"resp_\#(n)","status":"completed","output":[]}}"#]
        default:
            return []
        }
    }
}

typealias RouteKind = ProviderWorld.RouteKind
