"""Streams synthesized tensor data to an open file: row chunks drawn in parallel, written in order.

Each tensor is cut into chunks of whole rows (about CHUNK_BYTES each, a
function of the row size only), and each chunk draws from its own generator
seeded by (seed, crc32(tensor name), chunk index). The bytes therefore depend
on the seed alone, never on the thread count or the tensor order, and at most
a bounded window of chunks is ever in memory.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from strata.synth.blocks import draw_rows
from strata.synth.plan import TensorSpec

CHUNK_BYTES = 8 << 20
ALIGNMENT = 32  # GGUF's default general.alignment


@dataclass(frozen=True)
class Chunk:
    spec: TensorSpec
    index: int
    row_start: int
    row_stop: int

    @property
    def is_last(self) -> bool:
        return self.row_stop == (self.spec.shape[0] if len(self.spec.shape) > 1 else 1)


def chunks_of(spec: TensorSpec) -> Iterator[Chunk]:
    num_rows = spec.shape[0] if len(spec.shape) > 1 else 1
    rows_per_chunk = max(1, CHUNK_BYTES // spec.row_bytes)
    for index, start in enumerate(range(0, num_rows, rows_per_chunk)):
        yield Chunk(spec, index, start, min(num_rows, start + rows_per_chunk))


def draw_chunk(chunk: Chunk, seed: int, std: float) -> np.ndarray:
    """The chunk's bytes: deterministic in (seed, tensor name, chunk index)."""
    spec = chunk.spec
    num_rows, row_len = chunk.row_stop - chunk.row_start, spec.shape[-1]
    if spec.fill == "ones":
        return np.ones(num_rows * row_len, dtype=np.float32).view(np.uint8)
    key = np.random.SeedSequence(entropy=seed, spawn_key=(zlib.crc32(spec.name.encode()), chunk.index))
    rng = np.random.Generator(np.random.SFC64(key))
    return draw_rows(rng, spec.qtype, num_rows, row_len, std)


def write_tensors(
    out: BinaryIO,
    specs: Sequence[TensorSpec],
    seed: int,
    std: float,
    num_threads: int | None = None,
    on_tensor: Callable[[TensorSpec], None] | None = None,
) -> None:
    """Appends every tensor's data (each padded to ALIGNMENT) to `out`, positioned at the data section."""
    num_threads = num_threads or _usable_cpus()
    window = 2 * num_threads
    pending: deque[tuple[Chunk, Future[np.ndarray]]] = deque()
    with ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="synth") as pool:
        for spec in specs:
            for chunk in chunks_of(spec):
                pending.append((chunk, pool.submit(draw_chunk, chunk, seed, std)))
                if len(pending) >= window:
                    _write_next(out, pending, on_tensor)
        while pending:
            _write_next(out, pending, on_tensor)


def _write_next(out: BinaryIO, pending: deque, on_tensor: Callable[[TensorSpec], None] | None) -> None:
    chunk, future = pending.popleft()
    out.write(memoryview(future.result()))
    if chunk.is_last:
        pad_to_alignment(out)
        if on_tensor is not None:
            on_tensor(chunk.spec)


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def pad_to_alignment(out: BinaryIO) -> None:
    out.write(b"\0" * (-out.tell() % ALIGNMENT))
