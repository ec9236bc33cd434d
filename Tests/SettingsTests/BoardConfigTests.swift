import Foundation
import Testing
import Wire
@testable import Settings

/// The board's keys (button details and status LEDs), and `wake-model` (its conflict
/// with `wake-word` keeps it out of the every-key file).
let boardKeys: Set<String> = ["ptt-required", "ptt-debounce-ms", "ptt-long-press-ms", "leds", "led-spi", "led-count", "wake-model"]

@Suite struct BoardConfigTests {
    @Test("board keys: defaults")
    func defaults() throws {
        let c = try load(nil, requireRoute: false)
        #expect(!c.pttRequired && c.pttDebounceMS == 20 && c.pttLongPressMS == 3_000)
        #expect(c.leds.isEmpty && c.ledSPI == nil && c.ledCount == 3)
        #expect(boardKeys.isSubset(of: Set(Config.keys)))
    }

    @Test("board keys: every one from a file, then reset by the environment")
    func everyKey() throws {
        let text = route + """
        ptt = GPIO17
        ptt-required = yes
        ptt-debounce-ms = 35
        ptt-long-press-ms = 0
        leds = GPIO5, gpiochip0:6
        led-spi = /dev/spidev0.0
        led-count = 12
        wake-model = /home/pi/hey_linnet.tflite
        """
        let c = try load(text)
        #expect(c.pttRequired && c.pttDebounceMS == 35 && c.pttLongPressMS == 0)
        #expect(c.leds == [.name("GPIO5"), .chip("gpiochip0", offset: 6)])
        #expect(c.ledSPI == "/dev/spidev0.0" && c.ledCount == 12)
        #expect(Set(c.sources.keys.map(\.text)).isSuperset(of: boardKeys))
        #expect(c.sources["led-count"] == .file(path: "linnet.conf", line: 8))

        var env: [TextKey: String] = [:]
        for k in boardKeys where k != "ptt-required" { env[TextKey(Config.environmentName(k))] = "" }
        let d = try load(text, env: env, args: ["--no-ptt-required"])
        #expect(!d.pttRequired && d.pttDebounceMS == 20 && d.pttLongPressMS == 3_000)
        #expect(d.leds.isEmpty && d.ledSPI == nil && d.ledCount == 3 && d.wakeModel == nil)
        #expect(c.wakeModel == "/home/pi/hey_linnet.tflite")
        #expect(d.sources["ptt-required"] == .flag("--no-ptt-required"))
        #expect(try load(route, args: ["--ptt", "GPIO17", "--ptt-required"]).pttRequired)
        #expect(try load(route, env: ["LINNET_LED_COUNT": "255"]).ledCount == 255)
    }

    @Test("board keys: refused values", arguments: [
        ("ptt-debounce-ms = 0", "linnet.conf:2: ptt-debounce-ms: '0' is not a whole number of milliseconds from 1 to 500"),
        ("ptt-debounce-ms = 501", "linnet.conf:2: ptt-debounce-ms: '501' is not a whole number of milliseconds from 1 to 500"),
        ("ptt-long-press-ms = 499", "linnet.conf:2: ptt-long-press-ms: '499' is not 0 (off) or a whole number of milliseconds from 500 to 60000"),
        ("ptt-long-press-ms = 60001", "linnet.conf:2: ptt-long-press-ms: '60001' is not 0 (off) or a whole number of milliseconds from 500 to 60000"),
        ("led-count = 0", "linnet.conf:2: led-count: '0' is not a whole number of LEDs from 1 to 255"),
        ("led-count = 256", "linnet.conf:2: led-count: '256' is not a whole number of LEDs from 1 to 255"),
        ("leds = GPIO5,,GPIO6", "linnet.conf:2: leds: 'GPIO5,,GPIO6' is not a comma list of GPIO lines (GPIO5,GPIO6 or gpiochip0:5)"),
        ("leds = gpiochip0:x", "linnet.conf:2: leds: 'gpiochip0:x' is not a comma list of GPIO lines (GPIO5,GPIO6 or gpiochip0:5)"),
        ("ptt-required = maybe", "linnet.conf:2: ptt-required: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)"),
        ("ptt-requierd = yes", "linnet.conf:2: unknown key 'ptt-requierd' (did you mean 'ptt-required'?)"),
    ])
    func refused(line: String, expected: String) {
        #expect(message { () throws(ConfigError) in try load(route + line) } == expected)
    }

