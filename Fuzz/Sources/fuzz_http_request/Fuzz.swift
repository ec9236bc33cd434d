import FuzzSupport

// HTTP/1.1 requests (RFC 9112) as the built-in answerer (`linnet answer`) reads them:
// HTTPRequestParser fed in reads. Input as for fuzz_http_response: a byte n (low 3
// bits), n cut positions, then the request. Invariant: the reads do not matter (same
// request whole or in pieces, or both refused; limits may trip at different reads).

func run(_ reads: [[UInt8]]) -> Result<HTTPServerRequest?, HTTPError> {
    var parser = HTTPRequestParser()
    do throws(HTTPError) {
        for r in reads {
            if let request = try parser.feed(r) { return .success(request) }
        }
        return .success(nil)
    } catch {
        return .failure(error)
    }
}

func same(_ a: HTTPServerRequest?, _ b: HTTPServerRequest?) -> Bool {
    guard let a, let b else { return a == nil && b == nil }
    return a.method == b.method && a.target == b.target && a.headers == b.headers && a.body == b.body
}

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
        invariant(same(a, b), "the reads change the request")
    case (.failure, .failure):
        break
    case (.success, .failure(let e)), (.failure(let e), .success):
        if case .headersTooLarge = e { break }
        invariant(false, "whole: \(whole), in pieces: \(pieces)")
    }
    return 0
}
