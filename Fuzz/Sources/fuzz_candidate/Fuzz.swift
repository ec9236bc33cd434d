import FuzzSupport

// ICE candidate attributes (RFC 8839 §5.1) as they arrive in a remote SDP:
// Candidate(parsing:). Invariant: a parsed candidate's text parses back to the same value.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let text = String(decoding: inputBytes(data, size), as: UTF8.self)
    let candidate: Candidate
    do throws(ICEError) { candidate = try Candidate(parsing: text) } catch { return 0 }
    do throws(ICEError) {
        let again = try Candidate(parsing: candidate.description)
        invariant(again == candidate, "candidate changed in a round trip: \(candidate) → \(again)")
    } catch {
        invariant(false, "'\(candidate)' does not parse: \(error)")
    }
    return 0
}
