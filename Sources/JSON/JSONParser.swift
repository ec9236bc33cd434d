import Wire

/// Limits on what one document may make the parser do (RFC 8259 §9 lets a parser set
/// them). Breaking a limit is a `JSONError`; none of them can trap.
public struct JSONLimits: Sendable {
    /// Deepest nesting of arrays and objects (`[[1]]` has depth 2).
    public var maxDepth: Int
    /// Longest document in bytes.
    public var maxBytes: Int
    /// Longest string (member name or value) in bytes of UTF-8 after unescaping.
    public var maxStringBytes: Int

    /// Depth 64, 4 MiB documents, 1 MiB strings: far above any signaling body or
    /// Realtime event, far below what would hurt a small board.
    public init(maxDepth: Int = 64, maxBytes: Int = 4 << 20, maxStringBytes: Int = 1 << 20) {
        self.maxDepth = maxDepth
        self.maxBytes = maxBytes
        self.maxStringBytes = maxStringBytes
    }
}

extension JSONValue {
    /// Parses one JSON text (RFC 8259 §2): a value with optional white space around it.
    public static func parse(_ bytes: [UInt8], limits: JSONLimits = JSONLimits()) throws(JSONError) -> JSONValue {
        try bytes.withBytes { (raw) throws(JSONError) -> JSONValue in try parse(raw, limits: limits) }
    }

    public static func parse(_ text: String, limits: JSONLimits = JSONLimits()) throws(JSONError) -> JSONValue {
        try parse(Array(text.utf8), limits: limits)
    }

    public static func parse(_ bytes: UnsafeRawBufferPointer, limits: JSONLimits = JSONLimits()) throws(JSONError) -> JSONValue {
        var parser = JSONParser(bytes, limits: limits)
        return try parser.parseDocument()
    }
}

/// The iterative parser: one pass, an explicit stack of open containers.
struct JSONParser {
    let bytes: UnsafeRawBufferPointer
    let limits: JSONLimits
    var pos = 0
    /// Reused for strings with escapes or non-ASCII bytes and for number digits.
    var scratch: [UInt8] = []

    // The open containers, innermost last. `isObject[i]` says which stack the i-th
    // container lives on; keeping arrays and objects on separate stacks lets us append
    // to the innermost one in place.
    var isObject: [Bool] = []
    var arrays: [[JSONValue]] = []
    var objects: [[JSONObject.Member]] = []
    var pendingKeys: [String] = []

    init(_ bytes: UnsafeRawBufferPointer, limits: JSONLimits) {
        self.bytes = bytes
        self.limits = limits
    }

    // MARK: Structure

    mutating func parseDocument() throws(JSONError) -> JSONValue {
        guard bytes.count <= limits.maxBytes else { throw .documentTooLarge(at: limits.maxBytes) }
        // RFC 8259 §8.1: a parser MAY ignore a byte order mark; we do.
        if bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF { pos = 3 }
        var value = try parseValueOrOpen()
        while true {
            // `value` is complete: hand it to the innermost open container.
            guard let objectOnTop = isObject.last else { break }
            if objectOnTop {
                objects[objects.count &- 1].append((pendingKeys.removeLast(), value))
                skipWhitespace()
                let b = try next()
                if b == UInt8(ascii: ",") {
                    skipWhitespace()
                    pendingKeys.append(try parseMemberName())
                    value = try parseValueOrOpen()
                } else if b == UInt8(ascii: "}") {
                    isObject.removeLast()
                    value = .object(JSONObject(JSONParser.removingDuplicates(objects.removeLast())))
                } else {
                    throw .unexpectedByte(b, at: pos &- 1)
                }
            } else {
                arrays[arrays.count &- 1].append(value)
                skipWhitespace()
                let b = try next()
                if b == UInt8(ascii: ",") {
                    value = try parseValueOrOpen()
                } else if b == UInt8(ascii: "]") {
                    isObject.removeLast()
                    value = .array(arrays.removeLast())
                } else {
                    throw .unexpectedByte(b, at: pos &- 1)
                }
            }
        }
        skipWhitespace()
        if pos < bytes.count { throw .trailingData(at: pos) }
        return value
    }

