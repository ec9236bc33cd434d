#!/usr/bin/env python3
"""A webhook for Linnet's http tool tests (Home Assistant's REST API, in miniature).

http_tool_server.py LOG: prints `READY <port>` once listening on 127.0.0.1; each POST is
written to LOG as one JSON line (path, Authorization, body) and answered with
{"state": "on", "entity_id": <the body's entity_id>}.
"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

log = open(sys.argv[1], "a", buffering=1)


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        log.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization"),
                              "body": body.decode()}) + "\n")
        try:
            entity = json.loads(body).get("entity_id")
        except ValueError:
            entity = None
        out = json.dumps({"state": "on", "entity_id": entity}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Hook)
print(f"READY {server.server_address[1]}", flush=True)
server.serve_forever()
