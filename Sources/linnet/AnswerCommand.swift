// `linnet answer --listen HOST:PORT [--advertise IP] [--mode echo|tone]`: the built-in answerer. It
// serves the WHIP route (RFC 9725) and the app-backend route of ARCHITECTURE.md
// "Sessions", so `linnet run` and `linnet demo` have a provider on loopback, and a
// board can act as an intercom peer.
import CSystem
import Wire
import Settings
import Platform
import DTLS
import Agent
import Runtime

enum AnswerCommand {
    static func run(_ args: [String]) -> ExitStatus {
        // Flags only (`AnswerMode` and the keys are in the settings table).
        let config: Config
        do throws(CLIFailure) { config = try loadConfig(.answer, args).0 } catch {
            Log.error("answer: \(error.message)")
            return error.status
        }
        guard let listen = config.listen else {
            Log.error("answer: --listen HOST:PORT is required (e.g. 127.0.0.1:8080 or [::1]:8080)")
            return .usage
        }
        let mode = config.answerMode, seconds = config.seconds
        do throws(CLIFailure) {
            let signals: SignalSource
            let loop: EventLoop
            do throws(SystemError) {
                // SIGHUP stops like SIGTERM: every session closed (BYE) before exit.
                signals = try SignalSource([SIGINT, SIGTERM, SIGHUP])
                loop = try EventLoop()
            } catch {
                throw CLIFailure(.software, error.description)
            }
            defer { loop.close() }
            let crypto: CryptoRandom
            do throws(DTLSError) { crypto = try CryptoRandom() } catch { throw CLIFailure(.software, error.description) }
            let answerer = try Answerer(loop: loop, listen: listen, advertise: config.advertise, mode: mode, crypto: crypto)
            loop.watch(fd: signals.fd) { _ in
                if !signals.drain().isEmpty { loop.stop() }
            }
            if seconds > 0 { loop.schedule(after: .seconds(Int64(seconds))) { loop.stop() } }
            Log.info("answer: listening on http://\(answerer.address) (WHIP: POST /whip; backend: POST /voice/CHAT), mode \(mode.rawValue)\(config.advertise.isEmpty ? "" : ", advertising " + config.advertise.map { $0.description }.joined(separator: ", "))")
            writeOut("READY \(answerer.address.port)\n")
            do throws(SystemError) { try loop.run() } catch { throw CLIFailure(.software, error.description) }
            answerer.closeAll()
            // Let the closes (BYE, close_notify) leave before exiting: best effort, the
            // process ends either way.
            try? loop.runOnce(maxWait: .zero)
            return .ok
        } catch {
            Log.error("answer: \(error.message)")
            return error.status
        }
    }
}
