/// Status LEDs: a pure pattern generator, the APA102 byte encoding, and two outputs
/// (plain GPIO LEDs, APA102 LEDs on `/dev/spidev*` as on the ReSpeaker 2-Mic HAT).
///
/// Design decisions:
/// - The pattern is a pure function of (state, level, time since the state began,
///   LED count): tests check it frame by frame and the LEDs never drift from the state.
/// - Time is counted from the moment the state was entered, so a pattern always starts
///   at its first step (a "connecting" dot starts on the first LED).
/// - One pattern serves both kinds of LED: a plain GPIO LED is on when the pattern's
///   brightness is at least half (16 of 31). The patterns are chosen so that this
///   projection still tells the states apart on a single LED: idle and muted off,
///   listening steady on, connecting 2.5 Hz blink, speaking 1 Hz blink, error 4 Hz blink.
/// - `StatusLights` writes only when the frame changes and says when it will next
///   change (`nextDeadline`), so the loop sleeps between steps instead of ticking.
import CSystem
import CALSA
import CGPIOD
import Wire
import Platform
import Audio

/// What the LEDs show.
public enum LightState: String, Sendable, Equatable, CaseIterable {
    /// No session (waiting, or between sessions).
    case idle
    /// Signaling, ICE or DTLS in progress (also reconnecting).
    case connecting
    /// The microphone is open to the provider; brightness follows the level meter.
    case listening
    /// The assistant is speaking.
    case speaking
    /// Connected, microphone gated (push-to-talk released, or muted).
    case muted
    /// A failure the agent is retrying or cannot recover from.
    case error
    /// A tool the model called is running (a door being opened, a light set).
    case working
    /// No session by decision, not failure: a daily cap holds them until the next day.
    case paused
}

/// One LED: colour and APA102 global brightness (0…31).
public struct LEDColor: Sendable, Equatable, CustomStringConvertible {
    public var red: UInt8
    public var green: UInt8
    public var blue: UInt8
    /// 5 bits (0…31), the APA102's global brightness.
    public var brightness: UInt8

    public init(red: UInt8, green: UInt8, blue: UInt8, brightness: UInt8) {
        self.red = red
        self.green = green
        self.blue = blue
        self.brightness = min(brightness, 31)
    }

    public static let off = LEDColor(red: 0, green: 0, blue: 0, brightness: 0)

    /// Whether a plain on/off LED shows this as lit.
    public var isOn: Bool { brightness >= 16 && (red | green | blue) != 0 }

    public var description: String { "(\(red),\(green),\(blue))@\(brightness)" }
}

public enum StatusPattern {
    static let green = (r: UInt8(0), g: UInt8(255), b: UInt8(0))
    static let blue = (r: UInt8(0), g: UInt8(0), b: UInt8(255))
    static let cyan = (r: UInt8(0), g: UInt8(180), b: UInt8(255))
    static let amber = (r: UInt8(255), g: UInt8(140), b: UInt8(0))
    static let red = (r: UInt8(255), g: UInt8(0), b: UInt8(0))

    /// Connecting: one step per 200 ms; error: 125 ms on, 125 ms off; speaking: a 1 s
    /// triangle of brightness in 32 steps.
    public static let connectingStep = Duration.milliseconds(200)
    public static let errorHalfPeriod = Duration.milliseconds(125)
    public static let speakingPeriod = Duration.milliseconds(1000)
    /// A tool runs: alternate LEDs swap (one LED blinks) at this half period, slower
    /// than the error's so the two read apart.
    public static let workingHalfPeriod = Duration.milliseconds(250)
    /// Paused: a short amber flash every 2 s (on a plain LED too), slower than every
    /// other blink, so "not now, by choice" reads apart from "broken".
    public static let pausedPeriod = Duration.milliseconds(2000)
    public static let pausedFlash = Duration.milliseconds(250)

