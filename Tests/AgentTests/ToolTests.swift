import Testing
import Wire
import JSON
import Settings
@testable import Agent

private let t0 = Instant(nanoseconds: 1_000_000_000)

private func json(_ text: String) throws -> JSONValue { try JSONValue.parse(text) }

/// The tools file as the README shows it: a door strike, a program, Home Assistant.
let toolsFile = #"""
{"tools": [
  {"name": "open_door", "description": "Opens the front door for a visitor.", "gpio": {"line": "GPIO27", "pulse-ms": 800}, "max-per-minute": 2},
  {"name": "light", "description": "Switches the hall light.", "gpio": {"line": "gpiochip0:22"}},
  {"name": "weather", "description": "Today's weather for a city.", "exec": {"program": "weather"}, "timeout-ms": 2000,
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 40},
                  "days": {"type": "integer", "minimum": 1, "maximum": 3}}, "required": ["city"], "additionalProperties": false}},
  {"name": "scene", "description": "Sets a Home Assistant scene.", "http": {"url": "http://ha.local:8123/api/services/scene/turn_on", "token-file": "/etc/linnet/ha-token"},
   "parameters": {"type": "object", "properties": {"entity_id": {"enum": ["scene.evening", "scene.away"]}}, "required": ["entity_id"]}}
]}
"""#

@Suite struct ArgumentSchemaTests {
    static let weather = #"{"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 5}, "days": {"type": "integer", "minimum": 1, "maximum": 3}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}, "required": ["city"], "additionalProperties": false}"#

    @Test(arguments: [
        (#"{"city": "Köln"}"#, nil),
        (#"{"city": "Köln", "days": 3}"#, nil),
        // An integer is a number without a fraction, written 2.0 or 2 (Validation §6.1.1).
        (#"{"city": "Köln", "days": 2.0}"#, nil),
        (#"{"city": "Köln", "days": 2.5}"#, "arguments.days: expected integer, got a number"),
        (#"{"days": 2}"#, "arguments: 'city' is required"),
        (#"{"city": ""}"#, "arguments.city: shorter than 1 characters"),
        // Five characters, seven bytes: lengths count characters, not bytes.
        (#"{"city": "Zürich"}"#, "arguments.city: longer than 5 characters"),
        (#"{"city": "Nice", "days": 4}"#, "arguments.days: 4 is above the maximum 3"),
        (#"{"city": "Nice", "days": 0}"#, "arguments.days: 0 is below the minimum 1"),
        (#"{"city": "Nice", "cmd": "rm -rf /"}"#, "arguments: 'cmd' is not a parameter of this tool"),
        (#"{"city": 7}"#, "arguments.city: expected string, got a number"),
        (#"{"city": "Nice", "tags": ["a", 1]}"#, "arguments.tags[1]: expected string, got a number"),
        (#"{"city": "Nice", "tags": ["a", "b", "c"]}"#, "arguments.tags: more than 2 items"),
        (#"["city"]"#, "arguments: expected object, got an array"),
    ] as [(String, String?)])
    func arguments(_ text: String, _ expected: String?) throws {
        #expect(ArgumentSchema.violation(try json(text), try json(Self.weather)) == expected)
    }

    /// A schema is refused when it asks for something not enforced: it would look
    /// stricter than it is (a `pattern` the model could ignore).
    @Test func schemasThatWouldNotBeEnforcedAreRefused() throws {
        #expect(ArgumentSchema.problem(try json(Self.weather)) == nil)
        #expect(ArgumentSchema.problem(try json(#"{"type": "object", "properties": {"pin": {"type": "string", "pattern": "^[0-9]{4}$"}}}"#))
                == "parameters.properties.pin: 'pattern' is not a keyword Linnet enforces (it takes type, enum, const, properties, required, additionalProperties, minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength, items, minItems, maxItems)")
        #expect(ArgumentSchema.problem(try json(#"{"type": "obj"}"#)) == #"parameters.type: "obj" is not one of object, array, string, number, integer, boolean, null"#)
        #expect(ArgumentSchema.problem(try json(#"{"required": "city"}"#)) == "parameters.required: a list of names")
        #expect(ArgumentSchema.problem(try json(#"[1]"#)) == "parameters: a schema is a JSON object")
    }

    /// A hostile model's arguments nested 1,000 deep stop at the parser's depth bound
    /// (the tool call is refused), and a schema's own nesting is bounded at load.
    @Test func nestingIsBounded() throws {
        var deep = "1"
        for _ in 0..<1_000 { deep = "[" + deep + "]" }
        var calls = ToolCalls(try ToolSpec.parse(try json(toolsFile)))
        let verdict = calls.call(callID: "c1", name: "weather", arguments: #"{"city": "#, now: t0)
        guard case .refuse(let why) = verdict else { Issue.record("ran: \(verdict)"); return }
        #expect(why.hasPrefix(#"{"error":"the arguments are not JSON"#), "\(why)")
        let refused = calls.call(callID: "c2", name: "weather", arguments: #"{"city": "Nice", "x": "# + deep + "}", now: t0)
        guard case .refuse(let why2) = refused else { Issue.record("ran: \(refused)"); return }
        #expect(why2.contains("not JSON"), "\(why2)")
        var schema = #"{"type": "string"}"#
        for _ in 0..<20 { schema = #"{"type": "array", "items": "# + schema + "}" }
        #expect(ArgumentSchema.problem(try json(schema))?.hasSuffix("nested deeper than 16") == true)
    }
}

@Suite struct ToolSpecTests {
    @Test func theReadmeFileLoads() throws {
        let specs = try ToolSpec.parse(try json(toolsFile))
        #expect(specs.map { $0.name } == ["open_door", "light", "weather", "scene"])
        #expect(specs[0].action == .gpio(line: .name("GPIO27"), pulse: .milliseconds(800)))
        #expect(specs[0].maxPerMinute == 2 && specs[0].timeout == ToolSpec.defaultTimeout)
        #expect(specs[1].action == .gpio(line: .chip("gpiochip0", offset: 22), pulse: nil))
        // A set takes exactly a boolean `on`; a pulse takes nothing.
        #expect(ArgumentSchema.violation(try json(#"{"on": true}"#), specs[1].parameters) == nil)
        #expect(ArgumentSchema.violation(try json(#"{}"#), specs[1].parameters) == "arguments: 'on' is required")
        #expect(ArgumentSchema.violation(try json(#"{"on": 1}"#), specs[0].parameters) == "arguments: 'on' is not a parameter of this tool")
        #expect(specs[2].action == .exec(program: "weather") && specs[2].timeout == .seconds(2))
        if case .http(let url, let token) = specs[3].action {
            #expect(url.description == "http://ha.local:8123/api/services/scene/turn_on" && token == "/etc/linnet/ha-token")
        } else {
            Issue.record("not http: \(specs[3].action)")
        }
        // What session.update offers (GA: flat function declarations).
        #expect(specs[2].declaration["type"] == "function" && specs[2].declaration["name"] == "weather"
                && specs[2].declaration["parameters"]?["required"] == ["city"])
    }

    @Test(arguments: [
        (#"{"tools": [{"name": "a b", "description": "x", "exec": {"program": "p"}}]}"#, "tool 'a b': a name is 1 to 64 letters, digits, '_' or '-'"),
        (#"{"tools": [{"name": "a", "exec": {"program": "p"}}]}"#, "tool 'a': no \"description\": the model decides from it when to call the tool"),
        (#"{"tools": [{"name": "a", "description": "x"}]}"#, "tool 'a': exactly one of \"gpio\", \"exec\" or \"http\" says what the tool does"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "p"}, "http": {"url": "http://h/"}}]}"#, "tool 'a': exactly one of \"gpio\", \"exec\" or \"http\" says what the tool does"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "../bin/sh"}}]}"#, "tool 'a': exec.program: the file name of a program in the tools directory (no '/', not '.' or '..')"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": ".."}}]}"#, "tool 'a': exec.program: the file name of a program in the tools directory (no '/', not '.' or '..')"),
        (#"{"tools": [{"name": "a", "description": "x", "gpio": {"line": "GPIO5"}, "parameters": {"type": "object"}}]}"#, "tool 'a': a gpio tool's parameters are Linnet's own (none for a pulse, \"on\" for a set): leave \"parameters\" out"),
        (#"{"tools": [{"name": "a", "description": "x", "gpio": {"line": "GPIO5", "pulse-ms": 5}}]}"#, "tool 'a': gpio.pulse-ms: a whole number from 10 to 60000"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "p"}, "timeout-ms": 600000}]}"#, "tool 'a': timeout-ms: a whole number from 100 to 120000"),
        (#"{"tools": [{"name": "a", "description": "x", "http": {"url": "http://h/", "token-file": "token"}}]}"#, "tool 'a': http.token-file: an absolute path"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "p"}, "parameters": {"type": "string"}}]}"#, "tool 'a': parameters: the arguments are an object (\"type\": \"object\")"),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "p"}, "retries": 3}]}"#, "tool 'a': unknown key \"retries\""),
        (#"{"tools": [{"name": "a", "description": "x", "exec": {"program": "p"}}, {"name": "a", "description": "y", "exec": {"program": "q"}}]}"#, "tool 'a': the name is used twice"),
        (#"{"tool": []}"#, "the file is a JSON object with a \"tools\" list, an \"mcp\" list of servers, or both"),
    ])
    func badFilesSayWhichToolAndWhy(_ text: String, _ expected: String) throws {
        #expect(throws: ToolSpecError.self) { try ToolSpec.parse(try json(text)) }
        do {
            _ = try ToolSpec.parse(try json(text))
        } catch let error as ToolSpecError {
            #expect(error.description == expected)
        }
    }
}

@Suite struct ToolCallsTests {
    func calls() throws -> ToolCalls { ToolCalls(try ToolSpec.parse(try json(toolsFile))) }

    @Test func aGoodCallRunsAndItsResultIsTheOutput() throws {
        var c = try calls()
        guard case .run(let run) = c.call(callID: "call_1", name: "weather", arguments: #"{"city": "Nice"}"#, now: t0) else {
            Issue.record("not run"); return
        }
        #expect(run.spec.name == "weather" && run.arguments == ["city": "Nice"])
        #expect(c.deadline == t0 + .seconds(2) + ToolCalls.grace)
        let answer = c.finished(run.id, .output("sunny, 24 °C", truncated: false))
        #expect(answer?.callID == "call_1" && answer?.output == "sunny, 24 °C" && answer?.ok == true)
        // Once: a second report of the same run is nobody's.
        #expect(c.finished(run.id, .output("again", truncated: false)) == nil)
        #expect(c.deadline == nil)
    }

    @Test func refusalsAreErrorsTheModelCanRead() throws {
        var c = try calls()
        #expect(c.call(callID: "a", name: "launch_missiles", arguments: "{}", now: t0) == .refuse(#"{"error":"there is no tool named 'launch_missiles'"}"#))
        #expect(c.call(callID: "b", name: "weather", arguments: #"{"city": "Nice", "days": 9}"#, now: t0) == .refuse(#"{"error":"arguments.days: 9 is above the maximum 3"}"#))
        let big = #"{"city": ""# + String(repeating: "x", count: ToolCalls.maxArgumentBytes) + #""}"#
        #expect(c.call(callID: "c", name: "weather", arguments: big, now: t0) == .refuse(#"{"error":"the arguments are longer than 16384 bytes"}"#))
        #expect(c.running == 0)
    }

    /// A model that calls 1,000 times a second: the tool's rate holds (2 a minute for the
    /// door), the rest are refused at once, and a minute later it may be called again.
    @Test func aCallingLoopIsHeldToTheRate() throws {
        var c = try calls()
        var ran = 0, refused = 0
        for i in 0..<1_000 {
            switch c.call(callID: "c\(i)", name: "open_door", arguments: "{}", now: t0 + .milliseconds(Int64(i))) {
            case .run(let run):
                ran += 1
                _ = c.finished(run.id, .output("pulsed", truncated: false))
            case .refuse(let why):
                refused += 1
                if refused == 1 { #expect(why == #"{"error":"'open_door' was called 2 times in the last minute, its limit; try again later"}"#) }
            }
        }
        #expect(ran == 2 && refused == 998)
        if case .run = c.call(callID: "later", name: "open_door", arguments: "", now: t0 + .seconds(61)) {} else {
            Issue.record("still refused a minute later")
        }
        // At most maxInFlight at once, over all tools.
        var d = try calls()
        for i in 0..<ToolCalls.maxInFlight {
            if case .refuse = d.call(callID: "w\(i)", name: "weather", arguments: #"{"city": "Nice"}"#, now: t0) { Issue.record("refused \(i)") }
        }
        #expect(d.call(callID: "w9", name: "scene", arguments: #"{"entity_id": "scene.away"}"#, now: t0) == .refuse(#"{"error":"4 tools are running; wait for their results"}"#))
    }

    /// A tool that never returns: answered as timed out at its timeout plus the grace,
    /// and its late result is dropped.
    @Test func aToolThatNeverReturnsTimesOut() throws {
        var c = try calls()
        guard case .run(let run) = c.call(callID: "slow", name: "weather", arguments: #"{"city": "Nice"}"#, now: t0) else { return }
        #expect(c.handleTimeout(now: t0 + .seconds(2)).isEmpty)
        let late = c.handleTimeout(now: t0 + .seconds(3))
        #expect(late.count == 1 && late.first?.id == run.id && late.first?.callID == "slow")
        #expect(late.first?.output == #"{"error":"'weather' did not finish within 2000 ms and was stopped"}"#)
        #expect(c.finished(run.id, .output("too late", truncated: false)) == nil)
    }

    /// A result longer than the tool's cap is cut there, and the model is told.
    @Test func aLongResultIsCut() throws {
        var c = try calls()
        guard case .run(let run) = c.call(callID: "big", name: "weather", arguments: #"{"city": "Nice"}"#, now: t0) else { return }
        let answer = c.finished(run.id, .output(String(repeating: "é", count: 10_000), truncated: true))
        let cut = ToolSpec.defaultMaxOutputBytes
        #expect(answer?.output.hasSuffix("\n[the result was cut at \(cut) bytes]") == true)
        // Cut on a character boundary, never inside one.
        #expect(answer.map { $0.output.utf8.count } == cut + "\n[the result was cut at \(cut) bytes]".utf8.count)
    }
}

@Suite struct RealtimeToolTests {
    func drain(_ c: inout RealtimeConversation) -> [RealtimeOutput] {
        var out: [RealtimeOutput] = []
        while true {
            let o = c.pollOutput()
            if o == .none { return out }
            out.append(o)
        }
    }

    func sent(_ out: [RealtimeOutput]) throws -> [JSONValue] {
        try out.compactMap { if case .send(let t) = $0 { return try JSONValue.parse(t) } else { return nil } }
    }

    func conversation() throws -> RealtimeConversation {
        var s = RealtimeSettings(turnDetection: .vad)
        s.tools = try ToolSpec.parse(try json(toolsFile)).map { $0.declaration }
        var c = RealtimeConversation(settings: s)
        c.channelOpened(now: t0)
        return c
    }

    /// The GA sequence: the model's function_call item done (and again in response.done),
    /// one call reported; the output goes back as a function_call_output item, and the
    /// response that reads it is asked for once the model's response is over.
    @Test func aCallIsReportedOnceAndItsOutputAnswered() throws {
        var c = try conversation()
        let updates = try sent(drain(&c))
        let tools = updates.compactMap { $0["session"]?["tools"] }.first
        #expect(tools?.array?.count == 4 && tools?[0]?["name"] == "open_door" && tools?[0]?["type"] == "function")
        #expect(updates.compactMap { $0["session"]?["tool_choice"] }.first == "auto")
        c.received(text: #"{"type":"session.updated"}"#, now: t0)
        c.received(text: #"{"type":"response.created","response":{"id":"resp_1"}}"#, now: t0)
        let item = #"{"type":"function_call","id":"item_1","call_id":"call_9","name":"weather","arguments":"{\"city\":\"Nice\"}","status":"completed"}"#
        c.received(text: #"{"type":"response.output_item.done","response_id":"resp_1","output_index":0,"item":"# + item + "}", now: t0)
        c.received(text: #"{"type":"response.done","response":{"id":"resp_1","status":"completed","output":["# + item + "]}}", now: t0)
        let out = drain(&c)
        let calls = out.compactMap { o -> RealtimeEvent? in
            if case .event(let e) = o, case .toolCall = e { return e } else { return nil }
        }
        #expect(calls == [.toolCall(callID: "call_9", name: "weather", arguments: #"{"city":"Nice"}"#)])
        #expect(c.openToolCalls == ["call_9"])
        c.toolOutput(callID: "call_9", output: "sunny", now: t0 + .milliseconds(300))
        let answer = try sent(drain(&c))
        #expect(answer.map { $0["type"]?.string } == ["conversation.item.create", "response.create"])
        #expect(answer.first?["item"] == ["type": "function_call_output", "call_id": "call_9", "output": "sunny"])
        // An output for a call that is not open (an earlier session's) sends nothing.
        c.toolOutput(callID: "call_9", output: "again", now: t0 + .milliseconds(400))
        #expect(try sent(drain(&c)).isEmpty)
    }

    /// Two calls in one response: one response.create, after the last output, and held
    /// while the model's own response is still open.
    @Test func twoCallsOneResponseAfterBoth() throws {
        var c = try conversation()
        _ = drain(&c)
        c.received(text: #"{"type":"session.updated"}"#, now: t0)
        c.received(text: #"{"type":"response.created","response":{"id":"resp_1"}}"#, now: t0)
        for (i, name) in ["light", "open_door"].enumerated() {
            c.received(text: #"{"type":"response.output_item.done","item":{"type":"function_call","call_id":"c\#(i)","name":"\#(name)","arguments":"{}","status":"completed"}}"#, now: t0)
        }
        // A call cut off mid-arguments (the response was cancelled) is not a call.
        c.received(text: #"{"type":"response.output_item.done","item":{"type":"function_call","call_id":"c2","name":"light","arguments":"{\"o","status":"incomplete"}}"#, now: t0)
        _ = drain(&c)
        #expect(c.openToolCalls == ["c0", "c1"])
        c.toolOutput(callID: "c1", output: "pulsed", now: t0)
        #expect(try sent(drain(&c)).map { $0["type"]?.string } == ["conversation.item.create"])
        c.toolOutput(callID: "c0", output: "on", now: t0)
        // The model's response is still open: the create waits for its done.
        #expect(try sent(drain(&c)).map { $0["type"]?.string } == ["conversation.item.create"])
        c.received(text: #"{"type":"response.done","response":{"id":"resp_1","status":"completed","output":[]}}"#, now: t0)
        #expect(try sent(drain(&c)).map { $0["type"]?.string } == ["response.create"])
    }
}

/// Tool calls through the whole agent core, on the world's manual clock: the runtime's
/// part is the test's (it answers `.runTool` or not).
@Suite struct AgentToolTests {
    func world() throws -> (ProviderWorld, WorldProvider.Session) {
        var o = ProviderWorld.Options()
        o.route = .openai
        let specs = try ToolSpec.parse(try JSONValue.parse(toolsFile))
        o.configure = {
            $0.tools = specs
            $0.realtime.tools = specs.map { $0.declaration }
        }
        let w = try ProviderWorld(o)
        w.provider.onMessage = WorldProvider.realtimeScript
        w.startCore()
        try #require(w.run(within: .seconds(5)) { w.records("provider_session").contains { $0["state"]?.string == "updated" } } != nil)
        return (w, try #require(w.provider.sessionOfCore[1]))
    }

    func call(_ w: ProviderWorld, _ s: WorldProvider.Session, id: String, name: String, arguments: String) throws {
        let item: JSONValue = ["type": "function_call", "call_id": .string(id), "name": .string(name), "arguments": .string(arguments), "status": "completed"]
        let event: JSONValue = ["type": "response.output_item.done", "item": item]
        let peer = try #require(s.peer), channel = try #require(s.channel)
        try peer.send(channel: channel, text: event.serializedString(), now: w.now)
        w.provider.drain(s)
    }

    func outputs(_ s: WorldProvider.Session) -> [JSONValue] {
        s.messages.compactMap { try? JSONValue.parse(Array($0.utf8)) }
            .filter { $0["type"]?.string == "conversation.item.create" && $0["item"]?["type"]?.string == "function_call_output" }
    }

    /// A run the runtime never answers: at its timeout plus the grace the core tells the
    /// runtime to stop it and gives the model an error; the late result changes nothing.
    @Test func aToolThatNeverAnswersIsStoppedAndTheModelTold() throws {
        let (w, s) = try world()
        try call(w, s, id: "call_1", name: "weather", arguments: #"{"city": "Nice"}"#)
        try #require(w.run(within: .seconds(1)) { !w.toolRuns.isEmpty } != nil)
        let run = w.toolRuns[0]
        #expect(run.run.spec.name == "weather" && run.run.arguments == ["city": "Nice"])
        // Nothing yet at the tool's own timeout (2 s).
        w.run(for: .seconds(2) - .milliseconds(100))
        #expect(w.toolCancels.isEmpty && outputs(s).isEmpty)
        try #require(w.run(within: .seconds(2)) { !w.toolCancels.isEmpty } != nil)
        #expect(w.toolCancels.first?.id == run.run.id)
        #expect(w.toolCancels.first.map { $0.at - run.at } == .seconds(2) + ToolCalls.grace, "stopped at its timeout plus the grace")
        w.run(for: .milliseconds(200))
        #expect(outputs(s).first?["item"]?["output"] == #"{"error":"'weather' did not finish within 2000 ms and was stopped"}"#)
        w.core.toolFinished(run.run.id, .output("late", truncated: false), now: w.now)
        w.run(for: .milliseconds(200))
        #expect(outputs(s).count == 1 && w.core.toolCallsFailed == 1 && w.core.toolCallsRun == 0)
    }

    /// A good call answered by the runtime, and a bad one answered by the core at once:
    /// two outputs, each for its own call id, and nothing run for the bad one.
    @Test func goodAndBadCalls() throws {
        let (w, s) = try world()
        try call(w, s, id: "good", name: "open_door", arguments: "{}")
        try call(w, s, id: "bad", name: "open_door", arguments: #"{"force": true}"#)
        try #require(w.run(within: .seconds(1)) { outputs(s).count == 1 } != nil)
        #expect(w.toolRuns.count == 1)
        #expect(outputs(s).first?["item"]?["call_id"] == "bad")
        #expect(outputs(s).first?["item"]?["output"] == #"{"error":"arguments: 'force' is not a parameter of this tool"}"#)
        w.core.toolFinished(w.toolRuns[0].run.id, .output("pulsed for 800 ms", truncated: false), now: w.now)
        try #require(w.run(within: .seconds(1)) { outputs(s).count == 2 } != nil)
        #expect(outputs(s).last?["item"]?["call_id"] == "good" && outputs(s).last?["item"]?["output"] == "pulsed for 800 ms")
        #expect(w.records("tool_run").count == 1 && w.records("tool_result").count == 2)
    }
}
