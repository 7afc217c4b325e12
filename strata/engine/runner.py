"""ModelRunner: executes one scheduled step on the device.

It owns the slot set (KV page pool, page and position tables), the step buffers and
the decoder's activations. A step resets released slots, prepares admitted
ones (their position tables and rope delta — only their own regions), asks
the speculator for drafts, fills the step inputs (a drafting slot gets 1 + k
decode rows), runs the forward pass (a captured graph per row-count bucket
for decode-only steps, eager otherwise), and returns each request's tokens:
one, or a drafting slot's accepted run (drafting/accept.py).
Runs in the engine's worker thread; nothing here touches anyio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .. import _ffi as F
from ..config import PAGE_CELLS, EngineConfig
from .decode_ahead import DecodeAhead
from .drafting.speculator import may_draft
from .image_rows import ImageRows
from .logit_table import LogitTable
from .output import TokenLogprob
from .scheduler import StepPlan
from .step_io import StepIO

log = logging.getLogger("strata.runner")


@dataclass
class StepResult:
    tokens: list[list[int]]                       # aligned with plan.sampled_requests(): 1 token, or a kept run
    logprobs: list[list[TokenLogprob | None]] | None = None
    num_drafted: int = 0                          # draft rows verified in the step


def decode_bucket(n_rows: int, max_rows: int, speculating: bool = False, bucket_48: bool = True) -> int:
    """The rows of the captured decode graph that runs a step of n_rows decode rows (the rest are padding):
    the next power of two, except 33 to 48 rows, which get a graph of 48 — the CUDA tile kernel has a
    48-row route there (routing v9, libstrata/src/cuda/cuda_int_mma_tiles.cu), and its time grows with the
    rows a tile holds, so padding them to 64 would cost 64 rows. At most max_rows (the batch), so a batch of
    40 captures 40. With a speculator, up to 16 rows are not padded: verification row counts vary step to
    step, and padding them costs real rows. Rows are computed alike in any bucket (batch invariance).
    bucket_48=False (STRATA_DECODE_BUCKET_48=0): powers of two only, as before 2026-12-05, for an A/B."""
    if speculating and n_rows <= 16:
        return n_rows
    bucket = 1
    while bucket < n_rows:
        bucket *= 2
    if bucket_48 and 32 < n_rows <= 48:
        bucket = 48
    return min(bucket, max_rows)


def ahead_reuse() -> bool:
    """STRATA_DECODE_AHEAD_REUSE (strata/env.py): whether a guess serves a step of another plan's decode rows."""
    from .. import env

    return env.switch("STRATA_DECODE_AHEAD_REUSE")


def bucket_48() -> bool:
    """STRATA_DECODE_BUCKET_48 (strata/env.py): whether 33-48 decode rows run a 48-row graph (decode_bucket)."""
    from .. import env

    return env.switch("STRATA_DECODE_BUCKET_48")


def ahead_depth() -> int:
    """STRATA_DECODE_AHEAD_DEPTH (strata/env.py): decode steps queued ahead on CUDA, 1 or 2."""
    from .. import env

    raw = (env.get("STRATA_DECODE_AHEAD_DEPTH") or "1").strip()
    if raw not in ("1", "2"):
        raise ValueError(f"STRATA_DECODE_AHEAD_DEPTH must be 1 or 2, got {raw!r}")
    return int(raw)


def _sampled(sampled: list[int], logprobs=None) -> StepResult:
    """One token per sampled row (no drafts in the step)."""
    return StepResult([[t] for t in sampled], None if logprobs is None else [[lp] for lp in logprobs])


