// `linnet devices`: what a person needs to pick --capture, --playback and --ptt.
import Wire
import Devices
import Audio
import Platform
import Agent
import Runtime

enum DevicesCommand {
    static func run(_ args: [String]) -> ExitStatus {
        guard args.isEmpty else {
            Log.error("'devices' takes no arguments")
            return .usage
        }
        let pcms = ALSADevices.list()
        var text = "Sound cards (\(SoundCards.path)):\n"
        let cards = SoundCards.list()
        if cards.isEmpty {
            text += "  none (a HAT needs its overlay in /boot/firmware/config.txt and a reboot; a USB card, to be plugged in)\n"
        }
        for card in cards { text += "  \(card.index) [\(card.id)] \(card.name)\n" }
        text += "\nCapture devices (--capture):\n"
        text += describe(pcms.filter { $0.capture }, stream: .capture)
        text += "\nPlayback devices (--playback):\n"
        text += describe(pcms.filter { $0.playback }, stream: .playback)
        text += "\nGPIO chips (--ptt LINE or CHIP:OFFSET):\n"
        let chips = GPIOChips.list()
        if chips.isEmpty {
            text += "  none found (no /dev/gpiochip*, or no permission: is this user in the 'gpio' group?)\n"
        }
        for chip in chips {
            let named = chip.lines.enumerated().filter { !$0.element.isEmpty }
            text += "  \(chip.name) [\(chip.label)] \(chip.lines.count) lines"
            if !named.isEmpty {
                text += ": " + named.prefix(40).map { "\($0.element)=\($0.offset)" }.joined(separator: " ")
                if named.count > 40 { text += " …" }
            }
            text += "\n"
        }
        writeOut(text)
        return .ok
    }

    static func describe(_ list: [PCMDeviceInfo], stream: PCMStream) -> String {
        if list.isEmpty { return "  none (no sound card, and no ALSA configuration defines one)\n" }
        var text = ""
        for device in list {
            text += "  \(device.name)"
            if !device.description.isEmpty { text += "  — \(device.description)" }
            text += "\n"
            // Probing opens the device; only hardware-backed names are worth it (plugins
            // such as `default` or `dmix` report their own wide ranges). Their prefixes
            // are compared as bytes: ALSA PCM names are C strings.
            guard device.name.startsWithBytes("hw:") || device.name.startsWithBytes("plughw:") || device.name.startsWithBytes("sysdefault:"),
                  let caps = ALSADevices.capabilities(device.name, stream: stream) else { continue }
            let formats = caps.formats.map { $0.description }.joined(separator: " ")
            let rates = caps.rates.map { String($0) }.joined(separator: " ")
            let channels = caps.minChannels == caps.maxChannels ? "\(caps.minChannels)" : "\(caps.minChannels)–\(caps.maxChannels)"
            text += "      formats \(formats); rates \(rates) Hz; channels \(channels)\n"
        }
        return text
    }
}
