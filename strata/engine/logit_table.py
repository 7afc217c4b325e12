"""LogitTable: the per-slot adjustment rows on the device that strata_logits_adjust reads.

One F32 region [n_slots][2][vocab] at a fixed address (captured decode graphs
read it): slot s holds its request's additive row and repetition-factor row.
The runner points each sampled row at its slot (StepIO.adjust; -1 = none) and
writes a slot's rows only when its request's rules changed since the last
write, so nothing is uploaded for plain requests and a write touches only
that slot's region (DESIGN invariant 2).
"""

from __future__ import annotations

import numpy as np

from .. import _ffi as F


class LogitTable:
    def __init__(self, ctx: F.Context, n_slots: int, n_vocab: int):
        self.n_slots, self.n_vocab = n_slots, n_vocab
        self.row_bytes = 4 * n_vocab
        self.buffer = F.Buffer(ctx, 2 * n_slots * self.row_bytes)
        self._written: list[tuple[object, int] | None] = [None] * n_slots    # (rules, version) per slot
        self._host = np.empty((2, n_vocab), np.float32)                      # [2, vocab]

    def write(self, slot: int, rules) -> None:
        """Uploads the rows of `rules` into `slot`'s region unless they are there already."""
        key = (rules, rules.version)
        if self._written[slot] == key:
            return
        self._host[0], self._host[1] = rules.rows()
        self.buffer.upload(self._host, 2 * slot * self.row_bytes)
        self._written[slot] = key

    def forget(self, slot: int) -> None:
        self._written[slot] = None

    def close(self) -> None:
        self.buffer.close()
