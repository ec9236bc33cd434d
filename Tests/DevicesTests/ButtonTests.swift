import Testing
import Wire
import Platform
import Audio
import CSystem
@testable import Devices

func ms(_ n: Int64) -> Instant { Instant(nanoseconds: n * 1_000_000) }

/// Drives a ButtonLogic through a list of (time, level) edges and collects the events
/// with the time of the call that produced them.
struct Driver {
    var logic: ButtonLogic
    var log: [(Int64, ButtonEvent)] = []

    init(_ mode: PTTMode, pressed: Bool = false) {
        logic = ButtonLogic(mode: mode, pressed: pressed, now: .zero)
    }

    mutating func drain(_ at: Instant) {
        while case .event(let e) = logic.pollOutput() { log.append((at.nanoseconds / 1_000_000, e)) }
    }

    /// An edge at `t`, after the deadlines before it ran (as the loop would have).
    mutating func edge(_ t: Int64, _ pressed: Bool) {
        run(until: t)
        lateEdge(t, pressed)
    }

    /// An edge handed over with no timeouts run since the last call (a late read).
    mutating func lateEdge(_ t: Int64, _ pressed: Bool) {
        logic.handleEdge(pressed: pressed, at: ms(t))
        drain(ms(t))
    }

    /// Runs the deadlines as a loop would, up to `t`.
    mutating func run(until t: Int64) {
        while let d = logic.nextDeadline, d <= ms(t) {
            logic.handleTimeout(now: d)
            drain(d)
        }
    }

    var events: [ButtonEvent] { log.map { $0.1 } }
}

@Suite struct ButtonLogicTests {
    @Test func holdPressAndReleaseAfterDebounce() {
        var d = Driver(.hold)
        d.edge(100, true)
        #expect(d.logic.nextDeadline == ms(120))
        d.run(until: 119)
        #expect(d.events.isEmpty)
        d.run(until: 120)
        d.edge(600, false)
        d.run(until: 10_000)
        #expect(d.log.map { $0.0 } == [120, 620])
        #expect(d.events == [.talk(true), .talk(false)])
        #expect(d.logic.nextDeadline == nil)
    }

    /// Contact bounce: the press counts 20 ms after the last bounce, once.
    @Test func bouncesBecomeOnePress() {
        var d = Driver(.hold)
        for (t, level) in [(0, true), (1, false), (2, true), (4, false), (5, true)] as [(Int64, Bool)] {
            d.edge(t, level)
        }
        #expect(d.logic.nextDeadline == ms(25))
        d.run(until: 24)
        #expect(d.events.isEmpty)
        d.run(until: 400)
        // Release bounces too.
        for (t, level) in [(400, false), (401, true), (403, false)] as [(Int64, Bool)] { d.edge(t, level) }
        d.run(until: 1_000)
        #expect(d.log.map { $0.0 } == [25, 423])
        #expect(d.events == [.talk(true), .talk(false)])
    }

    @Test func glitchShorterThanDebounceIsIgnored() {
        var d = Driver(.hold)
        d.edge(0, true)
        d.edge(19, false)
        #expect(d.logic.nextDeadline == nil)
        d.run(until: 5_000)
        #expect(d.events.isEmpty)
        #expect(!d.logic.pressed)
    }

    /// Held past 3 s: the talking ends with the long press; the release adds nothing.
    @Test func holdLongPress() {
        var d = Driver(.hold)
        d.edge(0, true)
        d.run(until: 3_100)
        d.edge(4_000, false)
        d.run(until: 5_000)
        #expect(d.events == [.talk(true), .talk(false), .longPress])
        #expect(d.log.map { $0.0 } == [20, 3_000, 3_000])
    }

    @Test func releaseJustBeforeLongPress() {
        var d = Driver(.hold)
        d.edge(0, true)
        d.run(until: 100)
        d.edge(2_990, false)
        d.run(until: 10_000)
        #expect(d.events == [.talk(true), .talk(false)])
    }

