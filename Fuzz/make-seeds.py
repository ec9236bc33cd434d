#!/usr/bin/env python3
"""Writes the seed corpora in Fuzz/corpus/<target>/ (run once; the output is committed).

Every seed is built here from the RFC field layouts, not captured from Linnet, so the
fuzzers start from inputs an independent implementation would send:
- stun: the RFC 5769 vectors byte for byte, plus a Binding request as ICE sends it;
- sdp: Tests/SDPTests/Fixtures (browsers, aiortc, pion, GStreamer, FreeSWITCH);
- rtp, rtcp, sctp, dcep: packets laid out per RFC 3550/8285, RFC 9260, RFC 8832,
  with CRC32c computed here (RFC 9260 appendix B);
- dtls: a ClientHello from `openssl s_client -dtls1_2` and the first server flight of
  `openssl s_server -dtls1_2` answering it (needs openssl; skipped without it);
- json, http_*, wav, config: hand-written samples of what Linnet reads.

Targets that read several datagrams or reads (rtp, dtls) take "pieces": a 2-byte
big-endian length, then that many bytes, repeated. The HTTP targets take a first byte n
(low 3 bits) and n cut positions before the message.
"""
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(ROOT, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pieces(*datagrams):
    return b"".join(struct.pack(">H", len(d)) + d for d in datagrams)


def hexbytes(s):
    return bytes.fromhex("".join(s.split()))


# --- STUN (RFC 5769 §2) ---------------------------------------------------------------
def stun():
    write("stun", "rfc5769-request", hexbytes("""
        00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
        00 24 00 04 6e 00 01 ff
        80 29 00 08 93 2f f9 b1 51 26 3b 36
        00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20
        00 08 00 14 9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
        80 28 00 04 e5 7a 3b cf"""))
    write("stun", "rfc5769-ipv4-response", hexbytes("""
        01 01 00 3c 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
        00 20 00 08 00 01 a1 47 e1 12 a6 43
        00 08 00 14 2b 91 f5 99 fd 9e 90 c3 8c 74 89 f9 2a f9 ba 53 f0 6b e7 d7
        80 28 00 04 c0 7d 4c 96"""))
    write("stun", "rfc5769-ipv6-response", hexbytes("""
        01 01 00 48 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
        00 20 00 14 00 02 a1 47 01 13 a9 fa a5 d3 f1 79 bc 25 f4 b5 be d2 b9 d9
        00 08 00 14 a3 82 95 4e 4b e6 7b f1 17 84 c9 7c 82 92 c2 75 bf e3 ed 41
        80 28 00 04 c8 fb 0b 4c"""))
    # An error response (420 with UNKNOWN-ATTRIBUTES) and an unknown required attribute.
    tid = bytes(range(12))
    attrs = struct.pack(">HH", 0x0009, 4 + 7) + bytes([0, 0, 4, 20]) + b"Unknown" + b"\0"
    attrs += struct.pack(">HH", 0x000A, 4) + struct.pack(">HH", 0x0024, 0x7777)
    attrs += struct.pack(">HH", 0x7777, 4) + b"abcd"
    write("stun", "error-420", struct.pack(">HHI", 0x0111, len(attrs), 0x2112A442) + tid + attrs)
    # A MAPPED-ADDRESS (old style) response.
    attrs = struct.pack(">HH", 0x0001, 8) + bytes([0, 1]) + struct.pack(">H", 3478) + bytes([192, 0, 2, 1])
    write("stun", "mapped-address", struct.pack(">HHI", 0x0101, len(attrs), 0x2112A442) + tid + attrs)


def candidate():
    for i, c in enumerate([
        "candidate:1 1 udp 2130706431 192.168.1.20 50000 typ host",
        "candidate:842163049 1 udp 1677729535 198.51.100.7 61234 typ srflx raddr 192.168.1.20 rport 50000 generation 0 ufrag abcd network-cost 999",
        "a=candidate:3 1 tcp 1518280447 2001:db8::1 9 typ host tcptype active",
        "candidate:4 1 UDP 2122252543 3f2c5b1e-1d1a-4c7b-9d1e-0123456789ab.local 54321 typ host",
        "candidate:5 1 udp 41885439 203.0.113.9 3478 typ relay raddr 0.0.0.0 rport 0",
    ]):
        write("candidate", f"candidate-{i}", c)


def sdp():
    fixtures = os.path.join(ROOT, "..", "Tests", "SDPTests", "Fixtures")
    for name in sorted(os.listdir(fixtures)):
        if name.endswith(".sdp"):
            shutil.copy(os.path.join(fixtures, name), os.path.join(CORPUS, "sdp", name))


# --- RTP / RTCP (RFC 3550, RFC 8285) --------------------------------------------------
def rtp_packet(seq, ts, ssrc=0x11223344, pt=111, marker=False, csrcs=(), ext=None, payload=b"\xfc\xff\xfe", padding=0):
    b0 = 0x80 | (0x20 if padding else 0) | (0x10 if ext else 0) | len(csrcs)
    out = struct.pack(">BBHII", b0, (0x80 if marker else 0) | pt, seq, ts, ssrc)
    for c in csrcs:
        out += struct.pack(">I", c)
    if ext:
        profile, data = ext
        out += struct.pack(">HH", profile, len(data) // 4) + data
    out += payload
    if padding:
        out += bytes(padding - 1) + bytes([padding])
    return out


def rtp():
    opus = bytes([0x78]) + bytes(range(40))
    one_byte = bytes([0x10, 0xAA, 0x22, 1, 2, 3, 0, 0])   # id 1 len 1, id 2 len 3, padding
    two_byte = bytes([1, 2, 0xAA, 0xBB, 0, 3, 0, 0])     # id 1 len 2, padding, id 3 len 0... padded
    write("rtp", "stream", pieces(*[rtp_packet(1000 + i, 960 * i, payload=opus, marker=(i == 0)) for i in range(6)]))
    write("rtp", "reordered-lost", pieces(*[rtp_packet(s, 960 * ((s - 65530) % 65536)) for s in (65530, 65532, 65531, 65535, 0, 3, 2)]))
    write("rtp", "extensions", pieces(rtp_packet(1, 0, ext=(0xBEDE, one_byte)), rtp_packet(2, 960, ext=(0x1000, two_byte))))
    write("rtp", "csrc-padding", pieces(rtp_packet(7, 7, csrcs=(1, 2, 3), padding=4), rtp_packet(8, 967, padding=1)))
    write("rtp", "ssrc-change", pieces(rtp_packet(5, 0), rtp_packet(6, 960), rtp_packet(100, 5, ssrc=9), rtp_packet(101, 965, ssrc=9)))


def rtcp_header(count, pt, body, padding=0):
    if padding:
        body = body + bytes(padding - 1) + bytes([padding])
    return struct.pack(">BBH", 0x80 | (0x20 if padding else 0) | count, pt, len(body) // 4) + body


def report_block(ssrc):
    # SSRC, fraction lost, cumulative lost (24 bits), highest seq, jitter, LSR, DLSR.
    return struct.pack(">IB", ssrc, 12) + (5).to_bytes(3, "big") + struct.pack(">IIII", 0x0001_0400, 33, 0x1234_5678, 0x0001_8000)


def sdes(ssrc, cname):
    item = bytes([1, len(cname)]) + cname + b"\0"
    chunk = struct.pack(">I", ssrc) + item
    chunk += bytes((4 - len(chunk) % 4) % 4)
    return rtcp_header(1, 202, chunk)


def rtcp():
    sr = struct.pack(">IQIII", 0x11223344, 0xE6D1_2345_8000_0000, 96000, 100, 4000) + report_block(0x55667788)
    write("rtcp", "sr-sdes", rtcp_header(1, 200, sr) + sdes(0x11223344, b"linnet-cname"))
    rr = struct.pack(">I", 0x55667788) + report_block(0x11223344) + report_block(0x99)
    write("rtcp", "rr-sdes", rtcp_header(2, 201, rr) + sdes(0x55667788, b"peer"))
    bye = struct.pack(">I", 0x11223344) + bytes([7]) + b"goodbye"
    bye += bytes((4 - len(bye) % 4) % 4)
    write("rtcp", "rr-bye", rtcp_header(0, 201, struct.pack(">I", 1)) + rtcp_header(1, 203, bye))
    # RFC 4585 PLI (PSFB fmt 1) and a transport-wide feedback (RTPFB 15), reduced size.
    write("rtcp", "psfb-pli", rtcp_header(1, 206, struct.pack(">II", 1, 0x11223344)))
    write("rtcp", "rtpfb-padded", rtcp_header(15, 205, struct.pack(">IIHHI", 1, 0x11223344, 5, 2, 0x01000000), padding=4))


# --- SCTP (RFC 9260) and DCEP (RFC 8832) ------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def chunk(ctype, flags, value):
    out = struct.pack(">BBH", ctype, flags, 4 + len(value)) + value
    return out + bytes((4 - len(out) % 4) % 4)


def param(ptype, value):
    out = struct.pack(">HH", ptype, 4 + len(value)) + value
    return out + bytes((4 - len(out) % 4) % 4)


def sctp_packet(tag, *chunks):
    body = struct.pack(">HHII", 5000, 5000, tag, 0) + b"".join(chunks)
    crc = crc32c(body)
    # The checksum goes in little-endian order (RFC 9260 appendix B).
    return body[:8] + struct.pack("<I", crc) + body[12:]


def dcep_open(label, proto=b"", ctype=0, param_value=0, priority=256):
    return struct.pack(">BBHIHH", 3, ctype, priority, param_value, len(label), len(proto)) + label + proto


def sctp():
    ext = param(0x8008, bytes([0xC0, 0x82]))                     # supported extensions: FORWARD-TSN, RE-CONFIG
    init = struct.pack(">IIHHI", 0xA1B2C3D4, 131072, 1024, 1024, 100) + param(0xC000, b"") + ext
    write("sctp", "init", sctp_packet(0, chunk(1, 0, init)))
    cookie = bytes(range(48))
    init_ack = struct.pack(">IIHHI", 0x0BADF00D, 131072, 1024, 1024, 500) + param(7, cookie) + param(0xC000, b"") + ext
    write("sctp", "init-ack", sctp_packet(0xA1B2C3D4, chunk(2, 0, init_ack)))
    write("sctp", "cookie-echo", sctp_packet(0x0BADF00D, chunk(10, 0, cookie)))
    write("sctp", "cookie-ack", sctp_packet(0xA1B2C3D4, chunk(11, 0, b"")))
    data_open = struct.pack(">IHHI", 100, 0, 0, 50) + dcep_open(b"oai-events")
    write("sctp", "data-dcep-open", sctp_packet(0x0BADF00D, chunk(0, 0x03, data_open)))
    text = struct.pack(">IHHI", 101, 0, 1, 51) + b'{"type":"session.update"}'
    frag = struct.pack(">IHHI", 102, 2, 0, 53) + bytes(range(100))
    write("sctp", "data-bundled", sctp_packet(0x0BADF00D, chunk(0, 0x03, text), chunk(0, 0x06, frag), chunk(0, 0x01, frag)))
    sack = struct.pack(">IIHH", 100, 131072, 2, 1) + struct.pack(">HHHH", 2, 3, 5, 5) + struct.pack(">I", 99)
    write("sctp", "sack-gaps-dups", sctp_packet(0xA1B2C3D4, chunk(3, 0, sack)))
    hb = param(1, bytes(range(16)))
    write("sctp", "heartbeat", sctp_packet(0xA1B2C3D4, chunk(4, 0, hb)))
    write("sctp", "heartbeat-ack", sctp_packet(0xA1B2C3D4, chunk(5, 0, hb)))
    write("sctp", "forward-tsn", sctp_packet(0xA1B2C3D4, chunk(192, 0, struct.pack(">IHH", 120, 1, 7))))
    reset = param(13, struct.pack(">III", 1, 0, 110) + struct.pack(">HH", 1, 3))
    write("sctp", "reconfig-reset", sctp_packet(0xA1B2C3D4, chunk(130, 0, reset)))
    write("sctp", "reconfig-response", sctp_packet(0xA1B2C3D4, chunk(130, 0, param(16, struct.pack(">II", 1, 1)))))
    write("sctp", "abort-cause", sctp_packet(0xA1B2C3D4, chunk(6, 0, struct.pack(">HH", 12, 8) + b"oops")))
    write("sctp", "error-cause", sctp_packet(0xA1B2C3D4, chunk(9, 0, struct.pack(">HHI", 3, 8, 1000))))
    write("sctp", "shutdown", sctp_packet(0xA1B2C3D4, chunk(7, 0, struct.pack(">I", 100))))
    write("sctp", "shutdown-ack-complete", sctp_packet(0xA1B2C3D4, chunk(8, 0, b""), chunk(14, 1, b"")))
    write("sctp", "unknown-chunks", sctp_packet(0xA1B2C3D4, chunk(0x40, 0, b"skip"), chunk(0xC1, 0, b"report"), chunk(0x3F, 0, b"stop")))

    # The association target takes pieces; tags and checksums are fixed up by the harness.
    tsn = 0
    def data(stream, ssn, ppid, payload, flags=0x03):
        nonlocal tsn
        tsn += 1
        return chunk(0, flags, struct.pack(">IHHI", tsn, stream, ssn, ppid) + payload)
    write("sctp_association", "open-send-close", pieces(
        sctp_packet(0, data(1, 0, 50, dcep_open(b"peer-chan"))),
        sctp_packet(0, data(1, 1, 51, b"hello"), data(1, 2, 53, bytes(300), flags=0x02), data(1, 2, 53, bytes(10), flags=0x01)),
        sctp_packet(0, chunk(3, 0, struct.pack(">IIHH", 0, 65536, 1, 0) + struct.pack(">HH", 2, 4))),
        sctp_packet(0, chunk(192, 0, struct.pack(">IHH", 5, 1, 3))),
        sctp_packet(0, chunk(130, 0, param(13, struct.pack(">III", 7, 0, 5) + struct.pack(">H", 1)))),
        sctp_packet(0, chunk(4, 0, param(1, bytes(8)))),
        sctp_packet(0, chunk(7, 0, struct.pack(">I", 4))),
        sctp_packet(0, chunk(6, 0, b""))))
    write("sctp_association", "init-collision", pieces(sctp_packet(0, chunk(1, 0, init)), sctp_packet(0, chunk(10, 0, cookie))))

    write("dcep", "open-reliable", dcep_open(b"oai-events"))
    write("dcep", "open-unordered-rexmit", dcep_open(b"chat", b"json", ctype=0x81, param_value=3))
    write("dcep", "open-timed", dcep_open("lab\u00e9l".encode(), ctype=0x02, param_value=250, priority=512))
    write("dcep", "open-empty", dcep_open(b""))


# --- DTLS (openssl as the independent peer) ---------------------------------------------
def dtls():
    if not shutil.which("openssl"):
        print("openssl missing: no DTLS seeds", file=sys.stderr)
        return
    tmp = tempfile.mkdtemp()
    key, cert = os.path.join(tmp, "k.pem"), os.path.join(tmp, "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=seed"], check=True, capture_output=True)
    # A whole handshake through a relay that records both directions: s_client ->
    # relay -> s_server. Client-to-server datagrams seed the server role, server-to-client
    # ones the client role (Linnet's random and certificate differ, so mbedtls gets as far
    # as the Finished check or the fingerprint).
    def free_port():
        p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        p.bind(("127.0.0.1", 0))
        n = p.getsockname()[1]
        p.close()
        return n
    server_port = free_port()
    server = subprocess.Popen(["openssl", "s_server", "-dtls1_2", "-accept", str(server_port), "-cert", cert, "-key", key,
                               "-use_srtp", "SRTP_AES128_CM_SHA1_80", "-verify", "1"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    relay = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    relay.bind(("127.0.0.1", 0))
    relay.settimeout(0.5)
    upstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    upstream.settimeout(0.5)
    client = subprocess.Popen(["openssl", "s_client", "-dtls1_2", "-connect", f"127.0.0.1:{relay.getsockname()[1]}",
                               "-use_srtp", "SRTP_AES128_CM_SHA1_80", "-cert", cert, "-key", key],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    to_server, to_client = [], []
    client_addr = None
    deadline = time.time() + 4
    while time.time() < deadline:
        try:
            d, client_addr = relay.recvfrom(4096)
            to_server.append(d)
            upstream.sendto(d, ("127.0.0.1", server_port))
        except socket.timeout:
            pass
        try:
            while True:
                d, _ = upstream.recvfrom(4096)
                to_client.append(d)
                relay.sendto(d, client_addr)
        except socket.timeout:
            pass
    for p in (client, server):
        p.kill()
        p.wait()
    shutil.rmtree(tmp)
    write("dtls", "server-handshake", b"\x01" + pieces(*to_server))
    write("dtls", "server-clienthello", b"\x01" + pieces(to_server[0]))
    write("dtls", "client-handshake", b"\x00" + pieces(*to_client))
    # Records by hand: an alert, application data, a ChangeCipherSpec (RFC 6347 §4.1).
    rec = lambda ctype, epoch, seq, body: struct.pack(">BHH", ctype, 0xFEFD, epoch) + seq.to_bytes(6, "big") + struct.pack(">H", len(body)) + body
    write("dtls", "client-records", b"\x00" + pieces(rec(21, 0, 1, bytes([2, 40])), rec(20, 0, 2, b"\x01") + rec(23, 1, 0, bytes(40))))


# --- JSON, HTTP, WAV, config ----------------------------------------------------------

def clienthello():
    """ClientHello fragments (RFC 6347 §4.2.3) laid out from the record and handshake
    headers: GStreamer's 277 bytes as 0-230 and 230-277, fragments sharing a datagram,
    duplicates; the differential mode's length, body and (offset, count-1, seq) triples."""
    body = bytes(range(256)) + bytes(21)

    def frag(off, cnt, seq):
        r = bytes([22, 0xFE, 0xFD, 0, 0]) + seq.to_bytes(6, "big") + (12 + cnt).to_bytes(2, "big")
        r += bytes([1]) + len(body).to_bytes(3, "big") + (0).to_bytes(2, "big") + off.to_bytes(3, "big") + cnt.to_bytes(3, "big")
        return r + body[off:off + cnt]

    write("clienthello", "raw-gstreamer-two", b"\x00" + pieces(frag(0, 230, 0), frag(230, 47, 1)))
    write("clienthello", "raw-one-datagram", b"\x00" + pieces(frag(100, 177, 1) + frag(0, 120, 2)))
    write("clienthello", "raw-duplicates", b"\x00" + pieces(frag(0, 230, 0), frag(0, 230, 0), frag(200, 77, 1), frag(230, 47, 2)))

    def differential(fragments):
        out = b"\x01" + (len(body) - 1).to_bytes(2, "big") + body
        for off, cnt, seq in fragments:
            out += off.to_bytes(2, "big") + (cnt - 1).to_bytes(2, "big") + bytes([seq])
        return out

    write("clienthello", "diff-two", differential([(0, 230, 0), (230, 47, 1)]))
    write("clienthello", "diff-overlap", differential([(200, 77, 5), (0, 100, 3), (50, 200, 4)]))


def routes():
    """Route inputs: Link headers as RFC 9725 §4.6 shows them, provider answers (WHIP 201
    with Location/ETag/Link, a backend JSON answer, 307s), requests to `linnet answer`."""
    write("routes", "link", b"\x00" + b'<stun:stun.example.net>; rel="ice-server", <turn:turn.example.net?transport=udp>; rel="ice-server"; username="user"; credential="secret"')
    write("routes", "whip-201", b"\x01" + b"HTTP/1.1 201 Created\r\nContent-Type: application/sdp\r\nLocation: /base/whip/s1\r\nETag: \"s1-1\"\r\n"
          b"Link: <stun:stun.example.net>; rel=\"ice-server\"\r\nContent-Length: 5\r\n\r\nv=0\r\n")
    write("routes", "backend-200", b"\x01" + b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"id\":\"v1\",\"sdp\":\"v=0\\r\\n\"}")
    write("routes", "redirect", b"\x01" + b"HTTP/1.1 307 Temporary Redirect\r\nLocation: https://eu.provider.example/whip\r\nContent-Length: 0\r\n\r\n")
    write("routes", "server-offer", b"\x02" + b"POST /voice/chat7 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"sdp\":\"v=0\"}")
    write("routes", "server-delete", b"\x02" + b"DELETE /whip/s1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")

def json_():
    samples = {
        "session-update": '{"type":"session.update","session":{"instructions":"Be brief.","voice":"alloy","turn_detection":{"type":"server_vad","threshold":0.5}}}',
        "response-done": '{"type":"response.done","event_id":"ev_1","response":{"id":"r1","status":"completed","usage":{"total_tokens":1234,"input_tokens":1000}}}',
        "numbers": '[0,-0,1e400,-1.5e-7,9007199254740993,18446744073709551616,1.0,5e2,-9223372036854775808,0.1]',
        "strings": '["\\u00e9\\ud83d\\ude00","\\n\\t\\"\\\\\\/","caf\u00e9",""]',
        "nested": '{"a":[{"b":[[[]]]},{"c":{"d":null,"e":true,"f":false}}]}',
        "error": '{"type":"error","error":{"type":"invalid_request_error","code":"bad","message":"nope","param":null}}',
    }
    for name, text in samples.items():
        write("json", name, text)


def http():
    def cut(msg, cuts=()):
        return bytes([len(cuts)]) + bytes(cuts) + msg
    sdp_body = b"v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
    write("http_response", "created-sdp", cut(b"HTTP/1.1 201 Created\r\nContent-Type: application/sdp\r\nLocation: /v1/realtime/calls/abc\r\nETag: \"x\"\r\nContent-Length: "
                                            + str(len(sdp_body)).encode() + b"\r\n\r\n" + sdp_body, (5, 40, 41)))
    write("http_response", "chunked", cut(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
                                        b"7\r\n{\"a\":1}\r\n1;ext=1\r\n \r\n0\r\nTrailer: x\r\n\r\n", (60, 61, 70)))
    write("http_response", "close-delimited", cut(b"HTTP/1.0 500 Internal Server Error\r\nServer: x\r\n\r\n<html>oops</html>"))
    write("http_response", "redirect", cut(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: https://other.example.com:8443/x?y=1\r\nContent-Length: 0\r\n\r\n"))
    write("http_response", "no-body", cut(b"HTTP/1.1 204 No Content\r\nLocation: calls/1\r\n\r\n"))
    write("http_response", "continue-then-ok", cut(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", (1, 2, 3)))
    write("http_request", "post-sdp", cut(b"POST /whip HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/sdp\r\nContent-Length: "
                                        + str(len(sdp_body)).encode() + b"\r\n\r\n" + sdp_body, (3, 30)))
    write("http_request", "get", cut(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
    write("http_request", "chunked-post", cut(b"POST /session HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", (50,)))
    write("http_request", "delete", cut(b"DELETE /whip/1 HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: 0\r\n\r\n"))


def wav():
    def header(tag=1, channels=1, rate=48000, bits=16, extensible=False, extra=b"", data_len=960):
        block = channels * bits // 8
        fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, rate * block, block, bits)
        if extensible:
            guid = struct.pack("<H", tag) + bytes.fromhex("000000001000800000aa00389b71")
            fmt += struct.pack("<HHI", 22, bits, 3) + guid
        body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + extra + b"data" + struct.pack("<I", data_len)
        return b"RIFF" + struct.pack("<I", min(len(body) + data_len, 0xFFFFFFFF)) + body + bytes(min(data_len, 64))
    write("wav", "s16-mono-48k", header())
    write("wav", "s16-stereo-44k1", header(channels=2, rate=44100))
    write("wav", "s24-3-extensible", header(channels=2, rate=96000, bits=24, extensible=True))
    write("wav", "s32-list-chunk", header(bits=32, rate=16000, extra=b"LIST" + struct.pack("<I", 5) + b"INFOx\0"))
    write("wav", "float-refused", header(tag=3, bits=32))
    write("wav", "streaming-length", header(data_len=0xFFFFFFFF)[:60])


def config():
    write("config", "full", """# /etc/linnet/linnet.conf
whip = https://example.com/whip
token-file = /etc/linnet/token
capture = plughw:CARD=Device,DEV=0
playback = default
ptt = gpiochip0:17
ptt-mode = toggle
gain-db = 6
agc = yes
noise-gate-dbfs = -55
high-pass-hz = 80
bitrate = 24000
frame-ms = 20
log-level = info
instructions = "Be brief.\\nAnswer in English."
""")
    write("config", "openai", "openai = true\r\ntoken-url = http://127.0.0.1:8080/token\r\nvoice = alloy\r\nturn-detection = server-vad\r\nmax-session-minutes = 30\r\n")
    write("config", "backend", "\ufeffbackend = https://api.example.com/session\nchat = main\n; comment\nstun = stun.l.google.com:19302\ninterfaces = eth0,wlan0\n")
    write("config", "errors", "seconds = ten\nunknown-key = 1\n")

# --- TURN (RFC 8656) -----------------------------------------------------------------
COOKIE = 0x2112A442


def stun_msg(mtype, attrs, tid=b"\x01" * 12):
    body = b"".join(struct.pack(">HH", t, len(v)) + v + b"\x00" * ((4 - len(v) % 4) % 4) for t, v in attrs)
    return struct.pack(">HHI", mtype, len(body), COOKIE) + tid + body


def xor_v4(ip, port):
    a = bytes(int(x) for x in ip.split("."))
    x = bytes(b ^ c for b, c in zip(a, struct.pack(">I", COOKIE)))
    return struct.pack(">BBH", 0, 1, port ^ 0x2112) + x


def error_code(code, reason):
    return struct.pack(">HBB", 0, code // 100, code % 100) + reason


def turn():
    # fuzz_turn_client pieces: op byte, then the message (see the harness).
    peer = xor_v4("203.0.113.5", 6000)
    write("turn_client", "responses", pieces(
        b"\x02" + stun_msg(0x0108, []),                                   # CreatePermission success, signed
        b"\x06" + stun_msg(0x0109, []),                                   # ChannelBind success, signed
        b"\x02" + stun_msg(0x0104, [(0x000D, struct.pack(">I", 300))]),   # Refresh success, LIFETIME
        b"\x00" + struct.pack(">HH", 0x4000, 3) + b"abc",                # ChannelData on the bound channel
        b"\x00" + stun_msg(0x0017, [(0x0012, peer), (0x0013, b"data!")]),  # Data indication
    ))
    write("turn_client", "stale-unauthorized", pieces(
        b"\x0b" + b"",                                                   # refresh
        b"\x01" + stun_msg(0x0114, [(0x0009, error_code(438, b"Stale Nonce")), (0x0014, b"linnet.test"), (0x0015, b"n2")]),
        b"\x01" + stun_msg(0x0114, [(0x0009, error_code(401, b"Unauthorized")), (0x0014, b"linnet.test"), (0x0015, b"n3")]),
        b"\x03" + b"\x10\x00",                                           # time passes
        b"\x07" + b"hello",                                              # send to peer A
        b"\x0f",                                                         # release
    ))
    write("turn_client", "timers", pieces(b"\x03\xff\xff", b"\x03\xff\xff", b"\x17" + b"x" * 40, b"\x03\x00\x10"))
    # fuzz_turn_framing: mode byte (bit 0: RFC 4571), cuts, stream.
    stream = (stun_msg(0x0101, [(0x0016, xor_v4("192.0.2.1", 50000))]) + struct.pack(">HH", 0x4000, 5) + b"hello\x00\x00\x00"
              + stun_msg(0x0017, [(0x0012, peer), (0x0013, b"xyz")]) + struct.pack(">HH", 0x4001, 0))
    write("turn_framing", "turn-stream", bytes([3 << 1]) + bytes([5, 23, 40]) + stream)
    write("turn_framing", "turn-garbage", bytes([0]) + stream[:28] + b"\x80\x00\x00\x00")
    rfc4571 = b"".join(struct.pack(">H", len(p)) + p for p in (b"\x00\x01" + b"\x00" * 18, b"", b"\x80" * 12, b"z" * 300))
    write("turn_framing", "rfc4571", bytes([1 | (2 << 1)]) + bytes([3, 100]) + rfc4571)


if __name__ == "__main__":
    os.makedirs(os.path.join(CORPUS, "sdp"), exist_ok=True)
    for f in (stun, candidate, sdp, rtp, rtcp, sctp, dtls, clienthello, routes, json_, http, wav, config, turn):
        f()
    for t in sorted(os.listdir(CORPUS)):
        print(t, len(os.listdir(os.path.join(CORPUS, t))))
