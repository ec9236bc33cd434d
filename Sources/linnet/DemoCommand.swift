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
import Agent
import Media
import Settings
import Audio
import Runtime

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
                syllableEnd = n + 7_200 + Int(saturating: random() * 7_200)
                gapEnd = syllableEnd + 2_400 + Int(saturating: random() * 4_800)
                let vowels: [[Double]] = [[700, 1220, 2600], [300, 2300, 3000], [500, 900, 2400], [400, 1900, 2550]]
                let v = vowels[Int(saturating: random() * 4) % 4]
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
            frame[i] = Int16(saturating: max(-32_767, min(32_767, sample * 900)))
            n += 1
        }
        return true
    }
}

enum DemoCommand {
    static func run(_ args: [String]) -> ExitStatus {
        do throws(CLIFailure) {
            // Flags only: a built-in call does not change with the device's config file.
            // Its output and events always have a value (the table's demo defaults).
            var config = try loadConfig(.demo, args).0
            guard let output = config.output, let events = config.events else { throw CLIFailure(.usage, "demo: --output and --events need a file") }
            // SIGHUP stops the demo cleanly like SIGINT/SIGTERM (see RunCommand).
            let signals = try wrap { () throws(SystemError) in try SignalSource([SIGINT, SIGTERM, SIGHUP, SIGUSR1]) }
            let loop = try wrap { () throws(SystemError) in try EventLoop() }
            let crypto = try wrap { () throws(DTLSError) in try CryptoRandom() }
            let answerer = try Answerer(loop: loop, listen: SocketAddress(ip: .loopbackV4, port: 0), mode: .echo, crypto: crypto)
            writeOut("demo: built-in answerer (echo) on http://\(answerer.address)/whip\n")
            do throws(HTTPError) { config.whip = try HTTPURL("http://\(answerer.address)/whip") } catch { throw CLIFailure(.software, error.description) }
            let identity = try wrap { () throws(DTLSError) in try Identity(random: crypto) }
            let route = Route.whip(config.whip!)
            let core = AgentCore(settings: AgentSettings(config: config, route: route, token: nil, stun: nil,
                                                            sendOnOpen: ["{\"type\":\"demo.hello\",\"text\":\"Hello from Linnet\"}"]),
                                 identity: identity, crypto: crypto, seed: try randomSeed(crypto))
            // The test voice stands in for the microphone; the speaker is the output file
            // on its own clock (one duplex pipeline, as run's).
            let audio = try AudioIO.open(config: config, loop: loop, generator: TestVoice())
            let media = MediaSettings(rate: audio.rate, frameMilliseconds: audio.frameClock.milliseconds)
            let runner = Runtime(loop: loop, core: core, parts: RuntimeParts(addresses: [.loopbackV4], http: HTTPClient(loop: loop), media: media),
                                 audio: audio)
            runner.events = try EventLog(path: events, start: loop.now)
            var status = ExitStatus.ok
            runner.onStopped = { s in
                status = s
                loop.stop()
            }
            loop.watch(fd: signals.fd) { _ in
                for s in signals.drain() { if s == SIGUSR1 { runner.toggle() } else { runner.stop() } }
            }
            // A demo that cannot connect within 15 s will not: stop with an error rather
            // than retrying forever as the agent would.
            loop.schedule(after: .seconds(15)) {
                if core.firstConnectedAt == nil { runner.stop(.unavailable, "demo: no connection within 15 s") }
            }
            try runner.start()
            try wrap { () throws(SystemError) in try loop.run() }
            answerer.closeAll()
            defer {
                runner.dispose()
                loop.close()
            }
            status = audio.finalStatus(status)
            let t = core.totals
            let both = t.sent > 0 && t.received > 0 && t.decoded > 0
            writeOut("demo: sent \(t.sent) packets, received \(t.received), decoded \(t.decoded) frames, concealed \(t.concealed); "
                     + "connect \(core.lastConnectMilliseconds.map { "\($0) ms" } ?? "—"); what came back is in \(output)\n")
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
