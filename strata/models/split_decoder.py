"""The layer split at run time: one forward pass over stages, each a device context holding only its layers.

A stage is a StageDecoder (the ordinary Decoder's blocks over a contiguous
range of layers, renumbered from 0) on its own context, with its own KV and
position tables (SplitSlots) and, from the second stage on, its own step
inputs and activations. The first stage embeds; each stage runs its layers;
the hidden rows pass to the next stage through host memory (download waits
for the stage's work, upload is ordered before the next stage's kernels);
the last stage applies the output norm and head. Logit adjustment and
sampling then run on the first stage's context, where the runner's step
inputs, logit table and logprob reads live — same kernels, same bits.

Exactness (docs/layer-split.md): every kernel is batch-invariant and runs on
the same rows with the same operands as on one device; a transfer copies bits.
So a request's tokens on any split equal one device's. Decode steps replay
captured graphs, one per stage and one for sampling on the first context
(SplitGraph), with the host hand-overs between their launches: a host
transfer cannot be part of a graph. Prefill steps run eagerly, as on one device.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace

import numpy as np

from .. import _ffi as F
from .batch_groups import record_grouped
from .decoder import Activations, Decoder, _norm_params
from .spec import ModelSpec
from .weights import WeightArena


class StageDecoder(Decoder):
    """The Decoder's attention and MLP blocks for one stage's layers (renumbered from 0).

    Only the first stage has the embedding and only the last the output norm and head;
    `spec.n_layers` is the stage's layer count."""

    def __init__(self, ctx: F.Context, spec: ModelSpec, weights: WeightArena, first: bool, last: bool):
        self.ctx, self.spec, self.weights = ctx, spec, weights
        self.first, self.last = first, last
        w = weights
        self.embedding = w["token_embd.weight"] if first else None
        self.output = (w["token_embd.weight"] if spec.tied_output else w["output.weight"]) if last else None
        self.output_norm = w["output_norm.weight"] if last else None
        self.freq_factors = w.get("rope_freqs.weight")
        self.layers = [self._layer(i) for i in range(spec.n_layers)]
        self.rope_q = F.rope_params(spec.rope_mode, spec.n_heads, spec.head_dim, spec.rope_dim, spec.rope_base,
                                    spec.rope_freq_scale, spec.rope_sections)
        self.rope_k = F.rope_params(spec.rope_mode, spec.n_kv_heads, spec.head_dim, spec.rope_dim, spec.rope_base,
                                    spec.rope_freq_scale, spec.rope_sections)
        self.scale = 1.0 / math.sqrt(spec.head_dim)       # as Decoder: the same bits
        self.silu_down = F.matmul_params(F.MatmulPrologue.SILU_MUL, accumulate=True)
        self.head_params = _norm_params(self.output_norm, spec.rms_eps) if last else None


