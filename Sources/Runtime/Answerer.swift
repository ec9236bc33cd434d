// The built-in answerer (`linnet answer`, and `linnet demo`'s provider): it serves the
// WHIP route (RFC 9725) and the app-backend route of ARCHITECTURE.md "Sessions", so
// `linnet run` and `linnet demo` have a provider on loopback, and a board can act as an
// intercom peer.
import CSystem
import Wire
import Settings
import Platform
import JSON
import Signaling
import DTLS
import Codec
import Peer
import SCTP
import Agent

public final class Answerer {
    let loop: EventLoop
    let mode: AnswerMode
    let identity: Identity
    let crypto: CryptoRandom
    let addresses: [IPAddress]
    /// Public addresses behind a one-to-one NAT (`--advertise`), offered beside the
    /// local candidates.
    let advertise: [IPAddress]
    var server: HTTPServer!
    /// By session id ("s1", …): keys compared as bytes (Wire's `TextKey`).
    var sessions: [TextKey: Session] = [:]
    var nextID = 1
    let maxSessions = 16

    final class Session {
        let id: String
        let call: Call
        let started: Instant
        var tone: ToneSource?
        var toneTimer: EventLoop.TimerID?
        /// Echoes waiting for room in the SCTP send buffer (channel, bytes, text).
        var echoes: [(UInt16, [UInt8], Bool)] = []
        var restarts = 0
        init(id: String, call: Call, started: Instant) {
            self.id = id
            self.call = call
            self.started = started
        }
    }

    public init(loop: EventLoop, listen: SocketAddress, advertise: [IPAddress] = [], mode: AnswerMode, crypto: CryptoRandom) throws(CLIFailure) {
        self.loop = loop
        self.advertise = advertise
        self.mode = mode
        self.crypto = crypto
        do throws(DTLSError) { identity = try Identity(random: crypto) } catch { throw CLIFailure(.software, error.description) }
        // Listening on loopback means the peer is on this machine: gather on loopback
        // only. On a wildcard address, every interface (loopback included); on a
        // specific one, every non-loopback interface.
        if listen.ip.isLoopback {
            addresses = [listen.ip.isV4 ? .loopbackV4 : .loopbackV6]
        } else {
            addresses = gatherAddresses(includeLoopback: listen.ip.isUnspecified)
        }
        do throws(SystemError) {
            // Unowned: the server is the answerer's own and never outlives it (a strong
            // capture would be a reference cycle that outlives the command).
            server = try HTTPServer(loop: loop, listen: listen) { [unowned(unsafe) self] request, from, respond in
                self.handle(request, respond: respond)
            }
        } catch {
            throw CLIFailure(.unavailable, "cannot listen on \(listen): \(SystemError.message(error.code))")
        }
    }

    public var address: SocketAddress { server.address }

    /// One request on the WHIP or backend route, parsed and answered with the shapes
    /// `linnet run` reads (Signaling/Routes.swift holds both sides).
    func handle(_ request: HTTPServerRequest, respond: @escaping (HTTPResponse) -> Void) {
        Log.debug("answer: \(request.method) \(request.target)")
        switch RouteServer.parse(method: request.method, target: request.target, headers: request.headers, body: request.body) {
        case .refuse(let response):
            respond(response)
        case .request(.backendOffer(_, let offer)):
            offerReceived(offer, respond: respond) { id, answer in RouteServer.backendAnswered(id: id, answer: answer) }
        case .request(.backendClose(_, let id)):
            guard let seconds = closeSession(id) else { return respond(RouteServer.text(404, "no such voice")) }
            respond(RouteServer.backendClosed(seconds: seconds))
        case .request(.whipOffer(let offer)):
            // An ETag says ICE restarts are welcome (RFC 9725 §4.3.1).
            offerReceived(offer, respond: respond) { id, answer in RouteServer.whipCreated(id: id, answer: answer, etag: "\"\(id)-1\"") }
        case .request(.whipRestart(let id, let text)):
            // ICE restart (RFC 9725 §4.3.2): an RFC 8840 fragment with new credentials in,
            // ours out, DTLS and SRTP untouched.
            guard let s = sessions[TextKey(id)] else { return respond(RouteServer.text(404, "no such session")) }
            do throws(PeerError) {
                let fragment = try s.call.peer.acceptRestartFragment(text, now: loop.now)
                s.call.pump()
                s.restarts += 1
                Log.info("answer: session \(s.id): ICE restart")
                respond(RouteServer.restarted(fragment: fragment, etag: "\"\(s.id)-\(s.restarts + 1)\""))
            } catch {
                respond(RouteServer.text(400, error.description))
            }
        case .request(.whipDelete(let id)):
            guard closeSession(id) != nil else { return respond(RouteServer.text(404, "no such session")) }
            respond(HTTPResponse(status: 200))
        }
    }

