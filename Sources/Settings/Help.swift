// `linnet help COMMAND`'s option lines, written from the table: one line per key of the
// command, under its section's heading, with its default (the command's own where it
// has one) and its old spellings.
import Wire

extension SettingsTable {
    /// The options of `command`, ready to print (every line ends in a newline).
    public static func optionsHelp(for command: Command, width: Int = 88) -> String {
        let keys = keys(for: command)
        var text = ""
        for section in Section.allCases {
            let rows = keys.filter { $0.section == section }
            if rows.isEmpty { continue }
            text += "\n" + section.title + ":\n"
            for key in rows { text += line(key, command: command, width: width) }
        }
        return text
    }

    /// `  --gain-db DB            fixed gain before the other hooks (default 0)`, wrapped
    /// at `width` with the help column kept.
    static func line(_ key: Key, command: Command, width: Int) -> String {
        let column = 28
        var flag = "  --" + key.name
        if key.isBoolean {
            flag += " | --no-" + key.name
        } else {
            flag += " " + key.metavar
        }
        // Words of the help, then the default and old spellings, each kept whole so a
        // wrap never splits "(default 5)".
        var words = key.help.split(byte: UInt8(ascii: " ")).map(String.init)
        if let d = key.defaultText(for: command), shown(d, key) { words.append(key.isText ? "(default \"\(d)\")" : "(default \(d))") }
        for a in key.aliases {
            words.append(a.value.map { "(--\(a.flag): \($0))" } ?? "(also --\(a.flag))")
        }
        var out = flag
        if flag.utf8.count + 1 > column {
            out += "\n" + String(repeating: " ", count: column)
        } else {
            out += String(repeating: " ", count: column - flag.utf8.count)
        }
        // Word wrap the help column.
        var used = column
        var first = true
        for word in words {
            let n = word.utf8.count
            if !first && used + 1 + n > width {
                out += "\n" + String(repeating: " ", count: column)
                used = column
                first = true
            }
            if !first { out += " "; used += 1 }
            out += word
            used += n
            first = false
        }
        return out + "\n"
    }

    /// Whether help says the default: not for "off" booleans (a bare flag says it all).
    static func shown(_ text: String, _ key: Key) -> Bool {
        !(key.isBoolean && text.bytesEqual("false"))
    }
}
