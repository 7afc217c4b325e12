"""MtpDrafter (`--draft mtp`): batch-MTP drafts from the model's own multi-token-prediction layer.

After every engine step the nextn layer (models/mtp_head.py) runs over the
rows each slot kept in that step — prompt chunks and accepted runs, with the
main model's final hidden states still in the runner's activations — so its
own KV cache follows the slot. The last kept row of every slot that decodes
next samples draft 1; each further draft feeds the layer's output and the
drafted token back in, one row per slot. Every pass is batched over all
drafting slots (batch-MTP). Drafts are sampled with the request's own
parameters and (seed, position) keys.

Per-slot state, isolated: the layer's KV region and position table (a slot
set of one layer whose tables mirror the engine's, M-RoPE positions of image
prompts included) and the drafts waiting for the next step. Admitting,
cancelling or reusing one slot writes only that slot's regions, so a slot's
drafts never depend on its neighbours. `debug_shared_slot` breaks exactly
that (every request uses one slot's state) for the isolation negative control.
"""

from __future__ import annotations

import numpy as np

from ... import _ffi as F
from ...config import ConfigError
from ..step_io import StepIO
from .base import Drafter


class MtpDrafter(Drafter):
    source = "mtp"
    observes_steps = True

    def __init__(self, ctx: F.Context, model, batch: int, ctx_len: int, max_rows: int, draft_max: int,
                 vocab_subset: int | None = None, debug_shared_slot: int | None = None):
        from ...models.decoder import Activations
        from ...models.mtp_head import MtpHead

        spec = model.spec
        if not spec.n_nextn:
            raise ConfigError(no_mtp_message(model))
        self.ctx, self.spec, self.draft_max, self.ctx_len = ctx, spec, draft_max, ctx_len
        self.head = MtpHead(model.decoder, spec.n_layers, vocab_subset)
        self.slots = F.Slots(ctx, batch, 1, ctx_len, spec.n_kv_heads, spec.head_dim)
        self.max_rows = max_rows
        self.io = StepIO(ctx, max_rows, batch)
        self.act = Activations(ctx, spec, max_rows, batch)
        self.hidden = F.Buffer(ctx, max_rows * spec.hidden * 4)        # [max_rows, hidden] input states
        self.src = np.zeros(max_rows, dtype=np.int32)                  # rows the states are gathered from
        self.src_buf = F.Buffer(ctx, 4 * max_rows)
        self.debug_shared_slot = debug_shared_slot
        self.pending: dict[int, tuple[object, int, list[int]]] = {}    # slot -> (request, num_computed, drafts)

    @classmethod
    def for_model(cls, ctx, model, config) -> "MtpDrafter":
        k = config.draft_max or 4
        rows = config.chunk + config.batch * (1 + k)
        return cls(ctx, model, config.batch, config.ctx, rows, k, vocab_subset=getattr(config, "draft_vocab", None))

    def _slot(self, request) -> int:
        return request.slot if self.debug_shared_slot is None else self.debug_shared_slot

    # ------------------------------------------------------------ slot state

    def admit(self, request) -> None:
        """Mirrors the engine slot's prompt positions (M-RoPE ones for image prompts) and rope delta."""
        slot = self._slot(request)
        if request.positions is not None:
            positions = request.positions
        else:
            positions = np.repeat(np.arange(request.num_prompt, dtype=np.int32)[:, None], 4, axis=1)   # [n, 4]
            positions[:, 3] = 0
        self.slots.write_positions(slot, 0, positions)
        self.slots.set_delta(slot, int(request.rope_delta))
        self.pending.pop(request.slot, None)

    def release(self, slot: int) -> None:
        self.pending.pop(slot, None)
        if self.debug_shared_slot is None:
            self.slots.reset(slot)

    # ------------------------------------------------------------ after a step, before the next

    def observe(self, commits, main_act, main_rows: int) -> None:
        """Runs the layer over every kept row of the step and drafts for slots that decode next."""
        rows = [(c, i) for c in commits if getattr(c.request.params, "speculative", True)
                for i in range(len(c.rows))]
        if not rows:
            return
        rows.sort(key=lambda ci: ci[0].cells[ci[1]] < ci[0].request.num_prompt)   # decode cells first
        io, n = self.io, len(rows)
        n_decode = sum(1 for c, i in rows if c.cells[i] >= c.request.num_prompt)
        drafting = []                                 # (request, row of its last kept cell, that cell)
        for r, (c, i) in enumerate(rows):
            io.ids[r] = c.next_tokens[i]
            io.rows[r] = (self._slot(c.request), c.cells[i])
            self.src[r] = c.rows[i]
            if c.drafts_next and i == len(c.rows) - 1 and c.cells[i] + 2 < self.ctx_len:
                drafting.append((c.request, r, c.cells[i]))
        self._sampling(drafting)
        io.clear(n, len(drafting))
        io.upload()
        self.src_buf.upload(self.src[:n])
        h = self.spec.hidden * 4
        F.gather_rows(self.ctx, main_act.buffer, main_act.x, main_rows, h, self.src_buf, 0, n, self.hidden, 0)
        self.head.record(io, self.act, self.slots, n, n_decode, self.hidden, 0, len(drafting))
        drafts = {request: [] for request, _, _ in drafting}
        for (request, _, _), token in zip(drafting, io.download_ids(len(drafting)).tolist()):
            drafts[request].append(token)
        live = [(request, i, cell + 1) for i, (request, _, cell) in enumerate(drafting)]
        while live and len(drafts[live[0][0]]) < self.draft_max:
            live = [(request, i, cell) for request, i, cell in live if cell + 2 < self.ctx_len]
            if not live:
                break
            for r, (request, i, cell) in enumerate(live):   # the layer's output and the draft, one cell on
                io.ids[r] = drafts[request][-1]
                io.rows[r] = (self._slot(request), cell)
                self.src[r] = i
            self._sampling([(request, r, cell) for r, (request, _, cell) in enumerate(live)])
            io.clear(len(live), len(live))
            io.upload()
            self.src_buf.upload(self.src[: len(live)])
            F.gather_rows(self.ctx, self.act.buffer, self.act.xs, len(drafting), h, self.src_buf, 0, len(live),
                          self.hidden, 0)
            self.head.record(io, self.act, self.slots, len(live), len(live), self.hidden, 0, len(live))
            for (request, _, _), token in zip(live, io.download_ids(len(live)).tolist()):
                drafts[request].append(token)
            live = [(request, r, cell + 1) for r, (request, _, cell) in enumerate(live)]
        for request, _, cell in drafting:
            self.pending[request.slot] = (request, cell + 1, drafts[request])

    def _sampling(self, rows) -> None:
        """Logit rows and sampling keys: the row at cell c drafts the token at position c + 2."""
        for j, (request, r, cell) in enumerate(rows):
            p = request.params
            self.io.logit_idx[j] = r
            self.io.params[j] = (p.temperature, p.top_p, p.min_p, p.top_k, p.seed, cell + 2)

    def propose(self, wants):
        out = {}
        for request, k in wants:
            held = self.pending.get(request.slot)
            if held is not None and held[0] is request and held[1] == request.num_computed and held[2]:
                out[request] = held[2][:k]
        return out

    def close(self) -> None:
        for thing in (self.io, self.act, self.hidden, self.src_buf, self.slots):
            thing.close()


def no_mtp_message(model) -> str:
    return (f"--draft mtp needs a model with multi-token-prediction layers (GGUF nextn tensors, "
            f"{{arch}}.nextn_predict_layers > 0), and {model.name or model.spec.name or 'this model'} has none; "
            "use --draft suffix or --draft model instead")
