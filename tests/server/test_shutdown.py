"""Graceful shutdown: once the drain ends (--drain-timeout 0, or a second signal during the drain) every
stream in flight ends with a final event and `data: [DONE]`, a whole-answer request in flight gets a 503,
and the process exits 0. Draining itself (streams run to their end) is shown in test_balancer.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx
import pytest
from server_helpers import MODEL, REPO_ROOT, sse_events, start_server

LONG_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 400,
             "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
LONG_COMPLETION = {"model": MODEL, "prompt": "Count: 1, 2,", "max_tokens": 400, "ignore_eos": True, "stream": True}


class StreamReader(threading.Thread):
    """Reads one SSE response to its end in a thread; `started` is set once a token arrived."""

    def __init__(self, server, path: str, body: dict):
        super().__init__(daemon=True)
        self.server, self.path, self.body = server, path, body
        self.started = threading.Event()
        self.lines: list[str] = []
        self.status = None

    def run(self):
        with httpx.Client(base_url=self.server.url, timeout=60) as client:
            with client.stream("POST", self.path, json=self.body) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    self.lines.append(line)
                    if sum(x.startswith("data: ") for x in self.lines) >= 2:
                        self.started.set()


class WholeRequest(threading.Thread):
    def __init__(self, server, body: dict):
        super().__init__(daemon=True)
        self.server, self.body, self.response = server, body, None

    def run(self):
        self.response = httpx.post(f"{self.server.url}/v1/completions", json=self.body, timeout=60)


@pytest.mark.parametrize("sig,drain", [(signal.SIGTERM, "0"), (signal.SIGINT, "0"), (signal.SIGTERM, "600")])
def test_signal_ends_streams_in_flight_with_a_final_event(model_available, tmp_path, sig, drain):
    server = start_server(tmp_path, "--batch", "4", "--drain-timeout", drain)
    try:
        readers = [StreamReader(server, "/v1/chat/completions", LONG_CHAT),
                   StreamReader(server, "/v1/completions", LONG_COMPLETION)]
        whole = WholeRequest(server, {**LONG_COMPLETION, "stream": False})
        for reader in readers:
            reader.start()
        whole.start()
        for reader in readers:
            assert reader.started.wait(60), "no tokens before the signal"
        if drain != "0":            # draining: /health says so; the second signal ends the streams now
            server.proc.send_signal(sig)
            assert httpx.get(f"{server.url}/health", timeout=10).json() == {"status": "shutting_down"}
        rc = server.stop(sig, timeout=30)
        for thread in (*readers, whole):
            thread.join(10)
            assert not thread.is_alive()
    finally:
        server.stop(signal.SIGKILL)
    assert rc == 0, server.log()[-2000:]
    for reader in readers:
        assert reader.status == 200
        events = sse_events(reader.lines)
        assert events[-1] == "[DONE]"
        final = events[-2]
        assert final["error"]["code"] == "request_aborted"
        assert "shutting down" in final["error"]["message"]
        assert all("choices" in e for e in events[:-2]) and len(events) >= 4
    assert whole.response.status_code == 503
    assert whole.response.json()["error"]["code"] == "shutting_down"
    log = server.log()
    assert f"{signal.Signals(sig).name} received" in log and "stopped" in log
    assert ("received again" in log) == (drain != "0")
    assert "Traceback" not in log


def test_idle_server_stops_at_once(model_available, tmp_path):
    server = start_server(tmp_path, "--batch", "1")
    assert server.stop(signal.SIGTERM, timeout=15) == 0
    assert "Traceback" not in server.log()


def test_a_negative_drain_timeout_is_refused(model_available, tmp_path):
    done = subprocess.run([sys.executable, "-m", "strata.cli", "serve", "--device", "cpu", "--drain-timeout", "-1"],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2 and "--drain-timeout must be 0 or more seconds" in done.stderr