class SplitSlots:
    """One paged slot set per stage (each with that stage's layers), mirrored: the same pool size,
    page ids, page tables, positions and lengths on every stage, because every write reaches all.

    The runner, the engine's page reservations and the prefix cache (docs/kv_pool.md) use it as they
    use one F.Slots: page p of the pool is page p on every stage, each stage holding its layers' K/V
    of it. A page's bytes ([layer][K|V][kv_head][cell][head_dim]) are the stages' pages one after
    the other, layer-major as on one device, so slot files read and write the same layout."""

    def __init__(self, stages: list["Stage"], n_slots: int, n_ctx: int, n_pages: int | None = None):
        self.parts: list[F.Slots] = []
        try:
            for st in stages:
                sp = st.decoder.spec
                self.parts.append(F.Slots(st.ctx, n_slots, sp.n_layers, n_ctx, sp.n_kv_heads, sp.head_dim,
                                          n_pages=n_pages))
        except BaseException:
            self.close()
            raise
        first = self.parts[0]
        self.groups = 1               # batch groups (batch_groups.py); the runner sets it
        self.n_slots, self.n_ctx, self.slot_pages, self.n_pages = (first.n_slots, first.n_ctx, first.slot_pages,
                                                                   first.n_pages)
        self.n_layers = sum(part.n_layers for part in self.parts)

    def pages(self) -> tuple[int, int]:
        return self.parts[0].pages()

    def map_pages(self, slot: int, first: int, pages) -> None:
        for part in self.parts:
            part.map_pages(slot, first, pages)

    def unmap_pages(self, slot: int, first: int, n: int) -> None:
        for part in self.parts:
            part.unmap_pages(slot, first, n)

    def read_pages(self, slot: int, first: int = 0, n: int | None = None):
        return self.parts[0].read_pages(slot, first, n)

    def copy_page(self, dst: int, src: int) -> None:
        for part in self.parts:
            part.copy_page(dst, src)

    def page_bytes(self) -> int:
        return sum(part.page_bytes() for part in self.parts)

    def read_page(self, page: int, out=None) -> bytes | None:
        """As F.Slots.read_page: the stages' bytes one after the other, into `out` when given."""
        if out is None:
            return b"".join(part.read_page(page) for part in self.parts)
        view = memoryview(out).cast("B")
        if len(view) != self.page_bytes():
            raise ValueError(f"a page of this split holds {self.page_bytes()} bytes, got a buffer of {len(view)}")
        offset = 0
        for part in self.parts:
            size = part.page_bytes()
            part.read_page(page, out=view[offset:offset + size])
            offset += size
        return None

    def write_page(self, page: int, data: bytes) -> None:
        if len(data) != self.page_bytes():
            raise ValueError(f"a page of this split holds {self.page_bytes()} bytes, got {len(data)}")
        offset = 0
        for part in self.parts:
            size = part.page_bytes()
            part.write_page(page, data[offset:offset + size])
            offset += size

    def reset(self, slot: int) -> None:
        for part in self.parts:
            part.reset(slot)

    def truncate(self, slot: int, n_tokens: int) -> None:
        for part in self.parts:
            part.truncate(slot, n_tokens)

    def length(self, slot: int) -> int:
        return self.parts[0].length(slot)

    def write_positions(self, slot: int, first_row: int, positions) -> None:
        for part in self.parts:
            part.write_positions(slot, first_row, positions)

    def read_positions(self, slot: int, first_row: int, n_rows: int):
        return self.parts[0].read_positions(slot, first_row, n_rows)

    def set_delta(self, slot: int, delta: int) -> None:
        for part in self.parts:
            part.set_delta(slot, delta)

    def debug_share_table(self, slot: int, target: int) -> None:
        for part in self.parts:
            part.debug_share_table(slot, target)

    def close(self) -> None:
        for part in self.parts:
            part.close()


class Stage:
    """One device context, its weights and decoder, and (from the second stage on) step buffers per runner."""

    def __init__(self, ctx: F.Context, decoder: StageDecoder, weights: WeightArena, owns_ctx: bool):
        self.ctx, self.decoder, self.weights, self.owns_ctx = ctx, decoder, weights, owns_ctx
        self._buffers: dict[tuple, tuple] = {}   # (id(runner's StepIO), group) -> (weakref to it, StepIO, Activations)

    def buffers_for(self, io, full_spec: ModelSpec, group: int | None = None):
        """This stage's StepIO and Activations for the runner whose step inputs are `io`, shaped as
        its own. One pair per runner: a runner's captured graphs keep their addresses while another
        runner (another engine over the same model) uses the model; one more per batch group."""
        entry = self._buffers.get((id(io), group))
        if entry is not None and entry[0]() is io:
            return entry[1], entry[2]
        self._sweep()
        # The runner's StepIO class: the layout is the engine's, not this module's.
        sio = type(io)(self.ctx, io.max_rows, io.max_logits)
        sact = Activations(self.ctx, full_spec, io.max_rows, io.max_logits)
        self._buffers[(id(io), group)] = (weakref.ref(io), sio, sact)
        return sio, sact

    def _sweep(self) -> None:
        """Frees the buffers of runners that are gone or closed (their graphs were closed with them)."""
        for key, (ref, sio, sact) in list(self._buffers.items()):
            io = ref()
            if io is None or io.buffer._ptr is None:
                del self._buffers[key]
                for thing in (sio, sact):
                    try:
                        thing.close()
                    except F.StrataError:
                        pass      # a graph not yet closed still uses it: the library keeps it until then

    def close(self) -> None:
        for _, sio, sact in self._buffers.values():
            sio.close()
            sact.close()
        self._buffers.clear()
        self.weights.close()
        if self.owns_ctx:
            self.ctx.close()


