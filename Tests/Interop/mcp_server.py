#!/usr/bin/env python3
"""An MCP server for Linnet's tool tests, built with the protocol's official Python SDK
(`mcp` on PyPI, MCPServer over streamable HTTP), or a hostile one that is not.

mcp_server.py [--json] [--token T] [--idle S] [--log FILE] [--hostile stream-forever]

Prints `READY <port>` once its socket listens on 127.0.0.1 (an ephemeral port).
--json            answer POSTs with one JSON body instead of an SSE stream
--token T         refuse (401) a request without `Authorization: Bearer T`
--idle S          the SDK forgets a session idle for S seconds (a later request with its
                  id gets 404, as after a server restart) and says `FORGOT <id>`
--log FILE        one JSON line per request: method, JSON-RPC method, whether it carried
                  the session id, the protocol version and the token
--hostile stream-forever
                  no SDK: every POST is answered 200 text/event-stream and then only
                  comments, forever (a server that never answers)
Tools: set_light(room, on), wait_forever(), big() (10 MB of text), broken(x) (raises).
"""
import argparse, asyncio, json, socket, sys

ap = argparse.ArgumentParser()
ap.add_argument("--json", action="store_true")
ap.add_argument("--token")
ap.add_argument("--idle", type=float)
ap.add_argument("--log")
ap.add_argument("--hostile")
args = ap.parse_args()

sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(64)
port = sock.getsockname()[1]


async def stream_forever():
    async def serve(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n")
            while True:
                writer.write(b": still here\n\n" * 64)
                await writer.drain()
                await asyncio.sleep(0.01)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    server = await asyncio.start_server(serve, sock=sock)
    print(f"READY {port}", flush=True)
    await server.serve_forever()


if args.hostile == "stream-forever":
    asyncio.run(stream_forever())
    sys.exit(0)

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

m = MCPServer("linnet-test")


@m.tool()
def set_light(room: str, on: bool) -> str:
    """Switch the light of a room on or off."""
    return f"{room} light {'on' if on else 'off'}"


@m.tool()
async def wait_forever() -> str:
    """Never answers."""
    await anyio.sleep(3600)
    return "late"


@m.tool()
def big() -> str:
    """Returns ten megabytes of text."""
    return "x" * (10 << 20)


@m.tool()
def broken(x: int) -> str:
    """Always fails."""
    raise ValueError(f"broken by {x}")


kwargs = {"json_response": args.json}
if args.idle:
    kwargs["session_idle_timeout"] = args.idle
    # The SDK logs each session it reaps; said on stdout (`FORGOT <id>`), so a test can
    # wait for it rather than sleep.
    import logging

    class Forgot(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if "idle timeout" in text:
                print("FORGOT " + text.split()[1], flush=True)
    h = Forgot()
    logging.getLogger("mcp.server").addHandler(h)
    logging.getLogger("mcp.server").setLevel(logging.INFO)
app = m.streamable_http_app(**kwargs)
log = open(args.log, "a", buffering=1) if args.log else None


async def guarded(scope, receive, send):
    """Checks the token and logs the request, then hands it to the SDK's app."""
    if scope["type"] != "http":
        return await app(scope, receive, send)
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    body = b""
    more = True
    while more:
        msg = await receive()
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    try:
        rpc = json.loads(body).get("method") if body else None
    except ValueError:
        rpc = "(not JSON)"
    if log:
        log.write(json.dumps({"method": scope["method"], "rpc": rpc, "session": "mcp-session-id" in headers,
                              "version": headers.get("mcp-protocol-version"),
                              "authorization": headers.get("authorization")}) + "\n")
    if args.token and headers.get("authorization") != f"Bearer {args.token}":
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
        return await send({"type": "http.response.body", "body": b"no"})
    done = False

    async def replay():
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    await app(scope, replay, send)


config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
server = uvicorn.Server(config)
print(f"READY {port}", flush=True)
asyncio.run(server.serve(sockets=[sock]))
