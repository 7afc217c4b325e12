"""ModelDrafter (`--draft model`): a second, smaller model with the same tokenizer proposes drafts.

It keeps its own slot set (KV caches), step buffers and activations beside
the target model's, one slot per engine slot. Each step it first catches
every drafting slot up with the tokens its cache lacks (the prompt on the
first step, then the last accepted tokens; at most `chunk` rows in all, so a
long prompt is read over several steps, during which that slot does not
draft), in one batched pass whose last row per slot samples draft 1; then
one batched single-row pass per further draft. Drafts are sampled with the
request's own parameters and (seed, position) keys: for a seeded request a
draft model close to the target then picks the same token from the same
uniform draw. The cache remembers which tokens its cells hold, so accepted
drafts are not recomputed and rejected ones are simply overwritten.
"""

from __future__ import annotations

import numpy as np

from ... import _ffi as F
from ...config import ConfigError
from ..step_io import StepIO
from .base import Drafter, SlotStates

PROBE = "Speculative decoding: the draft and target models must share one tokenizer (ids 0-9, é, 中)."


class _Cache:
    """The token ids whose K/V a draft slot holds, cell by cell."""

    def __init__(self):
        self.tokens: list[int] = []


class ModelDrafter(Drafter):
    source = "model"

    def __init__(self, ctx: F.Context, draft_model, batch: int, ctx_len: int, chunk: int, owns_model: bool = False):
        from ...models.decoder import Activations

        spec = draft_model.spec
        self.ctx, self.draft, self.owns_model = ctx, draft_model, owns_model
        self.ctx_len = min(ctx_len, spec.ctx_train)
        self.chunk = chunk
        self.slots = F.Slots(ctx, batch, spec.n_layers, self.ctx_len, spec.n_kv_heads, spec.head_dim)
        self.max_rows = chunk + batch
        self.io = StepIO(ctx, self.max_rows, batch)
        self.act = Activations(ctx, spec, self.max_rows, batch)
        self._caches = SlotStates(lambda request: _Cache())

    @classmethod
    def load(cls, ctx: F.Context, model, config) -> "ModelDrafter":
        from ...models.loader import load_model

        draft = load_model(config.draft_model, ctx)
        try:
            check_same_tokenizer(model, draft)
        except ConfigError:
            draft.close()
            raise
        return cls(ctx, draft, config.batch, config.ctx, config.chunk, owns_model=True)

    # ------------------------------------------------------------ proposing

    def propose(self, wants):
        todo = []                       # [request, cache, most drafts] of slots that draft this step
        budget = self.chunk
        rows = []                       # (request, token, cell, sampled?) of the catch-up pass
        for request, k in wants:
            tokens = request.prompt_ids + request.output_ids
            k = min(k, self.ctx_len - len(tokens))
            cache = self._caches.get(request)
            valid = _common_prefix(cache.tokens, tokens)
            valid = min(valid, len(tokens) - 1)          # the last token is always fed: it samples draft 1
            del cache.tokens[valid:]
            if k <= 0 or budget == 0:
                continue
            pending = tokens[valid:][:budget]
            budget -= len(pending)
            complete = valid + len(pending) == len(tokens)
            for i, token in enumerate(pending):
                rows.append((request, token, valid + i, complete and i == len(pending) - 1))
            cache.tokens.extend(pending)
            if complete:
                todo.append([request, cache, k])
        if not rows:
            return {}
        drafts = {request: [] for request, _, _ in todo}
        sampled = self._run(rows)
        live = []
        for (request, cache, k), token in zip(todo, sampled):
            drafts[request].append(token)
            if k > 1:
                live.append((request, cache, k))
        while live:                     # one row per slot still drafting: its last draft
            rows = [(r, drafts[r][-1], len(c.tokens), True) for r, c, _ in live]
            for r, c, _ in live:
                c.tokens.append(drafts[r][-1])
            sampled = self._run(rows)
            for (request, _, _), token in zip(live, sampled):
                drafts[request].append(token)
            live = [(r, c, k) for r, c, k in live if len(drafts[r]) < k]
        return drafts

    def _run(self, rows) -> list[int]:
        """One eager pass of the draft model over rows (request, token, cell, sampled?)."""
        io, n = self.io, len(rows)
        n_logits = 0
        for i, (request, token, cell, sampled) in enumerate(rows):
            io.ids[i] = token
            io.rows[i] = (request.slot, cell)
            if sampled:
                p = request.params
                io.logit_idx[n_logits] = i
                io.params[n_logits] = (p.temperature, p.top_p, p.min_p, p.top_k, p.seed, cell + 1)
                n_logits += 1
        io.clear(n, n_logits)
        io.upload()
        # Every row is a text row at position = cell (positions_decode writes its table cell).
        self.draft.decoder.record(io, self.act, self.slots, n, n, n_logits)
        return io.download_ids(n_logits).tolist() if n_logits else []

    def release(self, slot: int) -> None:
        self._caches.drop(slot)
        self.slots.reset(slot)

    def close(self) -> None:
        self.io.close()
        self.act.close()
        self.slots.close()
        if self.owns_model:
            self.draft.close()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0])


def check_same_tokenizer(model, draft) -> None:
    """Refuses a draft model whose vocabulary differs from the target's (its ids would mean other text)."""
    if draft.spec.vocab != model.spec.vocab:
        raise ConfigError(f"--draft-model has a vocabulary of {draft.spec.vocab} tokens but the model has "
                          f"{model.spec.vocab}: the draft model must use the same tokenizer")
    a, b = model.tokenizer, draft.tokenizer
    if a.encode(PROBE, add_special=False) != b.encode(PROBE, add_special=False) or a.eos_ids != b.eos_ids:
        raise ConfigError("--draft-model tokenizes text differently from the model: "
                          "the draft model must use the same tokenizer")
