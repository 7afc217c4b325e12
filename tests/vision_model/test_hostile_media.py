"""image_url of every scheme and escape, sent to `strata serve` of a vision model with a media directory and
remote media on: each gets a 400 in OpenAI's shape (one uniform error for remote fetches, none of which may
reach loopback), is counted in /metrics, and an image chat streaming meanwhile equals its solo run."""

from __future__ import annotations

import http.server
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from .harness import data_url, picture

CAT = picture(64, 48, 3)
REPO_ROOT = Path(__file__).resolve().parents[2]
REFERENCE = {"model": "tiny-vl", "temperature": 0, "max_tokens": 12, "ignore_eos": True, "return_token_ids": True,
             "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(CAT)}},
                                                        {"type": "text", "text": "describe it"}]}]}


class _Listener(http.server.BaseHTTPRequestHandler):
    hits: list = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits.append(self.path)
        buffer = io.BytesIO()
        CAT.save(buffer, "PNG")
        body = buffer.getvalue()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def setup(checkpoint, tmp_path_factory):
    media = tmp_path_factory.mktemp("media")
    CAT.save(media / "cat.png")
    outside = media.parent / "secret.png"
    CAT.save(outside)
    (media / "escape.png").symlink_to(outside)
    os.mkfifo(media / "pipe.png")
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listener)
    listener.daemon_threads = True
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    port = _free_port()
    command = [sys.executable, "-m", "strata.cli", "serve", "--model", str(checkpoint), "--device", "cpu",
               "--port", str(port), "--ctx", "512", "--batch", "2", "--chunk", "16", "--media-dir", str(media),
               "--allow-remote-media", "--served-model-name", "tiny-vl"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_ALLOW") and k != "STRATA_API_KEY"}
    log_path = media.parent / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        from .test_server import _wait_healthy

        _wait_healthy(proc, url, log_path)
        yield url, media, outside, listener.server_address[1], port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        listener.shutdown()
        listener.server_close()


def _stream_ids(client: httpx.Client, started: threading.Event | None = None) -> list[int]:
    ids = []
    with client.stream("POST", "/v1/chat/completions", json={**REFERENCE, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    ids += choice.get("token_ids") or []
                    if ids and started is not None:
                        started.set()
    return ids


@pytest.fixture(scope="module")
def solo(setup):
    with httpx.Client(base_url=setup[0], timeout=120) as client:
        return _stream_ids(client)


def _cases(media: Path, outside: Path, listener: int, own: int) -> dict[str, tuple[str, str]]:
    fetch_failed = "image_fetch_failed"
    return {
        "data: not an image": ("data:image/png;base64,aGVsbG8=", "invalid_image"),
        "data: bad base64": ("data:image/png;base64,%%%%", "invalid_image_url"),
        "data: text type": ("data:text/html;base64,PGh0bWw+", "unsupported_image_format"),
        "ftp": ("ftp://127.0.0.1/cat.png", "invalid_image_url"),
        "gopher": (f"gopher://127.0.0.1:{listener}/", "invalid_image_url"),
        "javascript": ("javascript:alert(1)", "invalid_image_url"),
        "dotdot": ("../secret.png", "image_source_not_allowed"),
        "encoded dotdot": (f"file://{media}/%2e%2e/secret.png", "image_source_not_allowed"),
        "encoded NUL": (f"file://{media}/cat.png%00.txt", "invalid_image_url"),
        "absolute outside": (f"file://{outside}", "image_source_not_allowed"),
        "symlink out": ("escape.png", "image_source_not_allowed"),
        "proc": ("file:///proc/self/environ", "image_source_not_allowed"),
        "fifo": ("pipe.png", "invalid_image_url"),
        "file on another host": ("file://otherhost/cat.png", "invalid_image_url"),
        "loopback listener": (f"http://127.0.0.1:{listener}/cat.png", fetch_failed),
        "localhost": (f"http://localhost:{listener}/cat.png", fetch_failed),
        "decimal loopback": (f"http://2130706433:{listener}/cat.png", fetch_failed),
        "unspecified": (f"http://0.0.0.0:{listener}/cat.png", fetch_failed),
        "ipv6 loopback": (f"http://[::1]:{listener}/cat.png", fetch_failed),
        "the server itself": (f"http://127.0.0.1:{own}/slots", fetch_failed),
        "cloud metadata": ("http://169.254.169.254/latest/meta-data/", fetch_failed),
        "private network": ("http://10.0.0.1/cat.png", fetch_failed),
    }


CASE_NAMES = list(_cases(Path("/"), Path("/"), 0, 0))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_image_url_refused(setup, solo, name):
    url, media, outside, listener, own = setup
    image_url, code = _cases(media, outside, listener, own)[name]
    _Listener.hits = []
    body = {**REFERENCE, "max_tokens": 2,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                                       {"type": "text", "text": "what is it?"}]}]}
    with httpx.Client(base_url=url, timeout=120) as client:
        before = client.get("/metrics").text
        started, result = threading.Event(), {}
        reference = threading.Thread(target=lambda: result.update(ids=_stream_ids(client_b, started)))
        with httpx.Client(base_url=url, timeout=120) as client_b:
            reference.start()
            assert started.wait(120)
            r = client.post("/v1/chat/completions", json=body)
            reference.join(120)
        after = client.get("/metrics").text
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["code"] == code, error
    assert result["ids"] == solo
    assert _Listener.hits == []                               # nothing on loopback was fetched
    assert _count(after, "invalid") == _count(before, "invalid") + 1


def test_fetch_errors_are_uniform(setup):
    url, media, outside, listener, own = setup
    messages = set()
    with httpx.Client(base_url=url, timeout=120) as client:
        for target in (f"http://127.0.0.1:{listener}/cat.png", f"http://127.0.0.1:{own}/slots",
                       "http://127.0.0.1:9/closed", "http://169.254.169.254/"):
            body = {**REFERENCE, "max_tokens": 1, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": target}}]}]}
            messages.add(client.post("/v1/chat/completions", json=body).json()["error"]["message"].replace(target, "U"))
    assert len(messages) == 1, messages


def _count(text: str, outcome: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'strata_requests_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0
