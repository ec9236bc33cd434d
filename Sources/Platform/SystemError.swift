import CSystem

/// A failed system call: which call, and the errno it left.
public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The call that failed (`"bind"`, `"snd_pcm_open"`…).
    public var call: String
    /// The errno value (positive).
    public var code: Int32

    public init(_ call: String, code: Int32) {
        self.call = call
        self.code = code
    }

    public var isWouldBlock: Bool { code == EAGAIN || code == EWOULDBLOCK }

    /// `"bind: Address already in use (errno 98)"`.
    public var description: String {
        "\(call): \(SystemError.message(code)) (errno \(code))"
    }

    public static func message(_ code: Int32) -> String {
        guard let p = strerror(code) else { return "unknown error" }
        return String(cString: p)
    }
}

/// The syscall funnel: runs `body` until it does not fail with `EINTR`; a negative
/// result becomes a `SystemError` carrying errno.
///
/// `call` is an autoclosure: it names the call only for the error, so a name built by
/// interpolation (`"sendto \(address)"`) costs nothing on success. Built eagerly it would
/// be a string formatted and freed for every datagram sent (~1,900 instructions and a
/// few allocations a packet).
@inline(__always)
public func sys<T: BinaryInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let r = body()
        if r >= 0 { return r }
        let e = csystem_errno()
        if e == EINTR { continue }
        throw SystemError(call(), code: e)
    }
}

/// The outcome of a non-blocking call: done, or it would have blocked.
public enum IOResult<T> {
    case done(T)
    case wouldBlock
}

/// Like `sys`, but `EAGAIN`/`EWOULDBLOCK` come back as `.wouldBlock`, not an error.
@inline(__always)
public func sysNonBlocking<T: BinaryInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> IOResult<T> {
    do throws(SystemError) {
        return .done(try sys(call(), body))
    } catch {
        if error.isWouldBlock { return .wouldBlock }
        throw error
    }
}

/// Closes a descriptor, ignoring EINTR (Linux always releases the descriptor).
public func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}