    /// The frame of `count` LEDs for `state` at `elapsed` since the state began.
    /// - Parameter level: the microphone level 0…1 (values outside are clamped).
    public static func frame(_ state: LightState, level: Double, elapsed: Duration, count: Int) -> [LEDColor] {
        var out = [LEDColor](repeating: .off, count: max(count, 0))
        guard count > 0 else { return out }
        let t = max(elapsed.nanoseconds, 0)
        func color(_ c: (r: UInt8, g: UInt8, b: UInt8), _ brightness: UInt8) -> LEDColor {
            LEDColor(red: c.r, green: c.g, blue: c.b, brightness: brightness)
        }
        switch state {
        case .idle:
            // A dim mark that the agent runs; off on a plain LED.
            out[count / 2] = color(green, 2)
        case .connecting:
            // A dot running over the LEDs with a one-step gap (a blink on one LED).
            let step = Int(t / connectingStep.nanoseconds) % (count + 1)
            if step < count { out[step] = color(blue, 31) }
        case .listening:
            // 16…31: always "on" for a plain LED, brighter with the voice.
            let l = level.isNaN ? 0 : min(max(level, 0), 1)
            let b = UInt8(16 + Int((l * 15).rounded()))
            for i in 0..<count { out[i] = color(green, b) }
        case .speaking:
            let p = speakingPeriod.nanoseconds
            let phase = Int((t % p) * 32 / p)  // 0…31
            let b = UInt8(phase < 16 ? 1 + phase * 2 : 1 + (31 - phase) * 2)  // 1…31…1
            for i in 0..<count { out[i] = color(cyan, b) }
        case .muted:
            for i in 0..<count { out[i] = color(red, 4) }
        case .error:
            let on = (t / errorHalfPeriod.nanoseconds) % 2 == 0
            for i in 0..<count { out[i] = on ? color(red, 31) : .off }
        case .working:
            let phase = Int((t / workingHalfPeriod.nanoseconds) % 2)
            for i in 0..<count where i % 2 == phase { out[i] = color(amber, 31) }
        case .paused:
            let on = t % pausedPeriod.nanoseconds < pausedFlash.nanoseconds
            for i in 0..<count { out[i] = on ? color(amber, 31) : .off }
        }
        return out
    }

    /// A meter reading in dBFS as the 0…1 level `frame` takes: -60 dBFS (room noise) and
    /// below is 0, 0 dBFS is 1, linear in dB between (the LEDs then follow loudness as
    /// heard, not amplitude).
    public static func level(dBFS: Double) -> Double {
        guard !dBFS.isNaN else { return 0 }
        return min(max((dBFS + 60) / 60, 0), 1)
    }

    /// When `frame` next changes by time alone (nil: only a new level or state changes it).
    public static func nextChange(_ state: LightState, elapsed: Duration) -> Duration? {
        let t = max(elapsed.nanoseconds, 0)
        func next(_ step: Int64) -> Duration { .nanoseconds((t / step + 1) * step) }
        switch state {
        case .idle, .listening, .muted: return nil
        case .connecting: return next(connectingStep.nanoseconds)
        case .error: return next(errorHalfPeriod.nanoseconds)
        case .speaking: return next(speakingPeriod.nanoseconds / 32)
        case .working: return next(workingHalfPeriod.nanoseconds)
        case .paused:
            let p = pausedPeriod.nanoseconds, into = t % p
            return .nanoseconds(t - into + (into < pausedFlash.nanoseconds ? pausedFlash.nanoseconds : p))
        }
    }
}

/// The APA102 (and SK9822) wire format.
///
/// Datasheet layout: a start frame of 32 zero bits; per LED 32 bits: `111` and 5 bits of
/// global brightness, then blue, green, red, 8 bits each; then an end frame. The end
/// frame only supplies clock edges: each LED delays the data by half a clock, so `n`
/// LEDs need `n/2` more edges. The datasheet shows 32 one bits; we send zeros
/// (at least 32 bits, more past 64 LEDs), which clock the same and cannot light an
/// LED beyond `count` white if a strip is longer than configured.
public enum APA102 {
    /// The frame's length in bytes for `count` LEDs.
    public static func byteCount(leds count: Int) -> Int { 4 + 4 * count + endBytes(count) }

    static func endBytes(_ count: Int) -> Int { max(4, (count + 15) / 16) }

    /// Writes the frame for `leds` into `out` (replacing its contents).
    public static func encode(_ leds: [LEDColor], into out: inout [UInt8]) {
        out.removeAll(keepingCapacity: true)
        out.append(contentsOf: [0, 0, 0, 0])
        for l in leds {
            out.append(0xE0 | (l.brightness & 0x1F))
            out.append(l.blue)
            out.append(l.green)
            out.append(l.red)
        }
        for _ in 0..<endBytes(leds.count) { out.append(0) }
    }
}

// MARK: Outputs

/// Where frames go.
public protocol LightOutput: AnyObject {
    /// How many LEDs it drives.
    var count: Int { get }
    func write(_ frame: [LEDColor]) throws(GPIOError)
    func close()
}

/// APA102 LEDs on a spidev device (the ReSpeaker 2-Mic HAT: 3 LEDs on /dev/spidev0.0).
public final class APA102Output: LightOutput {
    public let count: Int
    public let path: String
    let fd: Int32
    var bytes: [UInt8] = []

