import Testing
import Foundation
import Wire
import JSON
import Platform
import Signaling
import Audio
import Devices
@testable import Agent
@testable import Runtime

/// The runtime side of tools, with real programs, pipes, a real HTTP server and the
/// real loop: what the model gets back, and what is left running (nothing).
@Suite(.serialized) struct ToolRunnerTests {
    let dir: String
    let loop: EventLoop
    let runner: ToolRunner

    init() throws {
        dir = temporary("tools-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        loop = try EventLoop()
        runner = ToolRunner(loop: loop, directory: dir, http: HTTPClient(loop: loop), tokens: [(dir + "/token", "s3cret")])
        func program(_ name: String, _ text: String) throws {
            try text.write(toFile: dir + "/" + name, atomically: true, encoding: .utf8)
            chmod(dir + "/" + name, 0o755)
        }
        try program("echo_args", "#!/bin/sh\ncat\n")
        try program("fails", "#!/bin/sh\necho 'no such city'\nexit 3\n")
        try program("flood", "#!/bin/sh\nexec yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n")
        try program("hangs", "#!/bin/sh\necho $$ > \"$PWD/hangs.pid\"\nexec sleep 1000\n")
        try program("env", "#!/bin/sh\nenv | sort\n")
        try "#!/bin/sh\necho hi\n".write(toFile: dir + "/not_executable", atomically: true, encoding: .utf8)
        symlink("/bin/echo", dir + "/link")
    }

    func spec(_ json: String) throws -> ToolSpec {
        try ToolSpec.parse(try JSONValue.parse(#"{"tools": ["# + json + #"]}"#))[0]
    }

    func exec(_ program: String, maxOutput: Int = 1024, arguments: JSONValue = ["city": "Nice"], id: Int = 1) throws -> ToolResult {
        let s = try spec(#"{"name": "t", "description": "d", "exec": {"program": "\#(program)"}, "max-output-bytes": \#(maxOutput), "parameters": {"type": "object"}}"#)
        var result: ToolResult?
        runner.start(ToolRun(id: id, spec: s, arguments: arguments)) { result = $0 }
        var turns = 0
        while result == nil && turns < 100_000 {
            try loop.runOnce(maxWait: .seconds(5))
            turns += 1
        }
        return try #require(result)
    }

    @Test func argumentsInResultOut() throws {
        #expect(try exec("echo_args") == .output(#"{"city":"Nice"}"#, truncated: false))
    }

    @Test func aFailingProgramSaysItsStatusAndFirstWords() throws {
        #expect(try exec("fails") == .failed("the program exited with status 3: no such city\n"))
    }

    /// 10 MB and more: cut at the tool's cap, the program stopped at once (not read to
    /// the end), nothing left running.
    @Test func aFloodIsCutAndStopped() throws {
        guard case .output(let text, let truncated) = try exec("flood") else { Issue.record("no output"); return }
        #expect(truncated && text.utf8.count == 1024 && text.hasPrefix("xxxx"))
    }

    /// Only what a tool needs: no token, no variable of Linnet's environment.
    @Test func aCleanEnvironment() throws {
        setenv("LINNET_TEST_SECRET", "do-not-leak", 1)
        defer { unsetenv("LINNET_TEST_SECRET") }
        guard case .output(let text, _) = try exec("env") else { Issue.record("no output"); return }
        let names = text.split(separator: "\n").map { String($0.prefix { $0 != "=" }) }
        #expect(Set(names).isSubset(of: ["PATH", "LANG", "LINNET_TOOL", "PWD", "SHLVL", "_"]), "\(names)")
        #expect(text.contains("LINNET_TOOL=t\n") && !text.contains("do-not-leak"))
        #expect(text.contains("PWD=\(dir)\n"), "runs in the tools directory: \(text)")
    }

    @Test func onlyARegularExecutableFileInTheDirectoryRuns() throws {
        #expect(try exec("link") == .failed("the program \(dir)/link is not a regular file (a symlink or a directory is not run)"))
        #expect(try exec("not_executable") == .failed("the program \(dir)/not_executable is not executable by this user"))
        guard case .failed(let why) = try exec("missing") else { Issue.record("ran"); return }
        #expect(why.hasPrefix("the program \(dir)/missing is missing"))
    }

    /// A tool that never returns: cancelled (the core's timeout), its process group
    /// killed and reaped, no result delivered.
    @Test func aHungToolIsKilledOnCancel() throws {
        let s = try spec(#"{"name": "t", "description": "d", "exec": {"program": "hangs"}}"#)
        var result: ToolResult?
        runner.start(ToolRun(id: 7, spec: s, arguments: [:])) { result = $0 }
        let pidFile = dir + "/hangs.pid"
        var turns = 0
        while !FileManager.default.fileExists(atPath: pidFile) || ((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").isEmpty {
            try loop.runOnce(maxWait: .milliseconds(20))
            turns += 1
            if turns > 500 { Issue.record("the program never started"); return }
        }
        let pid = pid_t(try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))!
        #expect(kill(pid, 0) == 0, "running before the cancel")
        runner.cancel(7)
        // Reaped by the runner: the pid is gone (not a zombie), within a few loop turns.
        turns = 0
        while kill(pid, 0) == 0 && turns < 200 {
            try loop.runOnce(maxWait: .milliseconds(20))
            turns += 1
        }
        #expect(kill(pid, 0) == -1 && errno == ESRCH, "the tool's process is still there")
        #expect(result == nil, "a cancelled run reports nothing")
    }

    /// An http tool: the arguments POSTed as JSON, the token only to its own origin, the
    /// body the result; an error status is a failure the model reads.
    @Test func httpToolPostsWithItsToken() throws {
        var seen: [HTTPServerRequest] = []
        let server = try HTTPServer(loop: loop, listen: SocketAddress("127.0.0.1:0")!) { request, _, respond in
            seen.append(request)
            let failing = request.target.hasPrefix("/fail")
            respond(HTTPResponse(status: failing ? 500 : 200, body: Array((failing ? "boom" : #"{"state":"on"}"#).utf8)))
        }
        let port = server.address.port
        let s = try spec(#"{"name": "scene", "description": "d", "http": {"url": "http://127.0.0.1:\#(port)/api/scene", "token-file": "\#(dir)/token"}, "parameters": {"type": "object"}}"#)
        var result: ToolResult?
        runner.start(ToolRun(id: 2, spec: s, arguments: ["entity_id": "scene.away"])) { result = $0 }
        while result == nil { try loop.runOnce(maxWait: .seconds(5)) }
        #expect(result == .output(#"{"state":"on"}"#, truncated: false))
        #expect(seen.first?.method == "POST" && seen.first?.target == "/api/scene")
        #expect(seen.first?.headers["Authorization"] == "Bearer s3cret")
        #expect(seen.first.map { String(decoding: $0.body, as: UTF8.self) } == #"{"entity_id":"scene.away"}"#)
        let f = try spec(#"{"name": "scene", "description": "d", "http": {"url": "http://127.0.0.1:\#(port)/fail"}, "parameters": {"type": "object"}}"#)
        result = nil
        runner.start(ToolRun(id: 3, spec: f, arguments: [:])) { result = $0 }
        while result == nil { try loop.runOnce(maxWait: .seconds(5)) }
        #expect(result == .failed("http://127.0.0.1:\(port)/fail answered 500: boom"))
        #expect(seen.last?.headers["Authorization"] == nil, "no token file, no token")
    }

    /// `linnet tool NAME 'JSON'`: the same checks and runner by hand, with the exit
    /// statuses CLI.md gives.
    @Test func byHand() throws {
        let tools = dir + "/tools.json"
        try #"{"tools": [{"name": "echo", "description": "d", "exec": {"program": "echo_args"}, "timeout-ms": 300, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}, {"name": "stuck", "description": "d", "exec": {"program": "hangs"}, "timeout-ms": 300}]}"#
            .write(toFile: tools, atomically: true, encoding: .utf8)
        let ok = try Linnet.run(["tool", "echo", #"{"x": 3}"#, "--tools", tools, "--tools-dir", dir])
        #expect(ok.status == 0 && ok.out == "{\"x\":3}\n", "\(ok)")
        let bad = try Linnet.run(["tool", "echo", #"{"x": 3.5}"#, "--tools", tools, "--tools-dir", dir])
        #expect(bad.status == 65 && bad.err.contains("arguments.x: expected integer, got a number"), "\(bad)")
        let none = try Linnet.run(["tool", "nope", "--tools", tools, "--tools-dir", dir])
        #expect(none.status == 78 && none.err.contains("no tool named 'nope' in the tools file (it has: echo, stuck)"), "\(none)")
        let stuck = try Linnet.run(["tool", "stuck", "--tools", tools, "--tools-dir", dir])
        #expect(stuck.status == 69 && stuck.err.contains("'stuck' did not finish within 300 ms and was stopped"), "\(stuck)")
        let pid = pid_t(try String(contentsOfFile: dir + "/hangs.pid", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines))!
        #expect(kill(pid, 0) == -1, "the stuck tool's process outlived linnet tool")
    }

    /// A gpio tool cannot take the button's or an LED's line (the kernel would refuse
    /// it with EBUSY at the first call): `run` and `check` say so at start.
    @Test func aToolOnTheButtonsOrAnLEDsLineIsRefused() throws {
        let file = dir + "/gpio-tools.json"
        try #"{"tools": [{"name": "door", "description": "d", "gpio": {"line": "GPIO23", "pulse-ms": 500}}]}"#
            .write(toFile: file, atomically: true, encoding: .utf8)
        let tools = try LoadedTools.load(file, directory: dir)
        #expect(tools.lineConflict(ptt: .name("GPIO23"), leds: []) == "tool 'door': GPIO23 is the push-to-talk button's line")
        #expect(tools.lineConflict(ptt: .name("GPIO17"), leds: [.name("GPIO25"), .name("GPIO23")]) == "tool 'door': GPIO23 is a status LED's line")
        #expect(tools.lineConflict(ptt: .name("GPIO17"), leds: [.name("GPIO25")]) == nil)
        let conf = dir + "/conflict.conf"
        try "ptt = GPIO23\ntools = \(file)\ntools-dir = \(dir)\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let r = try Linnet.run(["run", "--config", conf, "--whip", "http://127.0.0.1:9/whip", "--input", "/nonexistent.wav"])
        #expect(r.status == 78 && r.err.contains("GPIO23 is the push-to-talk button's line"), "\(r.err)")
    }

    /// gpio tools through the GPIO seam the button and LEDs use (libgpiod's calls,
    /// recorded): a pulse drives the line high then low and lets it go; a set leaves its
    /// level; a busy or missing line is a failure the model reads; a cancelled pulse
    /// puts the line back low.
    @Test func gpioToolsDriveTheirLine() throws {
        let gpio = RecordingGPIO([GPIOChipEntry(name: "gpiochip0", label: "pinctrl-bcm2711", lines: (0..<28).map { "GPIO\($0)" })])
        gpio.busy = [23]
        let runner = ToolRunner(loop: loop, directory: dir, http: HTTPClient(loop: loop), gpio: gpio)
        func run(_ json: String, _ arguments: JSONValue = [:], id: Int) throws -> ToolResult {
            var result: ToolResult?
            runner.start(ToolRun(id: id, spec: try spec(json), arguments: arguments)) { result = $0 }
            while result == nil { try loop.runOnce(maxWait: .seconds(5)) }
            return result!
        }
        let door = #"{"name": "door", "description": "d", "gpio": {"line": "GPIO27", "pulse-ms": 50}}"#
        #expect(try run(door, id: 1) == .output("pulsed for 50 ms", truncated: false))
        #expect(gpio.requests.count == 1 && gpio.requests[0].chip == "gpiochip0" && gpio.requests[0].offset == 27)
        #expect(gpio.requests[0].consumer == "linnet-tool" && gpio.requests[0].request == .output(activeLow: false, initial: false))
        #expect(gpio.levels == [false, true, false] && gpio.released == 1, "\(gpio.levels)")

        // A set holds its line while Linnet runs (a released Pi pin goes back to an
        // input); the next set drives the same request.
        let light = #"{"name": "light", "description": "d", "gpio": {"line": "gpiochip0:22"}}"#
        #expect(try run(light, ["on": true], id: 2) == .output("on", truncated: false))
        #expect(gpio.requests.last?.offset == 22 && gpio.levels.suffix(2) == [false, true] && gpio.released == 1)
        #expect(try run(light, ["on": false], id: 6) == .output("off", truncated: false))
        #expect(gpio.requests.count == 2 && gpio.levels.last == false && gpio.released == 1)

        guard case .failed(let busy) = try run(#"{"name": "b", "description": "d", "gpio": {"line": "GPIO23", "pulse-ms": 50}}"#, id: 3) else {
            Issue.record("a busy line was driven"); return
        }
        #expect(busy.hasPrefix("the line GPIO23"), "\(busy)")
        guard case .failed(let missing) = try run(#"{"name": "m", "description": "d", "gpio": {"line": "GPIO99", "pulse-ms": 50}}"#, id: 4) else {
            Issue.record("a missing line was driven"); return
        }
        #expect(missing.hasPrefix("the line GPIO99"), "\(missing)")

        // A pulse cancelled while high (the model was told it timed out): back low, let go.
        var late: ToolResult?
        runner.start(ToolRun(id: 5, spec: try spec(#"{"name": "slow", "description": "d", "gpio": {"line": "GPIO5", "pulse-ms": 60000}}"#), arguments: [:])) { late = $0 }
        #expect(gpio.levels.last == true)
        runner.cancel(5)
        #expect(gpio.levels.last == false && gpio.released == 2 && late == nil)
        // Linnet stops: the held line is let go.
        runner.stopAll()
        #expect(gpio.released == 3)
    }
}

/// The GPIO seam (Devices' `GPIOLibrary`), recording what a tool asks of it.
final class RecordingGPIO: GPIOLibrary {
    let chipList: [GPIOChipEntry]
    var requests: [(chip: String, offset: Int, consumer: String, request: GPIORequest)] = []
    /// Every level written to any line, the request's initial level included.
    var levels: [Bool] = []
    var released = 0
    /// Offsets another holder has (the kernel says EBUSY).
    var busy: Set<Int> = []

    init(_ chips: [GPIOChipEntry]) { chipList = chips }
    func chips() -> [GPIOChipEntry] { chipList }
    func request(chip: String, offset: Int, consumer: String, _ request: GPIORequest) throws(SystemError) -> any GPIORequestedLine {
        requests.append((chip, offset, consumer, request))
        if busy.contains(offset) { throw SystemError("gpiod_line_request", code: EBUSY) }
        if case .output(_, let initial) = request { levels.append(initial) }
        return Line(self)
    }

    final class Line: GPIORequestedLine {
        unowned let owner: RecordingGPIO
        init(_ owner: RecordingGPIO) { self.owner = owner }
        var fd: Int32 { -1 }
        func value() throws(SystemError) -> Bool { owner.levels.last ?? false }
        func setValue(_ on: Bool) throws(SystemError) { owner.levels.append(on) }
        func readEdges() throws(SystemError) -> [GPIOEdge] { [] }
        func release() { owner.released += 1 }
    }
}
