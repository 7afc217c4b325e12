"""Helpers of the HTTP tests: start `strata serve` as in production, read SSE and Prometheus text.

A server is `strata serve --device cpu` in a subprocess on a free loopback
port, ready once GET /health answers 200; stop() sends a signal and waits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

MODEL = "smollm2-135m"
CTX = 512
STARTUP_TIMEOUT_S = 120


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    port: int
    log_path: Path
    api_key: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def http(self, **kwargs) -> httpx.Client:
        # Pooled connections are dropped after 2 s idle: the server (hypercorn) closes a keep-alive
        # connection after 5 s, the same as httpx's default expiry, so a request sent on a connection
        # idle for ~5 s could meet the close ("Server disconnected without sending a response"; seen
        # once in the GPU corpus test while the kernel suite shared the machine).
        kwargs.setdefault("limits", httpx.Limits(keepalive_expiry=2.0))
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=kwargs.pop("timeout", 120), **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


REPO_ROOT = Path(__file__).resolve().parents[2]


def _strata_command() -> list[str]:
    # `python -m` from this checkout's root, not the venv's `strata` script: an editable install points that
    # script at whichever checkout installed it, so a worktree's tests would serve another tree's code.
    return [sys.executable, "-m", "strata.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_dir: Path, *flags: str, api_key: str | None = None, env: dict | None = None,
                 port: int | None = None) -> ServerProcess:
    port = port or _free_port()
    log_path = log_dir / f"serve-{port}.log"
    cmd = [*_strata_command(), "serve", "--device", "cpu", "--port", str(port), "--ctx", str(CTX), *flags]
    if api_key:
        cmd += ["--api-key", api_key]
    env = {**{k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"}, **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    server = ServerProcess(proc, port, log_path, api_key or (env or {}).get("STRATA_API_KEY"))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"strata serve exited with {proc.returncode}:\n{server.log()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop(signal.SIGKILL)
    pytest.fail(f"strata serve did not become healthy in {STARTUP_TIMEOUT_S}s:\n{server.log()[-3000:]}")


def wait_idle(server: ServerProcess, timeout: float = 10.0) -> float:
    """Waits until no slot is busy and no request waits; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        state = httpx.get(f"{server.url}/slots", headers=server.headers(), timeout=10).json()
        if state["busy_slots"] == 0 and state["queue_len"] == 0:
            return time.monotonic() - start
        time.sleep(0.01)
    raise AssertionError(f"slots still busy after {timeout}s: {state}")


def metrics(server: ServerProcess) -> str:
    return httpx.get(f"{server.url}/metrics", headers=server.headers(), timeout=10).text


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample in Prometheus text (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def chat_body(content: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def sse_events(lines) -> list:
    """The data payloads of an SSE stream: dicts, and the string '[DONE]'."""
    events = []
    for line in lines:
        if line.startswith(":"):
            continue                     # an SSE comment (the server's keep-alive ': ping')
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return events
