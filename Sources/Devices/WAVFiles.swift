import CSystem
import Wire
import Audio
import Platform

/// Why a file could not be used as a capture source or playback sink.
public enum FileError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The system refused to open it (missing file, permission, a planted link…).
    case system(path: String, SystemError)
    /// Writing failed once it was open (a full disk, `/dev/full`, `EFBIG`): what was
    /// to be recorded is incomplete (EX_IOERR, 74), not a configuration to fix.
    case write(path: String, SystemError)
    /// The file is not a WAV Linnet can read.
    case wav(path: String, WAVError)
    /// The file holds more samples than Linnet will load into memory.
    case tooLarge(path: String, bytes: Int)
    /// It cannot be opened for reading, or is not a regular file (a FIFO would block
    /// the open forever); the error says why and what to do.
    case unreadable(FileReadError)

    public var description: String {
        switch self {
        case .unreadable(let e): return e.description
        case .system(let path, let e): return "'\(path)': \(writeOpenReason(e))"
        case .write(let path, let e): return "'\(path)': cannot write: \(SystemError.message(e.code))"
        case .wav(let path, let e): return "'\(path)': \(e.description)"
        case .tooLarge(let path, let bytes): return "'\(path)': \(bytes / 1_048_576) MiB of samples is more than the 256 MiB Linnet loads"
        }
    }
}

/// Reads the sample data of a WAV file in its own encoding, period by period.
public final class WAVReader {
    public let path: String
    public let format: WAVFormat
    let fd: Int32
    /// Sample bytes left according to the header (clamped to the file's real size).
    var remaining: Int
    public var remainingBytes: Int { remaining }

    public init(path: String) throws(FileError) {
        self.path = path
        let fd: Int32
        let info: stat
        do throws(FileReadError) {
            (fd, info) = try openRegularFile(path)
        } catch {
            throw .unreadable(error)
        }
        var header = [UInt8](repeating: 0, count: 65_536)
        let n = header.withUnsafeMutableBytes { CSystem.read(fd, $0.baseAddress, $0.count) }
        let parsed: WAVFormat
        do throws(WAVError) {
            parsed = try Array(header[0..<max(0, n)]).withBytes { (raw: UnsafeRawBufferPointer) throws(WAVError) in try WAV.parse(raw) }
        } catch {
            closeDescriptor(fd)
            throw .wav(path: path, error)
        }
        let available = max(0, Int(info.st_size) - parsed.dataOffset)
        // A header a killed recorder never patched (0 or 0xFFFFFFFF) or one that claims
        // more than is there: read what the file really holds.
        remaining = parsed.dataLength == 0 || parsed.dataLength > available ? available : parsed.dataLength
        remaining -= remaining % parsed.bytesPerFrame
        lseek(fd, off_t(parsed.dataOffset), SEEK_SET)
        self.fd = fd
        self.format = parsed
    }

    deinit { closeDescriptor(fd) }

    /// Reads up to `buffer.count` bytes of whole frames; returns the bytes read, 0 at the end.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(FileError) -> Int {
        let want = min(buffer.count - buffer.count % format.bytesPerFrame, remaining)
        var done = 0
        while done < want {
            let n: Int
            do throws(SystemError) {
                n = try sys("read") { CSystem.read(fd, buffer.baseAddress! + done, want - done) }
            } catch {
                throw .system(path: path, error)
            }
            if n == 0 { break }
            done += n
        }
        done -= done % format.bytesPerFrame
        remaining -= done
        return done
    }
}

/// Writes 16-bit PCM to a WAV file; the header's sizes are patched on `close()` so the
/// file stays readable even if the process dies (the reader then trusts the file size).
public final class WAVWriter {
    public let path: String
    public let sampleRate: Int
    public let channels: Int
    var fd: Int32
    /// Sample bytes in the file (a failed write may have left part of a frame).
    public private(set) var dataBytes = 0
    /// The first write error (a full disk, `EFBIG` past `LimitFSIZE=`, a FIFO whose
    /// reader left). Nothing more is written after it: a partly written frame would
    /// shift every later sample. The owner reports it once and carries on.
    public private(set) var failure: FileError?

    /// Creates (or truncates) `path`. Opened without blocking: a FIFO with no reader is
    /// an error here rather than a hang.
    public init(path: String, sampleRate: Int, channels: Int) throws(FileError) {
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        switch openForWriting(path, flags: O_CREAT | O_TRUNC) {
        case .success(let f): fd = f
        case .failure(let e): throw .system(path: path, e)
        }
        try write(bytes: WAV.header(sampleRate: sampleRate, channels: channels, dataLength: 0))
        dataBytes = 0
    }

    // Owners call close() and report what it throws; this is only for one dropped
    // without it, where there is no one to tell.
    deinit { try? close() }

    /// Appends interleaved samples; after a failure, throws it again without writing.
    public func write(_ samples: UnsafeBufferPointer<Int16>) throws(FileError) {
        // WAV is little-endian, as are x86_64 and arm64.
        try write(raw: UnsafeRawBufferPointer(samples))
    }

    public func write(_ samples: [Int16]) throws(FileError) {
        try samples.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(FileError) in try write(p) }
    }

    /// Seconds of audio in the file (whole frames).
    public var seconds: Double { Double(wholeFrameBytes) / Double(2 * channels * max(sampleRate, 1)) }

    var wholeFrameBytes: Int { dataBytes - dataBytes % (2 * max(channels, 1)) }

    /// Patches the header with the final sizes (the whole frames that reached the file)
    /// and closes it.
    public func close() throws(FileError) {
        guard fd >= 0 else { return }
        let header = WAV.header(sampleRate: sampleRate, channels: channels, dataLength: wholeFrameBytes)
        let r = header.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        let e = csystem_errno()
        closeDescriptor(fd)
        fd = -1
        if r != 44 { throw .write(path: path, SystemError("pwrite", code: e)) }
    }

    private func write(bytes: [UInt8]) throws(FileError) {
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(FileError) in try write(raw: raw) }
    }

    private func write(raw: UnsafeRawBufferPointer) throws(FileError) {
        if let failure { throw failure }
        guard fd >= 0 else { throw .system(path: path, SystemError("write", code: EBADF)) }
        if let (error, written) = writeFully(fd: fd, raw) {
            dataBytes += written
            let f = FileError.write(path: path, error)
            failure = f
            throw f
        }
        dataBytes += raw.count
    }
}
