// The board's button and lights on the loop: the GPIO push-to-talk button's edges
// (libgpiod's event fd, no polling thread) turned into talk / long-press calls on the
// runner, and the status LEDs redrawn from the session state and the level meter.
import Wire
import Platform
import Devices
import Audio
import Agent
import Settings

public final class ButtonInput {
    let loop: EventLoop
    let button: GPIOButton
    var source: EventLoop.SourceID?
    var timer: EventLoop.TimerID?
    /// Where the button's events go (set once the runtime that takes them exists).
    public var onEvent: (ButtonEvent) -> Void = { _ in }

    /// Opens the configured button; nil when none is configured, or when it cannot be
    /// opened and `ptt-required` is off (logged: the agent carries on without it).
    /// The configured button (`input`, nil when none is configured or it cannot be
    /// used), or why it cannot be (`problem`). With `ptt-required` that is an error.
    public static func open(config: Config, loop: EventLoop) throws(CLIFailure) -> (input: ButtonInput?, problem: String?) {
        guard let line = config.ptt, config.pttMode != .open else { return (nil, nil) }
        let mode = config.pttMode
        let longPress: Duration? = config.pttLongPressMS == 0 ? nil : .milliseconds(Int64(config.pttLongPressMS))
        do throws(GPIOError) {
            let b = try GPIOButton.open(line: line, mode: mode, debounce: .milliseconds(Int64(config.pttDebounceMS)),
                                        longPress: longPress, now: loop.now)
            Log.info("push-to-talk button on \(b.name) (\(mode.rawValue)\(b.pullUp ? ", pull-up" : ""))")
            return (ButtonInput(loop: loop, button: b), nil)
        } catch {
            if config.pttRequired { throw CLIFailure(.unavailable, "push-to-talk button: \(error)") }
            return (nil, "push-to-talk button \(line): \(error)")
        }
    }

    init(loop: EventLoop, button: GPIOButton) {
        self.loop = loop
        self.button = button
        source = loop.watch(fd: button.fd) { _ in
            do throws(GPIOError) {
                self.deliver(try self.button.readEvents(now: self.loop.now))
            } catch {
                Log.error("push-to-talk button: \(error); no longer reading it")
                self.close()
            }
        }
    }

    func deliver(_ events: [ButtonEvent]) {
        for e in events { onEvent(e) }
        if let timer { loop.cancel(timer) }
        timer = nil
        if let d = button.nextDeadline {
            timer = loop.schedule(at: d) {
                self.timer = nil
                self.deliver(self.button.handleTimeout(now: self.loop.now))
            }
        }
    }

    func close() {
        if let source { loop.unwatch(source) }
        if let timer { loop.cancel(timer) }
        source = nil
        timer = nil
        button.close()
    }
}

/// The status LEDs: plain GPIO lines and/or APA102 over spidev, redrawn 20 times a
/// second from what `state` returns (writes happen only when a frame changes).
public final class Lights {
    let loop: EventLoop
    let lights: StatusLights
    var timer: EventLoop.TimerID?
    var state: () -> (LightState, Double) = { (.idle, 0) }
    var failed = false

    public static func open(config: Config, loop: EventLoop) -> Lights? {
        var outputs: [any LightOutput] = []
        if let spi = config.ledSPI {
            do throws(GPIOError) { outputs.append(try APA102Output(path: spi, count: config.ledCount)) } catch {
                Log.warning("status LEDs on \(spi): \(error); carrying on without them")
            }
        }
        if !config.leds.isEmpty {
            do throws(GPIOError) { outputs.append(try GPIOLEDOutput(lines: config.leds)) } catch {
                Log.warning("status LEDs: \(error); carrying on without them")
            }
        }
        return outputs.isEmpty ? nil : Lights(loop: loop, lights: StatusLights(outputs: outputs))
    }

    init(loop: EventLoop, lights: StatusLights) {
        self.loop = loop
        self.lights = lights
    }

    func start() { tick(at: loop.now) }

    func tick(at deadline: Instant) {
        timer = loop.schedule(at: deadline) {
            let (s, level) = self.state()
            do throws(GPIOError) { try self.lights.show(state: s, level: level, now: self.loop.now) } catch {
                if !self.failed { Log.warning("status LEDs: \(error)") }
                self.failed = true
            }
            self.tick(at: deadline + .milliseconds(50))
        }
    }

    func close() {
        if let timer { loop.cancel(timer) }
        timer = nil
        lights.close()
    }
}