class ModelRunner:
    def __init__(self, ctx: F.Context, model, config: EngineConfig, speculator=None):
        from ..models.decoder import Activations

        spec = model.spec
        self.ctx, self.model, self.config, self.spec = ctx, model, config, spec
        # A paged pool (docs/kv_pool.md): admission hands each request its pages (kv_pool.py), mapped
        # into its slot's page table here. Unset, the pool is as large as the fixed regions were.
        # A layer split (docs/layer-split.md) mirrors the pool's page ids and tables on every stage.
        n_pages = config.kv_pages or config.batch * -(-config.ctx // PAGE_CELLS)
        make_slots = getattr(model.decoder, "make_slots", None)
        self.slots = make_slots(config.batch, config.ctx, n_pages, config.batch_groups) if make_slots is not None else \
            F.Slots(ctx, config.batch, spec.n_layers, config.ctx, spec.n_kv_heads, spec.head_dim, n_pages=n_pages,
                    kv_dtype=config.kv_dtype)
        self.speculator = speculator                  # drafting/speculator.py, None: plain decoding
        rows_per_slot = 1 + (speculator.draft_max if speculator is not None else 0)
        self.max_rows = config.chunk + config.batch * rows_per_slot
        self.max_logits = config.batch * rows_per_slot
        self.io = StepIO(ctx, self.max_rows, self.max_logits)
        self.act = Activations(ctx, spec, self.max_rows, self.max_logits)
        self.graphs: dict[int, F.Graph] = {}
        self.use_graphs = config.graphs
        self.images = ImageRows(ctx, spec.hidden)      # per-slot image embeddings, injected in prefill
        self.logit_table = LogitTable(ctx, config.batch, spec.vocab)   # per-slot masks, bias, penalties
        on_gpu = ctx.info().backend == F.Backend.CUDA
        # Not on a layer split: its later stages copy the step inputs from the host, which a guessed
        # step advances on the device only.
        split = hasattr(model.decoder, "capture")
        self.ahead = DecodeAhead(ctx, self.io, self.max_logits, ahead_depth()) \
            if on_gpu and config.graphs and not split else None
        self.ahead_reuse = ahead_reuse()
        self.bucket_48 = bucket_48()
        # Tests that read act.logits after each step set this: a guessed next step would overwrite them.
        self.keep_logits = False

    # ------------------------------------------------------------ slot state

    def release(self, slots: list[int]) -> None:
        for slot in slots:
            self.slots.reset(slot)
            self.slots.unmap_pages(slot, 0, self.slots.slot_pages)
            self.images.release(slot)
            self.logit_table.forget(slot)
        if self.speculator is not None:
            self.speculator.release(slots)

    def admit(self, request) -> None:
        """Writes the request's prompt positions into its own slot's table."""
        n = request.num_prompt
        if request.positions is not None:
            positions = request.positions
        else:
            positions = np.repeat(np.arange(n, dtype=np.int32)[:, None], 4, axis=1)   # [n, 4]
            positions[:, 3] = 0
        self.slots.write_positions(request.slot, 0, positions)
        self.slots.set_delta(request.slot, int(request.rope_delta))
        if request.kv_pages is not None:
            self.slots.map_pages(request.slot, 0, request.kv_pages)
        self.images.admit(request)
        if self.speculator is not None:
            self.speculator.admit(request)

    # ------------------------------------------------------------ a step

    def step(self, released: list[int], plan: StepPlan) -> StepResult:
        guessed, keep = self._covering_guess(released, plan)
        if self.ahead is not None and (released or plan.admitted) and not keep:
            self.ahead.drop()
        self.release(released)
        for request in plan.admitted:
            self.admit(request)
        if plan.empty:
            return StepResult([])
        if guessed is not None:
            return self._step_after_guess(plan, guessed)
        drafts = self.speculator.propose(plan.decode) if self.speculator is not None else {}
        if self.use_graphs and plan.decode and not plan.prefill:
            return self._graph_step(plan, drafts)
        if self.ahead is not None:
            self.ahead.drop()
        n_rows, n_decode, n_logits, wants_logprobs = self._fill_inputs(plan, drafts)
        self.io.clear(n_rows, n_logits)
        self.io.upload()
        # Only decode rows, one per slot (no drafts): no row reads a cell another row writes.
        self.io.distinct_slots = n_decode == n_rows and not drafts
        self.model.decoder.record(self.io, self.act, self.slots, n_rows, n_decode, n_logits,
                                  inject=self.images.inject_for(plan, n_decode), adjust=self.logit_table)
        sampled = self.io.download_ids(n_logits).tolist() if n_logits else []
        return self._result(plan, drafts, sampled, wants_logprobs)

    def _covering_guess(self, released: list[int], plan: StepPlan):
        """The queued guess, where this step's plan is not the one guessed but the guess computed every
        decode row of it: a prompt chunk joined the decode rows, or requests were admitted or left
        (decode_ahead.py). None where the plain path applies (the guessed plan itself, taken by
        _graph_step) or nothing was guessed. Not with a speculator: its drafts would change the rows.
        The second value: keep the queue for _graph_step although requests were admitted (their prompts
        wait for a later step, STRATA_PREFILL_HOLD_MS, and the decode rows are the guessed ones: admission
        touches only the new slots, so the guess is the plan, and the next guess can be queued behind it)."""
        ahead = self.ahead
        if (ahead is None or not self.ahead_reuse or not ahead.queued() or not plan.decode
                or self.speculator is not None):
            return None, False
        if not (plan.prefill or released or plan.admitted):
            return None, False
        rows = [(r.slot, r.num_computed) for r in plan.decode]
        if not (plan.prefill or released) and ahead.guesses[0].expected == rows:
            return None, True
        return ahead.take_covering(rows), False

    def _step_after_guess(self, plan: StepPlan, guessed) -> StepResult:
        """A step whose decode rows a queued guess already computed: the device computes only the plan's
        prompt chunks (queued behind the guess), and the decode rows' tokens are read from the guess. The
        same tokens as computing every row now: each row is a pure function of its own sequence."""
        prompt_only = StepPlan(prefill=plan.prefill)
        sampled, wants = [], []
        if prompt_only.prefill:
            n_rows, n_decode, n_logits, wants = self._fill_inputs(prompt_only, {})
            self.io.clear(n_rows, n_logits)
            self.io.upload()
            self.io.distinct_slots = False
            self.model.decoder.record(self.io, self.act, self.slots, n_rows, n_decode, n_logits,
                                      inject=self.images.inject_for(prompt_only, n_decode), adjust=self.logit_table)
            sampled = self.io.download_ids(n_logits).tolist() if n_logits else []
        by_row = dict(zip(guessed.expected, self.ahead.tokens(guessed)))
        decoded = [by_row[(r.slot, r.num_computed)] for r in plan.decode]
        logprobs = None
        if any(w >= 0 for w in wants):      # only prompt rows may want them: a guess is launched for plain rows
            logprobs = [None] * len(decoded) + self._logprobs(wants, sampled)
        return _sampled(decoded + sampled, logprobs)

    def _graph_step(self, plan: StepPlan, drafts: dict) -> StepResult:
        """A decode-only step (verification rows included): a captured graph per row-count bucket,
        run one step ahead on CUDA when no slot drafts."""
        decode = plan.decode
        n = len(decode) + sum(len(d) for d in drafts.values()) if drafts else len(decode)
        bucket = self._bucket(n)
        graph = self._graph(bucket)
        # Plain: no row wants logprobs (they read this step's logits, which a guessed step overwrites).
        plain = not self.keep_logits and not any(r.params.logprobs for r in decode) and not self._speculating(plan)
        ahead = self.ahead if plain else None
        if ahead is None and self.ahead is not None:
            self.ahead.drop()
        rows = [(r.slot, r.num_computed) for r in decode] if ahead is not None else None
        launched = ahead.take(rows) if ahead is not None else None
        if launched is None:
            n_rows, _, n_logits, wants = self._fill_inputs(plan, drafts)
            self.io.clear(n_rows, n_logits)
            self.io.upload()
            if ahead is None:
                graph.launch()
                return self._result(plan, drafts, self.io.download_ids(n_logits).tolist(), wants)
            launched = ahead.launch(graph, n_logits)
        # Top the queue up to `depth` guesses: the d-th queued guess only where every request is sure
        # to be decoding d steps on.
        queued = ahead.queued()
        last = ahead.guesses[-1].expected if queued else rows
        for d in range(queued + 1, ahead.depth + 1):
            if not self._may_continue(plan, d):
                break
            ahead.launch_guess(graph, bucket, n, last)
            last = ahead.guesses[-1].expected
        return _sampled(ahead.tokens(launched))

    def _speculating(self, plan: StepPlan) -> bool:
        """Whether a request of this step may draft (a guessed plain step would then be wasted)."""
        return self.speculator is not None and any(may_draft(r) for r in plan.decode)

    def _result(self, plan: StepPlan, drafts: dict, sampled: list[int], wants: list[int]) -> StepResult:
        """Each sampled request's tokens: drafting slots keep their accepted run, and their rejected
        cells are forgotten (slot truncate)."""
        logprobs = self._logprobs(wants, sampled) if any(w >= 0 for w in wants) else None
        if not drafts:
            result = _sampled(sampled, logprobs)
            if self.speculator is not None:
                self.speculator.observe(plan, drafts, result.tokens, self.act, self.max_rows)
            return result
        tokens, groups, row = [], [] if logprobs is not None else None, 0
        for request in plan.sampled_requests():
            proposed = drafts.get(request, [])      # only decode requests draft
            width = 1 + len(proposed)
            run = sampled[row: row + width]
            if proposed:
                run = self.speculator.keep(request, proposed, run)
                if len(run) < width:
                    self.slots.truncate(request.slot, request.num_computed + len(run))
            tokens.append(run)
            if groups is not None:
                groups.append(logprobs[row: row + len(run)])
            row += width
        self.speculator.observe(plan, drafts, tokens, self.act, self.max_rows)
        return StepResult(tokens, groups, sum(len(d) for d in drafts.values()))

    def _may_continue(self, plan: StepPlan, steps: int = 1) -> bool:
        """Whether every request of this decode step may still be decoding `steps` steps on."""
        ctx = self.config.ctx
        for r in plan.decode:
            if (r.cancelled or len(r.output_ids) + steps >= r.params.max_tokens
                    or len(r.prompt_ids) + len(r.output_ids) + steps > ctx
                    or (r.rules is not None and not r.rules.static)):
                return False
        return True

    def _fill_inputs(self, plan: StepPlan, drafts: dict):
        """Decode rows first (a drafting slot's last token, then its drafts at the next cells), then
        prefill chunks; every decode row is sampled at its own position. The rows are gathered in
        lists and written with one numpy assignment per field (per-element writes cost more host
        time than the rest of a step, bench/host_step.py)."""
        io = self.io
        ids, cells, logit_rows = [], [], []
        for request in plan.decode:
            index, slot = request.num_computed, request.slot
            ids.append(request.token_at(index))
            cells.append((slot, index))
            logit_rows.append((len(cells) - 1, request, index + 1))
            for j, token in enumerate(drafts.get(request, ()) if drafts else (), 1):
                ids.append(token)
                cells.append((slot, index + j))
                logit_rows.append((len(cells) - 1, request, index + j + 1))
        row = n_decode = len(ids)
        if n_decode:
            io.ids[:n_decode] = ids
            io.rows[:n_decode] = cells
        for chunk in plan.prefill:
            request, n = chunk.request, chunk.length
            io.ids[row: row + n] = request.prompt_ids[chunk.start: chunk.start + n]
            io.rows[row: row + n, 0] = request.slot
            io.rows[row: row + n, 1] = np.arange(chunk.start, chunk.start + n, dtype=np.int32)
            row += n
            if chunk.completes_prompt:
                logit_rows.append((row - 1, request, request.num_prompt))
        wants = []
        if logit_rows:
            n_logits = len(logit_rows)
            params, adjust = [], []
            for r, request, position in logit_rows:
                p = request.params
                params.append((p.temperature, p.top_p, p.min_p, p.top_k, p.sampler_seed, position))
                if request.rules is None:
                    adjust.append(-1)
                else:
                    adjust.append(request.slot)
                    self.logit_table.write(request.slot, request.rules)
                wants.append(p.top_logprobs if p.logprobs else -1)
            io.logit_idx[:n_logits] = [r for r, _, _ in logit_rows]
            io.params[:n_logits] = params
            io.adjust[:n_logits] = adjust
        return row, n_decode, len(logit_rows), wants

    def _bucket(self, n_rows: int) -> int:
        return decode_bucket(n_rows, self.max_logits, self.speculator is not None, self.bucket_48)

    def _graph(self, bucket: int) -> F.Graph:
        """The decode graph for `bucket` rows, captured on first use (rows past the batch are padding)."""
        graph = self.graphs.get(bucket)
        if graph is None:
            # The graph serves every decode-only step of this bucket: its rows are of distinct slots
            # unless a speculator may add draft rows of one slot.
            self.io.distinct_slots = self.speculator is None
        capture = getattr(self.model.decoder, "capture", None)
        if graph is None and capture is not None:   # a layer split: a graph per stage (split_decoder.py)
            graph = self.graphs[bucket] = capture(self.io, self.act, self.slots, bucket, adjust=self.logit_table)
        if graph is None:
            self.ctx.graph_begin()
            try:
                self.model.decoder.record(self.io, self.act, self.slots, bucket, bucket, bucket,
                                          adjust=self.logit_table)
            except BaseException:
                try:
                    self.ctx.graph_end().close()
                except F.StrataError:
                    pass        # the failed recording was discarded; report the original error
                raise
            graph = self.ctx.graph_end()
            self.graphs[bucket] = graph
            log.debug("captured the decode graph for %d rows", bucket)
        return graph

    def _logprobs(self, wants: list[int], sampled: list[int]) -> list[TokenLogprob | None]:
        vocab = self.spec.vocab
        logits = self.act.buffer.to_numpy(np.float32, (len(sampled), vocab), self.act.logits)   # [n, vocab]
        out: list[TokenLogprob | None] = []
        for i, (top_n, token) in enumerate(zip(wants, sampled)):
            if top_n < 0:
                out.append(None)
                continue
            row = logits[i].astype(np.float64)
            lse = row.max() + np.log(np.exp(row - row.max()).sum())
            top = np.argsort(-row, kind="stable")[:top_n] if top_n else []
            out.append(TokenLogprob(token, float(row[token] - lse), [(int(t), float(row[t] - lse)) for t in top]))
        return out

    def close(self) -> None:
        if self.speculator is not None:
            self.speculator.close()
        if self.ahead is not None:
            self.ahead.close()
        for graph in self.graphs.values():
            graph.close()
        self.graphs.clear()
        self.images.close()
        self.logit_table.close()
        self.io.close()
        self.act.close()
        self.slots.close()
