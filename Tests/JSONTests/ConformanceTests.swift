// Accept / reject tables in the categories of the JSONTestSuite (y_ must accept, n_ must
// reject, i_ implementation-defined), with cases written here from RFC 8259's grammar.
import Testing
import JSON

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Documents RFC 8259 requires us to accept, with the value each one denotes.
let acceptCases: [(String, String, JSONValue)] = [
    // structure
    ("y_structure_empty_array", "[]", .array([])),
    ("y_structure_empty_object", "{}", .object(JSONObject())),
    ("y_structure_lonely_null", "null", .null),
    ("y_structure_lonely_true", "true", true),
    ("y_structure_lonely_false", "false", false),
    ("y_structure_lonely_int", "42", 42),
    ("y_structure_lonely_negative_real", "-0.1", -0.1),
    ("y_structure_lonely_string", "\"asd\"", "asd"),
    ("y_structure_whitespace_array", " [] ", .array([])),
    ("y_structure_all_whitespace_kinds", "\t\n\r [\t\n\r 1\t\n\r ,\r\n\t2 ]\n\r\t ", [1, 2]),
    ("y_structure_trailing_newline", "[\"a\"]\n", ["a"]),
    ("y_structure_true_in_array", "[true]", [true]),
    ("y_structure_string_empty", "\"\"", ""),
    ("y_structure_nested_mixed", "{\"a\":[{\"b\":[null,{}]}],\"c\":{\"d\":[[]]}}",
     ["a": [["b": [nil, .object(JSONObject())]]], "c": ["d": [.array([])]]]),
    // arrays
    ("y_array_arrays_with_spaces", "[[]   ]", [.array([])]),
    ("y_array_empty_string", "[\"\"]", [""]),
    ("y_array_null", "[null]", [nil]),
    ("y_array_heterogeneous", "[null, 1, \"1\", {}]", [nil, 1, "1", .object(JSONObject())]),
    ("y_array_with_several_null", "[1,null,null,null,2]", [1, nil, nil, nil, 2]),
    ("y_array_with_leading_space", " [1]", [1]),
    ("y_array_with_trailing_space", "[2] ", [2]),
    ("y_array_ending_with_newline", "[\"a\"\n]", ["a"]),
    ("y_array_false", "[false]", [false]),
    // objects
    ("y_object_basic", "{\"asd\":\"sdf\"}", ["asd": "sdf"]),
    ("y_object_two_members", "{\"asd\":\"sdf\", \"dfg\":\"fgh\"}", ["asd": "sdf", "dfg": "fgh"]),
    ("y_object_empty_key", "{\"\":0}", ["": 0]),
    ("y_object_escaped_null_in_key", "{\"foo\\u0000bar\": 42}", ["foo\u{0}bar": 42]),
    ("y_object_duplicated_key_same_value", "{\"a\":\"b\",\"a\":\"b\"}", ["a": "b"]),
    ("y_object_duplicated_key", "{\"a\":\"b\",\"a\":\"c\"}", ["a": "c"]),
    ("y_object_long_strings", "{\"x\":[{\"id\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}], \"id\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
     ["x": [["id": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]], "id": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]),
    ("y_object_simple", "{\"a\":[]}", ["a": .array([])]),
    ("y_object_with_newlines", "{\n\"a\": \"b\"\n}", ["a": "b"]),
    ("y_object_extreme_numbers", "{ \"min\": -1.0e+28, \"max\": 1.0e+28 }", ["min": -1.0e28, "max": 1.0e28]),
    ("y_object_string_unicode", "{\"title\":\"\\u041f\\u043e\\u043b\\u0442\\u043e\\u0440\\u0430 \\u0417\\u0435\\u043c\\u043b\\u0435\\u043a\\u043e\\u043f\\u0430\" }",
     ["title": "Полтора Землекопа"]),
    // numbers
    ("y_number_zero", "[0]", [0]),
    ("y_number_minus_zero", "[-0]", [.number(JSONNumber(-0.0))]),
    ("y_number_negative_int", "[-123]", [-123]),
    ("y_number_negative_one", "[-1]", [-1]),
    ("y_number_simple_int", "[123]", [123]),
    ("y_number_simple_real", "[123.456789]", [123.456789]),
    ("y_number_real_capital_e", "[1E22]", [1e22]),
    ("y_number_real_capital_e_neg_exp", "[1E-2]", [0.01]),
    ("y_number_real_capital_e_pos_exp", "[1E+2]", [100]),
    ("y_number_real_exponent", "[123e45]", [123e45]),
    ("y_number_real_fraction_exponent", "[123.456e78]", [123.456e78]),
    ("y_number_real_neg_exp", "[1e-2]", [0.01]),
    ("y_number_real_pos_exponent", "[1e+2]", [100]),
    ("y_number_0e+1", "[0e+1]", [0]),
    ("y_number_0e1", "[0e1]", [0]),
    ("y_number_after_space", "[ 4]", [4]),
    ("y_number_double_close_to_zero", "[-0.000000000000000000000000000000000000000000000000000000000000000000000000000001]", [-1e-78]),
    ("y_number_int_with_exp", "[20e1]", [200]),
    ("y_number_negative_int_exp_fraction", "[-1.5e+2]", [-150]),
    ("y_number_fraction_of_zero", "[0.5]", [0.5]),
    ("y_number", "[123e65]", [123e65]),
    // strings
    ("y_string_1_2_3_bytes_UTF-8_sequences", "[\"\\u0060\\u012a\\u12AB\"]", ["\u{60}\u{12A}\u{12AB}"]),
    ("y_string_accepted_surrogate_pair", "[\"\\uD801\\udc37\"]", ["\u{10437}"]),
    ("y_string_accepted_surrogate_pairs", "[\"\\ud83d\\ude39\\ud83d\\udc8d\"]", ["😹💍"]),
    ("y_string_allowed_escapes", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]", ["\"\\/\u{8}\u{C}\n\r\t"]),
    ("y_string_backslash_and_u_escaped_zero", "[\"\\\\u0000\"]", ["\\u0000"]),
    ("y_string_backslash_doublequotes", "[\"\\\"\"]", ["\""]),
    ("y_string_comments", "[\"a/*b*/c/*d//e\"]", ["a/*b*/c/*d//e"]),
    ("y_string_double_escape_a", "[\"\\\\a\"]", ["\\a"]),
    ("y_string_double_escape_n", "[\"\\\\n\"]", ["\\n"]),
    ("y_string_escaped_control_character", "[\"\\u0012\"]", ["\u{12}"]),
    ("y_string_escaped_noncharacter", "[\"\\uFFFF\"]", ["\u{FFFF}"]),
    ("y_string_in_array", "[\"asd\"]", ["asd"]),
    ("y_string_in_array_with_leading_space", "[ \"asd\"]", ["asd"]),
    ("y_string_last_surrogates_1_and_2", "[\"\\uDBFF\\uDFFF\"]", ["\u{10FFFF}"]),
    ("y_string_nbsp_uescaped", "[\"new\\u00A0line\"]", ["new\u{A0}line"]),
    ("y_string_nonCharacterInUTF-8_U+10FFFF", "[\"\u{10FFFF}\"]", ["\u{10FFFF}"]),
    ("y_string_nonCharacterInUTF-8_U+FFFF", "[\"\u{FFFF}\"]", ["\u{FFFF}"]),
    ("y_string_null_escape", "[\"\\u0000\"]", ["\u{0}"]),
    ("y_string_one-byte-utf-8", "[\"\\u002c\"]", [","]),
    ("y_string_pi", "[\"π\"]", ["π"]),
    ("y_string_reservedCharacterInUTF-8_U+1BFFF", "[\"\u{1BFFF}\"]", ["\u{1BFFF}"]),
    ("y_string_simple_ascii", "[\"asd \"]", ["asd "]),
    ("y_string_space", "\" \"", " "),
    ("y_string_three-byte-utf-8", "[\"\\u0821\"]", ["\u{821}"]),
    ("y_string_two-byte-utf-8", "[\"\\u0123\"]", ["\u{123}"]),
    ("y_string_u+2028_line_sep", "[\"\u{2028}\"]", ["\u{2028}"]),
    ("y_string_u+2029_par_sep", "[\"\u{2029}\"]", ["\u{2029}"]),
    ("y_string_uEscape", "[\"\\u0061\\u30af\\u30EA\\u30b9\"]", ["aクリス"]),
    ("y_string_uescaped_newline", "[\"new\\u000Aline\"]", ["new\nline"]),
    ("y_string_unescaped_char_delete", "[\"\u{7F}\"]", ["\u{7F}"]),
    ("y_string_unicode_2", "[\"⍂㈴⍂\"]", ["⍂㈴⍂"]),
    ("y_string_unicode_escaped_double_quote", "[\"\\u0022\"]", ["\""]),
    ("y_string_utf8", "[\"€𝄞\"]", ["€𝄞"]),
    ("y_string_with_del_character", "[\"a\u{7F}a\"]", ["a\u{7F}a"]),
    ("y_string_mixed_escape_and_utf8", "\"a\\tb€\\u00e9é\"", "a\tb€éé"),
]

