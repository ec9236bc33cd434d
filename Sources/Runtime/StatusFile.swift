// The status file for a kiosk UI, as one writer for the whole run: the command writes
// it before the runtime exists (`new`, `waiting` for the sound device), the runtime on
// each state change and stats tick.
import Platform

/// Rewritten whole (temp file + rename, so a reader never sees half of it); a path that
/// is not safe to write is said once and dropped (Platform/SafeFile.swift).
public struct StatusFile {
    public private(set) var path: String?
    /// What the file is, for the one warning (`status file`, `metrics file`).
    let label: String

    public init(path: String?, label: String = "status file") {
        self.path = path
        self.label = label
    }

    public mutating func write(_ bytes: [UInt8]) {
        guard let path else { return }
        do throws(SafeFile.Failure) {
            try SafeFile.replace(path, with: bytes)
        } catch {
            Log.warning("\(label): \(error); not writing it any more")
            self.path = nil
        }
    }
}
