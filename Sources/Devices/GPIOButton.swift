/// The GPIO push-to-talk button, and the libgpiod seam it (and the GPIO LEDs) use.
///
/// Design decisions:
/// - Every libgpiod call sits behind `GPIOLibrary` / `GPIORequestedLine`, two small
///   class-bound protocols shaped like the kernel's line requests rather than like
///   libgpiod 1.6's object model. `LibGPIOD` implements them with libgpiod 1.6 (Debian
///   12, Raspberry Pi OS bookworm). A libgpiod 2 implementation fits the same shape:
///   `chips()` from `gpiod_chip_get_info` / `gpiod_chip_get_line_info`,
///   `request` from `gpiod_line_settings` + `gpiod_line_config` +
///   `gpiod_chip_request_lines`, `readEdges` from `gpiod_line_request_read_edge_events`
///   into a `gpiod_edge_event_buffer`. Tests drive the real resolution, fallback and
///   event logic with a fake library.
/// - Lines are found by name through our own walk over the chips (not
///   `gpiod_line_find`, which libgpiod 2 does not have), so the same walk also yields
///   what an error message should list: the chips and named lines there are.
/// - No polling thread: the request's event descriptor goes into the caller's
///   `EventLoop`; `readEvents(now:)` drains it when it polls readable.
/// - Active-low with a pull-up: a button wired from the pin to ground reads "pressed"
///   as logical 1. Kernels before 5.5 (or pin controllers without bias support) refuse
///   the bias flag; the request is then retried without it and a warning says to
///   fit an external pull-up.
/// - Kernel timestamps order the edges of one read; they are mapped onto the loop's
///   clock relative to the latest edge (read at `now`), so it does not matter whether
///   the kernel stamps with CLOCK_MONOTONIC (5.7 and later) or CLOCK_REALTIME (older).
import CSystem
import CALSA
import CGPIOD
import Wire
import Platform
import Audio

/// Why a GPIO line (button or LED) or the LED SPI device could not be used.
public enum GPIOError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No `/dev/gpiochip*` exists (not a board with GPIO, or a container without it).
    case noChips
    /// The named chip is not there; `available` describes the chips that are.
    case chipNotFound(String, available: [String])
    /// No chip has a line with this name; `named` lists the named lines there are.
    case lineNotFound(String, named: [String])
    /// The chip has fewer lines than the offset asked for.
    case offsetOutOfRange(chip: String, offset: Int, lines: Int)
    /// Another program or a kernel driver holds the line (EBUSY); `consumer` is its label.
    case busy(line: String, consumer: String)
    /// The user may not open the chip or device (EACCES/EPERM).
    case permission(path: String)
    /// Any other failure of a GPIO call, with the line it concerned.
    case system(line: String, SystemError)
    /// The SPI device for APA102 LEDs could not be opened or written.
    case spi(path: String, SystemError)

    public var description: String {
        switch self {
        case .noChips:
            return "no GPIO chips found (/dev/gpiochip* missing): run without ptt or on a board with GPIO"
        case .chipNotFound(let c, let available):
            return "no GPIO chip '\(c)'; chips: " + (available.isEmpty ? "none readable" : joined(available, ", "))
        case .lineNotFound(let n, let named):
            if named.isEmpty { return "no GPIO line named '\(n)' (no chip names its lines: use CHIP:OFFSET, e.g. gpiochip0:17)" }
            let shown = named.count > 120 ? joined(Array(named.prefix(120)), " ") + " …" : joined(named, " ")
            return "no GPIO line named '\(n)'; named lines: " + shown
        case .offsetOutOfRange(let c, let o, let lines):
            return "GPIO chip \(c) has \(lines) lines (0…\(lines - 1)); there is no line \(o)"
        case .busy(let l, let consumer):
            let who = consumer.isEmpty ? "another program or a kernel driver" : "'\(consumer)'"
            return "GPIO line \(l) is in use by \(who) (check dtoverlay lines in config.txt and other GPIO programs)"
        case .permission(let p):
            return "no permission to open \(p) (as uid \(geteuid())): the chips must be in the 'gpio' group with mode 0660 (the linnet package's /lib/udev/rules.d/60-linnet.rules; 'udevadm trigger' applies it at once) and the user in that group (the package puts linnet there)"
        case .system(let l, let e):
            return "GPIO line \(l): \(e)"
        case .spi(let p, let e):
            let hint = e.code == ENOENT ? " (enable SPI: dtparam=spi=on in /boot/firmware/config.txt)" : e.code == EACCES ? " (add the user to the 'spi' group)" : ""
            return "LED SPI device \(p): \(e)\(hint)"
        }
    }
}

