// The JSON Schema a tool's `parameters` declare, as far as Linnet enforces it: the
// model's arguments are checked against it before anything runs (a door relay must not
// pulse because the model made up a field). Only the keywords below are accepted when
// the tools are loaded, so a schema never looks stricter than what is enforced.
// Keyword meanings follow JSON Schema 2020-12 (json-schema.org, Validation §6).
import Wire
import JSON

public enum ArgumentSchema {
    /// Keywords checked here (Validation §6.1–6.5, Core §10.3.2.1 for `properties`,
    /// §10.3.2.3 `additionalProperties`, §10.3.1.2 `items`), and annotations that
    /// assert nothing (§9: `description`, `title`, `default`, `examples`).
    static let enforced = ["type", "enum", "const", "properties", "required", "additionalProperties",
                           "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                           "minLength", "maxLength", "items", "minItems", "maxItems"]
    static let annotations = ["description", "title", "default", "examples"]
    static let types = ["object", "array", "string", "number", "integer", "boolean", "null"]
    /// Nesting a schema may have, and arguments may have (a hostile model's deep array).
    public static let maxDepth = 16

    /// Why `schema` cannot be enforced as written, or nil. `at` names where (for the
    /// configuration error: `tools.json: tool 'door': parameters.properties.ms`).
    public static func problem(_ schema: JSONValue, at path: String = "parameters", depth: Int = 0) -> String? {
        guard depth < maxDepth else { return "\(path): nested deeper than \(maxDepth)" }
        guard case .object(let o) = schema else { return "\(path): a schema is a JSON object" }
        for (key, value) in o {
            if !enforced.containsBytes(equalTo: key) && !annotations.containsBytes(equalTo: key) {
                return "\(path): '\(key)' is not a keyword Linnet enforces (it takes \(enforced.joined(separator: ", ")))"
            }
            switch key {
            case "type":
                let names = value.array ?? [value]
                guard !names.isEmpty else { return "\(path).type: an empty list" }
                for n in names {
                    guard let s = n.string, types.containsBytes(equalTo: s) else {
                        return "\(path).type: \(n) is not one of \(types.joined(separator: ", "))"
                    }
                }
            case "enum":
                guard let a = value.array, !a.isEmpty else { return "\(path).enum: a non-empty list" }
            case "properties":
                guard let props = value.object else { return "\(path).properties: an object of schemas" }
                for (name, sub) in props {
                    if let p = problem(sub, at: "\(path).properties.\(name)", depth: depth + 1) { return p }
                }
            case "required":
                guard let a = value.array, a.allSatisfy({ $0.string != nil }) else { return "\(path).required: a list of names" }
            case "additionalProperties":
                if value.bool == nil, let p = problem(value, at: "\(path).additionalProperties", depth: depth + 1) { return p }
            case "items":
                if let p = problem(value, at: "\(path).items", depth: depth + 1) { return p }
            case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
                guard value.double != nil else { return "\(path).\(key): a number" }
            case "minLength", "maxLength", "minItems", "maxItems":
                guard let n = value.int64, n >= 0 else { return "\(path).\(key): a whole number ≥ 0" }
            default:
                break
            }
        }
        return nil
    }

    /// The part of a schema Linnet enforces: keywords it does not check dropped, and
    /// any it checks whose value is malformed (an MCP server's schema is the server's to
    /// enforce whole; this is what the device checks before it sends anything).
    public static func enforceable(_ schema: JSONValue, depth: Int = 0) -> JSONValue {
        guard depth < maxDepth, case .object(let o) = schema else { return .object(JSONObject()) }
        var out = JSONObject()
        for (key, value) in o where enforced.containsBytes(equalTo: key) {
            var v = value
            if key.bytesEqual("properties"), let props = value.object {
                v = .object(JSONObject(props.members.map { (key: $0.key, value: enforceable($0.value, depth: depth + 1)) }))
            } else if key.bytesEqual("items") || (key.bytesEqual("additionalProperties") && value.bool == nil) {
                v = enforceable(value, depth: depth + 1)
            }
            let one = JSONValue.object(JSONObject([(key: key, value: v)]))
            if problem(one, depth: depth) == nil { out.members.append((key: key, value: v)) }
        }
        return .object(out)
    }

    /// Why `value` breaks `schema` (a sentence the model can act on), or nil when it
    /// conforms. `schema` passed `problem` when the tools were loaded.
    public static func violation(_ value: JSONValue, _ schema: JSONValue, at path: String = "arguments", depth: Int = 0) -> String? {
        guard depth < maxDepth else { return "\(path): nested deeper than \(maxDepth)" }
        guard case .object(let s) = schema else { return nil }
        if let t = s["type"] {
            let names = t.array ?? [t]
            if !names.contains(where: { has(value, type: $0.string ?? "") }) {
                let wanted = names.compactMap { $0.string }.joined(separator: " or ")
                return "\(path): expected \(wanted), got \(typeName(value))"
            }
        }
        if let e = s["enum"]?.array, !e.contains(value) {
            return "\(path): \(brief(value)) is not one of \(brief(.array(e)))"
        }
        if let c = s["const"], c != value { return "\(path): must be \(brief(c))" }
        switch value {
        case .number(let n):
            let x = n.double
            if let m = s["minimum"]?.double, x < m { return "\(path): \(n) is below the minimum \(JSONNumber(m))" }
            if let m = s["maximum"]?.double, x > m { return "\(path): \(n) is above the maximum \(JSONNumber(m))" }
            if let m = s["exclusiveMinimum"]?.double, x <= m { return "\(path): \(n) must be above \(JSONNumber(m))" }
            if let m = s["exclusiveMaximum"]?.double, x >= m { return "\(path): \(n) must be below \(JSONNumber(m))" }
        case .string(let text):
            // Lengths count characters as JSON Schema does (Validation §6.3.1: code points).
            let length = text.unicodeScalars.count
            if let m = s["minLength"]?.int64, length < m { return "\(path): shorter than \(m) characters" }
            if let m = s["maxLength"]?.int64, length > m { return "\(path): longer than \(m) characters" }
        case .array(let items):
            if let m = s["minItems"]?.int64, items.count < m { return "\(path): fewer than \(m) items" }
            if let m = s["maxItems"]?.int64, items.count > m { return "\(path): more than \(m) items" }
            if let itemSchema = s["items"] {
                for (i, item) in items.enumerated() {
                    if let v = violation(item, itemSchema, at: "\(path)[\(i)]", depth: depth + 1) { return v }
                }
            }
        case .object(let members):
            if let required = s["required"]?.array {
                for r in required {
                    if let name = r.string, members[name] == nil { return "\(path): '\(name)' is required" }
                }
            }
            let properties = s["properties"]?.object ?? JSONObject()
            for (name, member) in members {
                if let sub = properties[name] {
                    if let v = violation(member, sub, at: "\(path).\(name)", depth: depth + 1) { return v }
                } else if let extra = s["additionalProperties"] {
                    if extra.bool == false {
                        return "\(path): '\(utf8Prefix(name, maxBytes: 64))' is not a parameter of this tool"
                    }
                    if extra.bool == nil, let v = violation(member, extra, at: "\(path).\(name)", depth: depth + 1) { return v }
                }
            }
        case .null, .bool:
            break
        }
        return nil
    }

    static func has(_ value: JSONValue, type: String) -> Bool {
        switch value {
        case .null: return bytesEqual(type, "null")
        case .bool: return bytesEqual(type, "boolean")
        case .string: return bytesEqual(type, "string")
        case .array: return bytesEqual(type, "array")
        case .object: return bytesEqual(type, "object")
        case .number(let n):
            // An integer is a number with no fractional part (Validation §6.1.1), 5.0 too.
            if bytesEqual(type, "number") { return true }
            return bytesEqual(type, "integer") && n.double.isFinite && n.double.rounded(.towardZero) == n.double
        }
    }

    static func typeName(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// A value for a message, capped: the model may send anything, of any size.
    static func brief(_ value: JSONValue) -> String { utf8Prefix(value.serializedString(), maxBytes: 80) }
}
