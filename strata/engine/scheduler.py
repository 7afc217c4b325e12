"""Which rows run in the next step: admission, decode rows and prefill chunks.

There are no prefill or decode phases (vLLM v1's rule): each running
request's computed-token count catches up with its token count. A step holds
one decode row for every request whose prompt is done, plus prompt chunks of
admitted requests within the token budget (`chunk`). The budget is shortened
so that the step's rows (decode rows + prompt tokens) end on a multiple of
`chunk` (`prefill_budget`): a GPU matmul's time grows in whole row tiles and
waves, so 512 rows cost markedly less than 512 + 64 (bench/RESULTS.md,
2026-12-04 (night 2)). Admission also needs
the KV pages a request may use (kv_pool.py): a request the pool cannot cover
yet waits, and so do the ones behind it. A prompt longer than the
budget yields at each chunk boundary and resumes next step (BYIELD/resume, docs/design.md), so
decoding slots never wait for more than one chunk.

Optionally (`STRATA_PREFILL_HOLD_MS`, off by default) a step that decodes leaves fresh prompt tokens for a
later step while they would fill less than its budget and the oldest of them was admitted under that many
milliseconds ago: a GPU step of a few hundred rows costs about what a whole chunk costs, so waiting for
the next arrivals can read more prompt per step (TGI's waiting-token rule is the same idea). Never when
nothing decodes (the device would idle) and never beside a prompt a step has already partly read. An A/B switch for
serving throughput; untimed on a GPU when added (bench/RESULTS.md, 2026-12-05 fifth session).

Pure bookkeeping: no device, no threads, no clocks besides timestamps.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from .. import env
from .request import Request, State


class QueueFull(RuntimeError):
    """All slots are busy and the waiting queue is at its bound; retry later."""


@dataclass
class PrefillChunk:
    request: Request
    start: int        # first prompt index of the chunk
    length: int

    @property
    def completes_prompt(self) -> bool:
        return self.start + self.length == self.request.num_prompt


@dataclass
class StepPlan:
    admitted: list[Request] = field(default_factory=list)   # given a slot this step
    decode: list[Request] = field(default_factory=list)     # one row each, by slot
    prefill: list[PrefillChunk] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return len(self.decode) + sum(c.length for c in self.prefill)

    @property
    def empty(self) -> bool:
        return not self.decode and not self.prefill

    def sampled_requests(self) -> list[Request]:
        """Requests that get a token from this step, in row order."""
        return self.decode + [c.request for c in self.prefill if c.completes_prompt]


class Scheduler:
    def __init__(self, num_slots: int, chunk: int, max_queue: int, pool=None, align: bool | None = None,
                 hold_ms: float | None = None):
        """pool: a KvPool (kv_pool.py) whose pages admission must find first; None admits on slots alone.
        align: end each step's rows on a multiple of the chunk (`prefill_budget`); None reads
        STRATA_PREFILL_ALIGN. hold_ms: how long fresh prompts may wait to fill a decoding step (module
        docstring); None reads STRATA_PREFILL_HOLD_MS, 0 never holds."""
        if num_slots < 1 or chunk < 1 or max_queue < 0:
            raise ValueError("num_slots and chunk must be >= 1 and max_queue >= 0")
        if hold_ms is None:
            hold_ms = env.number("STRATA_PREFILL_HOLD_MS", float, 0, 10_000, "milliseconds")
        elif not 0 <= hold_ms <= 10_000:
            raise ValueError(f"the prefill hold must be 0 to 10000 ms, got {hold_ms}")
        self.hold_s = hold_ms / 1000
        self.num_slots = num_slots
        self.chunk = chunk
        self.max_queue = max_queue
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: dict[int, Request] = {}
        self.free_slots: list[int] = list(range(num_slots))
        self.released: list[int] = []        # slots freed since the runner last looked
        self.pool = pool
        self.align = env.get("STRATA_PREFILL_ALIGN") != "0" if align is None else align

    @property
    def queue_len(self) -> int:
        return len(self.waiting)

    @property
    def busy_slots(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.released)

    def submit(self, request: Request) -> None:
        """Queues a validated request; raises QueueFull past the bound (free slots absorb some)."""
        if len(self.waiting) >= self.max_queue + len(self.free_slots):
            raise QueueFull(
                f"all {self.num_slots} slots are busy and {len(self.waiting)} requests are waiting "
                f"(the queue bound is {self.max_queue}); retry later")
        self.waiting.append(request)

    def finish(self, request: Request, reason: str) -> None:
        """Ends a request; its slot (if any) is released for reset and reuse."""
        if request.state is State.FINISHED:
            return
        if request.state is State.WAITING:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        if request.slot is not None and self.running.get(request.slot) is request:
            del self.running[request.slot]
            self.released.append(request.slot)
            if self.pool is not None:     # the runner unmaps the slot's pages before the next step's kernels
                self.pool.release(request, keep=reason != "error")
        request.state = State.FINISHED
        request.finish_reason = reason

    def take_released(self) -> list[int]:
        slots, self.released = self.released, []
        return slots

    def return_slots(self, slots: list[int]) -> None:
        """The runner has reset these slots: they may be admitted into again."""
        self.free_slots.extend(slots)
        self.free_slots.sort()

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._drop_cancelled()
        self._admit(plan)
        prefilling = []
        for _, request in sorted(self.running.items()):
            (prefilling if request.in_prefill else plan.decode).append(request)
        budget = self.prefill_budget(len(plan.decode))
        if plan.decode and prefilling and self._hold(prefilling, budget):
            return plan
        for request in sorted(prefilling, key=lambda r: (r.admit_time, r.slot)) if prefilling else ():
            if budget == 0:
                break
            n = min(request.num_prompt - request.num_computed, budget)
            plan.prefill.append(PrefillChunk(request, request.num_computed, n))
            budget -= n
        return plan

    def prefill_budget(self, num_decode: int) -> int:
        """Prompt tokens a step with `num_decode` decode rows may take: what completes its rows to a multiple
        of the chunk, or the whole chunk where that would leave prompts less than a quarter of it (many
        decoding slots) or with `STRATA_PREFILL_ALIGN=0`. Never more than the chunk, so no step is larger than
        before. Which rows share a step changes no request's tokens (docs/design.md)."""
        if not self.align:
            return self.chunk
        budget = self.chunk - num_decode % self.chunk
        return budget if 4 * budget >= self.chunk else self.chunk

    def _hold(self, prefilling: list[Request], budget: int) -> bool:
        """True when this decoding step should leave its prompts for a later one: holding is on, no prompt
        is partly read by a step (a prefix-cache hit is not), their remaining tokens would not fill the
        budget, and the oldest was admitted under the hold ago."""
        if self.hold_s <= 0 or any(r.num_computed > r.num_cached for r in prefilling):
            return False
        if sum(r.num_prompt - r.num_computed for r in prefilling) >= budget:
            return False
        return time.monotonic() - min(r.admit_time for r in prefilling) < self.hold_s

    def _drop_cancelled(self) -> None:
        if not any(r.cancelled for r in self.waiting) and not any(r.cancelled for r in self.running.values()):
            return
        for request in [r for r in self.waiting if r.cancelled] + [r for r in self.running.values() if r.cancelled]:
            self.finish(request, "cancelled")

    def _admit(self, plan: StepPlan) -> None:
        now = time.monotonic()
        while self.waiting and self.free_slots:
            if self.pool is not None and not self.pool.admit(self.waiting[0]):
                break                     # the pool can't cover the oldest request yet: it waits (FIFO)
            request = self.waiting.popleft()
            request.slot = self.free_slots.pop(0)
            request.state = State.RUNNING
            request.admit_time = now
            self.running[request.slot] = request
            plan.admitted.append(request)