func joined(_ parts: [String], _ separator: String) -> String {
    var out = ""
    for (i, p) in parts.enumerated() { out += (i == 0 ? "" : separator) + p }
    return out
}

// MARK: The seam

/// One chip as the library sees it.
public struct GPIOChipEntry: Sendable, Equatable {
    /// `gpiochip0`.
    public var name: String
    /// The driver's label (`pinctrl-bcm2711`, `pinctrl-rp1`).
    public var label: String
    /// Line names by offset ("" for an unnamed line); empty when the chip could not be read.
    public var lines: [String]
    /// Consumer labels by offset ("" for a free line).
    public var consumers: [String]
    /// errno of opening the chip (0: it was read).
    public var openError: Int32

    public init(name: String, label: String, lines: [String], consumers: [String] = [], openError: Int32 = 0) {
        self.name = name
        self.label = label
        self.lines = lines
        self.consumers = consumers.isEmpty ? [String](repeating: "", count: lines.count) : consumers
        self.openError = openError
    }
}

/// How a line is requested.
public enum GPIORequest: Sendable, Equatable {
    /// An input reporting both edges.
    case edges(activeLow: Bool, pullUp: Bool)
    /// An output starting at `initial` (logical level).
    case output(activeLow: Bool, initial: Bool)
}

/// One edge as the kernel reported it.
public struct GPIOEdge: Sendable, Equatable {
    /// The logical level after the edge (active-low already applied by the kernel).
    public var rising: Bool
    /// The kernel's timestamp, nanoseconds (monotonic on Linux ≥ 5.7).
    public var timestamp: Int64

    public init(rising: Bool, timestamp: Int64) {
        self.rising = rising
        self.timestamp = timestamp
    }
}

/// The GPIO library: lists chips and requests lines. Errors are the errno of the call.
public protocol GPIOLibrary: AnyObject {
    /// Every chip, including those that could not be opened (with `openError`).
    func chips() -> [GPIOChipEntry]
    /// Requests one line of `chip` (a name as `chips()` returns it) for `consumer`.
    func request(chip: String, offset: Int, consumer: String, _ request: GPIORequest) throws(SystemError) -> any GPIORequestedLine
}

/// A requested line; released by `release()`.
public protocol GPIORequestedLine: AnyObject {
    /// The edge-event descriptor (inputs), non-blocking; -1 for outputs.
    var fd: Int32 { get }
    /// The current logical level.
    func value() throws(SystemError) -> Bool
    func setValue(_ on: Bool) throws(SystemError)
    /// The edges pending now (none when nothing is pending; never blocks).
    func readEdges() throws(SystemError) -> [GPIOEdge]
    func release()
}

// MARK: libgpiod 1.6

/// `GPIOLibrary` on libgpiod 1.6.
public final class LibGPIOD: GPIOLibrary {
    public init() {}

    /// Chips are probed as `/dev/gpiochip0…63` rather than with `gpiod_chip_iter_new`,
    /// which gives up on every chip when one cannot be opened; a chip we may not open
    /// is what the permission error must name.
    public func chips() -> [GPIOChipEntry] {
        var out: [GPIOChipEntry] = []
        for n in 0..<64 {
            let name = "gpiochip\(n)"
            let path = "/dev/" + name
            guard access(path, F_OK) == 0 else { continue }
            guard let chip = gpiod_chip_open(path) else {
                out.append(GPIOChipEntry(name: name, label: "", lines: [], openError: csystem_errno()))
                continue
            }
            defer { gpiod_chip_close(chip) }
            var lines: [String] = [], consumers: [String] = []
            for offset in 0..<gpiod_chip_num_lines(chip) {
                let line = gpiod_chip_get_line(chip, offset)
                lines.append(line.flatMap { gpiod_line_name($0) }.map { String(cString: $0) } ?? "")
                consumers.append(line.flatMap { gpiod_line_consumer($0) }.map { String(cString: $0) } ?? "")
            }
            out.append(GPIOChipEntry(name: String(cString: gpiod_chip_name(chip)), label: String(cString: gpiod_chip_label(chip)),
                                     lines: lines, consumers: consumers))
        }
        return out
    }