    /// Reads a scalar, or opens containers until it reaches a scalar or an empty
    /// container; either way returns the first complete value.
    mutating func parseValueOrOpen() throws(JSONError) -> JSONValue {
        while true {
            skipWhitespace()
            guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
            let start = pos
            switch bytes[pos] {
            case UInt8(ascii: "["):
                try checkDepth(at: start)
                pos &+= 1
                skipWhitespace()
                if pos < bytes.count && bytes[pos] == UInt8(ascii: "]") {
                    pos &+= 1
                    return .array([])
                }
                isObject.append(false)
                arrays.append([])
            case UInt8(ascii: "{"):
                try checkDepth(at: start)
                pos &+= 1
                skipWhitespace()
                if pos < bytes.count && bytes[pos] == UInt8(ascii: "}") {
                    pos &+= 1
                    return .object(JSONObject())
                }
                let key = try parseMemberName()
                isObject.append(true)
                objects.append([])
                pendingKeys.append(key)
            case UInt8(ascii: "\""):
                return .string(try parseString())
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .number(try parseNumber())
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                return .null
            case let b:
                throw .unexpectedByte(b, at: start)
            }
        }
    }

    func checkDepth(at position: Int) throws(JSONError) {
        // The container about to open would be at depth isObject.count + 1.
        if isObject.count >= limits.maxDepth { throw .tooDeep(at: position) }
    }

    /// `"name"` then `:` (white space allowed around the colon).
    mutating func parseMemberName() throws(JSONError) -> String {
        guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
        guard bytes[pos] == UInt8(ascii: "\"") else { throw .unexpectedByte(bytes[pos], at: pos) }
        let key = try parseString()
        skipWhitespace()
        let b = try next()
        guard b == UInt8(ascii: ":") else { throw .unexpectedByte(b, at: pos &- 1) }
        return key
    }

    mutating func next() throws(JSONError) -> UInt8 {
        guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
        let b = bytes[pos]
        pos &+= 1
        return b
    }

    /// RFC 8259 §2: space, tab, line feed, carriage return; nothing else.
    mutating func skipWhitespace() {
        while pos < bytes.count {
            switch bytes[pos] {
            case 0x20, 0x09, 0x0A, 0x0D: pos &+= 1
            default: return
            }
        }
    }

    mutating func expectLiteral(_ word: StaticString) throws(JSONError) {
        let w = UnsafeRawBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        for c in w {
            guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
            guard bytes[pos] == c else { throw .unexpectedByte(bytes[pos], at: pos) }
            pos &+= 1
        }
    }

    /// Last value wins, at the first name's position. Small objects: pairwise scan;
    /// large ones: sort indices by name bytes, so a hostile object with 100 000 members
    /// costs n log n, not n².
    static func removingDuplicates(_ members: [JSONObject.Member]) -> [JSONObject.Member] {
        let n = members.count
        if n < 2 { return members }
        // keep[i] = false drops member i; replacement[i] = index whose value i takes.
        var keep = [Bool](repeating: true, count: n)
        var replacement = Array(0..<n)
        var any = false
        if n <= 16 {
            for i in 0..<n where keep[i] {
                for j in (i &+ 1)..<n where keep[j] && JSONObject.sameName(members[i].key, members[j].key) {
                    keep[j] = false
                    replacement[i] = j
                    any = true
                }
            }
        } else {
            let order = (0..<n).sorted { a, b in
                let ka = members[a].key.utf8, kb = members[b].key.utf8
                if ka.elementsEqual(kb) { return a < b }
                return ka.lexicographicallyPrecedes(kb)
            }
            var runStart = 0
            for k in 1...n {
                if k < n && JSONObject.sameName(members[order[k]].key, members[order[runStart]].key) { continue }
                if k &- runStart > 1 {
                    any = true
                    replacement[order[runStart]] = order[k &- 1]
                    for r in (runStart &+ 1)..<k { keep[order[r]] = false }
                }
                runStart = k
            }
        }
        if !any { return members }
        var out: [JSONObject.Member] = []
        out.reserveCapacity(n)
        for i in 0..<n where keep[i] { out.append((members[i].key, members[replacement[i]].value)) }
        return out
    }