@Test(arguments: acceptCases.map { $0.0 })
func acceptsValidDocument(name: String) throws {
    let (_, text, expected) = try #require(acceptCases.first { $0.0 == name })
    let value = try JSONValue.parse(bytes(text))
    #expect(value == expected, "\(name)")
}

/// Documents RFC 8259's grammar excludes: each must be an error, with the byte offset
/// where it is detected (checked for a few, where the offset is unambiguous).
let rejectCases: [(String, [UInt8])] = {
    var c: [(String, [UInt8])] = []
    func add(_ name: String, _ s: String) { c.append((name, bytes(s))) }
    func raw(_ name: String, _ b: [UInt8]) { c.append((name, b)) }
    // structure
    add("n_structure_no_data", "")
    add("n_structure_whitespace_only", " \n\t")
    add("n_structure_lone_open_bracket", "[")
    add("n_structure_lone_open_brace", "{")
    add("n_structure_close_unopened_array", "1]")
    add("n_structure_double_array", "[][]")
    add("n_structure_two_values", "1 2")
    add("n_structure_object_followed_by_closing_object", "{}}")
    add("n_structure_array_trailing_garbage", "[1]x")
    add("n_structure_capitalized_True", "[True]")
    add("n_structure_NULL", "NULL")
    add("n_structure_incomplete_true", "[tru]")
    add("n_structure_incomplete_false", "[fals]")
    add("n_structure_incomplete_null", "[nul]")
    add("n_structure_truncated_true", "t")
    add("n_structure_angle_bracket_null", "[<null>]")
    add("n_structure_comment", "/**/[]")
    add("n_structure_trailing_comment", "[]//")
    add("n_structure_single_quote", "'")
    add("n_structure_single_star", "*")
    add("n_structure_unclosed_array_unfinished_true", "[ false, tru")
    add("n_structure_unclosed_object", "{\"asd\":\"asd\"")
    add("n_structure_array_with_unclosed_string", "[\"asd]")
    add("n_structure_open_array_object", "[{")
    add("n_structure_mismatched_close", "[}")
    add("n_structure_mismatched_close_object", "{]")
    add("n_structure_u2060_word_joiner", "[\u{2060}]")
    add("n_structure_whitespace_formfeed", "[\u{0C}]")
    add("n_structure_vertical_tab", "[\u{0B}1]")
    add("n_structure_nbsp_before", "\u{A0}[]")
    add("n_structure_null_byte_outside_string", "[\u{0}]")
    add("n_structure_trailing_null_byte", "[]\u{0}")
    add("n_structure_lone_bom", "\u{FEFF}")
    add("n_structure_ascii_unicode_identifier", "aå")
    add("n_structure_uescaped_LF_before_string", "[\\u000A\"\"]")
    raw("n_structure_UTF16_BOM", [0xFE, 0xFF, 0x00, 0x5B, 0x00, 0x5D])
    raw("n_structure_incomplete_UTF8_BOM", [0xEF, 0xBB, 0x7B, 0x7D])
    // arrays
    add("n_array_unclosed", "[\"\"")
    add("n_array_unclosed_with_number", "[1")
    add("n_array_comma_after_close", "[\"\"],")
    add("n_array_extra_comma", "[\"\",]")
    add("n_array_number_and_comma", "[1,]")
    add("n_array_just_comma", "[,]")
    add("n_array_comma_first", "[,1]")
    add("n_array_double_comma", "[1,,2]")
    add("n_array_missing_comma", "[1 true]")
    add("n_array_strings_without_comma", "[\"a\" \"b\"]")
    add("n_array_colon_instead_of_comma", "[\"\": 1]")
    add("n_array_star_inside", "[*]")
    add("n_array_unclosed_trailing_comma", "[1,")
    add("n_array_extra_close", "[\"x\"]]")
    add("n_array_items_separated_by_semicolon", "[1;2]")
    add("n_array_newlines_unclosed", "[\"a\",\n4\n,1,")
    // objects
    add("n_object_unquoted_key", "{a: \"b\"}")
    add("n_object_single_quote", "{'a':0}")
    add("n_object_missing_colon", "{\"a\" b}")
    add("n_object_missing_value", "{\"a\":")
    add("n_object_missing_semicolon", "{\"a\" \"b\"}")
    add("n_object_double_colon", "{\"x\"::\"b\"}")
    add("n_object_equals_instead_of_colon", "{\"a\"=\"b\"}")
    add("n_object_trailing_comma", "{\"id\":0,}")
    add("n_object_several_trailing_commas", "{\"id\":0,,,,,}")
    add("n_object_comma_instead_of_colon", "{\"x\", null}")
    add("n_object_non_string_key", "{1:1}")
    add("n_object_null_key", "{null:1}")
    add("n_object_array_key", "{[]:1}")
    add("n_object_missing_key", "{:\"b\"}")
    add("n_object_key_only", "{\"a\"}")
    add("n_object_two_members_no_comma", "{\"a\":1 \"b\":2}")
    add("n_object_trailing_comment", "{\"a\":\"b\"}/**/")
    add("n_object_with_comment", "{\"a\":/*comment*/\"b\"}")
    add("n_object_trailing_key", "{\"a\":1,\"b\"}")
    add("n_object_unclosed_no_value", "{\"\":")
    add("n_object_garbage_at_end", "{\"a\":\"a\" 123}")
    add("n_object_bracket_key", "{[: \"x\"}")
    add("n_object_emoji_key", "{🇨🇭}")
    // numbers
    add("n_number_leading_zero", "[01]")
    add("n_number_neg_leading_zero", "[-01]")
    add("n_number_leading_zeros_many", "[012]")
    add("n_number_plus_one", "[+1]")
    add("n_number_plus_plus", "[++1234]")
    add("n_number_starting_with_dot", "[.123]")
    add("n_number_neg_dot", "[-.123]")
    add("n_number_real_without_fractional_part", "[1.]")
    add("n_number_2.e3", "[2.e3]")
    add("n_number_2.e+3", "[2.e+3]")
    add("n_number_exponent_without_digits", "[1e]")
    add("n_number_exponent_sign_only", "[1e+]")
    add("n_number_exponent_minus_only", "[1e-]")
    add("n_number_0e", "[0e]")
    add("n_number_0.3e+", "[0.3e+]")
    add("n_number_double_e", "[1eE2]")
    add("n_number_plus_minus_exponent", "[1.0e+-1]")
    add("n_number_fraction_in_exponent", "[1e1.5]")
    add("n_number_two_dots", "[0.1.2]")
    add("n_number_minus_only", "[-]")
    add("n_number_minus_minus", "[--1]")
    add("n_number_minus_space", "[- 1]")
    add("n_number_NaN", "[NaN]")
    add("n_number_minus_NaN", "[-NaN]")
    add("n_number_Infinity", "[Infinity]")
    add("n_number_minus_infinity", "[-Infinity]")
    add("n_number_infinity_short", "[Inf]")
    add("n_number_hex", "[0x1]")
    add("n_number_hex_2", "[0x42]")
    add("n_number_underscore", "[1_000]")
    add("n_number_space_inside", "[1 000.0]")
    add("n_number_expression", "[1+2]")
    add("n_number_arabic_digit", "[١]")
    add("n_number_fullwidth_digit", "[１]")
    add("n_number_with_alpha", "[1.2a-3]")
    add("n_number_with_alpha_char", "[1.8011670033376514H-308]")
    add("n_number_neg_with_garbage_at_end", "[-1x]")
    add("n_number_real_garbage_after_e", "[1ea]")
    add("n_number_invalid+-", "[0e+-1]")
    add("n_number_top_level_leading_zero", "00")
    add("n_number_top_level_minus", "-")
    raw("n_number_invalid_utf8_after_e", bytes("[1e") + [0xE5] + bytes("]"))
    // strings
    add("n_string_unterminated", "\"abc")
    add("n_string_unterminated_in_array", "[\"a")
    add("n_string_single_doublequote", "\"")
    add("n_string_single_quote", "['single quote']")
    add("n_string_no_quotes_with_bad_escape", "[\\n]")
    add("n_string_escape_x", "[\"\\x00\"]")
    add("n_string_escape_a", "[\"\\a\"]")
    add("n_string_escape_apostrophe", "[\"\\'\"]")
    add("n_string_escape_capital_U", "[\"\\U0041\"]")
    add("n_string_escape_zero", "[\"\\0\"]")
    add("n_string_escape_space", "[\"\\ \"]")
    add("n_string_escaped_emoji", "[\"\\🌀\"]")
    add("n_string_backslash_at_end", "[\"\\")
    add("n_string_escaped_backslash_bad", "[\"\\\\\\\"]")
    add("n_string_incomplete_escape", "[\"\\\"]")
    add("n_string_incomplete_escaped_character", "[\"\\u00A\"]")
    add("n_string_1_surrogate_then_escape_u1", "[\"\\uD800\\u1\"]")
    add("n_string_1_surrogate_then_escape_u1x", "[\"\\uD800\\u1x\"]")
    add("n_string_invalid_unicode_escape", "[\"\\uqqqq\"]")
    add("n_string_u_escape_too_short", "[\"\\u12\"]")
    add("n_string_u_escape_bad_hex", "[\"\\u12g4\"]")
    add("n_string_incomplete_surrogate_escape_invalid", "[\"\\uD800\\uD800\\x\"]")
    add("n_string_unescaped_ctrl_char", "[\"a\u{0}a\"]")
    add("n_string_unescaped_ctrl_0x01", "[\"a\u{1}b\"]")
    add("n_string_unescaped_newline", "[\"new\nline\"]")
    add("n_string_unescaped_tab", "[\"\t\"]")
    add("n_string_unescaped_cr", "[\"a\rb\"]")
    add("n_string_unescaped_0x1F", "[\"\u{1F}\"]")
    add("n_string_start_escape_unclosed", "[\"\\")
    add("n_string_with_trailing_garbage", "\"\"x")
    add("n_string_leading_uescaped_thinspace", "[\\u0020\"asd\"]")
    // RFC 8259 §8.2 asks for well-formed Unicode: we reject lone surrogate escapes.
    add("n_string_lone_high_surrogate", "[\"\\uD800\"]")
    add("n_string_lone_low_surrogate", "[\"\\uDC00\"]")
    add("n_string_high_then_non_surrogate", "[\"\\uD800\\u0041\"]")
    add("n_string_high_then_newline_escape", "[\"\\uD800\\n\"]")
    add("n_string_two_high_surrogates", "[\"\\uD800\\uD800\"]")
    add("n_string_reversed_pair", "[\"\\uDC00\\uD800\"]")
    add("n_string_high_at_end", "[\"\\uDBFF\"]")
    add("n_string_high_then_raw", "[\"\\uD834abcdef\"]")
    // invalid UTF-8 inside strings (and outside)
    raw("n_string_invalid_utf8_latin1", bytes("[\"") + [0xE9] + bytes("\"]"))
    raw("n_string_lone_continuation", bytes("[\"") + [0x80] + bytes("\"]"))
    raw("n_string_lone_continuation_bf", bytes("[\"") + [0xBF] + bytes("\"]"))
    raw("n_string_overlong_2byte_slash", bytes("[\"") + [0xC0, 0xAF] + bytes("\"]"))
    raw("n_string_overlong_2byte_C1", bytes("[\"") + [0xC1, 0xBF] + bytes("\"]"))
    raw("n_string_overlong_3byte", bytes("[\"") + [0xE0, 0x80, 0xAF] + bytes("\"]"))
    raw("n_string_overlong_4byte", bytes("[\"") + [0xF0, 0x80, 0x80, 0xAF] + bytes("\"]"))
    raw("n_string_utf8_surrogate_D800", bytes("[\"") + [0xED, 0xA0, 0x80] + bytes("\"]"))
    raw("n_string_utf8_surrogate_DFFF", bytes("[\"") + [0xED, 0xBF, 0xBF] + bytes("\"]"))
    raw("n_string_above_10FFFF", bytes("[\"") + [0xF4, 0x90, 0x80, 0x80] + bytes("\"]"))
    raw("n_string_F5_lead", bytes("[\"") + [0xF5, 0x80, 0x80, 0x80] + bytes("\"]"))
    raw("n_string_5byte_sequence", bytes("[\"") + [0xF8, 0x88, 0x80, 0x80, 0x80] + bytes("\"]"))
    raw("n_string_FF", bytes("[\"") + [0xFF] + bytes("\"]"))
    raw("n_string_truncated_3byte", bytes("[\"") + [0xE2, 0x82] + bytes("\"]"))
    raw("n_string_truncated_4byte_at_end", bytes("[\"") + [0xF0, 0x9F, 0x98])
    raw("n_string_bad_continuation", bytes("[\"") + [0xE2, 0x28, 0xA1] + bytes("\"]"))
    raw("n_string_UTF16LE_with_BOM", [0xFF, 0xFE, 0x5B, 0x00, 0x22, 0x00, 0xE9, 0x00, 0x22, 0x00, 0x5D, 0x00])
    raw("n_structure_invalid_utf8_outside_string", [0x5B, 0xFF, 0x5D])
    return c
}()

