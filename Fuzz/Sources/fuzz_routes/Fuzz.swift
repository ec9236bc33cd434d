import FuzzSupport

// The routes' parsers (Signaling/Routes.swift): what a provider's answer, a `Link`
// header or a request to `linnet answer` can make of them.
//
// Input: a first byte; its low two bits pick the part.
// - 0: the rest is a `Link` field value. Invariants: every server's URL is non-empty
//   and holds no space or control byte.
// - 1: the rest is an HTTP response (bytes as a server sends them), read by our parser
//   and handed to `offerOutcome` for each route. Invariants: a resource never moves
//   from https to http; a backend voice id is 1–128 unreserved characters; a redirect
//   target is http(s) and no downgrade.
// - 2: the rest is an HTTP request to `linnet answer`. Invariants: ids and chats in a
//   parsed request hold no "/".

let https = try! HTTPURL("https://provider.example/base/whip")
let routes: [Route] = [.whip(https), .backend(base: try! HTTPURL("https://provider.example/api"), chat: "c1"),
                       .openai(calls: try! HTTPURL("https://provider.example/v1/realtime/calls"), tokenURL: try! HTTPURL("https://provider.example/key"))]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = inputBytes(data, size)
    guard let mode = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    switch mode & 3 {
    case 0:
        for s in ICEServerLink.parse(String(decoding: rest, as: UTF8.self)) {
            invariant(!s.url.isEmpty && !s.url.utf8.contains { $0 <= 0x20 || $0 == 0x7F }, "a server URL with a space or control byte: \(s.url)")
        }
    case 1:
        var parser = HTTPResponseParser()
        guard let response = (try? parser.feed(rest)) ?? (try? parser.finish()) else { return 0 }
        for route in routes {
            let url: HTTPURL
            switch route {
            case .whip(let u): url = u
            case .backend(let b, let chat): url = RoutePath.backendOffer(b, chat: chat)
            case .openai(let calls, _): url = calls
            }
            switch RouteClient.offerOutcome(route, response, url: url, now: 1_700_000_000, redact: { $0 }) {
            case .answer(let a):
                if let r = a.resource { invariant(r.secure, "a resource moved from https to http: \(r)") }
                if let id = a.voiceID {
                    invariant(!id.isEmpty && id.utf8.count <= 128 && id.utf8.allSatisfy(isUnreserved), "an unusable voice id was taken: \(id)")
                    let close = RoutePath.backendClose(try! HTTPURL("https://provider.example/api"), chat: "c1", id: id)
                    invariant(!close.target.utf8.contains { $0 <= 0x20 }, "a close path with a space or control byte")
                }
            case .redirect(let next):
                invariant(next.secure, "a redirect from https to http was followed: \(next)")
            case .failure:
                break
            }
        }
    default:
        var parser = HTTPRequestParser()
        guard let request = try? parser.feed(rest) else { return 0 }
        switch RouteServer.parse(method: request.method, target: request.target, headers: request.headers, body: request.body) {
        case .request(.backendOffer(let chat, _)): invariant(!chat.contains("/"), "a chat id with a slash")
        case .request(.backendClose(let chat, let id)): invariant(!chat.contains("/") && !id.contains("/"), "an id with a slash")
        case .request(.whipRestart(let id, _)), .request(.whipDelete(let id)): invariant(!id.contains("/"), "a session id with a slash")
        case .request(.whipOffer), .refuse: break
        }
    }
    return 0
}