    /// Opens `path` and sets SPI mode 0 and `speedHz` (the kernel default can be far
    /// above the 8 MHz or so that APA102 wiring on a HAT takes).
    public init(path: String, count: Int, speedHz: UInt32 = 8_000_000) throws(GPIOError) {
        self.path = path
        self.count = count
        let fd = csystem_open(path, O_WRONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { throw .spi(path: path, SystemError("open", code: csystem_errno())) }
        if cgpiod_spi_setup(fd, speedHz) < 0 {
            let e = csystem_errno()
            closeDescriptor(fd)
            throw .spi(path: path, SystemError("ioctl SPI_IOC_WR_MAX_SPEED_HZ", code: e))
        }
        self.fd = fd
        bytes.reserveCapacity(APA102.byteCount(leds: count))
    }

    deinit { closeDescriptor(fd) }

    public func write(_ frame: [LEDColor]) throws(GPIOError) {
        APA102.encode(frame, into: &bytes)
        let n = bytes.withUnsafeBytes { CSystem.write(fd, $0.baseAddress, $0.count) }
        if n < 0 { throw .spi(path: path, SystemError("write", code: csystem_errno())) }
    }

    public func close() {
        // All LEDs off on the way out, best effort: a bus that refuses now refused
        // during the run too, where the board said it.
        try? write([LEDColor](repeating: .off, count: count))
    }
}

/// Plain LEDs on GPIO lines, one per line, lit when the pattern's LED `isOn`.
public final class GPIOLEDOutput: LightOutput {
    let lines: [any GPIORequestedLine]
    let names: [String]
    var state: [Bool]
    public var count: Int { lines.count }

    /// Requests each line as an output, off. `activeLow` for LEDs wired from 3.3 V to the pin.
    public init(lines ids: [GPIOLine], activeLow: Bool = false, library: any GPIOLibrary = LibGPIOD()) throws(GPIOError) {
        let chips = library.chips()
        var lines: [any GPIORequestedLine] = []
        var names: [String] = []
        for id in ids {
            do throws(GPIOError) {
                let r = try resolveLine(id, chips: chips)
                lines.append(try requestLine(r, chips: chips, library: library, consumer: "linnet-led", .output(activeLow: activeLow, initial: false)))
                names.append(r.display)
            } catch {
                for l in lines { l.release() }
                throw error
            }
        }
        self.lines = lines
        self.names = names
        self.state = [Bool](repeating: false, count: lines.count)
    }

    public func write(_ frame: [LEDColor]) throws(GPIOError) {
        for i in 0..<min(frame.count, lines.count) {
            let on = frame[i].isOn
            guard on != state[i] else { continue }
            do throws(SystemError) {
                try lines[i].setValue(on)
            } catch {
                throw .system(line: names[i], error)
            }
            state[i] = on
        }
    }

    public func close() {
        for l in lines {
            // Best effort on the way out, as above.
            try? l.setValue(false)
            l.release()
        }
    }
}

// MARK: StatusLights

/// Drives outputs from the agent's state: call `show(state:level:now:)` on each state
/// or level change and at `nextDeadline`.
public final class StatusLights {
    let outputs: [any LightOutput]
    var state: LightState? = nil
    var since = Instant.zero
    var last: [[LEDColor]]
    /// When the current pattern next changes by itself; nil: only on the next `show`.
    public private(set) var nextDeadline: Instant? = nil

    public init(outputs: [any LightOutput]) {
        self.outputs = outputs
        self.last = [[LEDColor]](repeating: [], count: outputs.count)
    }

    /// Shows `state` at `now`; writes an output only when its frame changed. The first
    /// write error is thrown after every output has been tried.
    public func show(state newState: LightState, level: Double, now: Instant) throws(GPIOError) {
        if newState != state {
            state = newState
            since = now
        }
        let elapsed = now - since
        var firstError: GPIOError? = nil
        for (i, o) in outputs.enumerated() {
            let frame = StatusPattern.frame(newState, level: level, elapsed: elapsed, count: o.count)
            guard frame != last[i] else { continue }
            do throws(GPIOError) {
                try o.write(frame)
                last[i] = frame
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        nextDeadline = StatusPattern.nextChange(newState, elapsed: elapsed).map { since + $0 }
        if let firstError { throw firstError }
    }

    /// Turns everything off and releases the outputs.
    public func close() {
        for o in outputs { o.close() }
    }
}
