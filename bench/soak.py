"""Soak and fault test of `strata serve`: mixed clients for minutes, then a table of what happened.

N concurrent clients loop for M minutes, each iteration picking at random (seeded):
  exact     a streamed or whole request (greedy or seeded) whose token ids must equal its solo run
  cancel    a stream read for a few chunks, then closed by the client
  leave     a raw socket that leaves with FIN, half-close or RST right after its request, after the
            response head, or after some bytes of the stream
  bad       a malformed request (bad JSON, deep nesting, wrong types, non-JSON content type, huge text)
and with --restart-every S the script sends SIGTERM to the server it started and starts it again.

It reports requests by outcome, mismatches against the solo runs, 5xx counts, the server's RSS over time,
latency percentiles (time to first token and whole request) per minute, and the cancellations the server
counted against the disconnects made. Only loopback is ever contacted.

  python bench/soak.py --minutes 10 --clients 8                      # starts its own CPU server
  python bench/soak.py --minutes 10 --clients 64 --device cuda:0 --batch 64 --restart-every 120
  python bench/soak.py --url http://127.0.0.1:8080 --minutes 5       # an already running server (no restarts)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx

from server_process import free_port, stop, wait_ready  # bench/: the script's own folder is on sys.path

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [
    ("chat", "Write a short poem about the sea.", {"temperature": 0}),
    ("chat", "List three facts about the moon.", {"temperature": 0.8, "seed": 11, "top_p": 0.95}),
    ("complete", "The history of the bicycle begins", {"temperature": 0}),
    ("complete", "Once upon a time, in a small village,", {"temperature": 1.0, "seed": 5, "top_k": 40}),
    ("chat", "Explain what a compiler does, in detail and with examples. " * 8, {"temperature": 0}),
    ("complete", "def fibonacci(n):", {"temperature": 0.7, "seed": 99, "min_p": 0.05}),
]
# (body, content type); GENERATION_ONLY marks the bodies that are only bad on the generation routes
BAD = [
    (b'{"messages": [', "application/json"),
    (b"[" * 5000 + b"]" * 5000, "application/json"),
    (b'{"prompt": "Hi", "temperature": NaN}', "application/json"),
    (b'{"prompt": "Hi", "max_tokens": "many"}', "application/json"),
    (b'{"prompt": "Hi"}', "text/plain"),
    (b'{"prompt": "' + b"word " * 60000 + b'"}', "application/json"),
    (b'{"prompt": [1, 99999999]}', "application/json"),
    (b'{"prompt": "Hi", "stop": 7}', "application/json"),
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}',
     "application/json"),
]
ACTIONS = [("exact", 6), ("cancel", 1), ("leave", 2), ("bad", 1)]


class Server:
    """A `strata serve` this script started (restartable), or one given by --url."""

    def __init__(self, args):
        self.args = args
        self.proc: subprocess.Popen | None = None
        if args.url:
            self.url = args.url.rstrip("/")
        else:
            self.url = f"http://127.0.0.1:{free_port()}"
        host_port = self.url.split("//", 1)[1]
        self.host, self.port = host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1])
        self.log = open(args.log, "ab") if args.log else subprocess.DEVNULL

    def start(self) -> None:
        if self.args.url:
            return
        cmd = [sys.executable, "-m", "strata.cli", "serve", "--port", str(self.port), "--device", self.args.device,
               "--batch", str(self.args.batch), "--ctx", str(self.args.ctx), *self.args.serve_args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_ready(self.proc, self.url, 300):
            if self.proc.poll() is not None:
                raise SystemExit(f"strata serve exited with {self.proc.returncode}")
            raise SystemExit("strata serve did not become healthy in 300 s")

    def stop(self) -> None:
        stop(self.proc)

    def rss_mb(self) -> float | None:
        pid = self.proc.pid if self.proc else self.args.pid
        if not pid:
            return None
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None


def _body(kind: str, text: str, options: dict, max_tokens: int) -> tuple[str, dict]:
    body = {"max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True, **options}
    if kind == "chat":
        return "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    return "/v1/completions", {**body, "prompt": text}


async def stream_ids(client: httpx.AsyncClient, path: str, body: dict, stop_after: int | None = None):
    """(ids, ttft seconds, whole seconds, ended_by) of a streamed request; stop_after chunks: leave early."""
    ids, ttft, start, chunks, ended = [], None, time.monotonic(), 0, "done"
    async with client.stream("POST", path, json={**body, "stream": True}) as r:
        if r.status_code != 200:
            await r.aread()
            return None, None, None, f"http {r.status_code}"
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                ended = "error event: " + str(event["error"].get("code"))
            for choice in event.get("choices", []):
                if choice.get("token_ids"):
                    ttft = ttft if ttft is not None else time.monotonic() - start
                    ids += choice["token_ids"]
            chunks += 1
            if stop_after is not None and chunks >= stop_after:
                return ids, ttft, time.monotonic() - start, "left"
    return ids, ttft, time.monotonic() - start, ended


async def whole_ids(client: httpx.AsyncClient, path: str, body: dict):
    start = time.monotonic()
    r = await client.post(path, json=body)
    if r.status_code != 200:
        return None, None, None, f"http {r.status_code}"
    choice = r.json()["choices"][0]
    took = time.monotonic() - start
    return choice.get("token_ids", []), took, took, "done"


async def leave_raw(server: Server, rng: random.Random) -> str:
    """A raw request left with FIN, half-close or RST at a random point; returns the way it left."""
    kind, text, options = rng.choice(PROMPTS)
    path, body = _body(kind, text, options, 200)
    stream = rng.random() < 0.5
    data = json.dumps({**body, "stream": stream}).encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: {server.host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    how = rng.choice(["fin", "half-close", "rst"])
    when = rng.choice(["request", "head", "bytes"] if stream else ["request"])
    reader, writer = await asyncio.open_connection(server.host, server.port)
    sock = writer.get_extra_info("socket")
    try:
        writer.write(request)
        await writer.drain()
        if when == "head":
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        elif when == "bytes":
            await asyncio.wait_for(reader.readexactly(rng.randint(300, 2000)), 60)
        if how == "half-close":
            writer.write_eof()
            await asyncio.sleep(0.5)              # still open for reading, never reads
        elif how == "rst":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        writer.close()
    return f"leave {how} after {when}"


GENERATION_ONLY = (b'"max_tokens": "many"', b'"stop": 7', b"99999999")


async def bad_request(client: httpx.AsyncClient, rng: random.Random) -> int:
    data, mime = rng.choice(BAD)
    paths = ["/v1/chat/completions", "/v1/completions"]
    if not any(marker in data for marker in GENERATION_ONLY):
        paths.append("/tokenize")
    path = rng.choice(paths)
    r = await client.post(path, content=data, headers={"Content-Type": mime})
    shape = r.headers.get("content-type", "").startswith("application/json") and "error" in r.json()
    return r.status_code if shape else -r.status_code


class Soak:
    def __init__(self, args, server: Server):
        self.args, self.server = args, server
        self.solo: dict[tuple[int, bool], list[int]] = {}
        self.outcomes: Counter = Counter()
        self.mismatches: list[str] = []
        self.latency: dict[int, list[tuple[float, float]]] = defaultdict(list)   # minute -> (ttft, whole)
        self.rss: list[tuple[float, float]] = []
        self.disconnects = 0
        self.server_cancelled = 0
        self.restarting = False
        self.generation = 0                    # which server process (restarts count up)
        self.up: asyncio.Event | None = None   # clear while the server restarts: clients wait instead of spinning
        self.start = 0.0

    async def references(self) -> None:
        async with httpx.AsyncClient(base_url=self.server.url, timeout=600) as client:
            for i, (kind, text, options) in enumerate(PROMPTS):
                path, body = _body(kind, text, options, self.args.max_tokens)
                ids, *_ = await stream_ids(client, path, body)
                self.solo[(i, True)] = self.solo[(i, False)] = ids

    async def client_loop(self, seed: int) -> None:
        rng = random.Random(seed)
        weights = [w for _, w in ACTIONS]
        async with httpx.AsyncClient(base_url=self.server.url, timeout=600) as client:
            while time.monotonic() - self.start < self.args.minutes * 60:
                await self.up.wait()
                action = rng.choices([a for a, _ in ACTIONS], weights)[0]
                try:
                    await self.one(client, action, rng)
                except (httpx.TransportError, ConnectionError, OSError, asyncio.IncompleteReadError,
                        asyncio.TimeoutError) as exc:
                    self.outcomes[f"{action}: transport error{' (restart)' if self.restarting else ''}"] += 1
                    if not self.restarting:
                        self.mismatches.append(f"{action}: {type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.5)

    async def one(self, client: httpx.AsyncClient, action: str, rng: random.Random) -> None:
        if action == "bad":
            status = await bad_request(client, rng)
            self.outcomes[f"bad: {status}" if 400 <= status < 500 else f"bad: UNEXPECTED {status}"] += 1
            return
        if action == "leave":
            self.outcomes[await leave_raw(self.server, rng)] += 1
            self.disconnects += 1
            return
        index = rng.randrange(len(PROMPTS))
        kind, text, options = PROMPTS[index]
        path, body = _body(kind, text, options, self.args.max_tokens)
        if action == "cancel":
            _, _, _, ended = await stream_ids(client, path, {**body, "max_tokens": 200}, rng.randint(1, 4))
            self.outcomes[f"cancel: {ended}"] += 1
            self.disconnects += ended == "left"
            return
        stream = rng.random() < 0.6
        ids, ttft, whole, ended = await (stream_ids(client, path, body) if stream else whole_ids(client, path, body))
        if ended != "done":
            self.outcomes[f"exact: {ended}{' (restart)' if self.restarting else ''}"] += 1
            if ended.startswith("http 5") and not ended.startswith("http 503"):
                self.mismatches.append(f"exact: {ended}")
            return
        if ids == self.solo[(index, stream)]:
            self.outcomes["exact: equal to solo"] += 1
        else:
            self.outcomes["exact: MISMATCH"] += 1
            self.mismatches.append(f"prompt {index} stream={stream}: {len(ids)} ids differ from solo")
        self.latency[int((time.monotonic() - self.start) // 60)].append((ttft or whole, whole))

    async def sampler(self) -> None:
        while time.monotonic() - self.start < self.args.minutes * 60:
            rss = self.server.rss_mb()
            if rss is not None and not self.restarting:
                self.rss.append((time.monotonic() - self.start, self.generation, rss))
            await asyncio.sleep(10)

    async def scrape_cancelled(self) -> float:
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                text = (await client.get(f"{self.server.url}/metrics")).text
        except httpx.TransportError:
            return 0.0
        for line in text.splitlines():
            if line.startswith('strata_requests_total{outcome="cancelled"}'):
                return float(line.split()[-1])
        return 0.0

    async def restarter(self) -> None:
        if not self.args.restart_every or self.args.url:
            return
        while True:
            await asyncio.sleep(self.args.restart_every)
            if time.monotonic() - self.start > self.args.minutes * 60 - 30:
                return
            self.restarting = True
            self.up.clear()
            self.server_cancelled += await self.scrape_cancelled()
            await asyncio.to_thread(self.server.stop)
            self.outcomes["server restarts (SIGTERM)"] += 1
            await asyncio.to_thread(self.server.start)
            self.generation += 1
            self.restarting = False
            self.up.set()

    async def run(self) -> None:
        await self.references()
        self.up = asyncio.Event()
        self.up.set()
        self.start = time.monotonic()
        tasks = [self.client_loop(self.args.seed * 1000 + i) for i in range(self.args.clients)]
        await asyncio.gather(self.sampler(), self.restarter(), *tasks)
        await asyncio.sleep(2)
        self.server_cancelled += await self.scrape_cancelled()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def report(soak: Soak, args) -> dict:
    print(f"\nsoak: {args.clients} clients, {args.minutes} min, max_tokens {args.max_tokens}, seed {args.seed}")
    print("\n| outcome | requests |\n| --- | ---: |")
    for outcome, n in sorted(soak.outcomes.items()):
        print(f"| {outcome} | {n} |")
    five_xx = sum(n for o, n in soak.outcomes.items() if "UNEXPECTED 5" in o or ("http 5" in o and "503" not in o))
    print(f"\nmismatches/unexpected: {len(soak.mismatches)}   5xx: {five_xx}   disconnects made: {soak.disconnects}"
          f"   cancelled counted by the server: {soak.server_cancelled:.0f}")
    for line in soak.mismatches[:20]:
        print("  ", line)
    print("\n| minute | requests | TTFT p50 | p90 | p99 | whole p50 | p90 | p99 |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for minute in sorted(soak.latency):
        ttft = [t for t, _ in soak.latency[minute]]
        whole = [w for _, w in soak.latency[minute]]
        print(f"| {minute} | {len(whole)} | {_pct(ttft, .5):.2f} | {_pct(ttft, .9):.2f} | {_pct(ttft, .99):.2f} | "
              f"{_pct(whole, .5):.2f} | {_pct(whole, .9):.2f} | {_pct(whole, .99):.2f} |")
    if soak.rss:
        print("\n| time (s) | server process | RSS (MB) |\n| ---: | ---: | ---: |")
        step = max(1, len(soak.rss) // 16)
        rows = soak.rss[::step] + ([soak.rss[-1]] if (len(soak.rss) - 1) % step else [])
        for t, generation, rss in rows:
            print(f"| {t:.0f} | {generation} | {rss:.0f} |")
    return {"outcomes": dict(soak.outcomes), "mismatches": soak.mismatches, "five_xx": five_xx,
            "disconnects": soak.disconnects, "server_cancelled": soak.server_cancelled, "rss": soak.rss,
            "latency": {m: v for m, v in soak.latency.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=24, help="tokens per exact request (default 24)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--url", default=None, help="soak a running server instead of starting one (no restarts)")
    p.add_argument("--pid", type=int, default=None, help="with --url: the server's pid, for RSS")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--restart-every", type=float, default=0, help="SIGTERM and restart every S seconds (0: never)")
    p.add_argument("--log", default=None, help="append the server's output to this file")
    p.add_argument("--json", default=None, help="write the figures here too")
    p.add_argument("serve_args", nargs="*", help="more `strata serve` flags, after --")
    args = p.parse_args(argv)
    server = Server(args)
    server.start()
    try:
        soak = Soak(args, server)
        asyncio.run(soak.run())
    finally:
        server.stop()
    result = report(soak, args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    bad = result["mismatches"] or result["five_xx"]
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
