"""A Hugging Face hub stand-in on loopback: the few endpoints huggingface_hub uses to list and download.

GET /api/models/{repo}/tree/{rev}[/...] lists files; GET /api/models/{repo}[/revision/{rev}]
describes the repository (commit, files); HEAD/GET
/{repo}/resolve/{rev}/{file} answers metadata (commit, ETag, size) and bytes.
Unknown repositories and files get the hub's 404s with X-Error-Code. Every
request is recorded (path, Authorization header) so tests can check what was
asked and that offline runs asked nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.requests: list[tuple[str, str, str | None]] = []      # (method, path, Authorization)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._answer(body=True)

            def do_HEAD(self):
                self._answer(body=False)

            def _answer(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Authorization")))
                tree = re.match(r"^/api/models/([^/]+/[^/]+)/tree/[^/]+", path)
                info = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?$", path)
                resolve = re.match(r"^/([^/]+/[^/]+)/resolve/[^/]+/(.+)$", path)
                if tree:
                    repo = hub.repos.get(tree[1])
                    if repo is None:
                        return self._error(404, "RepoNotFound", f"Repository {tree[1]} not found")
                    listing = [{"type": "file", "path": name, "size": len(data), "oid": _sha1(data)}
                               for name, data in sorted(repo.items())]
                    return self._send(200, json.dumps(listing).encode(), "application/json", body)
                if info:
                    repo = hub.repos.get(info[1])
                    if repo is None:
                        return self._error(404, "RepoNotFound", f"Repository {info[1]} not found")
                    data = {"id": info[1], "modelId": info[1], "sha": COMMIT, "private": False,
                            "siblings": [{"rfilename": name} for name in sorted(repo)]}
                    return self._send(200, json.dumps(data).encode(), "application/json", body)
                if resolve:
                    repo = hub.repos.get(resolve[1])
                    if repo is None:
                        return self._error(404, "RepoNotFound", f"Repository {resolve[1]} not found")
                    if resolve[2] not in repo:
                        return self._error(404, "EntryNotFound", f"{resolve[2]} does not exist")
                    data = repo[resolve[2]]
                    return self._send(200, data, "application/octet-stream", body,
                                      {"X-Repo-Commit": COMMIT, "ETag": f'"{_sha1(data)}"'})
                self._error(404, "RepoNotFound", f"no route {path}")

            def _error(self, status: int, code: str, message: str) -> None:
                self._send(status, json.dumps({"error": message}).encode(), "application/json", True,
                           {"X-Error-Code": code, "X-Error-Message": message})

            def _send(self, status, data: bytes, content_type: str, body: bool, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        return Handler


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()
