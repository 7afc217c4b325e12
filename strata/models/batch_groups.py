"""Batch groups on a layer split (`--batch-groups N`): a step's rows in N groups pipelined over the stages.

The slots are split into N contiguous ranges; a step's rows go to their
slot's group, in their order (decode rows first, then prefill chunks, as in
the runner's step inputs), each group with its own step inputs and
activations on every stage. The groups are launched as a pipeline: stage s
gets group g once stage s-1 has finished it, and each stage's launches are
queued on its own stream, so while group g runs on stage s, group g+1 can run
on stage s-1. The logits of every group return to the first context in the
step's original order, then adjustment and sampling run once for the whole
step, as without groups.

Exactness (docs/layer-split.md): every kernel is batch-invariant, and a slot's
rows (its prefill chunk, its verification rows) stay in one group in their
order, so each row meets the same operands as in the whole batch: the tokens
equal one device's for any group count. Steps with groups run eagerly.
"""

from __future__ import annotations

import numpy as np

from .. import _ffi as F


def group_of_slots(n_slots: int, n_groups: int) -> np.ndarray:
    """Each slot's group: contiguous ranges of slots, as even as the count allows."""
    return (np.arange(n_slots) * n_groups) // n_slots       # [n_slots]


def split_inputs(io, n_rows: int, n_decode: int, n_logits: int, groups: np.ndarray, n_groups: int):
    """Per group: (rows of the step it holds, its decode-row count, the step's logit indices it holds)."""
    slots = io.rows[:n_rows, 0]
    row_group = groups[slots]                                  # [n_rows]
    logit_rows = io.logit_idx[:n_logits]
    out = []
    for g in range(n_groups):
        rows = np.flatnonzero(row_group == g)
        logits = np.flatnonzero(row_group[logit_rows] == g) if n_logits else np.zeros(0, dtype=np.int64)
        out.append((rows, int(np.count_nonzero(rows < n_decode)), logits))
    return out


def fill_group_io(gio, io, rows: np.ndarray, logits: np.ndarray) -> None:
    """`gio` := the step inputs of these rows of `io` (logit indices renumbered to the group's rows)."""
    n, m = len(rows), len(logits)
    gio.clear(n, m)
    gio.ids[:n] = io.ids[rows]
    gio.rows[:n] = io.rows[rows]
    if m:
        where = np.full(io.max_rows, -1, dtype=np.int64)
        where[rows] = np.arange(n)
        gio.logit_idx[:m] = where[io.logit_idx[logits]]
        gio.params[:m] = io.params[logits]
        gio.adjust[:m] = io.adjust[logits]
    gio.upload()


def record_grouped(decoder, io, act, slots, n_rows: int, n_decode: int, n_logits: int, inject, adjust,
                   n_groups: int):
    """SplitDecoder.record with the rows in `n_groups` groups pipelined over the stages."""
    if inject is not None:      # image rows: the split serves text-only GGUF models (layer_split.py)
        raise ValueError("batch groups take no image rows")
    spec, stages = decoder.spec, decoder.stages
    groups = group_of_slots(slots.n_slots, n_groups)
    plan = [p for p in split_inputs(io, n_rows, n_decode, n_logits, groups, n_groups) if len(p[0])]
    n_stages = len(stages)
    bufs = [[stage.buffers_for(io, spec, group=g) for stage in stages] for g in range(len(plan))]
    # Wave t runs group g on stage t - g; later stages first, so each launch's hand-over waits only
    # for work queued earlier and every stage's stream holds the next group behind the current one.
    for wave in range(len(plan) + n_stages - 1):
        for s in reversed(range(n_stages)):
            g = wave - s
            if not 0 <= g < len(plan):
                continue
            rows, n_dec, logits = plan[g]
            sio, sact = bufs[g][s]
            fill_group_io(sio, io, rows, logits)
            if s:
                decoder._hand_over(bufs[g][s - 1][1], sact, len(rows))
            decoder._stage_work(s, sio, sact, slots.parts[s], len(rows), n_dec, len(logits), None)
    if n_logits == 0:
        return
    # The logits of every group, in the step's order, into the first context's logit rows.
    vocab = spec.vocab
    gathered = np.empty((n_logits, vocab), dtype=np.float32)   # [n_logits, vocab]
    for g, (rows, _, logits) in enumerate(plan):
        if len(logits):
            last = bufs[g][-1][1]
            gathered[logits] = last.buffer.to_numpy(np.float32, (len(logits), vocab), last.logits)
    act.buffer.upload(gathered.view(np.uint8).reshape(-1), act.logits)
    decoder._sample(io, act, n_logits, adjust)

