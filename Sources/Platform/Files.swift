import CSystem
import Wire

/// Why a file a user named (token, config, CA file, WAV input, send file…) could not be
/// read, worded so the person can fix it: the system's reason plus what to do.
public enum FileReadError: Error, Equatable, Sendable, CustomStringConvertible {
    /// open(2) failed: missing, permission, a directory on the way that is not one…
    /// `ownerIsRoot`: the file (seen by stat) belongs to root and we are not root.
    case open(path: String, code: Int32, ownerIsRoot: Bool)
    /// It opened but is not a regular file (a FIFO, a directory, a device): reading one
    /// could block forever or never end.
    case notRegular(path: String, kind: String)
    /// Larger than the caller's limit (a wrong path: a recording, a log).
    case tooLarge(path: String, limit: Int)
    /// read(2) failed after the file opened (EIO…).
    case read(path: String, code: Int32)

    public var path: String {
        switch self {
        case .open(let p, _, _), .notRegular(let p, _), .tooLarge(let p, _), .read(let p, _): return p
        }
    }

    /// Whether the file is simply not there (open(2) said ENOENT): for the optional files
    /// a first run has not written yet, as opposed to one that cannot be read.
    public var isMissing: Bool {
        if case .open(_, let code, _) = self { return code == ENOENT }
        return false
    }

    /// The errno for `open`/`read`; nil for the others.
    public var code: Int32? {
        switch self {
        case .open(_, let c, _), .read(_, let c): return c
        case .notRegular, .tooLarge: return nil
        }
    }

    /// Why, without the path: `Permission denied (root only: use sudo)`, `a FIFO (named
    /// pipe), not a regular file`, `larger than 1 MiB`.
    public var reason: String {
        switch self {
        case .open(_, let code, let ownerIsRoot):
            let text = SystemError.message(code)
            if code == EACCES || code == EPERM {
                return ownerIsRoot ? "\(text) (root only: use sudo, or make it readable by this user)"
                    : "\(text) (make it readable by this user)"
            }
            return text
        case .notRegular(_, let kind): return "\(kind), not a regular file"
        case .tooLarge(_, let limit): return "larger than \(byteSize(limit))"
        case .read(_, let code): return SystemError.message(code)
        }
    }

    /// `'/etc/linnet/token': Permission denied (root only: use sudo, …)`.
    public var description: String { "'\(path)': \(reason)" }
}

/// What `readRegularFile` found besides the bytes.
public struct RegularFileInfo: Sendable, Equatable {
    /// The permission bits (`st_mode & 0o7777`).
    public var mode: UInt32
    public var ownerUID: UInt32
}

/// Opens `path` for reading without ever blocking in open(2), and only if it is a
/// regular file. A FIFO opened plainly blocks until a writer appears (forever, with no
/// output), so open with `O_NONBLOCK`, `fstat`, refuse anything but a regular file, then
/// clear `O_NONBLOCK` (regular files ignore it, but the descriptor should read plainly).
/// Returns the descriptor (close it) and its `stat`.
public func openRegularFile(_ path: String) throws(FileReadError) -> (fd: Int32, info: stat) {
    let fd = csystem_open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0)
    if fd < 0 {
        let code = csystem_errno()
        var seen = stat()
        let rootOwned = stat(path, &seen) == 0 && seen.st_uid == 0 && geteuid() != 0
        throw .open(path: path, code: code, ownerIsRoot: rootOwned)
    }
    var info = stat()
    if fstat(fd, &info) != 0 {
        let code = csystem_errno()
        closeDescriptor(fd)
        throw .read(path: path, code: code)
    }
    let type = UInt32(info.st_mode) & UInt32(S_IFMT)
    guard type == UInt32(S_IFREG) else {
        closeDescriptor(fd)
        throw .notRegular(path: path, kind: fileKind(type))
    }
    _ = csystem_fcntl_int(fd, F_SETFL, csystem_fcntl_int(fd, F_GETFL, 0) & ~O_NONBLOCK)
    return (fd, info)
}

/// Reads a whole regular file of at most `limit` bytes (see `openRegularFile`).
public func readRegularFile(_ path: String, limit: Int) throws(FileReadError) -> (bytes: [UInt8], info: RegularFileInfo) {
    let (fd, st) = try openRegularFile(path)
    defer { closeDescriptor(fd) }
    if Int(st.st_size) > limit { throw .tooLarge(path: path, limit: limit) }
    var out: [UInt8] = []
    out.reserveCapacity(Int(st.st_size))
    var buffer = [UInt8](repeating: 0, count: 16_384)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            let code = csystem_errno()
            if code == EINTR { continue }
            throw .read(path: path, code: code)
        }
        if n == 0 { break }
        out += buffer[0..<n]
        // The file may grow while it is read (a log someone named by mistake).
        if out.count > limit { throw .tooLarge(path: path, limit: limit) }
    }
    return (out, RegularFileInfo(mode: UInt32(st.st_mode) & 0o7777, ownerUID: UInt32(st.st_uid)))
}

