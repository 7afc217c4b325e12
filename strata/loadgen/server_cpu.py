"""The CPU time a local server process spends, by thread, read from Linux's /proc (`--server-pid`).

With many streaming clients the server's event loop (its main thread: HTTP,
SSE, token delivery) can limit throughput before the device does; CPU
seconds per generated token, on that thread and on all of them, show it
independently of how loaded the machine is (bench/RESULTS.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuSnapshot:
    """Clock ticks (user + system) per thread id of one process at one moment."""

    pid: int
    ticks: dict[int, int]   # thread id -> ticks; the main thread's id is the pid
    tick_hz: int = 100      # SC_CLK_TCK


def snapshot(pid: int) -> CpuSnapshot:
    """The CPU ticks of each thread of process `pid`; OSError with a clear message where /proc can't tell."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        raise OSError(f"--server-pid {pid}: no such process here (it reads /proc/{pid}: a local process on Linux)")
    ticks: dict[int, int] = {}
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:             # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()     # after "pid (comm) ": state is field 3
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return CpuSnapshot(pid, ticks, os.sysconf("SC_CLK_TCK"))


def per_token_us(before: CpuSnapshot, after: CpuSnapshot, tokens: int) -> dict:
    """The summary's fields: microseconds of server CPU per generated token, main thread and all.

    Per-thread differences in whole ticks: a thread that ended between the two snapshots is not
    counted (its last ticks are gone), one that started is counted from zero, and the main thread's
    figure can never exceed the all-threads one (summing floats in another order could make it)."""
    if tokens <= 0:
        return {"server_cpu_main_us_per_token": None, "server_cpu_all_us_per_token": None}
    deltas = {tid: max(0, t - before.ticks.get(tid, 0)) for tid, t in after.ticks.items()}
    to_us = 1e6 / after.tick_hz / tokens
    return {"server_cpu_main_us_per_token": deltas.get(after.pid, 0) * to_us,
            "server_cpu_all_us_per_token": sum(deltas.values()) * to_us}