@Test(arguments: rejectCases.map { $0.0 })
func rejectsInvalidDocument(name: String) throws {
    let (_, input) = try #require(rejectCases.first { $0.0 == name })
    #expect(throws: JSONError.self, "\(name)") { try JSONValue.parse(input) }
}

@Test func errorKindsAndPositions() {
    func error(_ s: [UInt8]) -> JSONError? {
        do throws(JSONError) {
            _ = try JSONValue.parse(s)
            return nil
        } catch {
            return error
        }
    }
    #expect(error(bytes("")) == .unexpectedEnd(at: 0))
    #expect(error(bytes("[1,")) == .unexpectedEnd(at: 3))
    #expect(error(bytes("[01]")) == .invalidNumber(at: 1))
    #expect(error(bytes("[1.]")) == .invalidNumber(at: 1))
    #expect(error(bytes("[+1]")) == .unexpectedByte(UInt8(ascii: "+"), at: 1))
    #expect(error(bytes("[1]x")) == .trailingData(at: 3))
    #expect(error(bytes("[1 2]")) == .unexpectedByte(UInt8(ascii: "2"), at: 3))
    #expect(error(bytes("{\"a\" 1}")) == .unexpectedByte(UInt8(ascii: "1"), at: 5))
    #expect(error(bytes("[\"\\x\"]")) == .invalidEscape(at: 2))
    #expect(error(bytes("[\"ab\\uD800\"]")) == .loneSurrogate(at: 4))
    #expect(error(bytes("[\"ab\\uDC00\"]")) == .loneSurrogate(at: 4))
    #expect(error(bytes("[\"a\tb\"]")) == .controlCharacterInString(at: 3))
    #expect(error(bytes("[\"ab") + [0xC0, 0xAF] + bytes("\"]")) == .invalidUTF8(at: 4))
    #expect(error(bytes("[1e400]")) == .numberOutOfRange(at: 1))
    #expect(error(bytes("tru")) == .unexpectedEnd(at: 3))
    #expect(error(bytes("trUe")) == .unexpectedByte(UInt8(ascii: "U"), at: 2))
    #expect(JSONError.invalidNumber(at: 7).description == "invalid number at byte 7")
}

