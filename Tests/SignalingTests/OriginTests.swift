import Testing
@testable import Signaling

/// RFC 6454 origins, RFC 9110 §10.2.2 redirects and the token's scope.
@Suite struct OriginTests {
    @Test func originsCompareSchemeHostAndPort() throws {
        let a = try HTTPURL("https://API.example.com/v1/x")
        #expect(a.origin == (try HTTPURL("https://api.example.com:443/other")).origin)
        #expect(a.origin != (try HTTPURL("http://api.example.com/v1/x")).origin)
        #expect(a.origin != (try HTTPURL("https://api.example.com:8443/v1/x")).origin)
        #expect(a.origin != (try HTTPURL("https://evil.example.com/v1/x")).origin)
    }

    @Test func redirects() throws {
        let base = try HTTPURL("https://api.example.com/whip/endpoint")
        #expect(try base.redirect(to: "/whip/other").description == "https://api.example.com/whip/other")
        #expect(try base.redirect(to: "https://eu.example.com/w").host == "eu.example.com")
        #expect(try base.redirect(to: "session/1").target == "/whip/session/1")
        #expect(throws: RedirectRefusal.downgrade(to: "http://api.example.com/w")) { try base.redirect(to: "http://api.example.com/w") }
        #expect(throws: RedirectRefusal.notHTTP("ftp://api.example.com/w")) { try base.redirect(to: "ftp://api.example.com/w") }
        #expect(throws: RedirectRefusal.notHTTP("javascript:alert(1)")) { try base.redirect(to: "javascript:alert(1)") }
        #expect(throws: RedirectRefusal.badLocation("/a b")) { try base.redirect(to: "/a b") }
        // http → https is an upgrade, fine; a colon after a slash is a path, not a scheme.
        #expect(try (try HTTPURL("http://h/x")).redirect(to: "https://h/y").secure)
        #expect(try base.redirect(to: "/a:b").target == "/a:b")
    }

    @Test func theTokenGoesOnlyToItsOrigin() throws {
        let c = BearerCredential(token: "secret-token-123", for: try HTTPURL("https://backend.example/voice"))
        #expect(c.authorization(for: try HTTPURL("https://backend.example/voice/7/close")) == "Bearer secret-token-123")
        #expect(c.authorization(for: try HTTPURL("https://other.example/voice")) == nil)
        #expect(c.authorization(for: try HTTPURL("http://backend.example/voice")) == nil)
        #expect(c.redact("you sent Authorization: Bearer secret-token-123\n") == "you sent Authorization: Bearer [redacted]\n")
        #expect(redacting("short", in: "a short word") == "a short word")
    }
}