    // MARK: Strings (RFC 8259 §7)

    /// Reads a string starting at its opening quote.
    mutating func parseString() throws(JSONError) -> String {
        pos &+= 1 // opening quote
        let start = pos
        // Fast path: printable ASCII up to the closing quote, no copy into scratch.
        while pos < bytes.count {
            let b = bytes[pos]
            if b == UInt8(ascii: "\"") {
                guard pos &- start <= limits.maxStringBytes else { throw .stringTooLong(at: start) }
                let s = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<pos]), as: UTF8.self)
                pos &+= 1
                return s
            }
            if b == UInt8(ascii: "\\") || b < 0x20 || b >= 0x80 { break }
            pos &+= 1
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<pos]))
        while true {
            guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
            if scratch.count > limits.maxStringBytes { throw .stringTooLong(at: start) }
            let b = bytes[pos]
            switch b {
            case UInt8(ascii: "\""):
                pos &+= 1
                // Every byte in scratch was validated (or produced) as UTF-8 already.
                return String(decoding: scratch, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try parseEscape()
            case 0x00..<0x20:
                throw .controlCharacterInString(at: pos)
            case 0x20..<0x80:
                scratch.append(b)
                pos &+= 1
            default:
                try copyUTF8Sequence()
            }
        }
    }

    /// One well-formed UTF-8 sequence (Unicode 15 table 3-7), copied to scratch.
    mutating func copyUTF8Sequence() throws(JSONError) {
        let start = pos
        let b0 = bytes[pos]
        let length: Int
        var low: UInt8 = 0x80, high: UInt8 = 0xBF // allowed range of the second byte
        switch b0 {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0          // no overlongs
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F          // no UTF-16 surrogates
        case 0xF0: length = 4; low = 0x90           // no overlongs
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F          // nothing above U+10FFFF
        default: throw .invalidUTF8(at: start)      // 80…C1 and F5…FF never lead
        }
        guard bytes.count &- pos >= length else {
            // Report a truncated sequence as bad UTF-8 only if what is there is bad.
            throw .invalidUTF8(at: start)
        }
        let b1 = bytes[pos &+ 1]
        guard b1 >= low && b1 <= high else { throw .invalidUTF8(at: start) }
        if length > 2 {
            for k in 2..<length where bytes[pos &+ k] & 0xC0 != 0x80 { throw .invalidUTF8(at: start) }
        }
        scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[pos..<(pos &+ length)]))
        pos &+= length
    }

    mutating func parseEscape() throws(JSONError) {
        let start = pos
        pos &+= 1 // backslash
        guard pos < bytes.count else { throw .unexpectedEnd(at: pos) }
        let c = bytes[pos]
        pos &+= 1
        switch c {
        case UInt8(ascii: "\""): scratch.append(0x22)
        case UInt8(ascii: "\\"): scratch.append(0x5C)
        case UInt8(ascii: "/"): scratch.append(0x2F)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try readHex4(escapeStart: start))
            if scalar >= 0xDC00 && scalar <= 0xDFFF { throw .loneSurrogate(at: start) }
            if scalar >= 0xD800 && scalar <= 0xDBFF {
                // §7: a character outside the BMP is a high+low surrogate pair.
                guard bytes.count &- pos >= 6, bytes[pos] == UInt8(ascii: "\\"),
                      bytes[pos &+ 1] == UInt8(ascii: "u") else { throw .loneSurrogate(at: start) }
                let lowStart = pos
                pos &+= 2
                let low = UInt32(try readHex4(escapeStart: lowStart))
                guard low >= 0xDC00 && low <= 0xDFFF else { throw .loneSurrogate(at: start) }
                scalar = 0x10000 &+ ((scalar &- 0xD800) << 10) &+ (low &- 0xDC00)
            }
            appendUTF8(scalar)
        default:
            throw .invalidEscape(at: start)
        }
    }

    mutating func readHex4(escapeStart: Int) throws(JSONError) -> UInt16 {
        guard bytes.count &- pos >= 4 else {
            throw bytes.count &- pos == 0 ? .unexpectedEnd(at: pos) : .invalidEscape(at: escapeStart)
        }
        var v: UInt16 = 0
        for _ in 0..<4 {
            let c = bytes[pos]
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c &- UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c &- UInt8(ascii: "a") &+ 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c &- UInt8(ascii: "A") &+ 10
            default: throw .invalidEscape(at: escapeStart)
            }
            v = v << 4 | UInt16(d)
            pos &+= 1
        }
        return v
    }

    mutating func appendUTF8(_ s: UInt32) {
        switch s {
        case 0..<0x80:
            scratch.append(UInt8(s))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | s >> 6))
            scratch.append(UInt8(0x80 | s & 0x3F))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | s >> 12))
            scratch.append(UInt8(0x80 | (s >> 6) & 0x3F))
            scratch.append(UInt8(0x80 | s & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | s >> 18))
            scratch.append(UInt8(0x80 | (s >> 12) & 0x3F))
            scratch.append(UInt8(0x80 | (s >> 6) & 0x3F))
            scratch.append(UInt8(0x80 | s & 0x3F))
        }
    }

    // MARK: Numbers (RFC 8259 §6)

    /// `[ minus ] int [ frac ] [ exp ]`, int = `0` / digit1-9 *DIGIT, frac = `.` 1*DIGIT,
    /// exp = (`e`/`E`) [ `-`/`+` ] 1*DIGIT. No `+` sign, no leading zeros, no NaN.
    mutating func parseNumber() throws(JSONError) -> JSONNumber {
        let start = pos
        var negative = false
        if bytes[pos] == UInt8(ascii: "-") {
            negative = true
            pos &+= 1
        }
        func isDigit(_ i: Int) -> Bool {
            i < bytes.count && bytes[i] >= UInt8(ascii: "0") && bytes[i] <= UInt8(ascii: "9")
        }
        guard isDigit(pos) else { throw .invalidNumber(at: start) }
        let intStart = pos
        if bytes[pos] == UInt8(ascii: "0") {
            pos &+= 1
            if isDigit(pos) { throw .invalidNumber(at: start) }
        } else {
            while isDigit(pos) { pos &+= 1 }
        }
        let intEnd = pos
        var fracStart = pos, fracEnd = pos
        if pos < bytes.count && bytes[pos] == UInt8(ascii: ".") {
            pos &+= 1
            fracStart = pos
            guard isDigit(pos) else { throw .invalidNumber(at: start) }
            while isDigit(pos) { pos &+= 1 }
            fracEnd = pos
        }
        var exponent = 0
        if pos < bytes.count && (bytes[pos] == UInt8(ascii: "e") || bytes[pos] == UInt8(ascii: "E")) {
            pos &+= 1
            var expNegative = false
            if pos < bytes.count && (bytes[pos] == UInt8(ascii: "+") || bytes[pos] == UInt8(ascii: "-")) {
                expNegative = bytes[pos] == UInt8(ascii: "-")
                pos &+= 1
            }
            guard isDigit(pos) else { throw .invalidNumber(at: start) }
            while isDigit(pos) {
                // Saturate: anything past a billion is over- or underflow anyway.
                if exponent < 1_000_000_000 { exponent = exponent &* 10 &+ Int(bytes[pos] &- UInt8(ascii: "0")) }
                pos &+= 1
            }
            if expNegative { exponent = 0 &- exponent }
        }
        // Significant digits, without leading zeros (trailing ones are folded into the
        // exponent by the converter).
        scratch.removeAll(keepingCapacity: true)
        var exp10 = exponent &- (fracEnd &- fracStart)
        for i in intStart..<intEnd where !(scratch.isEmpty && bytes[i] == UInt8(ascii: "0")) {
            scratch.append(bytes[i] &- UInt8(ascii: "0"))
        }
        for i in fracStart..<fracEnd where !(scratch.isEmpty && bytes[i] == UInt8(ascii: "0")) {
            scratch.append(bytes[i] &- UInt8(ascii: "0"))
        }
        while let last = scratch.last, last == 0 {
            scratch.removeLast()
            exp10 &+= 1
        }
        guard let n = DecimalConversion.number(digits: scratch, exponent: exp10, negative: negative) else {
            throw .numberOutOfRange(at: start)
        }
        return n
    }
}
