import Testing
import Wire
import Platform
import CSystem
@testable import Devices

func at(_ millis: Int64) -> Duration { .milliseconds(millis) }

@Suite struct StatusPatternTests {
    @Test func connectingDotRunsWithAGap() {
        // 3 LEDs, 200 ms steps: LED 0, 1, 2, none, then LED 0 again.
        let lit: [Int?] = [0, 1, 2, nil, 0, 1]
        for (k, expected) in lit.enumerated() {
            for offset: Int64 in [0, 199] {
                let f = StatusPattern.frame(.connecting, level: 0, elapsed: at(Int64(k) * 200 + offset), count: 3)
                let on = f.indices.filter { f[$0].brightness > 0 }
                #expect(on == (expected.map { [$0] } ?? []), "step \(k) +\(offset) ms")
                if let i = expected { #expect(f[i] == LEDColor(red: 0, green: 0, blue: 255, brightness: 31)) }
            }
        }
        // One LED: a 2.5 Hz blink (200 ms on, 200 ms off).
        let single = (0..<4).map { StatusPattern.frame(.connecting, level: 0, elapsed: at(Int64($0) * 200), count: 1)[0].isOn }
        #expect(single == [true, false, true, false])
        #expect(StatusPattern.nextChange(.connecting, elapsed: at(0)) == at(200))
        #expect(StatusPattern.nextChange(.connecting, elapsed: at(450)) == at(600))
    }

    @Test func listeningFollowsTheLevel() {
        // brightness = 16 + round(15 × level), clamped to 0…1.
        let cases: [(Double, UInt8)] = [(0, 16), (1, 31), (0.5, 24), (0.1, 18), (-3, 16), (7, 31), (.nan, 16)]
        for (level, b) in cases {
            let f = StatusPattern.frame(.listening, level: level, elapsed: at(12_345), count: 3)
            #expect(f == [LEDColor](repeating: LEDColor(red: 0, green: 255, blue: 0, brightness: b), count: 3), "level \(level)")
            #expect(f[0].isOn)
        }
        #expect(StatusPattern.nextChange(.listening, elapsed: at(5)) == nil)
    }

    @Test func levelFromDBFS() {
        let cases: [(Double, Double)] = [(-90, 0), (-60, 0), (-30, 0.5), (-15, 0.75), (0, 1), (6, 1), (-.infinity, 0), (.nan, 0)]
        for (db, expected) in cases { #expect(StatusPattern.level(dBFS: db) == expected, "\(db) dBFS") }
    }

    /// A triangle of brightness over 1 s in 32 steps of 31.25 ms: 1, 3, …, 31, 31, …, 1.
    @Test func speakingBreathes() {
        for step in 0..<32 {
            let t = Duration.nanoseconds(Int64(step) * 31_250_000)
            let expected = step < 16 ? 1 + 2 * step : 1 + 2 * (31 - step)
            let f = StatusPattern.frame(.speaking, level: 0.9, elapsed: t + .seconds(2), count: 2)
            #expect(f[0] == LEDColor(red: 0, green: 180, blue: 255, brightness: UInt8(expected)) && f[1] == f[0], "step \(step)")
        }
        // On a plain LED: on for the middle half of each second.
        let ons = (0..<8).map { StatusPattern.frame(.speaking, level: 0, elapsed: at(Int64($0) * 125), count: 1)[0].isOn }
        #expect(ons == [false, false, true, true, true, true, false, false])
        #expect(StatusPattern.nextChange(.speaking, elapsed: at(0)) == .nanoseconds(31_250_000))
    }

    @Test func errorBlinksAndMutedAndIdleAreSteady() {
        let blink = (0..<4).map { StatusPattern.frame(.error, level: 0, elapsed: at(Int64($0) * 125), count: 3) }
        #expect(blink[0] == [LEDColor](repeating: LEDColor(red: 255, green: 0, blue: 0, brightness: 31), count: 3))
        #expect(blink[1] == [LEDColor](repeating: .off, count: 3))
        #expect(blink[2] == blink[0] && blink[3] == blink[1])
        #expect(StatusPattern.nextChange(.error, elapsed: at(130)) == at(250))

        let muted = StatusPattern.frame(.muted, level: 1, elapsed: at(777), count: 3)
        #expect(muted == [LEDColor](repeating: LEDColor(red: 255, green: 0, blue: 0, brightness: 4), count: 3))
        let idle = StatusPattern.frame(.idle, level: 1, elapsed: at(777), count: 3)
        #expect(idle == [.off, LEDColor(red: 0, green: 255, blue: 0, brightness: 2), .off])
        // A plain LED: idle and muted are off.
        #expect(!muted[0].isOn && !idle[1].isOn)
        #expect(StatusPattern.frame(.idle, level: 0, elapsed: .zero, count: 0).isEmpty)
    }

    /// A tool at work: alternate LEDs swap every 250 ms, amber; one plain LED blinks at
    /// half the error's rate, so the two read apart.
    @Test func workingAlternates() {
        let amber = LEDColor(red: 255, green: 140, blue: 0, brightness: 31)
        let f = (0..<3).map { StatusPattern.frame(.working, level: 0, elapsed: at(Int64($0) * 250), count: 4) }
        #expect(f[0] == [amber, .off, amber, .off] && f[1] == [.off, amber, .off, amber] && f[2] == f[0])
        let one = (0..<4).map { StatusPattern.frame(.working, level: 0, elapsed: at(Int64($0) * 250), count: 1)[0].isOn }
        #expect(one == [true, false, true, false])
        #expect(StatusPattern.nextChange(.working, elapsed: at(260)) == at(500))
    }

    /// Paused (a daily cap): every LED flashes amber for 250 ms every 2 s, on a plain
    /// LED too, slower than any other state's blink; the next change is the flash's
    /// edge.
    @Test func pausedFlashesSlowly() {
        let amber = LEDColor(red: 255, green: 140, blue: 0, brightness: 31)
        let one = stride(from: 0, to: 4_000, by: 125).map { StatusPattern.frame(.paused, level: 0, elapsed: at(Int64($0)), count: 1)[0].isOn }
        #expect(one.enumerated().filter { $0.element }.map { $0.offset * 125 } == [0, 125, 2_000, 2_125])
        #expect(StatusPattern.frame(.paused, level: 0, elapsed: at(100), count: 3) == [amber, amber, amber])
        #expect(StatusPattern.nextChange(.paused, elapsed: at(100)) == at(250))
        #expect(StatusPattern.nextChange(.paused, elapsed: at(250)) == at(2_000))
        #expect(StatusPattern.nextChange(.paused, elapsed: at(2_100)) == at(2_250))
    }
}

@Suite struct APA102Tests {
    /// Datasheet layout: 32-bit start frame of zeros; per LED `111bbbbb` B G R; end frame.
    @Test func frameLayout() {
        let leds = [LEDColor(red: 0x12, green: 0x34, blue: 0x56, brightness: 7),
                    LEDColor(red: 0xFF, green: 0, blue: 0x80, brightness: 31),
                    .off]
        var out: [UInt8] = []
        APA102.encode(leds, into: &out)
        #expect(out == [0, 0, 0, 0,
                        0b1110_0111, 0x56, 0x34, 0x12,
                        0b1111_1111, 0x80, 0x00, 0xFF,
                        0b1110_0000, 0, 0, 0,
                        0, 0, 0, 0])
        #expect(out.count == APA102.byteCount(leds: 3))
        // Brightness is 5 bits: larger values are clamped, never spill into the 111 marker.
        #expect(LEDColor(red: 1, green: 1, blue: 1, brightness: 200).brightness == 31)
    }