    func textResponse(_ status: Int, _ text: String) -> HTTPResponse { RouteServer.text(status, text) }

    func offerReceived(_ offer: String, respond: @escaping (HTTPResponse) -> Void,
                       success: @escaping (String, String) -> HTTPResponse) {
        guard sessions.count < maxSessions else {
            respond(textResponse(503, "too many calls"))
            return
        }
        let id = "s\(nextID)"
        nextID += 1
        let call: Call
        do throws(CallError) {
            call = try Call(loop: loop, role: .answerer, addresses: addresses, stun: nil, advertised: advertise, identity: identity, crypto: crypto, label: "answer: session \(id)")
        } catch {
            respond(textResponse(500, error.description))
            return
        }
        let session = Session(id: id, call: call, started: loop.now)
        // Unowned: the call is the session's, the session the answerer's (strong
        // captures would be cycles that outlive them).
        call.onEvent = { [unowned(unsafe) self, unowned(unsafe) session] e in self.event(e, session) }
        call.start()
        call.whenGathered(timeout: .seconds(2)) {
            self.accept(offer, call: call, session: session, respond: respond, success: success)
        }
    }

    /// The offer applied once gathering is done, and the answer sent. Out of line on
    /// purpose: inlined into the closure above, the arm64 Embedded build (Swift 6.3.1,
    /// -Osize with LTO) gave the SDP parser's typed-throw result the stack slot of a
    /// spilled capture (the session id), which the parse overwrote, and the arm64 demo
    /// crashed in qemu-check. A watchpoint under qemu's gdb stub showed the write.
    @inline(never)
    func accept(_ offer: String, call: Call, session: Session, respond: @escaping (HTTPResponse) -> Void,
                success: @escaping (String, String) -> HTTPResponse) {
        let id = session.id
        do throws(PeerError) {
            let answer = try call.peer.acceptOffer(offer, now: loop.now)
            call.pump()
            sessions[TextKey(id)] = session
            Log.info("answer: session \(id) started (\(mode.rawValue))")
            startMedia(session)
            respond(success(id, answer))
        } catch {
            Log.warning("answer: refused an offer: \(error)")
            call.close()
            respond(textResponse(400, error.description))
        }
    }

    func event(_ e: PeerEvent, _ s: Session) {
        switch e {
        case .iceStateChanged(let state): Log.info("answer: session \(s.id): ICE \(state)")
        case .connected: Log.info("answer: session \(s.id): connected (DTLS-SRTP up)")
        case .failed(let error):
            Log.warning("answer: session \(s.id) failed: \(error)")
            _ = closeSession(s.id)
        case .dataChannel(.opened(_, let label, _)):
            Log.info("answer: session \(s.id): data channel '\(label)' open")
        case .dataChannel(.message(let channel, let data, let isText)):
            // Echo mode answers every message on its own channel, text as text, in
            // order; what does not fit the send buffer waits for `.sendBufferLow`.
            guard mode == .echo else { break }
            s.echoes.append((channel, data, isText))
            flushEchoes(s)
        case .dataChannel(.sendBufferLow):
            flushEchoes(s)
        case .closed:
            if sessions[TextKey(s.id)] != nil {
                Log.info("answer: session \(s.id) closed by the peer")
                _ = closeSession(s.id)
            }
        default: break
        }
    }