    public func request(chip name: String, offset: Int, consumer: String, _ request: GPIORequest) throws(SystemError) -> any GPIORequestedLine {
        guard let chip = gpiod_chip_open_lookup(name) else { throw SystemError("gpiod_chip_open_lookup", code: csystem_errno()) }
        guard let line = gpiod_chip_get_line(chip, UInt32(truncatingIfNeeded: offset)) else {
            let e = csystem_errno()
            gpiod_chip_close(chip)
            throw SystemError("gpiod_chip_get_line", code: e)
        }
        var r: Int32
        switch request {
        case .edges(let activeLow, let pullUp):
            var flags: Int32 = 0
            if activeLow { flags |= Int32(GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW) }
            if pullUp { flags |= Int32(GPIOD_LINE_REQUEST_FLAG_BIAS_PULL_UP) }
            r = gpiod_line_request_both_edges_events_flags(line, consumer, flags)
        case .output(let activeLow, let initial):
            let flags: Int32 = activeLow ? Int32(GPIOD_LINE_REQUEST_FLAG_ACTIVE_LOW) : 0
            r = gpiod_line_request_output_flags(line, consumer, flags, initial ? 1 : 0)
        }
        if r < 0 {
            let e = csystem_errno()
            gpiod_chip_close(chip)
            throw SystemError("gpiod_line_request", code: e)
        }
        var fd: Int32 = -1
        if case .edges = request {
            fd = gpiod_line_event_get_fd(line)
            // The loop reads only when poll says so, but a spurious wake-up must not
            // block it: the event descriptor is made non-blocking.
            let fl = csystem_fcntl_int(fd, F_GETFL, 0)
            _ = csystem_fcntl_int(fd, F_SETFL, fl | O_NONBLOCK)
        }
        return LibGPIODLine(chip: chip, line: line, fd: fd)
    }
}

final class LibGPIODLine: GPIORequestedLine {
    let chip: OpaquePointer
    let line: OpaquePointer
    let fd: Int32
    var released = false

    init(chip: OpaquePointer, line: OpaquePointer, fd: Int32) {
        self.chip = chip
        self.line = line
        self.fd = fd
    }

    deinit { release() }

    func value() throws(SystemError) -> Bool {
        let v = gpiod_line_get_value(line)
        if v < 0 { throw SystemError("gpiod_line_get_value", code: csystem_errno()) }
        return v == 1
    }

    func setValue(_ on: Bool) throws(SystemError) {
        if gpiod_line_set_value(line, on ? 1 : 0) < 0 { throw SystemError("gpiod_line_set_value", code: csystem_errno()) }
    }

    func readEdges() throws(SystemError) -> [GPIOEdge] {
        var out: [GPIOEdge] = []
        var events = [gpiod_line_event](repeating: gpiod_line_event(), count: 16)
        while true {
            let n = events.withUnsafeMutableBufferPointer { gpiod_line_event_read_multiple(line, $0.baseAddress, 16) }
            if n < 0 {
                let e = csystem_errno()
                if e == EAGAIN || e == EWOULDBLOCK { return out }
                if e == EINTR { continue }
                throw SystemError("gpiod_line_event_read_multiple", code: e)
            }
            for i in 0..<Int(n) {
                let ev = events[i]
                out.append(GPIOEdge(rising: ev.event_type == Int32(GPIOD_LINE_EVENT_RISING_EDGE),
                                    timestamp: Int64(ev.ts.tv_sec) &* 1_000_000_000 &+ Int64(ev.ts.tv_nsec)))
            }
            if n < 16 { return out }
        }
    }