    /// The end frame must give at least n/2 extra clock edges (one bit each).
    @Test func endFrameCoversLongStrips() {
        for n in [1, 3, 64, 65, 100, 300] {
            var out: [UInt8] = []
            APA102.encode([LEDColor](repeating: .off, count: n), into: &out)
            let endBits = (out.count - 4 - 4 * n) * 8
            #expect(endBits >= 32 && endBits >= n / 2, "\(n) LEDs")
            // Every LED frame starts with the 111 marker.
            for i in 0..<n { #expect(out[4 + 4 * i] & 0xE0 == 0xE0) }
        }
    }
}

final class RecordingOutput: LightOutput {
    let count: Int
    var frames: [[LEDColor]] = []
    var closed = false
    init(count: Int) { self.count = count }
    func write(_ frame: [LEDColor]) throws(GPIOError) { frames.append(frame) }
    func close() { closed = true }
}

@Suite struct StatusLightsTests {
    @Test func writesOnChangeAndSchedulesTheNextStep() throws {
        let out = RecordingOutput(count: 3)
        let lights = StatusLights(outputs: [out])
        try lights.show(state: .connecting, level: 0, now: ms(1_000))
        #expect(lights.nextDeadline == ms(1_200))
        try lights.show(state: .connecting, level: 0, now: ms(1_100))  // same frame
        #expect(out.frames.count == 1)
        try lights.show(state: .connecting, level: 0, now: ms(1_200))
        #expect(out.frames.count == 2 && out.frames[1][1].brightness == 31)
        #expect(lights.nextDeadline == ms(1_400))
        // A new state restarts its pattern.
        try lights.show(state: .error, level: 0, now: ms(1_290))
        #expect(lights.nextDeadline == ms(1_415))
        try lights.show(state: .listening, level: 0.2, now: ms(1_300))
        #expect(lights.nextDeadline == nil)
        try lights.show(state: .listening, level: 0.2, now: ms(1_350))
        try lights.show(state: .listening, level: 1, now: ms(1_360))
        #expect(out.frames.count == 5)
        #expect(out.frames.last! == StatusPattern.frame(.listening, level: 1, elapsed: .zero, count: 3))
        lights.close()
        #expect(out.closed)
    }