    @Test("board keys: rules across keys")
    func conflicts() {
        #expect(message { () throws(ConfigError) in try load(route + "ptt-required = true") }
                == "linnet.conf:2: ptt-required needs a button (ptt = GPIO17 or CHIP:OFFSET)")
        #expect(message { () throws(ConfigError) in try load(route + "ptt = GPIO17\nleds = GPIO5,GPIO17") }
                == "linnet.conf:3: the LED line GPIO17 is also the push-to-talk button")
        #expect(message { () throws(ConfigError) in try load(route + "leds = GPIO5,gpiochip0:5,GPIO5") }
                == "linnet.conf:2: the LED line GPIO5 is listed twice")
        // The wake word: one model, push-to-talk turns, the voice flag on.
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = okay_nabu\nwake-model = /m.tflite") }
                == "linnet.conf:3: wake-word and wake-model both name a model: give one (wake-model = PATH.tflite for your own)")
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = alexa\nturn-detection = vad") }
                == "linnet.conf:3: a wake word makes push-to-talk turns: turn-detection vad (an always-open microphone) contradicts it")
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = alexa\nptt = GPIO17\nptt-mode = open") }
                == "linnet.conf:4: a wake word makes push-to-talk turns: ptt-mode open (the button does not gate the microphone) contradicts it; use hold or toggle")
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = alexa\nvoice-flag = off") }
                == "linnet.conf:3: a wake word's turn ends on the voice flag: voice-flag off contradicts it")
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = hey_siri") }
                == "linnet.conf:2: wake-word: 'hey_siri' is not one of okay_nabu, hey_jarvis, alexa, hey_mycroft")
        #expect(message { () throws(ConfigError) in try load(route + "wake-word = alexa\nwake-sensitivity = 0.6") }
                == "linnet.conf:3: wake-sensitivity: '0.6' is not a number from -0.5 to 0.5")
        // With a button, or without one: push-to-talk turns, the voice flag on.
        let both = try? load(route + "wake-word = hey_jarvis\nptt = GPIO17\nwake-sensitivity = -0.05")
        #expect(both?.effectiveTurnDetection == .ptt && both?.wakeSensitivity == -0.05
                && both?.wakeModelPath == "/usr/share/linnet/wake/hey_jarvis.tflite")
        let alone = try? load(route + "wake-model = /home/pi/hey_linnet.tflite")
        #expect(alone?.effectiveTurnDetection == .ptt && alone?.wakeModelPath == "/home/pi/hey_linnet.tflite")
        // Harmless leftovers are allowed: led-count without led-spi.
        #expect(message { () throws(ConfigError) in try load(route + "led-count = 5") } == nil)
    }

    /// Every board profile's linnet.conf uses real keys and valid values, alone (the
    /// route is left for the person to fill in) and with a route added on top.
    @Test("board/*/linnet.conf parse")
    func boardProfiles() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let board = root.appendingPathComponent("board")
        let profiles = try FileManager.default.contentsOfDirectory(atPath: board.path)
            .filter { FileManager.default.fileExists(atPath: board.appendingPathComponent($0).appendingPathComponent("linnet.conf").path) }
            .sorted()
        #expect(profiles == ["aiy-voice-hat", "i2s-mems", "respeaker-2mic", "usb"])
        for name in profiles {
            let path = board.appendingPathComponent(name).appendingPathComponent("linnet.conf").path
            let text = try String(contentsOfFile: path, encoding: .utf8)
            let label = "board/\(name)/linnet.conf"
            let alone = message { () throws(ConfigError) in try Config.load(file: (label, text), environment: [:], arguments: [], requireRoute: false) }
            #expect(alone == nil, "\(label)")
            let routed = message { () throws(ConfigError) in
                try Config.load(file: (label, text), environment: [:], arguments: ["--whip", "https://whip.example.net/whip"])
            }
            #expect(routed == nil, "\(label) with a route")
            // The profile's uncommented keys are what it documents: capture and playback at least.
            let c = try Config.load(file: (label, text), environment: [:], arguments: [], requireRoute: false)
            #expect(c.sources["capture"] != nil && c.sources["playback"] != nil, "\(label)")
        }
    }
}
