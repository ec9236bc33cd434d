import Testing
import Foundation

/// `board/image/linnet-provision`, the first-boot step of the SD card image (issue 39),
/// run as the image runs it but on folders of this machine: a boot folder (the FAT
/// partition) and a root (`--root`) holding the installed package's board profiles.
/// What it installed, with which mode, what it erased from the "card", and what the
/// report says are read back from the files themselves.
struct ProvisionBench {
    let base: URL
    var boot: URL { base.appendingPathComponent("boot") }
    var root: URL { base.appendingPathComponent("root") }
    /// A stand-in for /sys/class/leds: the Pi's activity LED, its trigger as the kernel
    /// lists it (the selected one in brackets), and the timer trigger's two delays.
    var leds: URL { base.appendingPathComponent("leds") }
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let configTxt = "# the firmware's own settings\narm_64bit=1\n"

    init() throws {
        base = FileManager.default.temporaryDirectory.appendingPathComponent("linnet-provision-\(UUID().uuidString)")
        let fm = FileManager.default
        try fm.createDirectory(at: boot, withIntermediateDirectories: true)
        try fm.createDirectory(at: root.appendingPathComponent("etc"), withIntermediateDirectories: true)
        try Self.configTxt.write(to: boot.appendingPathComponent("config.txt"), atomically: true, encoding: .utf8)
        try fm.createDirectory(at: leds.appendingPathComponent("ACT"), withIntermediateDirectories: true)
        for (file, text) in [("trigger", "none timer heartbeat [mmc0]\n"), ("delay_on", "500\n"), ("delay_off", "500\n")] {
            try text.write(to: leds.appendingPathComponent("ACT/\(file)"), atomically: false, encoding: .utf8)
        }
        try "127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n".write(to: root.appendingPathComponent("etc/hosts"), atomically: true, encoding: .utf8)
        // The profiles as the package installs them (scripts/build-deb.sh: every folder
        // of board/ with a linnet.conf).
        let profiles = root.appendingPathComponent("usr/share/linnet/board")
        try fm.createDirectory(at: profiles, withIntermediateDirectories: true)
        for name in try fm.contentsOfDirectory(atPath: Self.repository.appendingPathComponent("board").path) {
            let src = Self.repository.appendingPathComponent("board/\(name)")
            guard fm.fileExists(atPath: src.appendingPathComponent("linnet.conf").path) else { continue }
            try fm.copyItem(at: src, to: profiles.appendingPathComponent(name))
        }
    }

    func remove() { try? FileManager.default.removeItem(at: base) }

    func put(_ name: String, _ text: String) throws {
        try text.write(to: boot.appendingPathComponent(name), atomically: false, encoding: .utf8)
    }

    func onCard(_ name: String) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: boot.appendingPathComponent(name).path)) != nil
    }

    func installed(_ path: String) -> String? {
        try? String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// What was last written to the activity LED's FILE.
    func led(_ file: String) -> String? {
        try? String(contentsOf: leds.appendingPathComponent("ACT/\(file)"), encoding: .utf8)
    }

    func mode(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: root.appendingPathComponent(path).path))?[.posixPermissions] as? Int
    }

    /// The report with its CR LF line ends (for Windows' Notepad) made LF.
    var report: String? {
        guard let raw = try? String(contentsOf: boot.appendingPathComponent("linnet-firstboot.txt"), encoding: .utf8) else { return nil }
        #expect(raw.utf8.last == 0x0A && raw.utf8.filter { $0 == 0x0A }.count == raw.utf8.filter { $0 == 0x0D }.count)
        return raw.replacingOccurrences(of: "\r\n", with: "\n")
    }

    func run() throws -> (status: Int32, out: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        p.arguments = [Self.repository.appendingPathComponent("board/image/linnet-provision").path, "--boot", boot.path, "--root", root.path, "--leds", leds.path]
        p.environment = ProcessInfo.processInfo.environment.merging(["LINNET": Linnet.executable.path]) { $1 }
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self))
    }

    /// A public key made by ssh-keygen, as a user's `id_ed25519.pub`.
    func publicKey() throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/ssh-keygen")
        p.arguments = ["-q", "-t", "ed25519", "-N", "", "-C", "maker@laptop", "-f", base.appendingPathComponent("key").path]
        try p.run()
        p.waitUntilExit()
        return try String(contentsOf: base.appendingPathComponent("key.pub"), encoding: .utf8)
    }
}

@Suite struct ProvisionTests {
    static let token = "sk-proj-0123456789abcdefABCDEF_-x"
    static let passphrases = ["correct horse battery", "second network pass"]