    /// A release bounce around the long-press time: the long press waits for it to
    /// settle, and fires once the contact is back down.
    @Test func bounceAtLongPressTime() {
        var d = Driver(.hold)
        d.edge(0, true)
        d.edge(2_995, false)
        d.edge(3_005, true)
        d.run(until: 3_005)
        #expect(d.events == [.talk(true), .talk(false), .longPress])
        // The deadline (3 s) is already past when the contact returns; the driver
        // runs a past deadline at its own time.
        #expect(d.log.map { $0.0 } == [20, 3_000, 3_000])
        #expect(d.logic.nextDeadline == nil)
    }

    /// A release read late (after the long-press deadline) is ordered after the long press.
    @Test func deadlinesBeforeAnEdgeComeFirst() {
        var d = Driver(.hold)
        d.edge(0, true)
        d.lateEdge(3_500, false)  // no handleTimeout in between
        d.run(until: 10_000)
        #expect(d.events == [.talk(true), .talk(false), .longPress])
        #expect(d.log.allSatisfy { $0.0 == 3_500 })
    }

    @Test func toggle() {
        var d = Driver(.toggle)
        d.edge(0, true); d.edge(200, false)
        d.edge(1_000, true); d.edge(1_300, false)
        d.run(until: 2_000)
        #expect(d.events == [.talk(true), .talk(false)])
        #expect(d.log.map { $0.0 } == [20, 1_020])
        // Long press while talking: talking ends, then the long press.
        d.edge(2_000, true); d.edge(2_100, false)
        d.edge(3_000, true)
        d.run(until: 7_000)
        d.edge(7_000, false)
        d.run(until: 8_000)
        #expect(d.events == [.talk(true), .talk(false), .talk(true), .talk(false), .longPress])
        #expect(!d.logic.talking)
    }

    @Test func openModeReportsOnlyLongPresses() {
        var d = Driver(.open)
        d.edge(0, true); d.edge(500, false)
        d.edge(1_000, true)
        d.run(until: 4_100)
        d.edge(4_200, false)
        d.run(until: 5_000)
        #expect(d.events == [.longPress])
        #expect(d.log[0].0 == 4_000)
    }

    /// A button held when the line is opened does nothing until released and pressed again.
    @Test func heldAtStartIsIgnored() {
        var d = Driver(.hold, pressed: true)
        d.run(until: 10_000)
        d.edge(10_000, false)
        d.run(until: 11_000)
        #expect(d.events.isEmpty)
        d.edge(11_000, true)
        d.run(until: 11_100)
        #expect(d.events == [.talk(true)])
    }

    @Test func longPressOffAndCustomTimes() {
        var logic = ButtonLogic(mode: .hold, debounce: .milliseconds(5), longPress: nil, now: .zero)
        logic.handleEdge(pressed: true, at: ms(0))
        #expect(logic.nextDeadline == ms(5))
        logic.handleTimeout(now: ms(60_000))
        #expect(logic.pollOutput() == .event(.talk(true)))
        #expect(logic.pollOutput() == .timeout(.distantFuture))
    }