    @Test func gpioLEDsFollowThePatternThroughTheSeam() throws {
        let fake = FakeGPIO(pi5Chips())
        let leds = try GPIOLEDOutput(lines: [.name("GPIO5"), .name("GPIO6")], library: fake)
        #expect(fake.requests.map { $0.request } == [.output(activeLow: false, initial: false), .output(activeLow: false, initial: false)])
        #expect(fake.requests.map { $0.offset } == [5, 6] && fake.requests.allSatisfy { $0.consumer == "linnet-led" })
        let lights = StatusLights(outputs: [leds])
        try lights.show(state: .connecting, level: 0, now: ms(0))      // LED 0
        try lights.show(state: .connecting, level: 0, now: ms(200))    // LED 1
        try lights.show(state: .connecting, level: 0, now: ms(400))    // gap
        try lights.show(state: .listening, level: 0, now: ms(500))     // both
        try lights.show(state: .listening, level: 0.5, now: ms(600))   // no change on plain LEDs
        #expect(fake.lines[0].writes == [true, false, true])
        #expect(fake.lines[1].writes == [true, false, true])
        leds.close()
        #expect(fake.lines.allSatisfy { $0.released && !$0.level })
    }

    @Test func busyLEDLineReleasesTheOthers() {
        let fake = FakeGPIO(pi5Chips())
        fake.failures["gpiochip4:6"] = EBUSY
        do throws(GPIOError) {
            _ = try GPIOLEDOutput(lines: [.name("GPIO5"), .name("GPIO6")], library: fake)
            Issue.record("no error")
        } catch {
            #expect(error == .busy(line: "GPIO6 (gpiochip4:6)", consumer: ""))
            #expect(error.description.contains("another program or a kernel driver"))
        }
        #expect(fake.lines.count == 1 && fake.lines[0].released)
    }

    @Test func missingSPIDeviceIsAClearError() {
        do throws(GPIOError) {
            _ = try APA102Output(path: "/nonexistent/spidev9.9", count: 3)
            Issue.record("no error")
        } catch {
            #expect(error.description.hasPrefix("LED SPI device /nonexistent/spidev9.9: open: "))
            #expect(error.description.contains("dtparam=spi=on"))
        }
    }
}
