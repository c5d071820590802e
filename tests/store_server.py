#!/usr/bin/python3
"""HTTP file server with Range support and fault injection, for test_store.

Usage: store_server.py --file MODEL --log LOG
Prints "PORT <n>" on stdout once it listens on 127.0.0.1.

Every path ending in .gguf serves MODEL.  /pack.json serves a pack manifest
naming m.gguf with its length and sha256.  /redir-cross/<p> redirects to
http://localhost:<port>/<p> (another origin), /redir-same/<p> to /<p>.
GET /_ctl?k=v&... sets faults, all of which apply to later requests:
  rate=B        throttle bodies to B bytes/s (0 = unthrottled)
  drop=N        close the connection after N body bytes (once)
  stall=N       stop sending for 10 s after N body bytes (once)
  norange=1     ignore Range headers (always answer 200)
  wronglen=1    append 1000 bytes to every body (Content-Length matches)
  wrongbytes=1  flip one byte in the middle of every body
Each request is logged to LOG as one JSON line.
"""
import argparse
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

STATE = {"rate": 0, "drop": 0, "stall": 0, "norange": 0, "wronglen": 0, "wrongbytes": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def record(self, status, sent_range):
        entry = {
            "path": self.path,
            "host": self.headers.get("Host", ""),
            "range": self.headers.get("Range", ""),
            "if_range": self.headers.get("If-Range", ""),
            "auth": "Authorization" in self.headers,
            "status": status,
            "served_range": sent_range,
        }
        with LOCK:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def do_GET(self):
        url = urlsplit(self.path)
        path = url.path
        if path == "/_ctl":
            with LOCK:
                for k, v in parse_qs(url.query).items():
                    STATE[k] = int(v[0])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if path.startswith("/redir-cross/") or path.startswith("/redir-same/"):
            rest = path.split("/", 2)[2]
            port = self.server.server_address[1]
            loc = ("http://localhost:%d/" % port if path.startswith("/redir-cross/") else "/") + rest
            self.record(302, "")
            self.send_response(302)
            self.send_header("Location", loc)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/pack.json":
            body = json.dumps({"name": "packed:v1", "artifacts": [
                {"url": "m.gguf", "path": "m.gguf", "role": "model", "length": len(self.server.data),
                 "sha256": self.server.sha}]}).encode()
            self.record(200, "")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not path.endswith(".gguf"):
            self.record(404, "")
            self.send_error(404)
            return
        with LOCK:
            st = dict(STATE)
        data = self.server.data
        if st["wrongbytes"]:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        if st["wronglen"]:
            data = data + b"\0" * 1000
        etag = '"%s"' % self.server.sha[:16]
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range", "")
        if_range = self.headers.get("If-Range")
        if rng.startswith("bytes=") and not st["norange"] and (if_range is None or if_range == etag):
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = int(b) if b else len(data) - 1
            if start >= len(data):
                self.record(416, "")
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        body = data[start:end + 1]
        served = "bytes %d-%d/%d" % (start, end, len(data)) if status == 206 else ""
        self.record(status, served)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", served)
        self.end_headers()
        sent = 0
        chunk = 16384
        while sent < len(body):
            with LOCK:
                rate, drop, stall = STATE["rate"], STATE["drop"], STATE["stall"]
            n = min(chunk, len(body) - sent)
            if drop and sent + n >= drop:
                self.wfile.write(body[sent:drop])
                with LOCK:
                    STATE["drop"] = 0
                self.wfile.flush()
                self.close_connection = True
                return
            if stall and sent + n >= stall:
                self.wfile.write(body[sent:stall])
                self.wfile.flush()
                with LOCK:
                    STATE["stall"] = 0
                time.sleep(10)
                self.close_connection = True
                return
            try:
                self.wfile.write(body[sent:sent + n])
            except (BrokenPipeError, ConnectionResetError):
                return
            sent += n
            if rate:
                time.sleep(n / rate)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(args.file, "rb") as f:
        srv.data = f.read()
    srv.sha = hashlib.sha256(srv.data).hexdigest()
    srv.log_path = args.log
    open(args.log, "w").close()
    print("PORT %d" % srv.server_address[1], flush=True)
    # stop when the test (our parent) goes away
    parent = os.getppid()
    threading.Thread(target=lambda: (srv.serve_forever()), daemon=True).start()
    while os.getppid() == parent:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