// MARK: Implementation-defined (i_) cases: the behaviour we chose, asserted.

@Test func implementationDefinedNumbers() throws {
    // Overflowing magnitudes are refused (JSON cannot carry the resulting infinity).
    for s in ["[1.5e+9999]", "[-1.5e+9999]", "[1e309]", "[123123e100000]", "[-123123e100000]",
              "[1.8e308]", "[1" + String(repeating: "0", count: 309) + "]"] {
        #expect(throws: JSONError.self, "\(s)") { try JSONValue.parse(bytes(s)) }
    }
    // Largest finite double and anything that still rounds to it are accepted.
    #expect(try JSONValue.parse(bytes("[1.7976931348623157e308]"))[0]?.double == Double.greatestFiniteMagnitude)
    #expect(try JSONValue.parse(bytes("[1.7976931348623158e308]"))[0]?.double == Double.greatestFiniteMagnitude)
    // Underflow rounds to a signed zero.
    let tiny = try JSONValue.parse(bytes("[123e-10000000, -123e-10000000, 1e-400]"))
    #expect(tiny[0]?.double == 0 && tiny[0]?.double?.sign == .plus)
    #expect(tiny[1]?.double == 0 && tiny[1]?.double?.sign == .minus)
    #expect(tiny[2]?.double == 0)
    #expect(tiny[0]?.int64 == nil)
    // Integers beyond Int64 keep only their Double.
    let big = try JSONValue.parse(bytes("[100000000000000000000, -9223372036854775809, 9223372036854775808, -9223372036854775808, 9223372036854775807]"))
    #expect(big[0]?.int64 == nil && big[0]?.double == 1e20)
    #expect(big[1]?.int64 == nil && big[1]?.double == -9223372036854775808.0)
    #expect(big[2]?.int64 == nil)
    #expect(big[3]?.int64 == Int64.min)
    #expect(big[4]?.int64 == Int64.max)
    // "Very close to zero" with many digits.
    #expect(try JSONValue.parse(bytes("[-1e-1000]"))[0]?.double?.sign == .minus)
}

