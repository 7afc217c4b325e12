"""The memory roofline of the card a GPU benchmark runs on: its name and what a device-to-device copy reaches.

The "% of roofline" columns of bench/gpu_decode.py, bench/gpu_matmul.py and bench/gpu_profile.py divide by
this figure. They used to divide by a constant, the 4.27 TB/s an H200 reached in such a copy, which overstated
every other card's share (a `run` call may be answered by an H100: docs/gpu.md). Bytes moved count both
sides of the copy (read and write), as that figure did.

    from roofline import card_roofline
    name, bytes_per_s = card_roofline("cuda:0")          # measured once per process
    name, bytes_per_s = card_roofline("cuda:0", tbs=4.27)  # a given figure (old tables' constant)
"""

from __future__ import annotations

import time

from strata import _ffi as S

H200_COPY_TBS = 4.27  # an H200's device-to-device copy (bench/RESULTS.md): the constant the tables used before
_MEASURED: dict[str, tuple[str, float]] = {}


def copy_bandwidth(ctx: S.Context, n_bytes: int = 512 << 20, copies: int = 8) -> float:
    """Bytes per second (read + written) of `copies` back-to-back copies of n_bytes between two buffers of
    `ctx`'s device, after one untimed copy."""
    if n_bytes <= 0 or copies <= 0:
        raise ValueError("copy_bandwidth needs a positive size and number of copies")
    src, dst = S.Buffer(ctx, n_bytes), S.Buffer(ctx, n_bytes)
    try:
        src.fill(1)
        dst.copy_from(src)
        ctx.synchronize()
        t0 = time.perf_counter()
        for _ in range(copies):
            dst.copy_from(src)
        ctx.synchronize()
        seconds = time.perf_counter() - t0
    finally:
        src.close()
        dst.close()
    return 2.0 * n_bytes * copies / seconds


def card_roofline(device: str, tbs: float | None = None) -> tuple[str, float]:
    """(the device's name, its roofline in bytes/s): `tbs` TB/s when given, else a copy measured on the
    device (once per process and device)."""
    if tbs is not None:
        if not tbs > 0:
            raise ValueError(f"a roofline of {tbs} TB/s: expected a positive figure")
        ctx = S.Context(device)
        try:
            return ctx.info().name, tbs * 1e12
        finally:
            ctx.close()
    if device not in _MEASURED:
        ctx = S.Context(device)
        try:
            _MEASURED[device] = (ctx.info().name, copy_bandwidth(ctx))
        finally:
            ctx.close()
    return _MEASURED[device]


def describe(name: str, bytes_per_s: float, given: bool) -> str:
    """One line for a benchmark's header."""
    how = "given" if given else "measured: a device-to-device copy, bench/roofline.py"
    return f"# roofline: {name}, {bytes_per_s / 1e12:.2f} TB/s ({how})"
