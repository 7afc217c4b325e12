"""Speculator: which decoding slots draft this step, how many tokens, and what they keep.

The runner asks it for each step's drafts (after admission, before the
inputs are filled) and hands it each drafting slot's samples afterwards. A
request drafts when speculation is on for the server and the request, its
prompt is done, and at least one more token fits both its max_tokens and
the slot (a draft row must lie inside the context). What a slot keeps is
`accepted_run`; the KV cells of rejected drafts are forgotten with
slot truncate, so the slot's table ends where its accepted tokens end.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from .accept import accepted_run
from ..metrics import DraftCounts
from .base import Drafter


def may_draft(request) -> bool:
    """Speculation allowed for this request (`"speculative": false` turns it off)."""
    return bool(getattr(request.params, "speculative", True)) and not request.in_prefill


class Speculator:
    def __init__(self, drafter: Drafter, draft_max: int, ctx: int, vocab: int, counts: DraftCounts | None = None,
                 adaptive: bool = False):
        """adaptive: each request drafts at most one more token than it last had accepted (growing by one
        while everything is accepted) — for backends where a verification row costs nearly a decode step
        (the CPU); on a GPU the extra rows of a small batch are almost free."""
        if draft_max < 1:
            raise ValueError("draft_max must be >= 1")
        self.drafter, self.draft_max, self.ctx, self.vocab = drafter, draft_max, ctx, vocab
        self.counts = counts if counts is not None else DraftCounts()
        self.adaptive = adaptive
        self._caps: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # request -> drafts allowed next

    def limit(self, request) -> int:
        """The most tokens the request may draft now: within draft_max, its max_tokens and the slot."""
        remaining = request.params.max_tokens - len(request.output_ids) - 1
        room = self.ctx - 1 - request.num_computed
        return max(0, min(self._caps.get(request, self.draft_max), remaining, room))

    def propose(self, decode: list) -> dict:
        """{request: drafts} for this step's decode requests (slot order); others decode plainly."""
        wants = [(r, k) for r in decode if may_draft(r) and not r.cancelled and (k := self.limit(r)) > 0]
        if not wants:
            return {}
        limits = dict(wants)
        out = {}
        for request, drafts in self.drafter.propose(wants).items():
            drafts = self._checked(drafts, limits.get(request, 0))
            if drafts:
                out[request] = drafts
        return out

    def _checked(self, drafts, k: int) -> list[int]:
        """The proposal cut to k tokens and at the first id outside the vocabulary."""
        out = []
        for token in list(drafts)[:k]:
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < self.vocab:
                break
            out.append(int(token))
        return out

    def keep(self, request, drafts: list[int], sampled: list[int]) -> list[int]:
        """The tokens the request keeps from its 1 + len(drafts) samples; counts them."""
        run = accepted_run(drafts, sampled)
        request.num_drafted += len(drafts)
        request.num_draft_accepted += len(run) - 1
        self.counts.add(self.drafter.source, len(drafts), len(run) - 1)
        if self.adaptive:
            accepted, cap = len(run) - 1, self._caps.get(request, self.draft_max)
            self._caps[request] = min(self.draft_max, cap + 1 if accepted == len(drafts) else accepted + 1)
        return run

    def release(self, slots: list[int]) -> None:
        for slot in slots:
            self.drafter.release(slot)

    def admit(self, request) -> None:
        self.drafter.admit(request)

    def observe(self, plan, drafts: dict, tokens: list[list[int]], main_act, main_rows: int) -> None:
        """Lets a drafter that follows the model's hidden states (MTP) see the rows each slot kept."""
        if getattr(self.drafter, "observes_steps", False):
            self.drafter.observe(commits(plan, drafts, tokens), main_act, main_rows)

    def close(self) -> None:
        self.drafter.close()


def draft_state(request) -> dict:
    """The /slots fields of a request's speculation: drafts verified, accepted, and the rate."""
    if not request.num_drafted:
        return {}
    return {"draft_tokens": request.num_drafted, "draft_accepted": request.num_draft_accepted,
            "draft_acceptance": round(request.num_draft_accepted / request.num_drafted, 4)}


@dataclass
class Commit:
    """Rows of a step whose K/V a slot keeps, for drafters that follow the model's hidden states."""

    request: object
    rows: list[int]            # rows of the step, in the order the runner filled them
    cells: list[int]           # the slot's cache index of each row
    next_tokens: list[int]     # the token that follows each row's token
    drafts_next: bool          # the request decodes in the next step (it may draft)


def commits(plan, drafts: dict, tokens: list[list[int]]) -> list[Commit]:
    """Decode rows first (1 + k per drafting slot, of which the kept run's), then prefill chunks."""
    out, row = [], 0
    kept = dict(zip(plan.sampled_requests(), tokens))
    for request in plan.decode:
        run, n = kept[request], request.num_computed
        out.append(Commit(request, list(range(row, row + len(run))), list(range(n, n + len(run))), list(run),
                          not request.cancelled))
        row += 1 + len(drafts.get(request, ()))
    for chunk in plan.prefill:
        request, start, length = chunk.request, chunk.start, chunk.length
        nxt = request.prompt_ids[start + 1: start + length + 1]
        if chunk.completes_prompt:
            nxt = nxt + kept[request][:1]
        out.append(Commit(request, list(range(row, row + length)), list(range(start, start + length)), nxt,
                          chunk.completes_prompt and not request.cancelled))
        row += length
    return out
