"""`strata top --once` against a live server: the busy slot, its request and speed, the server's figures; the API key."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

from server_helpers import chat_body


def _top(url: str, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "strata.cli", "top", "--once", "--interval", "0.3", "--url", url, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_top_once_shows_a_decoding_slot(server, http):
    stop = threading.Event()

    def stream():
        body = chat_body("Tell me a long story.", max_tokens=200, ignore_eos=True, stream=True, temperature=0)
        with server.http() as client, client.stream("POST", "/v1/chat/completions", json=body) as response:
            for _ in response.iter_lines():
                if stop.is_set():
                    break

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    try:
        # Wait until the slot has a decode speed to show (bounded: the stream ends after 200 tokens).
        deadline = time.monotonic() + 300
        busy = []
        while not (busy and busy[0]["tokens_per_s"] is not None):
            assert time.monotonic() < deadline and reader.is_alive(), f"no decoding slot seen: {busy}"
            busy = [s for s in http.get("/slots").json()["slots"] if s["state"] != "idle"]
            time.sleep(0.05)
        done = _top(server.url)
    finally:
        stop.set()
        reader.join(60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"server    {server.url} · engine up" in out
    assert re.search(r"slots\s+1/4 busy · 0 queued · KV [\d,]+/2,048 tokens", out), out
    assert re.search(r"speed\s+[\d.,]+ tokens/s generated \(last [\d.]+ s\)", out), out
    assert re.search(r"TTFT p50/p99 [\d,]+/[\d,]+ ms · ITL p50/p99 [\d,]+/[\d,]+ ms", out), out
    row = next(line for line in out.splitlines() if busy[0]["request_id"] in line)
    assert "decode" in row and re.search(r"\d+/\d+ \(100%\)", row), row
    assert re.search(r"│\s+\d+\.\d\s+│", row), row                     # the slot's tokens/s


def test_top_needs_the_api_key(key_server):
    refused = _top(key_server.url)
    assert refused.returncode == 1 and "401" in refused.stderr and "API key" in refused.stderr
    done = _top(key_server.url, "--api-key", key_server.api_key)
    assert done.returncode == 0, done.stderr
    assert "0/1 busy" in done.stdout and "idle" in done.stdout


def test_top_unreachable_server():
    done = _top("http://127.0.0.1:9")
    assert done.returncode == 1 and "cannot reach" in done.stderr