    func release() {
        guard !released else { return }
        released = true
        gpiod_line_release(line)
        gpiod_chip_close(chip)
    }
}

// MARK: Resolving a line

/// Where a line is: its chip (as `chips()` names it), offset and a display name.
public struct ResolvedLine: Sendable, Equatable {
    public var chip: String
    public var offset: Int
    /// `GPIO17 (gpiochip0:17)`.
    public var display: String
}

/// Finds `id` among `chips`, or says what there is instead.
public func resolveLine(_ id: GPIOLine, chips: [GPIOChipEntry]) throws(GPIOError) -> ResolvedLine {
    guard !chips.isEmpty else { throw .noChips }
    switch id {
    case .name(let wanted):
        var denied: [String] = []
        for chip in chips {
            if chip.openError == EACCES || chip.openError == EPERM { denied.append("/dev/" + chip.name) }
            // Line and chip names are the kernel's bytes (libgpiod matches them with
            // strcmp): compared as bytes here and below.
            if let offset = chip.lines.firstIndex(where: { $0.bytesEqual(wanted) }) {
                return ResolvedLine(chip: chip.name, offset: offset, display: "\(wanted) (\(chip.name):\(offset))")
            }
        }
        // Not found and some chips could not be read: the line may be on any of them,
        // so all are named (not only the first, which may not be the one).
        if !denied.isEmpty { throw .permission(path: joined(denied, ", ")) }
        var named: [String] = []
        for chip in chips { for n in chip.lines where !n.isEmpty && !named.containsBytes(equalTo: n) { named.append(n) } }
        throw .lineNotFound(wanted, named: named)
    case .chip(let wanted, let offset):
        // gpiod_chip_open_lookup also takes a number, a path or a label.
        let match = chips.first { c in
            c.name.bytesEqual(wanted) || ("/dev/" + c.name).bytesEqual(wanted) || c.name.bytesEqual("gpiochip" + wanted)
                || (!c.label.isEmpty && c.label.bytesEqual(wanted))
        }
        guard let chip = match else {
            throw .chipNotFound(wanted, available: chips.map(chipSummary))
        }
        if chip.openError == EACCES || chip.openError == EPERM { throw .permission(path: "/dev/" + chip.name) }
        if chip.openError != 0 { throw .system(line: "\(wanted):\(offset)", SystemError("open /dev/" + chip.name, code: chip.openError)) }
        guard offset < chip.lines.count else { throw .offsetOutOfRange(chip: chip.name, offset: offset, lines: chip.lines.count) }
        let name = chip.lines[offset]
        return ResolvedLine(chip: chip.name, offset: offset, display: (name.isEmpty ? "" : name + " ") + "(\(chip.name):\(offset))")
    }
}

/// `gpiochip0 [pinctrl-bcm2711] 58 lines`.
func chipSummary(_ c: GPIOChipEntry) -> String {
    if c.openError != 0 { return "\(c.name) (cannot open: \(SystemError.message(c.openError)))" }
    return "\(c.name) [\(c.label)] \(c.lines.count) lines"
}

/// Requests a resolved line, turning errno into the errors a person can act on.
public func requestLine(_ r: ResolvedLine, chips: [GPIOChipEntry], library: any GPIOLibrary, consumer: String,
                 _ request: GPIORequest) throws(GPIOError) -> any GPIORequestedLine {
    do throws(SystemError) {
        return try library.request(chip: r.chip, offset: r.offset, consumer: consumer, request)
    } catch {
        switch error.code {
        case EBUSY:
            let c = chips.first { $0.name.bytesEqual(r.chip) }
            let consumer = c.flatMap { r.offset < $0.consumers.count ? $0.consumers[r.offset] : nil } ?? ""
            throw .busy(line: r.display, consumer: consumer)
        case EACCES, EPERM: throw .permission(path: "/dev/" + r.chip)
        default: throw .system(line: r.display, error)
        }
    }
}

/// Errno values with which a kernel or pin controller refuses the bias flag: EINVAL
/// (kernels before 5.5 do not know it), EOPNOTSUPP, and the kernel-internal ENOTSUPP
/// (524) that some pin controllers leak.
func isBiasRefusal(_ code: Int32) -> Bool { code == EINVAL || code == EOPNOTSUPP || code == 524 }