    /// Everything a fleet script drops in, with Windows line ends and Notepad's `.txt`:
    /// each file installed where the service and the system read it, with its mode, and
    /// gone from the card; the report names each, without a secret.
    @Test func aCardWithEverythingProvisionsTheBoard() throws {
        let b = try ProvisionBench()
        defer { b.remove() }
        let conf = try String(contentsOf: ProvisionBench.repository.appendingPathComponent("board/usb/linnet.conf"), encoding: .utf8)
        try b.put("linnet.conf", conf.replacingOccurrences(of: "\n", with: "\r\n"))
        try b.put("token.txt", Self.token + "\r\n")
        try b.put("wifi.conf", """
            # home and the workshop
            country = GB
            ssid = Home Net
            passphrase = \(Self.passphrases[0])

            ssid = Workshop
            passphrase = \(Self.passphrases[1])
            ssid = Cafe
            open = yes
            """)
        try b.put("board", "respeaker-2mic\n")
        // Debian's raspi-firmware, as on the image: its config.txt is rewritten at each
        // kernel update from this folder's raspi-firmware-custom.
        try FileManager.default.createDirectory(at: b.root.appendingPathComponent("etc/default"), withIntermediateDirectories: true)
        try "ROOTPART=LABEL=LINNETROOT\n".write(to: b.root.appendingPathComponent("etc/default/raspi-firmware"), atomically: true, encoding: .utf8)
        try b.put("hostname", "kiosk-07\n")
        let key = try b.publicKey()
        try b.put("authorized_keys", "# the maker\n" + key)
        let r = try b.run()
        #expect(r.status == 0, "\(r.out)")
        #expect(r.out.contains("reboot: needed"))
        #expect(b.led("trigger") == "none timer heartbeat [mmc0]\n", "the LED was changed with nothing refused")

        #expect(b.installed("etc/linnet/token") == Self.token + "\n")
        #expect(b.mode("etc/linnet/token") == 0o600)
        #expect(b.installed("etc/linnet/linnet.conf") == conf)
        #expect(b.mode("etc/linnet/linnet.conf") == 0o644)
        let home = b.installed("etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection")
        #expect(home?.contains("ssid=Home Net\n") == true && home?.contains("psk=\(Self.passphrases[0])\n") == true)
        #expect(b.mode("etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection") == 0o600)
        #expect(b.installed("etc/NetworkManager/system-connections/linnet-wifi-2.nmconnection")?.contains("psk=\(Self.passphrases[1])\n") == true)
        let cafe = b.installed("etc/NetworkManager/system-connections/linnet-wifi-3.nmconnection")
        #expect(cafe?.contains("ssid=Cafe\n") == true && cafe?.contains("[wifi-security]") == false)
        #expect(b.installed("etc/modprobe.d/linnet-wifi-country.conf") == "options cfg80211 ieee80211_regdom=GB\n")
        #expect(b.installed("etc/asound.conf") == (try String(contentsOf: ProvisionBench.repository.appendingPathComponent("board/respeaker-2mic/asound.conf"), encoding: .utf8)))
        #expect(b.installed("etc/hostname") == "kiosk-07\n")
        #expect(b.installed("etc/hosts") == "127.0.0.1\tlocalhost\n127.0.1.1\tkiosk-07\n")
        #expect(b.installed("root/.ssh/authorized_keys") == "# the maker\n" + key)
        #expect(b.mode("root/.ssh/authorized_keys") == 0o600)

        // The overlays in config.txt, after the firmware's own lines, between markers.
        let configTxt = try String(contentsOf: b.boot.appendingPathComponent("config.txt"), encoding: .utf8)
        #expect(configTxt.hasPrefix(ProvisionBench.configTxt + "# linnet board: begin\n"))
        #expect(configTxt.contains("dtoverlay=respeaker-2mic-v2_0\n") && configTxt.hasSuffix("# linnet board: end\n"))
        #expect(b.installed("etc/default/raspi-firmware-custom") == (try String(contentsOf: ProvisionBench.repository.appendingPathComponent("board/respeaker-2mic/config.txt"), encoding: .utf8)))

        // Off the card: the secrets and everything installed.
        for name in ["token.txt", "wifi.conf", "linnet.conf", "board", "hostname", "authorized_keys"] {
            #expect(!b.onCard(name), "\(name) is still on the card")
        }
        let report = try #require(b.report)
        for line in ["token: ok", "wifi.conf: ok, 3 network(s) installed, country GB", "board: ok, profile respeaker-2mic",
                     "linnet.conf: ok", "hostname: ok, kiosk-07", "authorized_keys: ok, 1 key(s)"] {
            #expect(report.contains(line), "no '\(line)' in \(report)")
        }
        for secret in [Self.token] + Self.passphrases {
            #expect(!report.contains(secret) && !r.out.contains(secret), "a secret in the report or the journal")
        }

        // A later wifi.conf is the whole list: the three networks make way for one.
        // The board unchanged: config.txt is not rewritten, no reboot.
        try b.put("wifi.conf", "ssid = Office\npassphrase = another passphrase\n")
        try b.put("board", "respeaker-2mic")
        let again = try b.run()
        #expect(again.status == 0 && !again.out.contains("reboot: needed"), "\(again.out)")
        let profiles = try FileManager.default.contentsOfDirectory(atPath: b.root.appendingPathComponent("etc/NetworkManager/system-connections").path)
        #expect(profiles.sorted() == ["linnet-wifi-1.nmconnection"])
        #expect(b.installed("etc/NetworkManager/system-connections/linnet-wifi-1.nmconnection")?.contains("ssid=Office\n") == true)
        #expect(try String(contentsOf: b.boot.appendingPathComponent("config.txt"), encoding: .utf8) == configTxt)
    }