class SplitDecoder:
    """Decoder.record's contract over several stages; `make_slots` gives the runner the per-stage KV
    and `capture` its decode graphs."""

    def __init__(self, spec: ModelSpec, stages: list[Stage]):
        self.spec, self.stages = spec, stages
        self.ctx = stages[0].ctx
        self.boundaries = []          # the first layer of every stage after the first (global numbering)
        start = 0
        for stage in stages[:-1]:
            start += stage.decoder.spec.n_layers
            self.boundaries.append(start)

    def make_slots(self, n_slots: int, n_ctx: int, n_pages: int | None = None, groups: int = 1) -> SplitSlots:
        """The runner's slot set: paged with `n_pages` pool pages on every stage (None: fixed regions),
        its slots in `groups` batch groups (batch_groups.py)."""
        slots = SplitSlots(self.stages, n_slots, n_ctx, n_pages)
        slots.groups = groups
        return slots

    def pool_fit(self) -> tuple[ModelSpec, int]:
        """(a spec whose n_layers is the layers on the binding device, that device's free bytes): the
        KV pool is mirrored on every stage, so it fits where free memory per layer of KV is least.
        Stages on one device (cpu, or cuda:0 twice) share its memory and count together."""
        layers: dict[str, int] = {}
        free: dict[str, int] = {}
        for stage in self.stages:
            name = stage.ctx.device
            layers[name] = layers.get(name, 0) + stage.decoder.spec.n_layers
            free[name] = min(free.get(name, 1 << 62), stage.ctx.info().free_bytes)
        name = min(layers, key=lambda d: free[d] / layers[d])
        return replace(self.spec, n_layers=layers[name]), free[name]

    def record(self, io, act: Activations, slots: SplitSlots, n_rows: int, n_decode: int, n_logits: int,
               inject=None, adjust=None) -> None:
        """As Decoder.record, eagerly; `io`, `act` and `adjust` live on the first stage's context."""
        if slots.groups > 1:
            return record_grouped(self, io, act, slots, n_rows, n_decode, n_logits, inject, adjust, slots.groups)
        last_act = act
        for index in range(len(self.stages)):
            sio, sact = self._enter(index, io, act, last_act, n_rows)
            self._stage_work(index, sio, sact, slots.parts[index], n_rows, n_decode, n_logits, inject)
            last_act = sact
        if n_logits == 0:             # prefill chunks that complete no prompt: nothing to sample
            return
        self._logits_back(last_act, act, n_logits)
        self._sample(io, act, n_logits, adjust)

    def capture(self, io, act: Activations, slots: SplitSlots, n_rows: int, adjust=None) -> "SplitGraph":
        """The decode graphs for `n_rows` rows (every row decodes and is sampled, as the runner's
        one-device graph): one per stage, recorded on its context, and one for adjustment and
        sampling on the first. SplitGraph.launch replays them with the hand-overs between."""
        graphs: list[F.Graph] = []
        try:
            for index, stage in enumerate(self.stages):
                sio, sact = (io, act) if index == 0 else stage.buffers_for(io, self.spec)
                part = slots.parts[index]
                graphs.append(_record(stage.ctx, lambda: self._stage_work(index, sio, sact, part, n_rows, n_rows,
                                                                          n_rows, None)))
            graphs.append(_record(self.ctx, lambda: self._sample(io, act, n_rows, adjust)))
        except BaseException:
            for graph in graphs:
                graph.close()
            raise
        return SplitGraph(self, io, act, graphs, n_rows)

    def _enter(self, index: int, io, act: Activations, prev_act: Activations, n_rows: int):
        """Stage `index`'s step inputs and activations, ready to run: after the first stage, a copy of
        this step's inputs and the previous stage's hidden rows."""
        if index == 0:
            return io, act
        sio, sact = self.stages[index].buffers_for(io, self.spec)
        sio.host[:] = io.host             # rows, ids, sample rows and params of this step
        sio.upload()
        self._hand_over(prev_act, sact, n_rows)
        return sio, sact

    def _stage_work(self, index: int, sio, sact: Activations, part: F.Slots, n_rows: int, n_decode: int,
                    n_logits: int, inject) -> None:
        """One stage's kernels on its context: positions, the embedding (first), its layers, and the
        output norm and head (last, when rows are sampled)."""
        s, stage = self.spec, self.stages[index]
        d, ctx = stage.decoder, stage.ctx
        if n_decode:
            F.positions_decode(ctx, part, sio.buffer, sio.rows_off, n_decode)
        if d.first:
            e = d.embedding
            F.embed(ctx, e.buffer, e.offset, e.dtype, s.vocab, s.hidden, sio.buffer, sio.ids_off, n_rows,
                    sact.buffer, sact.x)
            if inject is not None:
                inject(sact.buffer, sact.x)
        for layer_index, layer in enumerate(d.layers):
            d._attention_block(layer_index, layer, sio, sact, part, n_rows)
            d._mlp_block(layer, sact, n_rows)
        if d.last and n_logits:
            A, o = sact.buffer, d.output
            F.gather_rows(ctx, A, sact.x, n_rows, s.hidden * 4, sio.buffer, sio.logit_idx_off, n_logits, A, sact.xs)
            F.matmul_ex(ctx, d.head_params, A, sact.xs, n_logits, s.hidden, o.buffer, o.offset, o.dtype, o.rows,
                        A, sact.logits)

    def _logits_back(self, last_act: Activations, act: Activations, n_logits: int) -> None:
        """The logits back to the first context (sampling, logprobs)."""
        if last_act is not act:
            _transfer(last_act.buffer, last_act.logits, act.buffer, act.logits, n_logits * self.spec.vocab * 4)

    def _sample(self, io, act: Activations, n_logits: int, adjust) -> None:
        s, ctx = self.spec, self.ctx
        if adjust is not None:
            F.logits_adjust(ctx, act.buffer, act.logits, n_logits, s.vocab, io.buffer, io.adjust_off, adjust.buffer,
                            0, adjust.n_slots)
        F.sample(ctx, act.buffer, act.logits, n_logits, s.vocab, io.buffer, io.params_off, io.buffer, io.out_off)

    def _hand_over(self, src: Activations, dst: Activations, n_rows: int) -> None:
        """The hidden rows [0, n_rows) of one stage into the next stage's input rows."""
        _transfer(src.buffer, src.x, dst.buffer, dst.x, n_rows * self.spec.hidden * 4)

    def close(self) -> None:
        for stage in reversed(self.stages):
            stage.close()


