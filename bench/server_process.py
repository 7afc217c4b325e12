"""A server process a bench script starts on loopback: a free port, waiting until it answers, stopping it.

Shared by bench/soak.py and bench/serve_ab.py (strata serve, llama-server)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen, url: str, timeout_s: float, path: str = "/health", poll_s: float = 0.3) -> bool:
    """True once GET url+path answers 200; False when the process exits first (proc.returncode says how) or
    timeout_s passes."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(poll_s)
    return False


def stop(proc: subprocess.Popen | None, grace_s: float = 60) -> None:
    """SIGTERM, then SIGKILL after grace_s; nothing if it is not running."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
