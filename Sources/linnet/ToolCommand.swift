// `linnet tool NAME ['JSON'] [options]`: one of the tools file's tools, run by hand as the
// model would call it. The work is Runtime's (LoadedTools.runByHand).
import Wire
import Platform
import Agent
import Settings
import Runtime

enum ToolCommand {
    static func run(_ args: [String]) -> ExitStatus {
        let positional = args.prefix { !$0.startsWithBytes("-") }
        guard let name = positional.first, positional.count <= 2 else {
            Log.error("tool: usage: linnet tool NAME ['{\"arg\": …}'] [--tools FILE] [--tools-dir DIR]")
            return .usage
        }
        do throws(CLIFailure) {
            let config = try loadConfig(.run, Array(args.dropFirst(positional.count))).0
            guard let path = config.tools else { throw CLIFailure(.config, "no tools file: set tools = FILE (or --tools FILE)") }
            let tools = try LoadedTools.load(path, directory: config.toolsDir)
            let output = try tools.runByHand(name, arguments: positional.count > 1 ? positional[positional.startIndex + 1] : "",
                                             directory: config.toolsDir, caFile: config.caFile)
            writeOut(output + "\n")
            return .ok
        } catch {
            Log.error("tool: \(error.message)")
            return error.status
        }
    }
}
