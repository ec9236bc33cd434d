import Testing
import Foundation
import Audio
import Settings
@testable import linnet
@testable import Runtime

/// The settings table as the commands use it.
@Suite struct SettingsCLITests {
    /// `linnet help COMMAND` is written from the table: every key the table gives a
    /// command is in that command's help, as the binary prints it.
    @Test(arguments: Command.allCases)
    func helpListsEveryKeyOfTheCommand(command: Command) throws {
        let r = try Linnet.run(["help", command.description])
        #expect(r.status == 0)
        #expect(r.out.hasPrefix("usage: linnet \(command)"))
        for k in SettingsTable.keys(for: command) {
            #expect(r.out.contains("  --\(k.name) "), "--\(k.name) missing from 'linnet help \(command)'")
        }
        // `--help` after the command prints the same.
        #expect(try Linnet.run([command.description, "--help"]).out == r.out)
    }

    /// `audio` and `run` build their capture hooks with the same function from the same
    /// Config section: the same keys give the same chain, hook by hook and setting by
    /// setting, and the same Opus settings. (`aec = auto` is the one key whose default
    /// differs by command: `run` with a speaker turns it on, `audio`'s loopback does
    /// not, so the cases give it.)
    @Test(arguments: [
        ["--no-aec"],
        ["--aec", "--agc", "--agc-target-dbfs", "-12", "--gain-db", "6", "--noise-gate", "--noise-gate-dbfs", "-45", "--high-pass-hz", "120"],
        ["--no-aec", "--no-limiter", "--high-pass-hz=0", "--rate", "16000", "--capture-channel", "1", "--bitrate", "24000", "--no-fec", "--dtx", "--complexity", "9"],
        ["--aec", "--limiter-dbfs", "-3", "--gain-db", "-2.5", "--agc"],
    ])
    func audioAndRunBuildTheSameChain(args: [String]) throws {
        let run = try Config.load(for: .run, file: nil, environment: [:], arguments: args + ["--whip", "http://127.0.0.1:9/whip"])
        let audio = try Config.load(for: .audio, file: nil, environment: [:], arguments: args, requireRoute: false)
        let a = try AudioSetup(config: run), b = try AudioSetup(config: audio)
        #expect(describe(a) == describe(b))
        #expect(describe(a).contains("mute"), "\(describe(a))")
        // The same Config section gives the same chain through the file, too.
        var file = ""
        var i = 0
        while i < args.count {
            let word = String(args[i].dropFirst(2))
            if let eq = word.firstIndex(of: "=") {
                file += "\(word[..<eq]) = \(word[word.index(after: eq)...])\n"
                i += 1
            } else if i + 1 < args.count, !args[i + 1].hasPrefix("--") {
                file += "\(word) = \(args[i + 1])\n"
                i += 2
            } else {
                file += word.hasPrefix("no-") ? "\(word.dropFirst(3)) = false\n" : "\(word) = true\n"
                i += 1
            }
        }
        let fromFile = try Config.load(for: .audio, file: ("linnet.conf", file), environment: [:], arguments: [], requireRoute: false)
        #expect(describe(try AudioSetup(config: fromFile)) == describe(a), "\(file)")
    }

    func describe(_ s: AudioSetup) -> [String] {
        var out = ["rate \(s.rate.hertz)", "channel \(s.channel.map(String.init) ?? "mix")",
                   "opus \(s.bitrate) \(s.complexity) fec \(s.fec) dtx \(s.dtx)"]
        for hook in s.chain.hooks {
            switch hook {
            case let h as HighPassFilter: out.append("high-pass \(h.cutoffHz)")
            case let h as GainHook: out.append("gain \(h.gain)")
            case let h as AutomaticGainControl: out.append("agc \(h.targetDBFS)")
            case let h as NoiseGate: out.append("gate \(h.thresholdDBFS)")
            case let h as Limiter: out.append("limiter \(h.ceilingDBFS)")
            case is LevelMeter: out.append("meter")
            case is MuteGate: out.append("mute")
            default: out.append("\(type(of: hook))")
            }
        }
        return out
    }
}