/// Opens `path` for writing (flags such as `O_CREAT | O_TRUNC` or `O_APPEND` added)
/// without blocking in open(2): a FIFO with no reader would otherwise wait forever for
/// one. Returns the descriptor in blocking mode, or the errno. A FIFO with no reader
/// fails with `ENXIO`, which `writeOpenReason` words.
///
/// In a directory others can write (`/tmp`, a shared drop folder), whatever sits at
/// `path` may have been planted there to make a process running as root append to or
/// truncate a file it names (CWE-59). There, as the kernel's `protected_symlinks` and
/// `protected_regular` do for sticky directories, but for every such directory and
/// whatever the sysctls say: a symlink is followed only when it is ours, an existing
/// file is written only when it is ours, and the final open never follows a symlink
/// that appears after the check (`O_NOFOLLOW`). Elsewhere (`/dev/stdout`, a log
/// directory of the service's own) paths are opened as given.
public func openForWriting(_ path: String, flags: Int32, mode: UInt32 = 0o644) -> Result<Int32, SystemError> {
    var extra: Int32 = 0
    let shared = directoryOthersCanWrite(of: path)
    if shared {
        var st = stat()
        if lstat(path, &st) == 0 {
            let mine = st.st_uid == geteuid()
            if st.st_mode & UInt32(S_IFMT) == UInt32(S_IFLNK) {
                guard mine else { return .failure(SystemError("open", code: refusedSymlink)) }
            } else {
                guard mine || st.st_mode & UInt32(S_IFMT) != UInt32(S_IFREG) else { return .failure(SystemError("open", code: refusedForeignFile)) }
                extra = O_NOFOLLOW
            }
        } else {
            extra = O_NOFOLLOW
        }
    }
    let fd = csystem_open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | flags | extra, mode)
    guard fd >= 0 else {
        let code = csystem_errno()
        // ELOOP under O_NOFOLLOW: a symlink was put there between the check and the open.
        return .failure(SystemError("open", code: code == ELOOP && extra != 0 ? refusedSymlink : code))
    }
    if shared {
        // A file someone else made (or hard-linked) there between the check and the open.
        var st = stat()
        if fstat(fd, &st) == 0, st.st_mode & UInt32(S_IFMT) == UInt32(S_IFREG), st.st_uid != geteuid() {
            closeDescriptor(fd)
            return .failure(SystemError("open", code: refusedForeignFile))
        }
    }
    _ = csystem_fcntl_int(fd, F_SETFL, csystem_fcntl_int(fd, F_GETFL, 0) & ~O_NONBLOCK)
    return .success(fd)
}

/// `openForWriting`'s own refusals, as codes no errno uses.
let refusedSymlink: Int32 = -1_001
let refusedForeignFile: Int32 = -1_002

/// Whether the directory holding `path` is writable by group or others (sticky or not).
func directoryOthersCanWrite(of path: String) -> Bool {
    var dir = "."
    if let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) {
        dir = slash == path.utf8.startIndex ? "/" : String(Substring(path.utf8[..<slash]))
    }
    var st = stat()
    guard stat(dir, &st) == 0 else { return false }
    return st.st_mode & 0o022 != 0  // S_IWGRP | S_IWOTH (macros Swift does not import)
}

/// The reason an `openForWriting` failure shows: strerror, except for the FIFO case and
/// its own refusals.
public func writeOpenReason(_ error: SystemError) -> String {
    switch error.code {
    case ENXIO: return "a FIFO (named pipe) that no process has open for reading"
    case refusedSymlink: return "a symlink another user owns, in a directory others can write: not following it (write somewhere only this user can, or remove the link)"
    case refusedForeignFile: return "a file another user owns, in a directory others can write: not writing to it (remove it, or write elsewhere)"
    default: return SystemError.message(error.code)
    }
}

/// `1 MiB`, `64 KiB`, `100 bytes`.
public func byteSize(_ n: Int) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 { return "\(n >> 20) MiB" }
    if n >= 1 << 10 && n % (1 << 10) == 0 { return "\(n >> 10) KiB" }
    return "\(n) bytes"
}

func fileKind(_ type: UInt32) -> String {
    switch type {
    case UInt32(S_IFIFO): return "a FIFO (named pipe)"
    case UInt32(S_IFDIR): return "a directory"
    case UInt32(S_IFCHR): return "a character device"
    case UInt32(S_IFBLK): return "a block device"
    case UInt32(S_IFSOCK): return "a socket"
    default: return "a special file"
    }
}

/// The user a service runs as, and becoming it: `linnet check` run by root checks what
/// the service will be able to do (open the sound card, the GPIO chips), not what root
/// can, which is everything.
public struct ServiceUser: Sendable, Equatable {
    public var name: String
    public var uid: UInt32
    public var gid: UInt32
    /// The supplementary groups the unit gives it (`SupplementaryGroups=`), those of
    /// them that exist here, by name and id.
    public var groups: [(name: String, gid: UInt32)]

    public static func == (a: ServiceUser, b: ServiceUser) -> Bool {
        a.name.bytesEqual(b.name) && a.uid == b.uid && a.gid == b.gid && a.groups.map { $0.gid } == b.groups.map { $0.gid }
    }

    /// `name` and the groups the unit names, or nil when there is no such user.
    public static func lookup(_ name: String, supplementary: [String]) -> ServiceUser? {
        var uid: UInt32 = 0, gid: UInt32 = 0
        guard csystem_user(name, &uid, &gid) != 0 else { return nil }
        var groups: [(name: String, gid: UInt32)] = []
        for g in supplementary {
            var id: UInt32 = 0
            if csystem_group(g, &id) != 0 { groups.append((g, id)) }
        }
        return ServiceUser(name: name, uid: uid, gid: gid, groups: groups)
    }

    /// Becomes this user for the rest of the process (no way back); the errno on failure.
    public func become() -> Result<Void, SystemError> {
        var ids = groups.map { $0.gid }
        let r = ids.withUnsafeMutableBufferPointer { csystem_become(uid, gid, $0.baseAddress, Int32($0.count)) }
        return r == 0 ? .success(()) : .failure(SystemError("setresuid", code: -r))
    }
}
