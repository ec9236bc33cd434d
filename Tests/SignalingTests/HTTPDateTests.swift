import Testing
import Foundation
import Wire
@testable import Signaling

/// Unix seconds of a UTC calendar date, computed by Foundation's Gregorian calendar
/// (independent of the code under test).
private func reference(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int, _ s: Int) -> Int64 {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    let date = calendar.date(from: DateComponents(year: y, month: mo, day: d, hour: h, minute: mi, second: s))!
    return Int64(date.timeIntervalSince1970)
}

@Suite struct HTTPDateTests {
    /// RFC 9110 §5.6.7's own example, in its three formats, is one instant.
    @Test func theRFCExampleInAllThreeFormats() {
        let expected = reference(1994, 11, 6, 8, 49, 37)
        #expect(expected == 784_111_777)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT", now: reference(2026, 1, 1, 0, 0, 0)) == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
    }

    @Test func assortedDatesAgainstFoundation() {
        #expect(HTTPDate.parse("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        #expect(HTTPDate.parse("Tue, 29 Feb 2028 23:59:59 GMT") == reference(2028, 2, 29, 23, 59, 59))
        #expect(HTTPDate.parse("Wed, 31 Dec 2036 12:00:00 GMT") == reference(2036, 12, 31, 12, 0, 0))
        #expect(HTTPDate.parse("Mon, 01 Jan 2100 00:00:00 GMT") == reference(2100, 1, 1, 0, 0, 0))
        #expect(HTTPDate.parse("sun, 06 nov 1994 08:49:37 gmt") == 784_111_777)  // case-insensitive
        #expect(HTTPDate.parse("Thu Mar 12 01:02:03 2026") == reference(2026, 3, 12, 1, 2, 3))
    }

    /// RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century.
    @Test func rfc850TwoDigitYears() {
        let now = reference(2026, 6, 1, 0, 0, 0)
        #expect(HTTPDate.parse("Friday, 01-Jan-27 00:00:00 GMT", now: now) == reference(2027, 1, 1, 0, 0, 0))
        #expect(HTTPDate.parse("Monday, 01-Jan-76 00:00:00 GMT", now: now) == reference(2076, 1, 1, 0, 0, 0))
        #expect(HTTPDate.parse("Thursday, 01-Jan-77 00:00:00 GMT", now: now) == reference(1977, 1, 1, 0, 0, 0))
    }

    @Test(arguments: [
        "", "GMT", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 2027 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 06 08:49:37", "Sun Nov 123 08:49:37 1994",
        "Sun, -6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:3x GMT", "Sun, 00 Nov 1994 08:49:37 GMT",
    ])
    func invalidDates(text: String) {
        #expect(HTTPDate.parse(text) == nil)
    }

    func response(_ retryAfter: String?) -> HTTPResponse {
        HTTPResponse(status: 503, headers: HTTPHeaders(retryAfter.map { [("Retry-After", $0)] } ?? []))
    }

    /// RFC 9110 §10.2.3: delay-seconds or an HTTP-date, relative to now.
    @Test func retryAfter() {
        let now = reference(2026, 11, 29, 12, 0, 0)
        #expect(response("120").retryAfter(now: now) == .seconds(120))
        #expect(response(" 0 ").retryAfter(now: now) == .zero)
        #expect(response("Sun, 29 Nov 2026 12:01:30 GMT").retryAfter(now: now) == .seconds(90))
        #expect(response("Sun, 29 Nov 2026 11:00:00 GMT").retryAfter(now: now) == .zero)  // already past
        #expect(response("99999999999999999999").retryAfter(now: now) == HTTPResponse.maxRetryAfter)
        #expect(response(nil).retryAfter(now: now) == nil)
        #expect(response("-5").retryAfter(now: now) == nil)
        // Not RFC 9110 delay-seconds, but what OpenAI sends (and its SDKs honour).
        #expect(response("1.5").retryAfter(now: now) == .milliseconds(1500))
        #expect(response("soon").retryAfter(now: now) == nil)
    }
}

@Suite struct HTTPBoundsTests {
    /// A chunk longer than its size line says must not be buffered waiting for a CRLF.
    @Test func chunkOverrunIsRefusedEarly() {
        var p = HTTPResponseParser()
        #expect(throws: HTTPError.malformed("chunk data longer than its size")) {
            _ = try p.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcdefgh".utf8))
        }
    }

    /// An endless trailer line is cut off at the header limit.
    @Test func endlessTrailerIsRefused() throws {
        var p = HTTPResponseParser(limits: HTTPLimits(maxHeaderBytes: 512, maxBodyBytes: 1024))
        #expect(try p.feed(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ".utf8)) == nil)
        #expect(throws: HTTPError.headersTooLarge(limit: 512)) {
            for _ in 0..<10 { _ = try p.feed([UInt8](repeating: 0x61, count: 100)) }
        }
    }

    /// RFC 9112 §6.3: differing Content-Length fields are an error; repeated equal ones are not.
    @Test func conflictingContentLengths() throws {
        #expect(throws: HTTPError.malformed("conflicting Content-Length fields")) {
            _ = try feedAll("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", splitEvery: 100)
        }
        let r = try #require(try feedAll("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", splitEvery: 100))
        #expect(r.bodyText == "abc")
    }

    @Test func defaultLimitsAreExplicit() {
        #expect(HTTPLimits().maxHeaderBytes == 16_384 && HTTPLimits().maxBodyBytes == 1_048_576)
    }
}

@Suite struct HTTPInterimResponseTests {
    /// RFC 9110 §15.2: 1xx responses before the final one are skipped, however split.
    @Test(arguments: [1, 5, 1000])
    func interimResponsesAreSkipped(step: Int) throws {
        let text = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            + "HTTP/1.1 201 Created\r\nLocation: /x\r\nContent-Length: 2\r\n\r\nok"
        let r = try #require(try feedAll(text, splitEvery: step))
        #expect(r.status == 201 && r.bodyText == "ok" && r.headers["Location"] == "/x" && r.headers["Link"] == nil)
    }

    @Test func onlyInterimIsTruncated() {
        #expect(throws: HTTPError.truncated) { _ = try feedAll("HTTP/1.1 100 Continue\r\n\r\n", splitEvery: 3) }
    }
}
