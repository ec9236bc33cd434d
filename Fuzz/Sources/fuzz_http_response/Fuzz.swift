import FuzzSupport

// HTTP/1.1 responses (RFC 9112) as the signaling client reads them from a socket:
// HTTPResponseParser fed in reads, then `finish()` at connection close; a `Location`
// is resolved against a fixed URL as a redirect would be.
//
// Input: one byte n (low 3 bits), n cut positions, then the response bytes.
// Invariants:
// - the reads do not matter: fed whole or cut at the given places, the parser gives the
//   same response (or both refuse it; limits may trip at different reads);
// - a complete response with a body, serialized by HTTPResponse.serialize (the
//   answerer's side), parses back with the same status and body;
// - a resolved Location yields a URL with no space or control byte in host or target
//   (they go into the next request line and Host header verbatim).

let base = try! HTTPURL("https://api.example.com/v1/realtime?model=x")

func run(_ reads: [[UInt8]]) -> Result<HTTPResponse, HTTPError> {
    var parser = HTTPResponseParser()
    do throws(HTTPError) {
        for r in reads {
            if let response = try parser.feed(r) { return .success(response) }
        }
        return .success(try parser.finish())
    } catch {
        return .failure(error)
    }
}

func clean(_ s: String) -> Bool { !s.utf8.contains { $0 <= 0x20 || $0 == 0x7F } }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard let first = bytes.first else { return 0 }
    let n = min(Int(first & 7), bytes.count - 1)
    let cuts = Array(bytes[1..<(1 + n)])
    let message = Array(bytes[(1 + n)...])

    let whole = run([message])
    let pieces = run(split(message, cuts: cuts))
    switch (whole, pieces) {
    case (.success(let a), .success(let b)):
        invariant(a == b, "the reads change the response")
    case (.failure, .failure):
        break
    case (.success, .failure(let e)), (.failure(let e), .success):
        if case .headersTooLarge = e { break }
        invariant(false, "whole: \(whole), in pieces: \(pieces)")
    }
    guard case .success(let response) = whole else { return 0 }

    if let location = response.headers["Location"] {
        do throws(HTTPError) {
            let next = try base.resolving(location)
            invariant(clean(next.host) && clean(next.target), "redirect to an unusable URL: \(next)")
        } catch {}
    }

    if !(100..<200).contains(response.status), response.status != 204, response.status != 304,
       (100...999).contains(response.status), clean(response.reason.replacingSpaces()) {
        var copy = response
        copy.headers.fields = response.headers.fields.filter { f in
            let name = f.name.lowercased()
            return name != "content-length" && name != "transfer-encoding" && name != "connection"
        }
        switch run([copy.serialize()]) {
        case .success(let again):
            invariant(again.status == response.status && again.body == response.body,
                      "status or body changed in a round trip")
        case .failure(let e):
            invariant(false, "a serialized response does not parse: \(e)")
        }
    }
    return 0
}

extension String {
    func replacingSpaces() -> String { String(decoding: utf8.map { $0 == 0x20 ? 0x2D : $0 }, as: UTF8.self) }
}