    /// Each bad file named with its line and the fix; nothing of it installed; a bad file
    /// holding a secret erased all the same, one without left to be fixed; the exit
    /// status says a file was refused.
    @Test func badFilesAreReportedWithTheirLineAndNotInstalled() throws {
        let b = try ProvisionBench()
        defer { b.remove() }
        try b.put("token", "first line\nsecond line\n")
        try b.put("wifi.conf", "ssid = Home\npassphrase = short\n")
        try b.put("board", "respeaker-4mic\n")
        try b.put("hostname", "-kiosk-\n")
        try b.put("linnet.conf", "capture = default\nfrobnicate = 3\n")
        try b.put("authorized_keys", "ssh-ed25519 not-a-key me@laptop\n")
        let r = try b.run()
        #expect(r.status == 65, "\(r.out)")
        let report = try #require(b.report)
        for line in ["token: FAILED, the file has 2 lines", "wifi.conf line 2: FAILED, a WPA passphrase is 8 to 63",
                     "board: FAILED, 'respeaker-4mic' is not a board profile; write one of: aiy-voice-hat i2s-mems respeaker-2mic usb\n",
                     "hostname: FAILED, '-kiosk-' is not a host name", "linnet.conf: FAILED, linnet.conf:2: unknown key 'frobnicate'",
                     "authorized_keys line 1: FAILED"] {
            #expect(report.contains(line), "no '\(line)' in \(report)")
        }
        #expect(!report.contains("short") && !report.contains("first line"))
        for path in ["etc/linnet/token", "etc/linnet/linnet.conf", "etc/asound.conf", "etc/hostname", "root/.ssh/authorized_keys"] {
            #expect(b.installed(path) == nil, "\(path) installed from a bad file")
        }
        #expect(!FileManager.default.fileExists(atPath: b.root.appendingPathComponent("etc/NetworkManager").path))
        #expect(!b.onCard("token") && !b.onCard("wifi.conf"))
        #expect(b.onCard("board") && b.onCard("hostname") && b.onCard("linnet.conf") && b.onCard("authorized_keys"))
        #expect(try String(contentsOf: b.boot.appendingPathComponent("config.txt"), encoding: .utf8) == ProvisionBench.configTxt)
        // The board has no screen: its activity LED blinks fast.
        #expect(b.led("trigger") == "timer\n" && b.led("delay_on") == "100\n" && b.led("delay_off") == "100\n")
        #expect(r.out.contains("ACT LED blinking fast"))
    }

    /// What a hostile or broken card holds: a symlink where the token should be is
    /// neither followed nor read, a FIFO does not hang the boot, two spellings of one
    /// file are refused, and an oversized file is not read.
    @Test func linksFifosAndDuplicatesAreRefused() throws {
        let b = try ProvisionBench()
        defer { b.remove() }
        let secret = b.base.appendingPathComponent("shadow")
        try "root:$6$secret-hash:19000::::::\n".write(to: secret, atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: b.boot.appendingPathComponent("token").path, withDestinationPath: secret.path)
        #expect(mkfifo(b.boot.appendingPathComponent("authorized_keys").path, 0o644) == 0)
        try b.put("hostname", "one\n")
        try b.put("hostname.txt", "two\n")
        try b.put("wifi.conf", String(repeating: "# padding\n", count: 10_000))
        let r = try b.run()
        #expect(r.status == 65, "\(r.out)")
        let report = try #require(b.report)
        #expect(report.contains("token: FAILED, token is not a regular file"))
        #expect(report.contains("authorized_keys: FAILED, authorized_keys is not a regular file"))
        #expect(report.contains("hostname: FAILED, both hostname and hostname.txt are on the card"))
        #expect(report.contains("wifi.conf: FAILED, wifi.conf is larger than 65536 bytes"))
        #expect(b.installed("etc/linnet/token") == nil && b.installed("etc/hostname") == nil)
        // The link went, and what it pointed at is untouched.
        #expect(!b.onCard("token"))
        #expect(try String(contentsOf: secret, encoding: .utf8) == "root:$6$secret-hash:19000::::::\n")
    }

    /// A card with nothing for Linnet: nothing changes, no report.
    @Test func anEmptyCardChangesNothing() throws {
        let b = try ProvisionBench()
        defer { b.remove() }
        let r = try b.run()
        #expect(r.status == 0 && r.out.isEmpty, "\(r.out)")
        #expect(b.report == nil)
        #expect(try String(contentsOf: b.boot.appendingPathComponent("config.txt"), encoding: .utf8) == ProvisionBench.configTxt)
    }
}
