#!/usr/bin/python3
"""Stand-ins for the sources kiln pulls from, for test_store_sources.

Usage: source_server.py --file MODEL --chat-file CHAT_MODEL [--whisper-file WHISPER] --log LOG
Prints "PORTS <hub> <cdn> <registry>" once all three listen on 127.0.0.1.

hub       the Hugging Face routes kiln uses:
            GET  /api/models/ORG/REPO/revision/REV   {"id", "sha"}
            GET  /api/models/ORG/REPO/tree/COMMIT    the files (3 per page,
                                                     Link rel="next")
            HEAD|GET /ORG/REPO/resolve/COMMIT/PATH   LFS files: 302 to the
                 CDN with a signed query, X-Repo-Commit, X-Linked-Etag,
                 X-Linked-Size; small files: 200 with a Git blob id ETag
          Errors as the hub gives them: 401 + X-Error-Code RepoNotFound for
          a private repository without access, 401/403 + GatedRepo on the
          files of a gated one, 403 on acme/denied-GGUF, 404 otherwise.
cdn       GET /blob/SHA256?X-Amz-Signature=...  the bytes, with Range and
          the fault injection of store_server.py
registry  the Ollama registry routes:
            GET /v2/NS/MODEL/manifests/TAG   schema 2 manifest
            GET /v2/NS/MODEL/blobs/sha256:X  307 to the CDN
          library/tiny:latest (model, template, system, params, license),
          library/wrong:latest (its model digest is not its bytes),
          team/private:latest (401 without "Authorization: Bearer regtoken"
          or the token /token gives for it),
          and three that need the token exchange (401 with
          "WWW-Authenticate: Bearer realm=...,service=...[,scope=...]"):
          team/tokened (GET /token?service=kiln-registry&scope=
          repository:team/tokened:pull gives {"access_token": ...} to
          anyone; the challenge names no scope), team/keyed (its token
          only for "Bearer regtoken"), team/farauth (its realm is the
          CDN's /token: another origin, which must be asked anonymously),
          library/chatty:latest (CHAT_MODEL, a system prompt, temperature 0).

Repositories (COMMIT_A is main at first; /_ctl?main=b moves main to B):
  acme/tiny-GGUF     README.md, tiny-Q8_0.gguf, tiny-Q4_K_M.gguf,
                     mmproj-tiny-F16.gguf, sub/tiny-Q2_K-0000{1,2}-of-00002.gguf
                     (shard 2 is a GGUF without tensors); tag v1 = COMMIT_A
  acme/private-GGUF  tiny-Q4_K_M.gguf; needs token hf_good or hf_accepted
  acme/gated-GGUF    tiny-Q4_K_M.gguf; files need token hf_accepted
  acme/denied-GGUF   tiny-Q4_K_M.gguf; files are 403 with any token
  acme/big-GGUF      big-Q4_K_M.gguf: a GGUF whose header is 1.5 MiB (no tensors)
  acme/huge-GGUF     huge-Q4_K_M.gguf: a GGUF whose header is 65 MiB
  ggerganov/whisper.cpp  README.md, ggml-tiny.en.bin (WHISPER, when given: not the
                     published file, so its SHA-1 is not the one kiln knows) at both commits
Every model file is MODEL plus a few zero bytes, so each has its own hash.

GET /_ctl?k=v on any port sets (for later requests):
  main=a|b       which commit main names
  fail503=N      the next N hub API requests answer 503
  badsha=1       the tree (and HEAD) give tiny-Q4_K_M.gguf a wrong SHA-256
  badlink=1      HEAD's X-Linked-Etag disagrees with the tree
  drop=N         the CDN closes the connection after N body bytes (once)
  norange=1      the CDN ignores Range
  rate=B         the CDN sends B bytes/s
Each request is logged to LOG as one JSON line: role, method, path (no
query), query (bool), auth (bool), range, status.
"""
import argparse
import hashlib
import json
import os
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT_A = "a" * 39 + "1"
COMMIT_B = "b" * 39 + "2"
STATE = {"main": "a", "fail503": 0, "badsha": 0, "badlink": 0, "drop": 0, "norange": 0, "rate": 0}
LOCK = threading.Lock()
SECRET_BODY = "BODY-SECRET-do-not-print"
EMPTY_GGUF = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)