    func flushEchoes(_ s: Session) {
        while let (channel, data, isText) = s.echoes.first {
            do throws(PeerError) {
                if isText {
                    try s.call.peer.send(channel: channel, text: String(decoding: data, as: UTF8.self), now: loop.now)
                } else {
                    try s.call.peer.send(channel: channel, binary: data, now: loop.now)
                }
                s.echoes.removeFirst()
            } catch {
                if case .dataChannel(.sendBufferFull) = error { break }
                Log.warning("answer: session \(s.id): echo dropped: \(error)")
                s.echoes.removeFirst()
            }
        }
        s.call.pump()
    }

    func startMedia(_ s: Session) {
        switch mode {
        case .echo:
            // Echo the encoded frames as they come: no decode or re-encode, so what
            // returns is exactly what was sent (the caller's codec is what is tested).
            s.call.onAudio = { [unowned(unsafe) s] audio in
                let samples = audio.payload.withUnsafeBytes { opusPacketSamples($0) } ?? 960
                s.call.sendAudio(audio.payload, samples: UInt32(samples))
            }
        case .tone:
            let tone: ToneSource
            do throws(CodecError) { tone = try ToneSource(frequency: 440, amplitude: 0.25) } catch {
                Log.warning("answer: session \(s.id) sends no tone: \(error)")
                return
            }
            s.tone = tone
            scheduleTone(s, at: loop.now)
        }
    }

    func scheduleTone(_ s: Session, at deadline: Instant) {
        s.toneTimer = loop.schedule(at: deadline) {
            guard self.sessions[TextKey(s.id)] != nil, let tone = s.tone else { return }
            if let packet = tone.next() { s.call.sendAudio(packet, samples: 960) }
            self.scheduleTone(s, at: deadline + .milliseconds(20))
        }
    }

    /// Ends a session; returns its length in seconds, nil if unknown.
    func closeSession(_ id: String) -> Int? {
        guard let s = sessions.removeValue(forKey: TextKey(id)) else { return nil }
        if let t = s.toneTimer { loop.cancel(t) }
        s.call.close()
        let seconds = Int((loop.now - s.started).milliseconds / 1000)
        Log.info("answer: session \(id) ended after \(seconds) s")
        return seconds
    }

    public func closeAll() {
        for id in Array(sessions.keys) { _ = closeSession(id.text) }
    }
}

/// A sine tone as 20 ms Opus packets (48 kHz mono), for `--mode tone` and tests.
public final class ToneSource {
    let encoder: OpusEncoder
    var phase = 0.0
    let step: Double
    let amplitude: Double
    var pcm = [Int16](repeating: 0, count: 960)
    var packet = [UInt8](repeating: 0, count: 1275)

    init(frequency: Double, amplitude: Double) throws(CodecError) {
        encoder = try OpusEncoder(sampleRate: 48_000, channels: 1)
        try encoder.setBitrate(32_000)
        step = 2 * Double.pi * frequency / 48_000
        self.amplitude = amplitude
    }

    func next() -> [UInt8]? {
        for i in 0..<960 {
            pcm[i] = Int16(saturating: amplitude * 32_767 * sin(phase))
            phase += step
            if phase > 2 * Double.pi { phase -= 2 * Double.pi }
        }
        let encoder = self.encoder
        // A whole 20 ms frame into a packet of Opus's largest size (RFC 6716 §3.2.1)
        // leaves libopus nothing to refuse; were it to, the tone skips that frame.
        let n = try? pcm.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(CodecError) in
            try packet.withMutableBytes { (out: UnsafeMutableRawBufferPointer) throws(CodecError) in try encoder.encode(p, into: out) }
        }
        guard let n else { return nil }
        return Array(packet[0..<n])
    }
}