    /// Random bouncy edges: talk events always alternate starting with true, and the
    /// debounced level only changes after the raw level was stable for 20 ms (checked
    /// against an independent replay of the edge list).
    @Test(arguments: [1, 2, 3, 4, 5] as [UInt64])
    func randomEdgesKeepTheInvariants(seed: UInt64) {
        var rng = SeededRandom(seed: seed)
        for mode in PTTMode.allCases {
            var d = Driver(mode)
            var t: Int64 = 0
            var level = false
            var edges: [(Int64, Bool)] = []
            for _ in 0..<400 {
                t += Int64(rng.next() % 60) + 1
                level.toggle()
                edges.append((t, level))
                d.edge(t, level)
                d.run(until: t)
            }
            d.run(until: t + 10_000)
            var talking = false
            for e in d.events {
                if case .talk(let on) = e {
                    #expect(on != talking)
                    talking = on
                }
            }
            // Independent: count presses = runs of `true` lasting ≥ 20 ms that follow a
            // settled `false` (every edge toggles, so each run ends at the next edge).
            var settledPresses = 0
            var settled = false
            for (i, (at, l)) in edges.enumerated() {
                let end = i + 1 < edges.count ? edges[i + 1].0 : Int64.max
                if end - at >= 20, l != settled {
                    settled = l
                    if l { settledPresses += 1 }
                }
            }
            let talkOns = d.events.filter { $0 == .talk(true) }.count
            switch mode {
            case .hold: #expect(talkOns == settledPresses)
            // Presses here are under 60 ms, never long: each one toggles.
            case .toggle: #expect(d.events.count == settledPresses && d.events.allSatisfy { $0 != .longPress })
            case .open: #expect(talkOns == 0)
            }
        }
    }
}

// MARK: GPIOButton through a fake libgpiod

final class FakeLine: GPIORequestedLine {
    let fd: Int32
    var level: Bool
    var pending: [GPIOEdge] = []
    var readError: Int32 = 0
    var writes: [Bool] = []
    var released = false

    init(fd: Int32, level: Bool) {
        self.fd = fd
        self.level = level
    }

    func value() throws(SystemError) -> Bool { level }
    func setValue(_ on: Bool) throws(SystemError) {
        level = on
        writes.append(on)
    }
    func readEdges() throws(SystemError) -> [GPIOEdge] {
        if readError != 0 { throw SystemError("gpiod_line_event_read_multiple", code: readError) }
        defer { pending = [] }
        return pending
    }
    func release() { released = true }
}

final class FakeGPIO: GPIOLibrary {
    var chipList: [GPIOChipEntry]
    /// errno for a request of (chip, offset); a bias request refused with `biasErrno`.
    var failures: [String: Int32] = [:]
    var biasErrno: Int32 = 0
    var requests: [(chip: String, offset: Int, consumer: String, request: GPIORequest)] = []
    var lines: [FakeLine] = []
    var initialLevel = false

    init(_ chips: [GPIOChipEntry]) { chipList = chips }

    func chips() -> [GPIOChipEntry] { chipList }

    func request(chip: String, offset: Int, consumer: String, _ request: GPIORequest) throws(SystemError) -> any GPIORequestedLine {
        requests.append((chip, offset, consumer, request))
        if let e = failures["\(chip):\(offset)"] { throw SystemError("gpiod_line_request", code: e) }
        if case .edges(_, true) = request, biasErrno != 0 { throw SystemError("gpiod_line_request", code: biasErrno) }
        let l = FakeLine(fd: Int32(100 + lines.count), level: initialLevel)
        lines.append(l)
        return l
    }
}

/// A Raspberry Pi 5 on an older kernel: the header on gpiochip4 (pinctrl-rp1).
func pi5Chips() -> [GPIOChipEntry] {
    var header = (0..<54).map { "GPIO\($0)" }
    header[27] = "GPIO27"
    var consumers = [String](repeating: "", count: 54)
    consumers[4] = "onewire"
    return [
        GPIOChipEntry(name: "gpiochip0", label: "gpio-brcmstb@107d508500", lines: (0..<32).map { "RP1_\($0)" }),
        GPIOChipEntry(name: "gpiochip1", label: "gpio-brcmstb@107d508520", lines: [String](repeating: "", count: 4)),
        GPIOChipEntry(name: "gpiochip4", label: "pinctrl-rp1", lines: header, consumers: consumers),
    ]
}

