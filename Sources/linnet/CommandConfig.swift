// Every command's options come from the settings table (Sources/Settings): this reads
// them for one command, with the exit statuses CLI.md gives a bad option.
// (Agent: the exit statuses live there; Embedded Swift needs the module of each case.)
import Wire
import Platform
import Agent
import Settings
import Runtime

/// The config `command` runs with, and the config file it read (nil: none). For run,
/// check and audio: the config file (`--config`, else LINNET_CONFIG, else the default
/// when it exists), then LINNET_*, then flags; for demo and answer, flags only. A bad
/// flag is a usage error (64); a bad file or variable, or a broken rule across keys, a
/// configuration error (78). Sets the log level it names.
func loadConfig(_ command: Command, _ args: [String], requireRoute: Bool = false) throws(CLIFailure) -> (Config, String?) {
    var file: (path: String, text: String)? = nil
    let env = command.readsLayers ? processEnvironment() : [:]
    if command.readsLayers {
        let path: String, explicit: Bool
        do throws(ConfigError) { (path, explicit) = try Config.configPath(arguments: args, environment: env) } catch {
            throw CLIFailure(.usage, error.description)
        }
        if explicit || fileExists(path) {
            do throws(FileReadError) {
                file = (path, String(decoding: try readRegularFile(path, limit: 1 << 20).bytes, as: UTF8.self))
            } catch {
                throw CLIFailure(.config, "cannot read the config file \(error)")
            }
        }
    }
    do throws(ConfigError) {
        let config = try Config.load(for: command, file: file, environment: env, arguments: args, requireRoute: requireRoute)
        Log.level = config.logLevel
        return (config, file?.path)
    } catch {
        throw CLIFailure(error.isUsage ? .usage : .config, error.description)
    }
}
