"""Helpers of the balancer test: deploy/haproxy/haproxy.cfg run by Debian's haproxy in front of loopback replicas.

The shipped configuration is used as it is, except the lines between its
`# BEGIN servers` and `# END servers` markers, which become one `server`
line per replica (with checks every 200 ms so the test does not wait on
production intervals). `make balancer` installs haproxy; without it the
test skips.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
STARTUP_TIMEOUT_S = 30


@dataclass
class Balancer:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def haproxy_or_skip() -> str:
    path = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if path is None:
        pytest.skip("haproxy is not installed (make balancer installs Debian's package)")
    return path


def config_for(replicas: dict[str, int]) -> str:
    """deploy/haproxy/haproxy.cfg with its server lines replaced by loopback replicas {name: port}."""
    lines = CONFIG.read_text().splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip().startswith("# BEGIN servers"))
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("# END servers"))
    servers = [f"    server {name} 127.0.0.1:{port} inter 200ms fall 1 rise 1" for name, port in replicas.items()]
    return "\n".join(lines[: begin + 1] + servers + lines[end:]) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_balancer(tmp_path: Path, replicas: dict[str, int]) -> Balancer:
    binary = haproxy_or_skip()
    port = _free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(config_for(replicas))
    log_path = tmp_path / "haproxy.log"
    env = {**os.environ, "STRATA_BALANCER_BIND": f"127.0.0.1:{port}"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
    balancer = Balancer(proc, port, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"haproxy exited with {proc.returncode}:\n{balancer.log()[-3000:]}")
        try:
            # Ready once every replica has answered through it (each passed its first check).
            seen = {replica_of(httpx.get(f"{balancer.url}/v1/models", headers={"X-Session-ID": f"probe-{i}"},
                                         timeout=5)) for i in range(16)}
            if seen == set(replicas):
                return balancer
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    balancer.stop()
    pytest.fail(f"haproxy did not reach every replica in {STARTUP_TIMEOUT_S}s:\n{balancer.log()[-3000:]}")


def replica_of(response: httpx.Response) -> str | None:
    return response.headers.get("X-Strata-Replica")
