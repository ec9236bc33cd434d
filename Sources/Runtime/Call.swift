// One call's network side on the loop for `answer`: the Peer, its paths (SessionPaths,
// the same as `run`'s sessions) and the timer that drives it. Media plugs in through
// `onAudio` and `sendAudio`.
import CSystem
import Wire
import Platform
import ICE
import DTLS
import Peer
import Agent

public final class Call {
    let loop: EventLoop
    let peer: Peer
    let paths: SessionPaths
    var timer: DeadlineTimer!
    var onEvent: (PeerEvent) -> Void = { _ in }
    var onAudio: (ReceivedAudio) -> Void = { _ in }
    let started: Instant
    var closed = false

    /// Binds the paths (a UDP socket per address) and creates the peer.
    init(loop: EventLoop, role: PeerRole, addresses: [IPAddress], stun: SocketAddress?,
         advertised: [IPAddress] = [], identity: Identity, crypto: CryptoRandom, label: String) throws(CallError) {
        self.loop = loop
        started = loop.now
        do throws(SessionPathsError) {
            paths = try SessionPaths(loop: loop, label: label, addresses: addresses, failures: SendFailures())
        } catch {
            throw .paths(error)
        }
        var config = PeerConfiguration(hostAddresses: paths.localAddresses)
        config.ice.stunServer = stun
        config.ice.advertised = advertised
        // The same consent timing as `run`'s calls: one policy, in ICE.
        config.ice.useVoiceCallConsent()
        var seed: UInt64 = 0
        do throws(DTLSError) {
            for b in try crypto.bytes(8) { seed = seed << 8 | UInt64(b) }
        } catch {
            throw .peer(.random(error))
        }
        do throws(PeerError) {
            peer = try Peer(role: role, configuration: config, identity: identity, crypto: crypto, seed: seed)
        } catch {
            throw .peer(error)
        }
        // Unowned: the timer and the paths are the call's own (a strong capture is a cycle).
        timer = DeadlineTimer(loop: loop) { [unowned(unsafe) self] in
            self.peer.handleTimeout(now: self.loop.now)
            self.pump()
        }
        paths.onPacket = { [unowned(unsafe) self] packet, from, local in
            self.peer.handleInput(packet, from: from, local: local, now: self.loop.now)
        }
        paths.afterInput = { [unowned(unsafe) self] in self.pump() }
    }

    deinit { shutdown() }

    func start() {
        peer.start(now: loop.now)
        pump()
    }

    /// Sends one encoded frame (`samples` at 48 kHz).
    func sendAudio(_ payload: [UInt8], samples: UInt32) {
        payload.withUnsafeBytes { peer.sendAudio($0, samples: samples, now: loop.now) }
        pump()
    }

    /// Drains the peer: datagrams out, events to the owner, the next deadline armed.
    func pump() {
        while true {
            switch peer.pollOutput() {
            case .transmit(let bytes, let from, let to):
                paths.transmit(bytes, from: from, to: to, for: peer)
                peer.recycle(bytes)
            case .event(let e):
                if case .audio(let a) = e { onAudio(a) } else { onEvent(e) }
            case .timeout(let t):
                timer.arm(t)
                return
            }
        }
    }

    func close() {
        guard !closed else { return }
        peer.close(now: loop.now)
        pump()
        shutdown()
    }

    func shutdown() {
        closed = true
        timer?.cancel()
        paths.close()
    }
}

public enum CallError: Error, CustomStringConvertible {
    case paths(SessionPathsError)
    case peer(PeerError)

    public var description: String {
        switch self {
        case .paths(let e): return e.description
        case .peer(let e): return e.description
        }
    }
}

/// The local addresses to gather on: every up interface, loopback only when asked
/// (CLI.md --interfaces; tests and a loopback signaling host need it).
public func gatherAddresses(includeLoopback: Bool, only names: [String]? = nil) -> [IPAddress] {
    var out: [IPAddress] = []
    for i in Interfaces.list(includeLoopback: includeLoopback) {
        // Interface names are the kernel's bytes.
        if let names, !names.containsBytes(equalTo: i.name) { continue }
        // Link-local IPv6 needs a scope on every send and no peer here uses it.
        if i.address.isLinkLocal && !i.address.isV4 { continue }
        if !out.contains(i.address) { out.append(i.address) }
    }
    return out
}

extension Call {
    /// Runs `then` once gathering is complete, or after `timeout` with what there is
    /// (a STUN server that does not answer must not hold the call up).
    func whenGathered(timeout: Duration, then: @escaping () -> Void) {
        if peer.gatheringComplete {
            loop.schedule(after: .zero, then)
            return
        }
        // `then` (which may hold this call) is kept until it runs, then let go: the
        // wrapped handler stays as the call's, and must not hold a cycle after it.
        var pending: (() -> Void)? = then
        let previous = onEvent
        let timer = loop.schedule(after: timeout) {
            guard let run = pending else { return }
            pending = nil
            run()
        }
        onEvent = { [unowned(unsafe) self] e in
            previous(e)
            if case .gatheringComplete = e, let run = pending {
                pending = nil
                self.loop.cancel(timer)
                self.loop.schedule(after: .zero, run)
            }
        }
    }
}