class SplitGraph:
    """A split's decode step for one row count: the stages' graphs launched in order, each stage's
    step inputs copied and the hidden rows handed over between launches, then the logits back and
    the sampling graph on the first context. The runner uses it as one F.Graph (launch, close)."""

    def __init__(self, decoder: SplitDecoder, io, act: Activations, graphs: list[F.Graph], n_rows: int):
        self.decoder, self.io, self.act, self.graphs, self.n_rows = decoder, io, act, graphs, n_rows

    def launch(self) -> None:
        d, io, act = self.decoder, self.io, self.act
        last_act = act
        for index, graph in enumerate(self.graphs[:-1]):
            _, last_act = d._enter(index, io, act, last_act, self.n_rows)
            graph.launch()
        d._logits_back(last_act, act, self.n_rows)
        self.graphs[-1].launch()

    def close(self) -> None:
        for graph in self.graphs:
            graph.close()
        self.graphs = []


def _record(ctx: F.Context, work) -> F.Graph:
    """`work`'s calls on `ctx` recorded as a graph (a failed recording is discarded, the error kept)."""
    ctx.graph_begin()
    try:
        work()
    except BaseException:
        try:
            ctx.graph_end().close()
        except F.StrataError:
            pass
        raise
    return ctx.graph_end()


def _transfer(src: F.Buffer, src_off: int, dst: F.Buffer, dst_off: int, n_bytes: int) -> None:
    """Bytes from one context's buffer to another's through host memory (the download waits for src's work)."""
    staging = np.empty(n_bytes, dtype=np.uint8)
    src.download(staging, src_off)
    dst.upload(staging, dst_off)


def stage_spec(spec: ModelSpec, n_layers: int) -> ModelSpec:
    return replace(spec, n_layers=n_layers)
