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
but wasted device time. Where the plan changed only by rows joining or leaving
(a prompt chunk arrived, a request was admitted or finished early), the guess
still computed each remaining decode row's next token: the runner takes those
tokens from it (take_covering) and computes only the rest, so the guessed
step is not wasted. Only worth it where the device runs asynchronously
(CUDA); the CPU backend computes synchronously.

`depth` guesses may be queued (STRATA_DECODE_AHEAD_DEPTH, read when the runner
is built; 1 by default): with 2, the device has two steps of work queued when
the host comes back, so a host round trip (hand-off, token delivery,
scheduling) of up to two device steps leaves it no idle gap; a miss then
drops up to `depth` guessed steps. The runner queues a guess d steps on only
for a request that is sure to be decoding then (its token budget and the
context reach that far), so a dropped guess writes cache cells the request
had reserved and nobody reads.
"""

from __future__ import annotations

import collections
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
    def __init__(self, ctx: F.Context, io, max_logits: int, depth: int = 1):
        self.ctx, self.io, self.max_logits = ctx, io, max_logits
        self.depth = depth
        self._turns = depth + 1            # the step being read, and each queued guess, own a part
        self.host = F.HostBuffer(ctx, self._turns * 4 * max_logits)
        self.guesses: collections.deque[Launched] = collections.deque()   # oldest (next step) first
        self._turn = 0
        self.hits = 0
        self.misses = 0
        self.reused = 0          # guesses whose rows served a step of another shape (take_covering)

    @property
    def guess(self) -> Launched | None:
        """The guess for the next step, if any."""
        return self.guesses[0] if self.guesses else None

    @guess.setter
    def guess(self, launched: Launched | None) -> None:
        self.guesses.clear()
        if launched is not None:
            self.guesses.append(launched)

    def take(self, rows: list[tuple[int, int]]) -> Launched | None:
        """The next queued guess if it computes exactly these rows (later guesses stay queued);
        otherwise drops every guess."""
        if self.guesses and self.guesses[0].expected == rows:
            self.hits += 1
            return self.guesses.popleft()
        self.drop()
        return None

    def take_covering(self, rows: list[tuple[int, int]]) -> Launched | None:
        """The next queued guess if it computed every one of these rows (and maybe rows of requests that
        have since left); later guesses are dropped. For a step whose plan is not the guessed one (a prompt
        chunk joined, a request left or was admitted): the guess's tokens for these rows are theirs, since
        each row is a pure function of its own sequence, so the step need not compute them again."""
        launched = None
        if rows and self.guesses and set(rows) <= set(self.guesses[0].expected):
            launched = self.guesses.popleft()
            self.reused += 1
        self.drop()
        return launched

    def drop(self) -> None:
        self.misses += len(self.guesses)
        self.guesses.clear()

    def queued(self) -> int:
        return len(self.guesses)

    def launch(self, graph: F.Graph, n_logits: int) -> Launched:
        """Launches the graph on the inputs already on the device; its tokens go to the host buffer."""
        graph.launch()
        return self._collect(n_logits)

    def launch_guess(self, graph: F.Graph, bucket: int, n_logits: int, rows: list[tuple[int, int]]) -> None:
        """Queues the step after the last one launched; rows: that last step's rows."""
        io = self.io
        F.step_advance(self.ctx, io.buffer, io.ids_off, io.rows_off, io.params_off, io.out_off, bucket)
        graph.launch()
        launched = self._collect(n_logits)
        launched.expected = [(slot, index + 1) for slot, index in rows]
        self.guesses.append(launched)

    def tokens(self, launched: Launched) -> list[int]:
        F.wait(self.ctx, launched.marker)
        start = launched.turn * 4 * self.max_logits
        return self.host.array[start: start + 4 * launched.n_logits].view(np.int32).tolist()

    def _collect(self, n_logits: int) -> Launched:
        turn, self._turn = self._turn, (self._turn + 1) % self._turns
        self.host.copy_from(self.io.buffer, turn * 4 * self.max_logits, self.io.out_off, 4 * n_logits)
        return Launched(F.marker(self.ctx), turn, n_logits)

    def close(self) -> None:
        self.guesses.clear()
        self.host.close()
