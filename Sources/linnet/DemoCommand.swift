// `linnet demo`: a whole call on this machine, no sound card and no backend: the
// built-in answerer on loopback (echo), real UDP, ICE, DTLS-SRTP and a data channel,
// a built-in test voice as the microphone, and what comes back written to a WAV file.
// Exits 0 when audio went both ways.
import CSystem
import Wire
import Platform
import JSON
import Signaling
import DTLS
import Codec
import Peer

/// A synthetic voice: a vowel-like tone (a 140 Hz glottal pulse through three formant
/// resonances) in 150–300 ms syllables, at about -20 dBFS. Deterministic.
final class TestVoice: FrameSource {
    var n = 0
    var syllableEnd = 0
    var gapEnd = 0
    var state: UInt64 = 0x2545_F491_4F6C_DD1D
    var formants: [(Double, Double)] = [(700, 0), (1220, 0), (2600, 0)]
    var y: [(Double, Double)] = [(0, 0), (0, 0), (0, 0)]

    func random() -> Double {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        return Double(state % 10_000) / 10_000
    }

    func nextFrame(into frame: inout [Int16]) -> Bool {
        for i in 0..<frame.count {
            if n >= gapEnd {
                syllableEnd = n + 7_200 + Int(random() * 7_200)
                gapEnd = syllableEnd + 2_400 + Int(random() * 4_800)
                let vowels: [[Double]] = [[700, 1220, 2600], [300, 2300, 3000], [500, 900, 2400], [400, 1900, 2550]]
                let v = vowels[Int(random() * 4) % 4]
                formants = [(v[0], 0), (v[1], 0), (v[2], 0)]
            }
            var sample = 0.0
            if n < syllableEnd {
                let pulse = n % (48_000 / 140) == 0 ? 1.0 : 0.0
                for k in 0..<3 {
                    // Two-pole resonator at the formant (bandwidth ~100 Hz).
                    let r = 0.987, w = 2 * Double.pi * formants[k].0 / 48_000
                    let out = pulse + 2 * r * cos(w) * y[k].0 - r * r * y[k].1
                    y[k] = (out, y[k].0)
                    sample += out
                }
            } else {
                y = [(0, 0), (0, 0), (0, 0)]
            }
            frame[i] = Int16(max(-32_767, min(32_767, sample * 900)))
            n += 1
        }
        return true
    }
}

enum DemoCommand {
    static func run(_ args: [String]) -> ExitStatus {
        do throws(CLIFailure) {
            let o: Options
            do throws(Options.Failure) { o = try Options(args, valued: ["seconds", "output", "events", "log-level"]) } catch {
                throw CLIFailure(.usage, error.description)
            }
            if let level = o["log-level"] {
                guard let l = LogLevel(name: level) else { throw CLIFailure(.usage, "--log-level must be error, warn, info or debug") }
                Log.level = l
            }
            let seconds: Int
            do throws(Options.Failure) { seconds = try o.int("seconds", default: 5, range: 1...3600) } catch { throw CLIFailure(.usage, error.description) }
            let output = o["output"] ?? "linnet-demo.wav"
            let signals = try wrap { () throws(SystemError) in try SignalSource([SIGINT, SIGTERM]) }
            let loop = try wrap { () throws(SystemError) in try EventLoop() }
            let crypto = try wrap { () throws(DTLSError) in try CryptoRandom() }
            let answerer = try Answerer(loop: loop, listen: SocketAddress(ip: .loopbackV4, port: 0), mode: .echo, crypto: crypto)
            writeOut("demo: built-in answerer (echo) on http://\(answerer.address)/whip\n")
            let url: HTTPURL
            do throws(HTTPError) { url = try HTTPURL("http://\(answerer.address)/whip") } catch { throw CLIFailure(.software, error.description) }
            let identity = try wrap { () throws(DTLSError) in try Identity(random: crypto) }
            let call = try wrap { () throws(CallError) in
                try Call(loop: loop, role: .offerer, addresses: [.loopbackV4], stun: nil, identity: identity, crypto: crypto)
            }
            let media = try wrap { () throws(CodecError) in try MediaPath() }
            let sink = try WAVFrameSink(path: output)
            let session = Session(loop: loop, route: .whip(url), token: nil, call: call, media: media, source: TestVoice(), sink: sink)
            session.events = try EventLog(path: o["events"] ?? "-", start: loop.now)
            session.queued = ["{\"type\":\"demo.hello\",\"text\":\"Hello from Linnet\"}"]
            var status = ExitStatus.ok
            session.onEnd = { s, _ in
                status = s
                loop.stop()
            }
            session.onConnected = { loop.schedule(after: .seconds(Int64(seconds))) { session.stop() } }
            loop.watch(fd: signals.fd) { _ in if !signals.drain().isEmpty { session.stop() } }
            session.start()
            try wrap { () throws(SystemError) in try loop.run() }
            answerer.closeAll()
            let s = call.peer.stats
            let both = s.rtpSent > 0 && s.rtpReceived > 0 && media.stats.framesDecoded > 0
            writeOut("demo: sent \(s.rtpSent) packets, received \(s.rtpReceived), decoded \(media.stats.framesDecoded) frames; "
                     + "connect \(session.connectMilliseconds.map { "\($0) ms" } ?? "—"); what came back is in \(output)\n")
            if status == .ok && !both {
                Log.error("demo: audio did not go both ways")
                return .software
            }
            writeOut(status == .ok ? "demo: ok, audio went both ways\n" : "demo: failed\n")
            return status
        } catch {
            Log.error("demo: \(error.message)")
            return error.status
        }
    }
}