def gguf_header_only(pad_len):
    """A GGUF without tensors whose header holds a string of pad_len bytes."""
    def kv_str(key, val):
        k = key.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(val)) + val
    kvs = [kv_str("general.architecture", b"llama"), kv_str("tokenizer.ggml.model", b"llama"),
           kv_str("test.padding", b"x" * pad_len)]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    return out + b"\0" * (-len(out) % 32)


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class World:
    """Files of every repository at every commit, blobs by sha256."""

    def __init__(self, model, chat_model, whisper):
        self.model = model
        self.blobs = {}
        self.repos = {}
        pad = 0

        def gguf(extra):
            nonlocal pad
            pad += 1
            return model + b"\0" * (pad + extra)

        for commit, extra in ((COMMIT_A, 0), (COMMIT_B, 100)):
            files = {
                "README.md": (b"# tiny\n", False),
                "tiny-Q8_0.gguf": (gguf(extra), True),
                "tiny-Q4_K_M.gguf": (gguf(extra), True),
                "mmproj-tiny-F16.gguf": (gguf(extra), True),
                "sub/tiny-Q2_K-00001-of-00002.gguf": (gguf(extra), True),
                "sub/tiny-Q2_K-00002-of-00002.gguf": (EMPTY_GGUF, True),
            }
            self.repos[("acme/tiny-GGUF", commit)] = files
        for name in ("acme/private-GGUF", "acme/gated-GGUF", "acme/denied-GGUF"):
            self.repos[(name, COMMIT_A)] = {"tiny-Q4_K_M.gguf": (gguf(0), True)}
        # headers of 1.5 MiB (two range reads) and of 65 MiB (past the 64 MiB an inspection reads)
        self.repos[("acme/big-GGUF", COMMIT_A)] = {"big-Q4_K_M.gguf": (gguf_header_only(3 << 19), True)}
        self.repos[("acme/huge-GGUF", COMMIT_A)] = {"huge-Q4_K_M.gguf": (gguf_header_only(65 << 20), True)}
        for commit in (COMMIT_A, COMMIT_B) if whisper else ():
            self.repos[("ggerganov/whisper.cpp", commit)] = {"README.md": (b"# whisper\n", False),
                                                             "ggml-tiny.en.bin": (whisper, True)}
        self.sha = {}  # id(bytes) -> sha256, so no answer hashes 65 MiB again
        for files in self.repos.values():
            for data, _ in files.values():
                self.blobs[self.sha256(data)] = data
        # the registry
        self.manifests = {}
        layers = [
            ("application/vnd.ollama.image.model", model),
            ("application/vnd.ollama.image.template",
             b"{{ if .System }}<|system|>{{ .System }}\n{{ end }}{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}\n"
             b"{{ end }}<|assistant|>"),
            ("application/vnd.ollama.image.system", b"You are a tiny test model."),
            ("application/vnd.ollama.image.params", b'{"temperature":0.25,"top_k":7,"stop":["<|user|>"],"num_ctx":96}'),
            ("application/vnd.ollama.image.license", b"Tiny License 1.0\n"),
        ]
        self.manifests[("library/tiny", "latest")] = self.manifest(layers)
        for name in ("team/private", "team/tokened", "team/keyed", "team/farauth"):
            self.manifests[(name, "latest")] = self.manifest(layers[:1])
        self.manifests[("library/chatty", "latest")] = self.manifest([
            ("application/vnd.ollama.image.model", chat_model),
            # ChatML as a Go template: for a conversation without tools it
            # renders what the GGUF's own (Qwen3) template does
            ("application/vnd.ollama.image.template",
             b"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"),
            ("application/vnd.ollama.image.system", b"Be brief."),
            ("application/vnd.ollama.image.params", b'{"temperature":0,"num_predict":8}')])
        wrong = self.manifest([("application/vnd.ollama.image.model", model + b"\1")])
        self.manifests[("library/wrong", "latest")] = wrong
        # the blob it names is served with other bytes
        wrong_sha = json.loads(wrong)["layers"][0]["digest"][7:]
        self.blobs[wrong_sha] = model + b"\2"

    def sha256(self, data):
        if id(data) not in self.sha:
            self.sha[id(data)] = hashlib.sha256(data).hexdigest()
        return self.sha[id(data)]

    def manifest(self, layers):
        out = []
        for media, data in layers:
            sha = hashlib.sha256(data).hexdigest()
            self.blobs[sha] = data
            out.append({"mediaType": media, "digest": "sha256:" + sha, "size": len(data)})
        config = json.dumps({"model_format": "gguf", "model_family": "llama"}).encode()
        csha = hashlib.sha256(config).hexdigest()
        self.blobs[csha] = config
        return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                           "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                      "digest": "sha256:" + csha, "size": len(config)},
                           "layers": out}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall per answer

    def log_message(self, fmt, *args):
        pass

    def record(self, status):
        url = urlsplit(self.path)
        entry = {"role": self.server.role, "method": self.command, "path": url.path, "query": bool(url.query),
                 "auth": "Authorization" in self.headers, "range": self.headers.get("Range", ""), "status": status}
        with LOCK:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def reply(self, status, body=b"", headers=()):
        self.record(status)
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code=None):
        hdrs = [("Content-Type", "application/json")]
        if code:
            hdrs.append(("X-Error-Code", code))
        self.reply(status, json.dumps({"error": SECRET_BODY}).encode(), hdrs)

    def token(self):
        a = self.headers.get("Authorization", "")
        return a[7:] if a.startswith("Bearer ") else None

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path == "/_ctl":
            with LOCK:
                for k, v in parse_qs(url.query).items():
                    STATE[k] = v[0] if k == "main" else int(v[0])
            return self.reply(200, b"ok")
        getattr(self, "route_" + self.server.role)(url)

    # ---- hub ----

    def access(self, repo, files):
        """None when allowed, else the error to send."""
        tok = self.token()
        if repo == "acme/private-GGUF" and tok not in ("hf_good", "hf_accepted"):
            return (401, "RepoNotFound") if tok is None else (404, "RepoNotFound")
        if files and repo == "acme/gated-GGUF" and tok != "hf_accepted":
            return (401, "GatedRepo") if tok is None else (403, "GatedRepo")
        if files and repo == "acme/denied-GGUF":
            return (403, None)
        return None

    def commit_of(self, repo, rev):
        main = COMMIT_A if STATE["main"] == "a" else COMMIT_B
        rev = {"main": main, "v1": COMMIT_A}.get(rev, rev)
        return rev if (repo, rev) in self.server.world.repos else None

    def lfs_sha(self, name, data):
        sha = self.server.world.sha256(data)
        if STATE["badsha"] and name.endswith("tiny-Q4_K_M.gguf"):
            sha = "0" * 64
        return sha

    def route_hub(self, url):
        parts = url.path.split("/")
        world = self.server.world
        if url.path.startswith("/api/models/"):
            with LOCK:
                fail = STATE["fail503"] > 0
                if fail:
                    STATE["fail503"] -= 1
            if fail:
                return self.error(503)
            if len(parts) < 7:
                return self.error(404)
            repo = parts[3] + "/" + parts[4]
            if not any(r == repo for r, _ in world.repos):
                return self.error(401 if self.token() is None else 404, "RepoNotFound")
            denied = self.access(repo, False)
            if denied:
                return self.error(*denied)
            if parts[5] == "revision":
                commit = self.commit_of(repo, unquote("/".join(parts[6:])))
                if not commit:
                    return self.error(404, "RevisionNotFound")
                return self.reply(200, json.dumps({"id": repo, "sha": commit, "private": False}).encode(),
                                  [("Content-Type", "application/json")])
            if parts[5] == "tree":
                commit = parts[6]
                if (repo, commit) not in world.repos:
                    return self.error(404, "RevisionNotFound")
                q = parse_qs(url.query)
                if q.get("recursive") != ["true"]:
                    return self.error(400)
                start = int(q.get("cursor", ["0"])[0])
                entries = []
                files = world.repos[(repo, commit)]
                dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
                for d in dirs:
                    entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
                for p in sorted(files):
                    data, lfs = files[p]
                    # an LFS file's oid is its pointer's Git blob id, never the content's hash
                    oid = git_blob_id(("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
                        world.sha256(data), len(data))).encode()) if lfs else git_blob_id(data)
                    e = {"type": "file", "oid": oid, "size": len(data), "path": p}
                    if lfs:
                        e["lfs"] = {"oid": self.lfs_sha(p, data), "size": len(data), "pointerSize": 134}
                    entries.append(e)
                page = entries[start:start + 3]
                hdrs = [("Content-Type", "application/json")]
                if start + 3 < len(entries):
                    nxt = "http://127.0.0.1:%d/api/models/%s/tree/%s?recursive=true&cursor=%d" % (
                        self.server.server_address[1], repo, commit, start + 3)
                    hdrs.append(("Link", '<%s>; rel="next"' % nxt))
                return self.reply(200, json.dumps(page).encode(), hdrs)
            return self.error(404)
        # /ORG/REPO/resolve/COMMIT/PATH
        if len(parts) >= 6 and parts[3] == "resolve":
            repo = parts[1] + "/" + parts[2]
            commit = self.commit_of(repo, parts[4])
            path = unquote("/".join(parts[5:]))
            if not any(r == repo for r, _ in world.repos):
                return self.error(401 if self.token() is None else 404, "RepoNotFound")
            denied = self.access(repo, True)
            if denied:
                return self.error(*denied)
            if not commit or path not in world.repos[(repo, commit)]:
                return self.error(404, "EntryNotFound")
            data, lfs = world.repos[(repo, commit)][path]
            if not lfs:
                return self.reply(200, data, [("ETag", '"%s"' % git_blob_id(data)), ("X-Repo-Commit", commit)])
            sha = self.lfs_sha(path, data)
            linked = "1" * 64 if STATE["badlink"] else sha
            real = world.sha256(data)
            loc = "http://127.0.0.1:%d/blob/%s?X-Amz-Signature=sig-secret-123&Expires=99" % (self.server.cdn_port, real)
            return self.reply(302, b"", [("Location", loc), ("X-Repo-Commit", commit),
                                         ("X-Linked-Etag", '"%s"' % linked), ("X-Linked-Size", str(len(data))),
                                         ("ETag", '"%s"' % linked)])
        return self.error(404)

    # ---- registry ----

    # the token each guarded repository takes, and what its token service
    # wants to hand it out (None: anyone)
    GUARDED = {"team/private": ("private-token", "regtoken"), "team/tokened": ("anon-token", None),
               "team/keyed": ("keyed-token", "regtoken"), "team/farauth": ("far-token", None)}

    def token_service(self, url):
        q = parse_qs(url.query)
        scope, service = q.get("scope", [""])[0], q.get("service", [""])[0]
        if not scope.startswith("repository:") or not scope.endswith(":pull") or service != "kiln-registry":
            return self.reply(400, json.dumps({"errors": [{"code": "DENIED"}]}).encode())
        name = scope[len("repository:"):-len(":pull")]
        guard = self.GUARDED.get(name)
        if guard is None or (guard[1] is not None and self.token() != guard[1]):
            return self.reply(401, json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": SECRET_BODY}]}).encode())
        key = "access_token" if name == "team/tokened" else "token"
        return self.reply(200, json.dumps({key: guard[0], "expires_in": 300}).encode(),
                          [("Content-Type", "application/json")])

    def route_registry(self, url):
        parts = url.path.split("/")
        world = self.server.world
        if url.path == "/token":
            return self.token_service(url)
        if len(parts) != 6 or parts[1] != "v2":
            return self.error(404)
        name = parts[2] + "/" + parts[3]
        guard = self.GUARDED.get(name)
        if guard and self.token() not in ((guard[0], "regtoken") if name == "team/private" else (guard[0],)):
            port = self.server.cdn_port if name == "team/farauth" else self.server.server_address[1]
            chal = 'Bearer realm="http://127.0.0.1:%d/token",service="kiln-registry"' % port
            if name in ("team/keyed", "team/private"):
                chal += ',scope="repository:%s:pull"' % name
            return self.reply(401, json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": SECRET_BODY}]}).encode(),
                              [("WWW-Authenticate", chal)])
        if parts[4] == "manifests":
            m = world.manifests.get((name, parts[5]))
            if m is None:
                return self.reply(404, json.dumps({"errors": [{"code": "MANIFEST_UNKNOWN", "message": SECRET_BODY}]})
                                  .encode())
            return self.reply(200, m, [("Content-Type", "application/vnd.docker.distribution.manifest.v2+json"),
                                       ("Docker-Content-Digest", "sha256:" + hashlib.sha256(m).hexdigest())])
        if parts[4] == "blobs" and parts[5].startswith("sha256:") and parts[5][7:] in world.blobs:
            loc = "http://127.0.0.1:%d/blob/%s?sig=reg-secret-456" % (self.server.cdn_port, parts[5][7:])
            return self.reply(307, b"", [("Location", loc)])
        return self.error(404)

    # ---- cdn ----

    def route_cdn(self, url):
        if url.path == "/token":  # team/farauth's realm, on another origin
            return self.token_service(url)
        parts = url.path.split("/")
        if len(parts) != 3 or parts[1] != "blob" or parts[2] not in self.server.world.blobs:
            return self.error(404)
        data = self.server.world.blobs[parts[2]]
        etag = '"%s"' % parts[2]
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range", "")
        with LOCK:
            st = dict(STATE)
        if rng.startswith("bytes=") and not st["norange"]:
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = min(int(b), len(data) - 1) if b else len(data) - 1
            if start >= len(data):
                return self.reply(416, b"", [("Content-Range", "bytes */%d" % len(data))])
            status = 206
        body = data[start:end + 1]
        self.record(status)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, len(data)))
        self.end_headers()
        sent = 0
        while sent < len(body):
            with LOCK:
                rate, drop = STATE["rate"], STATE["drop"]
            n = min(16384 if (rate or drop) else 1 << 20, len(body) - sent)
            try:
                if drop and sent + n >= drop:
                    self.wfile.write(body[sent:drop])
                    with LOCK:
                        STATE["drop"] = 0
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[sent:sent + n])
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            sent += n
            if rate:
                time.sleep(n / rate)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--chat-file", required=True)
    ap.add_argument("--whisper-file")  # optional: serves ggerganov/whisper.cpp when given
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    whisper = None
    if args.whisper_file:
        with open(args.whisper_file, "rb") as w:
            whisper = w.read()
    with open(args.file, "rb") as f, open(args.chat_file, "rb") as c:
        world = World(f.read(), c.read(), whisper)
    open(args.log, "w").close()
    servers = {}
    for role in ("hub", "cdn", "registry"):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        srv.handle_error = lambda request, address: None  # a client that hangs up is no error here
        srv.role = role
        srv.world = world
        srv.log_path = args.log
        servers[role] = srv
    for srv in servers.values():
        srv.cdn_port = servers["cdn"].server_address[1]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("PORTS %d %d %d" % tuple(servers[r].server_address[1] for r in ("hub", "cdn", "registry")), flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # stop when the test (our parent) goes away
        time.sleep(0.5)


if __name__ == "__main__":
    main()
