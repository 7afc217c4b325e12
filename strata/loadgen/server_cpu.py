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
    main: float          # seconds on the process's main thread (its tid is the pid)
    total: float         # seconds on all its threads alive now (threads that ended are not counted)


def snapshot(pid: int) -> CpuSnapshot:
    """user + system CPU seconds of process `pid`; OSError with a clear message where /proc can't tell."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        raise OSError(f"--server-pid {pid}: no such process here (it reads /proc/{pid}: a local process on Linux)")
    tick = os.sysconf("SC_CLK_TCK")
    main = total = 0.0
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:             # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()     # after "pid (comm) ": state is field 3
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15)
        total += seconds
        if task.name == str(pid):
            main = seconds
    return CpuSnapshot(main, total)


def per_token_us(before: CpuSnapshot, after: CpuSnapshot, tokens: int) -> dict:
    """The summary's fields: microseconds of server CPU per generated token, main thread and all."""
    if tokens <= 0:
        return {"server_cpu_main_us_per_token": None, "server_cpu_all_us_per_token": None}
    return {"server_cpu_main_us_per_token": (after.main - before.main) * 1e6 / tokens,
            "server_cpu_all_us_per_token": (after.total - before.total) * 1e6 / tokens}
