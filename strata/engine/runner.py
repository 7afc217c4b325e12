"""ModelRunner: executes one scheduled step on the device.

It owns the slot set (KV caches and position tables), the step buffers and
the decoder's activations. A step resets released slots, prepares admitted
ones (their position tables and rope delta — only their own regions), fills
the step inputs, runs the forward pass (a captured graph per batch-size
bucket for decode-only steps, eager otherwise), and returns the sampled ids.
Runs in the engine's worker thread; nothing here touches anyio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .. import _ffi as F
from ..config import EngineConfig
from .decode_ahead import DecodeAhead
from .image_rows import ImageRows
from .output import TokenLogprob
from .scheduler import StepPlan
from .step_io import StepIO

log = logging.getLogger("strata.runner")


@dataclass
class StepResult:
    sampled: list[int]                            # aligned with plan.sampled_requests()
    logprobs: list[TokenLogprob | None] | None = None


class ModelRunner:
    def __init__(self, ctx: F.Context, model, config: EngineConfig):
        from ..models.decoder import Activations

        spec = model.spec
        self.ctx, self.model, self.config, self.spec = ctx, model, config, spec
        self.slots = F.Slots(ctx, config.batch, spec.n_layers, config.ctx, spec.n_kv_heads, spec.head_dim)
        self.max_rows = config.chunk + config.batch
        self.max_logits = config.batch
        self.io = StepIO(ctx, self.max_rows, self.max_logits)
        self.act = Activations(ctx, spec, self.max_rows, self.max_logits)
        self.graphs: dict[int, F.Graph] = {}
        self.use_graphs = config.graphs
        self.images = ImageRows(ctx, spec.hidden)      # per-slot image embeddings, injected in prefill
        on_gpu = ctx.info().backend == F.Backend.CUDA
        self.ahead = DecodeAhead(ctx, self.io, self.max_logits) if on_gpu and config.graphs else None
        # Tests that read act.logits after each step set this: a guessed next step would overwrite them.
        self.keep_logits = False

    # ------------------------------------------------------------ slot state

    def release(self, slots: list[int]) -> None:
        for slot in slots:
            self.slots.reset(slot)
            self.images.release(slot)

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
        self.images.admit(request)

    # ------------------------------------------------------------ a step

    def step(self, released: list[int], plan: StepPlan) -> StepResult:
        if self.ahead is not None and (released or plan.admitted):
            self.ahead.drop()
        self.release(released)
        for request in plan.admitted:
            self.admit(request)
        if plan.empty:
            return StepResult([])
        if self.use_graphs and plan.decode and not plan.prefill:
            return self._graph_step(plan)
        if self.ahead is not None:
            self.ahead.drop()
        n_rows, n_logits, wants_logprobs = self._fill_inputs(plan)
        self.io.clear(n_rows, n_logits)
        self.io.upload()
        self.model.decoder.record(self.io, self.act, self.slots, n_rows, len(plan.decode), n_logits,
                                  inject=self.images.inject_for(plan))
        sampled = self.io.download_ids(n_logits).tolist() if n_logits else []
        logprobs = self._logprobs(wants_logprobs, sampled) if any(w >= 0 for w in wants_logprobs) else None
        return StepResult(sampled, logprobs)

    def _graph_step(self, plan: StepPlan) -> StepResult:
        """A decode-only step: a captured graph per batch-size bucket, run one step ahead on CUDA."""
        n = len(plan.decode)
        bucket = self._bucket(n)
        graph = self._graph(bucket)
        wants = [r.params.top_logprobs if r.params.logprobs else -1 for r in plan.decode]
        ahead = self.ahead if all(w < 0 for w in wants) and not self.keep_logits else None
        if ahead is None and self.ahead is not None:
            self.ahead.drop()
        rows = [(r.slot, r.num_computed) for r in plan.decode]
        launched = ahead.take(rows) if ahead is not None else None
        if launched is None:
            n_rows, n_logits, wants = self._fill_inputs(plan)
            self.io.clear(n_rows, n_logits)
            self.io.upload()
            if ahead is None:
                graph.launch()
                sampled = self.io.download_ids(n_logits).tolist()
                logprobs = self._logprobs(wants, sampled) if any(w >= 0 for w in wants) else None
                return StepResult(sampled, logprobs)
            launched = ahead.launch(graph, n_logits)
        if self._may_continue(plan):
            ahead.launch_guess(graph, bucket, n, rows)
        return StepResult(ahead.tokens(launched))

    def _may_continue(self, plan: StepPlan) -> bool:
        """Whether every request of this decode step may still be decoding in the next one."""
        return all(not r.cancelled and len(r.output_ids) + 1 < r.params.max_tokens
                   and r.num_tokens + 1 <= self.config.ctx for r in plan.decode)

    def _fill_inputs(self, plan: StepPlan):
        io = self.io
        row, logit_rows, wants = 0, [], []
        for request in plan.decode:
            index = request.num_computed
            io.ids[row] = request.token_at(index)
            io.rows[row] = (request.slot, index)
            logit_rows.append((row, request, index + 1))
            row += 1
        for chunk in plan.prefill:
            request, n = chunk.request, chunk.length
            io.ids[row: row + n] = request.prompt_ids[chunk.start: chunk.start + n]
            io.rows[row: row + n, 0] = request.slot
            io.rows[row: row + n, 1] = np.arange(chunk.start, chunk.start + n, dtype=np.int32)
            row += n
            if chunk.completes_prompt:
                logit_rows.append((row - 1, request, request.num_prompt))
        for i, (r, request, position) in enumerate(logit_rows):
            p = request.params
            io.logit_idx[i] = r
            io.params[i] = (p.temperature, p.top_p, p.min_p, p.top_k, p.seed, position)
            wants.append(p.top_logprobs if p.logprobs else -1)
        return row, len(logit_rows), wants

    def _bucket(self, n_rows: int) -> int:
        bucket = 1
        while bucket < n_rows:
            bucket *= 2
        return min(bucket, self.max_logits)

    def _graph(self, bucket: int) -> F.Graph:
        """The decode graph for `bucket` rows, captured on first use (rows past the batch are padding)."""
        graph = self.graphs.get(bucket)
        if graph is None:
            self.ctx.graph_begin()
            try:
                self.model.decoder.record(self.io, self.act, self.slots, bucket, bucket, bucket)
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
        if self.ahead is not None:
            self.ahead.close()
        for graph in self.graphs.values():
            graph.close()
        self.graphs.clear()
        self.images.close()
        self.io.close()
        self.act.close()
        self.slots.close()
