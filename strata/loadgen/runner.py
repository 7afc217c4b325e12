"""A load run: N concurrent streaming clients with staggered arrivals, then each request rerun alone.

The concurrent phase is what a server sees in production; the solo phase
runs the same bodies one at a time, and each concurrent stream is compared
with its solo rerun. On Strata every pair is equal (a request's tokens never
depend on who else is served); on a server that batches without that
guarantee, some are not. A conversation (Workload.turns > 1) runs its turns
in order, each sending the replies it got before; its solo rerun replays the
conversation alone with its own replies, and turn t is compared with turn t.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

from . import server_cpu, server_steps
from .client import StreamResult, stream_chat
from .workload import Workload


@dataclass(frozen=True)
class Target:
    """Where the load goes: a base URL (with or without /v1) and an optional API key."""

    url: str
    api_key: str | None = None
    timeout_s: float = 600.0

    @property
    def v1(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/v1") else base + "/v1"

    @property
    def root(self) -> str:
        """The server's root (where Strata's /metrics is)."""
        return self.v1[:-len("/v1")]

    def client(self, connections: int) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(headers=headers, timeout=self.timeout_s, limits=limits)


@dataclass
class LoadRun:
    workload: Workload
    num_clients: int
    stagger_s: float
    concurrent: list[StreamResult]
    wall_s: float                               # from `started` to the last request's end (not to the last client's)
    solo: list[StreamResult] | None = None      # None: the solo check was not run
    notes: list[str] = field(default_factory=list)
    # the server's CPU (server_cpu.py) just before and just after the concurrent phase; None: not asked
    cpu: tuple[server_cpu.CpuSnapshot, server_cpu.CpuSnapshot] | None = None
    started: float = 0.0                        # perf_counter when the concurrent phase began
    # a Strata server's engine steps over the concurrent phase (server_steps.py); None: the server has no such
    # metrics (another server) or its /metrics could not be read
    steps: dict | None = None


async def discover_model(target: Target) -> str:
    """The first model id the server lists at /v1/models."""
    async with target.client(1) as http:
        response = await http.get(target.v1 + "/models")
        if response.status_code != 200:
            raise RuntimeError(f"GET {target.v1}/models answered {response.status_code}: {response.text[:200]}")
        models = response.json().get("data") or []
        if not models:
            raise RuntimeError(f"GET {target.v1}/models lists no model; pass --model")
        return models[0]["id"]


async def run_load(target: Target, workload: Workload, num_clients: int, stagger_s: float = 0.0,
                   solo_check: bool = True, server_pid: int | None = None) -> LoadRun:
    """Runs the concurrent phase, then (solo_check) every request again alone.

    server_pid: a local server process whose CPU time is read around the
    concurrent phase only (the solo reruns generate as many tokens again,
    mostly while the server waits on its device).
    """
    if num_clients < 1:
        raise ValueError("the number of clients must be at least 1")
    url = target.v1 + "/chat/completions"
    results: list[list[StreamResult] | None] = [None] * workload.num_requests
    next_index = iter(range(workload.num_requests))

    async def client(client_id: int, http: httpx.AsyncClient) -> None:
        await asyncio.sleep(client_id * stagger_s)      # staggered arrivals: admissions land mid-prefill/decode
        for index in next_index:                          # shared iterator: each index taken by one client
            results[index] = await run_conversation(http, url, workload, index)

    async with target.client(num_clients) as http:
        steps_before = await server_steps.snapshot(http, target.root)
        cpu_before = server_cpu.snapshot(server_pid) if server_pid is not None else None
        start = time.perf_counter()
        await asyncio.gather(*(client(c, http) for c in range(min(num_clients, workload.num_requests))))
        cpu = (cpu_before, server_cpu.snapshot(server_pid)) if cpu_before is not None else None
        steps_after = await server_steps.snapshot(http, target.root) if steps_before is not None else None
    concurrent = [r for turns in results if turns for r in turns]
    # The wall ends with the last request, not with the last client: clients share one queue of requests, so
    # where the server answers faster than the stagger, late clients wake to an empty queue, and their sleep
    # is no part of the server's time (it was, until 2026-12-05: bench/RESULTS.md).
    wall_s = max((r.end for r in concurrent), default=time.perf_counter()) - start
    run = LoadRun(workload, num_clients, stagger_s, concurrent, wall_s, cpu=cpu, started=start)
    if steps_before is not None and steps_after is not None:
        run.steps = server_steps.difference(steps_before, steps_after)
    if solo_check:
        run.solo = await run_solo(target, workload)
    return run


async def run_conversation(http: httpx.AsyncClient, url: str, workload: Workload, index: int) -> list[StreamResult]:
    """Request `index`'s turns in order (one for a plain request); stops at the first failed turn."""
    results: list[StreamResult] = []
    replies: tuple[str, ...] = ()
    for turn in range(workload.turns):
        result = await stream_chat(http, url, workload.body(index, replies), index, turn)
        results.append(result)
        if not result.ok:
            break
        replies += (result.text,)
    return results


async def run_solo(target: Target, workload: Workload) -> list[StreamResult]:
    """Each request (each conversation) alone, one after another."""
    url = target.v1 + "/chat/completions"
    async with target.client(1) as http:
        return [r for i in range(workload.num_requests) for r in await run_conversation(http, url, workload, i)]


def run_load_sync(target: Target, workload: Workload, num_clients: int, stagger_s: float = 0.0,
                  solo_check: bool = True) -> LoadRun:
    return asyncio.run(run_load(target, workload, num_clients, stagger_s, solo_check))
