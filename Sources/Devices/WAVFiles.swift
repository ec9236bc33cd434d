import CSystem
import Wire
import Audio
import Platform

/// Why a file could not be used as a capture source or playback sink.
public enum FileError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The system refused (missing file, permission, disk full…).
    case system(path: String, SystemError)
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
    public private(set) var dataBytes = 0

    public init(path: String, sampleRate: Int, channels: Int) throws(FileError) {
        self.path = path
        self.sampleRate = sampleRate
        self.channels = channels
        do throws(SystemError) {
            fd = try sys("open") { csystem_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644) }
        } catch {
            throw .system(path: path, error)
        }
        try writeAll(WAV.header(sampleRate: sampleRate, channels: channels, dataLength: 0))
    }

    deinit { try? close() }

    /// Appends interleaved samples.
    public func write(_ samples: UnsafeBufferPointer<Int16>) throws(FileError) {
        // WAV is little-endian, as are x86_64 and arm64.
        try writeAll(UnsafeRawBufferPointer(samples))
        dataBytes += samples.count * 2
    }

    public func write(_ samples: [Int16]) throws(FileError) {
        try samples.withBuffer { (p: UnsafeBufferPointer<Int16>) throws(FileError) in try write(p) }
    }

    /// Patches the header with the final sizes and closes the file.
    public func close() throws(FileError) {
        guard fd >= 0 else { return }
        let header = WAV.header(sampleRate: sampleRate, channels: channels, dataLength: dataBytes)
        let r = header.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        let e = csystem_errno()
        closeDescriptor(fd)
        fd = -1
        if r != 44 { throw .system(path: path, SystemError("pwrite", code: e)) }
    }

    private func writeAll(_ bytes: [UInt8]) throws(FileError) {
        try bytes.withBytes { (raw: UnsafeRawBufferPointer) throws(FileError) in try writeAll(raw) }
    }

    private func writeAll(_ raw: UnsafeRawBufferPointer) throws(FileError) {
        var done = 0
        while done < raw.count {
            do throws(SystemError) {
                done += try sys("write") { CSystem.write(fd, raw.baseAddress! + done, raw.count - done) }
            } catch {
                throw .system(path: path, error)
            }
        }
    }
}