@Test func implementationDefinedStructure() throws {
    // A UTF-8 byte order mark before the text is skipped (RFC 8259 §8.1 allows it).
    #expect(try JSONValue.parse([0xEF, 0xBB, 0xBF] + bytes("{}")) == .object(JSONObject()))
    // 500 nested arrays: beyond the default depth of 64, accepted with a raised limit.
    let deep = bytes(String(repeating: "[", count: 500) + String(repeating: "]", count: 500))
    #expect(throws: JSONError.tooDeep(at: 64)) { try JSONValue.parse(deep) }
    var value = try JSONValue.parse(deep, limits: JSONLimits(maxDepth: 500))
    var depth = 0
    while case .array(let a) = value {
        depth += 1
        guard let first = a.first else { break }
        value = first
    }
    #expect(depth == 500)
    // Exactly the limit is fine, one more is not.
    let at64 = bytes(String(repeating: "[", count: 64) + String(repeating: "]", count: 64))
    #expect(throws: Never.self) { try JSONValue.parse(at64) }
    let objects65 = bytes(String(repeating: "{\"a\":", count: 65) + "1" + String(repeating: "}", count: 65))
    #expect(throws: JSONError.tooDeep(at: 320)) { try JSONValue.parse(objects65) }
}

@Test func implementationDefinedStrings() throws {
    // Lone surrogates (i_string_1st_surrogate_but_2nd_missing etc.): rejected.
    for s in ["[\"\\uDADA\"]", "[\"\\uD888\\u1234\"]", "[\"\\uDFAA\"]", "{\"\\uDFAA\":0}", "[\"\\uD800\\uD800\\n\"]"] {
        #expect(throws: JSONError.self) { try JSONValue.parse(bytes(s)) }
    }
    // Noncharacters are valid scalars and are accepted.
    #expect(try JSONValue.parse(bytes("[\"\\uFDD0\\uFFFE\"]"))[0]?.string == String(String.UnicodeScalarView([Unicode.Scalar(0xFDD0)!, Unicode.Scalar(0xFFFE)!])))
    // UTF-16 and invalid UTF-8 documents: rejected (we read UTF-8 only, RFC 8259 §8.1).
    #expect(throws: JSONError.self) { try JSONValue.parse([0xFE, 0xFF, 0x00, 0x5B, 0x00, 0x22, 0x00, 0x22, 0x00, 0x5D]) }
    #expect(throws: JSONError.self) { try JSONValue.parse(bytes("[\"") + [0xF4, 0xBF, 0xBF, 0xBF] + bytes("\"]")) }
}