func openError(_ body: () throws(GPIOError) -> GPIOButton) -> GPIOError? {
    do throws(GPIOError) {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

@Suite struct GPIOButtonTests {
    @Test func opensByNameWithPullUpAndReportsPresses() throws {
        let fake = FakeGPIO(pi5Chips())
        let b = try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: ms(0))
        #expect(b.name == "GPIO17 (gpiochip4:17)")
        #expect(b.pullUp && b.fd == 100)
        #expect(fake.requests.count == 1)
        #expect(fake.requests[0].chip == "gpiochip4" && fake.requests[0].offset == 17 && fake.requests[0].consumer == "linnet-ptt")
        #expect(fake.requests[0].request == .edges(activeLow: true, pullUp: true))

        // Kernel stamps on their own clock (5 s), with a 2 ms bounce; read at 50 ms.
        let k: Int64 = 5_000_000_000
        fake.lines[0].pending = [GPIOEdge(rising: true, timestamp: k), GPIOEdge(rising: false, timestamp: k + 1_000_000),
                                 GPIOEdge(rising: true, timestamp: k + 2_000_000)]
        #expect(try b.readEvents(now: ms(50)) == [])
        // The last edge is mapped to now: the press settles at 70 ms.
        #expect(b.nextDeadline == ms(70))
        #expect(b.handleTimeout(now: ms(69)) == [])
        #expect(b.handleTimeout(now: ms(70)) == [.talk(true)])
        #expect(b.talking)
        // Long press deadline from when the contact settled (50 ms).
        #expect(b.nextDeadline == ms(3_050))
        #expect(b.handleTimeout(now: ms(3_050)) == [.talk(false), .longPress])
        b.close()
        #expect(fake.lines[0].released)
    }

    /// A release and press read together long after they happened keep their spacing.
    @Test func edgesReadLateKeepTheirSpacing() throws {
        let fake = FakeGPIO(pi5Chips())
        let b = try GPIOButton.open(line: .chip("gpiochip4", offset: 17), mode: .toggle, library: fake, now: ms(0))
        #expect(b.name == "GPIO17 (gpiochip4:17)")
        fake.lines[0].pending = [GPIOEdge(rising: true, timestamp: 1_000_000), GPIOEdge(rising: false, timestamp: 101_000_000)]
        // Read at 1 s: the press (100 ms long) is in the past and is counted now.
        #expect(try b.readEvents(now: ms(1_000)) == [.talk(true)])
        #expect(b.nextDeadline == ms(1_020))
        #expect(b.handleTimeout(now: ms(1_020)) == [])
    }

    @Test func biasRefusedFallsBackWithoutPullUp() throws {
        for code in [EINVAL, EOPNOTSUPP, 524] {
            let fake = FakeGPIO(pi5Chips())
            fake.biasErrno = code
            let b = try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: .zero)
            #expect(!b.pullUp)
            #expect(fake.requests.map { $0.request } == [.edges(activeLow: true, pullUp: true), .edges(activeLow: true, pullUp: false)])
        }
    }

    @Test func heldAtOpenIsRead() throws {
        let fake = FakeGPIO(pi5Chips())
        fake.initialLevel = true
        let b = try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: .zero)
        #expect(b.logic.pressed && !b.talking)
    }

    @Test func errorsNameWhatExists() {
        let fake = FakeGPIO(pi5Chips())
        fake.failures["gpiochip4:4"] = EBUSY
        fake.failures["gpiochip4:5"] = EACCES
        fake.failures["gpiochip4:6"] = EIO

        let busy = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO4"), mode: .hold, library: fake, now: .zero) }
        #expect(busy == .busy(line: "GPIO4 (gpiochip4:4)", consumer: "onewire"))
        #expect(busy?.description.contains("in use by 'onewire'") == true)

        let denied = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO5"), mode: .hold, library: fake, now: .zero) }
        #expect(denied == .permission(path: "/dev/gpiochip4"))
        #expect(denied?.description.contains("'gpio' group") == true)

        let io = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO6"), mode: .hold, library: fake, now: .zero) }
        #expect(io == .system(line: "GPIO6 (gpiochip4:6)", SystemError("gpiod_line_request", code: EIO)))

        let missing = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO99"), mode: .hold, library: fake, now: .zero) }
        guard case .lineNotFound(let n, let named)? = missing else { Issue.record("\(String(describing: missing))"); return }
        #expect(n == "GPIO99" && named.contains("GPIO17") && named.contains("RP1_0") && !named.contains(""))
        #expect(missing?.description.contains("GPIO17") == true)

        let noChip = openError { () throws(GPIOError) in try GPIOButton.open(line: .chip("gpiochip9", offset: 1), mode: .hold, library: fake, now: .zero) }
        #expect(noChip == .chipNotFound("gpiochip9", available: ["gpiochip0 [gpio-brcmstb@107d508500] 32 lines",
                                                                 "gpiochip1 [gpio-brcmstb@107d508520] 4 lines",
                                                                 "gpiochip4 [pinctrl-rp1] 54 lines"]))

        let range = openError { () throws(GPIOError) in try GPIOButton.open(line: .chip("gpiochip1", offset: 4), mode: .hold, library: fake, now: .zero) }
        #expect(range == .offsetOutOfRange(chip: "gpiochip1", offset: 4, lines: 4))

        // A chip by label or number, as gpiod_chip_open_lookup takes it.
        #expect(openError { () throws(GPIOError) in try GPIOButton.open(line: .chip("pinctrl-rp1", offset: 17), mode: .hold, library: fake, now: .zero) } == nil)
        #expect(openError { () throws(GPIOError) in try GPIOButton.open(line: .chip("4", offset: 17), mode: .hold, library: fake, now: .zero) } == nil)

        let none = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: FakeGPIO([]), now: .zero) }
        #expect(none == .noChips)
    }

    /// Every chip the user may not open is named (on a board where none may be opened,
    /// the first alone said gpiochip0, which was not even the chip with the line), with
    /// what makes them openable.
    @Test func everyUnreadableChipIsNamed() {
        let fake = FakeGPIO([GPIOChipEntry(name: "gpiochip0", label: "", lines: [], openError: EACCES),
                             GPIOChipEntry(name: "gpiochip1", label: "", lines: [], openError: EACCES)])
        let e = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: .zero) }
        #expect(e == .permission(path: "/dev/gpiochip0, /dev/gpiochip1"))
        #expect(e?.description.contains("60-linnet.rules") == true)
    }

    /// A chip we may not open hides its lines: a name not found elsewhere is a
    /// permission problem, not a missing line.
    @Test func unreadableChipIsAPermissionError() {
        let fake = FakeGPIO([GPIOChipEntry(name: "gpiochip0", label: "", lines: [], openError: EACCES)])
        let e = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: .zero) }
        #expect(e == .permission(path: "/dev/gpiochip0"))
        let e2 = openError { () throws(GPIOError) in try GPIOButton.open(line: .chip("gpiochip0", offset: 17), mode: .hold, library: fake, now: .zero) }
        #expect(e2 == .permission(path: "/dev/gpiochip0"))
    }

    @Test func readErrorIsTyped() throws {
        let fake = FakeGPIO(pi5Chips())
        let b = try GPIOButton.open(line: .name("GPIO17"), mode: .hold, library: fake, now: .zero)
        fake.lines[0].readError = ENODEV
        do throws(GPIOError) {
            _ = try b.readEvents(now: ms(1))
            Issue.record("no error")
        } catch {
            #expect(error == .system(line: "GPIO17 (gpiochip4:17)", SystemError("gpiod_line_event_read_multiple", code: ENODEV)))
        }
    }

    /// The real libgpiod implementation on this machine: no chips here (a VM), so the
    /// error must say so; on a board it resolves to some chip.
    @Test func realLibraryOnThisMachine() {
        let lib = LibGPIOD()
        let chips = lib.chips()
        let e = openError { () throws(GPIOError) in try GPIOButton.open(line: .name("LINNET_NO_SUCH_LINE"), mode: .hold, library: lib, now: .zero) }
        if chips.isEmpty { #expect(e == .noChips) } else { #expect(e != nil) }
    }
}
