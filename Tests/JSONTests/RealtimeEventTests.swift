// OpenAI Realtime data-channel events (oai-events), as the service documents them:
// parse what the server sends and read the fields the agent needs; build what we send.
import Testing
import JSON

@Test func transcriptionCompleted() throws {
    let text = #"""
    {"event_id":"event_2122","type":"conversation.item.input_audio_transcription.completed","item_id":"item_003","content_index":0,"transcript":"Grüß Gott! Wie spät ist es? \ud83d\udd70\ufe0f \"Bitte\" schnell.\n","usage":{"type":"duration","seconds":3.2}}
    """#
    let e = try JSONValue.parse(text)
    #expect(e["type"]?.string == "conversation.item.input_audio_transcription.completed")
    #expect(e["item_id"]?.string == "item_003")
    #expect(e["content_index"]?.int == 0)
    #expect(e["transcript"]?.string == "Grüß Gott! Wie spät ist es? 🕰️ \"Bitte\" schnell.\n")
    #expect(e["usage"]?["seconds"]?.double == 3.2)
    #expect(e["usage"]?["seconds"]?.int == nil)
}

@Test func errorEvent() throws {
    let text = #"""
    {
      "event_id": "event_890",
      "type": "error",
      "error": {
        "type": "invalid_request_error",
        "code": "invalid_value",
        "message": "Invalid value: 'session.audio.input.turn_detection.silence_duration_ms'. Expected an integer.",
        "param": "session.audio.input.turn_detection.silence_duration_ms",
        "event_id": "event_567"
      }
    }
    """#
    let e = try JSONValue.parse(text)
    #expect(e["type"]?.string == "error")
    let err = try #require(e["error"])
    #expect(err["code"]?.string == "invalid_value")
    #expect(err["event_id"]?.string == "event_567")
    #expect(err["message"]?.string?.hasPrefix("Invalid value") == true)
    // A session_expired error has a null param.
    let expired = try JSONValue.parse(#"{"type":"error","event_id":"e1","error":{"type":"invalid_request_error","code":"session_expired","message":"Your session hit the maximum duration of 60 minutes.","param":null,"event_id":null}}"#)
    #expect(expired["error"]?["code"]?.string == "session_expired")
    #expect(expired["error"]?["param"]?.isNull == true)
}

@Test func sessionUpdateBuiltAndReadBack() throws {
    // Push-to-talk configuration (PROTOCOLS.md): no server turn detection.
    let update: JSONValue = [
        "type": "session.update",
        "session": [
            "type": "realtime",
            "instructions": "Du bist ein hilfreicher Assistent.\nAntworte kurz.",
            "audio": [
                "input": ["turn_detection": nil, "transcription": ["model": "whisper-1"]],
                "output": ["voice": "marin"],
            ],
            "max_output_tokens": 4096,
            "temperature": 0.8,
        ],
    ]
    let wire = update.serializedString()
    #expect(wire == #"{"type":"session.update","session":{"type":"realtime","instructions":"Du bist ein hilfreicher Assistent.\nAntworte kurz.","audio":{"input":{"turn_detection":null,"transcription":{"model":"whisper-1"}},"output":{"voice":"marin"}},"max_output_tokens":4096,"temperature":0.8}}"#)
    let back = try JSONValue.parse(wire)
    #expect(back == update)
    #expect(back["session"]?["audio"]?["input"]?["turn_detection"]?.isNull == true)
    #expect(back["session"]?["max_output_tokens"]?.int == 4096)
}

@Test func sessionCreatedAndResponseDone() throws {
    let created = #"""
    {"type":"session.created","event_id":"event_C9G5RJeJ2gF77mV7f2B1j","session":{"type":"realtime","object":"realtime.session","id":"sess_C9G5QPteg4UIbotdKLoYQ","model":"gpt-realtime-2025-08-28","output_modalities":["audio"],"instructions":"Your knowledge cutoff is 2023-10.","tools":[],"tool_choice":"auto","max_output_tokens":"inf","tracing":null,"prompt":null,"expires_at":1756324625,"audio":{"input":{"format":{"type":"audio/pcm","rate":24000},"transcription":null,"noise_reduction":null,"turn_detection":{"type":"server_vad","threshold":0.5,"prefix_padding_ms":300,"silence_duration_ms":200,"idle_timeout_ms":null,"create_response":true,"interrupt_response":true}},"output":{"format":{"type":"audio/pcm","rate":24000},"voice":"marin","speed":1}},"include":null}}
    """#
    let c = try JSONValue.parse(created)
    #expect(c["type"]?.string == "session.created")
    #expect(c["session"]?["expires_at"]?.int64 == 1_756_324_625)
    #expect(c["session"]?["output_modalities"]?[0]?.string == "audio")
    #expect(c["session"]?["audio"]?["input"]?["turn_detection"]?["silence_duration_ms"]?.int == 200)
    #expect(c["session"]?["audio"]?["input"]?["turn_detection"]?["threshold"]?.double == 0.5)
    #expect(c["session"]?["max_output_tokens"]?.string == "inf")
    let done = #"""
    {"type":"response.done","event_id":"event_CCXHxcMy86rrKhBLDdqCh","response":{"object":"realtime.response","id":"resp_CCXHw0UJld10EzIUXQCNh","status":"completed","status_details":null,"output":[{"id":"item_CCXHwGjjDUfOXbiySlK7i","type":"message","status":"completed","role":"assistant","content":[{"type":"output_audio","transcript":"Loud and clear! I can hear you perfectly."}]}],"usage":{"total_tokens":253,"input_tokens":132,"output_tokens":121,"input_token_details":{"text_tokens":119,"audio_tokens":13,"cached_tokens":64}}}}
    """#
    let d = try JSONValue.parse(done)
    #expect(d["response"]?["status"]?.string == "completed")
    #expect(d["response"]?["output"]?[0]?["role"]?.string == "assistant")
    #expect(d["response"]?["output"]?[0]?["content"]?[0]?["transcript"]?.string == "Loud and clear! I can hear you perfectly.")
    #expect(d["response"]?["usage"]?["input_token_details"]?["cached_tokens"]?.int == 64)
}
