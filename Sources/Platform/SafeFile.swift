import CSystem
import Wire

/// Replaces a small file whole, the way root daemons must (systemd's `write_string_file`
/// with a temporary file and rename): a reader never sees half of it, and nothing
/// planted in the directory can redirect the write.
///
/// - The directory must belong to us or to root, and be writable by nobody else unless
///   it has the sticky bit (`/tmp`: others cannot rename or remove our files there).
///   Otherwise someone else could swap what we are about to write through.
/// - The temporary file is created fresh with `O_CREAT | O_EXCL | O_NOFOLLOW` under a
///   random name, relative to the opened directory: a symlink planted at any name
///   (`status.json.tmp → /etc/passwd`) is never followed, only refused.
/// - The target, if it exists, must be a regular file (`lstat`): `/dev/null`, `/dev/full`,
///   a FIFO or a symlink is refused, never replaced — `--status-file /dev/null` must not
///   turn the null device into a file for every other process.
/// - `rename` replaces the target atomically; on any failure the temporary file is removed.
/// - `durable`: the file's bytes are on the disk before the rename, and the rename is
///   before `replace` returns (fsync of the file, then of the directory): state a power
///   cut must not take back once written (the day's usage, the open sessions' close
///   URLs). Without it, ext4 keeps the replacement atomic but may lose the last few
///   seconds of renames on a cut (its commit interval); the virtual board's power cuts
///   found a usage count that went back that way.
public enum SafeFile {
    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        case directory(path: String, reason: String)
        case target(path: String, reason: String)
        case system(SystemError)

        public var description: String {
            switch self {
            case .directory(let p, let r): return "the directory '\(p)' \(r)"
            case .target(let p, let r): return "'\(p)' \(r)"
            case .system(let e): return e.description
            }
        }
    }

    /// Writes `bytes` to `path` (mode 0644) by temporary file and rename; `durable`
    /// also waits until both are on the disk.
    public static func replace(_ path: String, with bytes: [UInt8], durable: Bool = false) throws(Failure) {
        let (dir, name) = split(path)
        // A path component is bytes to the kernel (POSIX), so "." and ".." are matched as bytes.
        guard !name.isEmpty, !name.bytesEqual("."), !name.bytesEqual("..") else { throw .target(path: path, reason: "is not a file name") }
        let dfd = csystem_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        guard dfd >= 0 else { throw .directory(path: dir, reason: "cannot be opened: \(SystemError.message(csystem_errno()))") }
        defer { closeDescriptor(dfd) }
        var st = stat()
        guard fstat(dfd, &st) == 0 else { throw .system(SystemError("fstat \(dir)", code: csystem_errno())) }
        let me = geteuid()
        if st.st_uid != me && st.st_uid != 0 {
            throw .directory(path: dir, reason: "belongs to another user (uid \(st.st_uid)): not writing there")
        }
        let othersWrite = st.st_mode & 0o022 != 0  // S_IWGRP | S_IWOTH (macros Swift does not import)
        if othersWrite && st.st_mode & UInt32(S_ISVTX) == 0 {
            throw .directory(path: dir, reason: "is writable by others without the sticky bit: not writing there")
        }
        var target = stat()
        if fstatat(dfd, name, &target, AT_SYMLINK_NOFOLLOW) == 0 {
            guard target.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG) else {
                throw .target(path: path, reason: "exists and is not a regular file (\(kind(target.st_mode))): not replacing it")
            }
        } else if csystem_errno() != ENOENT {
            throw .system(SystemError("stat \(path)", code: csystem_errno()))
        }
        var random: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &random) { getrandom($0.baseAddress, $0.count, 0) }
        let temporary = "." + name + ".tmp." + String(random, radix: 16)
        let fd = csystem_openat(dfd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw .system(SystemError("create a temporary file in \(dir)", code: csystem_errno())) }
        var ok = true
        var error = SystemError("write", code: 0)
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if csystem_errno() == EINTR { continue }
                    ok = false
                    error = SystemError("write \(path)", code: csystem_errno())
                    return
                }
                offset += n
            }
        }
        if ok && durable && fsync(fd) != 0 {
            ok = false
            error = SystemError("fsync \(path)", code: csystem_errno())
        }
        closeDescriptor(fd)
        if ok && renameat(dfd, temporary, dfd, name) != 0 {
            ok = false
            error = SystemError("rename to \(path)", code: csystem_errno())
        }
        if !ok {
            _ = unlinkat(dfd, temporary, 0)
            throw .system(error)
        }
        // The rename is a change of the directory: on the disk once the directory is.
        if durable && fsync(dfd) != 0 {
            throw .system(SystemError("fsync \(dir)", code: csystem_errno()))
        }
    }

    static func split(_ path: String) -> (String, String) {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return (".", path) }
        let dir = String(path[..<slash])
        let name = String(path[path.utf8.index(after: slash)...])
        return (dir.isEmpty ? "/" : dir, name)
    }

    static func kind(_ mode: UInt32) -> String {
        switch mode & UInt32(S_IFMT) {
        case UInt32(S_IFLNK): return "a symbolic link"
        case UInt32(S_IFCHR): return "a character device"
        case UInt32(S_IFBLK): return "a block device"
        case UInt32(S_IFIFO): return "a FIFO"
        case UInt32(S_IFDIR): return "a directory"
        case UInt32(S_IFSOCK): return "a socket"
        default: return "not a regular file"
        }
    }
}