// MARK: The button

/// The push-to-talk button on a GPIO line: edges from the kernel through `ButtonLogic`.
///
/// Use: `open`, watch `fd` in the loop and call `readEvents(now:)` when it is
/// readable; schedule `handleTimeout(now:)` at `nextDeadline` (a release settling, a
/// long press); `close()` at the end.
public final class GPIOButton {
    /// The edge-event descriptor to poll for `POLLIN`.
    public let fd: Int32
    /// Where the button is, e.g. `GPIO17 (gpiochip0:17)`.
    public let name: String
    /// Whether the kernel took the pull-up (false: an external pull-up is needed).
    public let pullUp: Bool
    public private(set) var logic: ButtonLogic
    let line: any GPIORequestedLine

    init(line: any GPIORequestedLine, name: String, pullUp: Bool, logic: ButtonLogic) {
        self.line = line
        self.fd = line.fd
        self.name = name
        self.pullUp = pullUp
        self.logic = logic
    }

    /// Opens the button: finds the line, requests both edges active-low with a pull-up
    /// (without it if refused, with a warning), and reads its level.
    public static func open(line id: GPIOLine, mode: PTTMode,
                            debounce: Duration = ButtonLogic.defaultDebounce,
                            longPress: Duration? = ButtonLogic.defaultLongPress,
                            library: any GPIOLibrary = LibGPIOD(),
                            now: Instant) throws(GPIOError) -> GPIOButton {
        let chips = library.chips()
        let resolved = try resolveLine(id, chips: chips)
        var pullUp = true
        var requested: any GPIORequestedLine
        do throws(GPIOError) {
            requested = try requestLine(resolved, chips: chips, library: library, consumer: "linnet-ptt", .edges(activeLow: true, pullUp: true))
        } catch {
            guard case .system(_, let e) = error, isBiasRefusal(e.code) else { throw error }
            Log.warning("\(resolved.display): the kernel refused the pull-up bias (\(SystemError.message(e.code))); "
                        + "requesting the button without it: fit an external pull-up (10 kΩ to 3.3 V)")
            pullUp = false
            requested = try requestLine(resolved, chips: chips, library: library, consumer: "linnet-ptt", .edges(activeLow: true, pullUp: false))
        }
        let held: Bool
        do throws(SystemError) {
            held = try requested.value()
        } catch {
            requested.release()
            throw .system(line: resolved.display, error)
        }
        return GPIOButton(line: requested, name: resolved.display, pullUp: pullUp,
                          logic: ButtonLogic(mode: mode, debounce: debounce, longPress: longPress, pressed: held, now: now))
    }

    /// Reads the pending edges (call when `fd` is readable) and returns the events they
    /// and any deadline up to `now` produced. A read error is returned as `GPIOError`
    /// and leaves the logic as it was.
    public func readEvents(now: Instant) throws(GPIOError) -> [ButtonEvent] {
        let edges: [GPIOEdge]
        do throws(SystemError) {
            edges = try line.readEdges()
        } catch {
            throw .system(line: name, error)
        }
        if let latest = edges.last?.timestamp {
            // Spacing from the kernel's stamps, anchored at now (see the module notes).
            for e in edges {
                let age = max(0, latest &- e.timestamp)
                logic.handleEdge(pressed: e.rising, at: now - .nanoseconds(age))
            }
        }
        logic.handleTimeout(now: now)
        return drain()
    }

    /// Handles deadlines up to `now` (schedule it at `nextDeadline`).
    public func handleTimeout(now: Instant) -> [ButtonEvent] {
        logic.handleTimeout(now: now)
        return drain()
    }

    /// When `handleTimeout` should next run; nil when nothing is pending.
    public var nextDeadline: Instant? { logic.nextDeadline }

    /// Whether the button currently has the microphone open.
    public var talking: Bool { logic.talking }

    public func close() { line.release() }

    private func drain() -> [ButtonEvent] {
        var out: [ButtonEvent] = []
        while case .event(let e) = logic.pollOutput() { out.append(e) }
        return out
    }
}
