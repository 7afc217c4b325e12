"""DecodeAhead: keep the next decode step queued on the device while the host works.

In steady decoding (the same requests in the same rows, step after step) the
next step's inputs are a pure function of the last one on the device: each
row's new token is the one just sampled, its cache index and sampling
position move on by one (strata_step_advance). So right after launching step
N, the runner also launches step N+1 that way, and returns step N's tokens
while the device computes N+1. If the next plan is what was guessed, its
tokens are already on their way; if not (a request finished, was cancelled or
admitted), the guess is dropped and the step recomputed — each row's result
is a pure function of its own sequence, so a dropped guess changes nothing
but wasted device time. Only worth it where the device runs asynchronously
(CUDA); the CPU backend computes synchronously.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _ffi as F


@dataclass
class Launched:
    marker: int
    turn: int            # which half of the host buffer receives its tokens
    n_logits: int
    expected: list[tuple[int, int]] | None = None   # the rows (slot, index) a guessed step computes


class DecodeAhead:
    def __init__(self, ctx: F.Context, io, max_logits: int):
        self.ctx, self.io, self.max_logits = ctx, io, max_logits
        self.host = F.HostBuffer(ctx, 2 * 4 * max_logits)
        self.guess: Launched | None = None
        self._turn = 0
        self.hits = 0
        self.misses = 0

    def take(self, rows: list[tuple[int, int]]) -> Launched | None:
        """The queued guess if it computes exactly these rows; otherwise drops it."""
        guess, self.guess = self.guess, None
        if guess is not None and guess.expected == rows:
            self.hits += 1
            return guess
        if guess is not None:
            self.misses += 1
        return None

    def drop(self) -> None:
        if self.guess is not None:
            self.misses += 1
        self.guess = None

    def launch(self, graph: F.Graph, n_logits: int) -> Launched:
        """Launches the graph on the inputs already on the device; its tokens go to the host buffer."""
        graph.launch()
        return self._collect(n_logits)

    def launch_guess(self, graph: F.Graph, bucket: int, n_logits: int, rows: list[tuple[int, int]]) -> None:
        io = self.io
        F.step_advance(self.ctx, io.buffer, io.ids_off, io.rows_off, io.params_off, io.out_off, bucket)
        graph.launch()
        launched = self._collect(n_logits)
        launched.expected = [(slot, index + 1) for slot, index in rows]
        self.guess = launched

    def tokens(self, launched: Launched) -> list[int]:
        F.wait(self.ctx, launched.marker)
        start = launched.turn * 4 * self.max_logits
        return self.host.array[start: start + 4 * launched.n_logits].view(np.int32).tolist()

    def _collect(self, n_logits: int) -> Launched:
        turn, self._turn = self._turn, 1 - self._turn
        self.host.copy_from(self.io.buffer, turn * 4 * self.max_logits, self.io.out_off, 4 * n_logits)
        return Launched(F.marker(self.ctx), turn, n_logits)

    def close(self) -> None:
        self.guess = None
        self.host.close()
