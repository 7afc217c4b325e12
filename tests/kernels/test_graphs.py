"""Graphs: a recorded mini forward pass launched twice equals eager execution
bit for bit and follows new inputs written into the same buffers; recording
refuses synchronous calls, a failed call poisons the recording, and graphs
keep their buffers and slot sets alive."""

import numpy as np
import pytest

from kernel_refs import make_weights, rows_array
from strata import _ffi as S

VOCAB, DIM, HEADS, KV_HEADS, HD, N_ROWS = 50, 64, 4, 2, 16, 3


class MiniModel:
    """Buffers for embed -> rmsnorm -> q/k/v matmuls -> rope -> kv_store ->
    attention -> matmul(+residual) -> silu_mul -> logits -> argmax, sample."""

    def __init__(self, ctx, rng):
        self.ctx = ctx
        self.slots = S.Slots(ctx, 2, 1, 16, KV_HEADS, HD)
        for s in range(2):
            self.slots.write_positions(s, 0, np.repeat(np.arange(16, dtype=np.int32)[:, None] * 3, 4, axis=1))
        emb, _ = make_weights(rng, S.DType.Q8_0, VOCAB, DIM)
        wqkv, _ = make_weights(rng, S.DType.Q4_1, (HEADS + 2 * KV_HEADS) * HD, DIM)
        wo, _ = make_weights(rng, S.DType.Q4_K, DIM, HEADS * HD * 4)
        self.emb = S.Buffer.from_array(ctx, emb)
        self.wqkv = S.Buffer.from_array(ctx, wqkv)
        self.wo = S.Buffer.from_array(ctx, wo)
        self.norm = S.Buffer.from_array(ctx, rng.standard_normal(DIM, dtype=np.float32))
        self.ids = S.Buffer(ctx, 4 * N_ROWS)
        self.rows = S.Buffer(ctx, 8 * N_ROWS)
        self.params = S.Buffer(ctx, 32 * N_ROWS)
        self.h = S.Buffer(ctx, 4 * N_ROWS * DIM)
        self.x = S.Buffer(ctx, 4 * N_ROWS * DIM)
        self.qkv = S.Buffer(ctx, 4 * N_ROWS * (HEADS + 2 * KV_HEADS) * HD)
        self.att = S.Buffer(ctx, 4 * N_ROWS * HEADS * HD * 4)
        # The o-projection reads 4·HEADS·HD values a row of `att` and the forward writes only half of
        # them: zero the rest, or the outputs depend on what the allocation held before (a test that
        # compares two models' runs, test_pdl.py, would compare leftovers).
        self.att.fill(0)
        self.out_ids = S.Buffer(ctx, 8 * N_ROWS)
        self.rope = S.rope_params(S.RopeMode.HALF, HEADS + KV_HEADS, HD)

    def set_inputs(self, ids, pairs, seeds):
        self.ids.upload(np.asarray(ids, np.int32))
        self.rows.upload(rows_array(pairs))
        p = np.zeros(N_ROWS, S.SAMPLING_PARAMS_DTYPE)
        p["temperature"], p["top_p"], p["seed"], p["position"] = 0.8, 0.9, seeds, [r[1] for r in pairs]
        self.params.upload(p)

    def forward(self):
        c, n = self.ctx, N_ROWS
        qkv_w = (HEADS + 2 * KV_HEADS) * HD
        S.embed(c, self.emb, 0, S.DType.Q8_0, VOCAB, DIM, self.ids, 0, n, self.h, 0)
        S.rmsnorm(c, self.h, 0, self.norm, 0, self.x, 0, n, DIM, 1e-5)
        S.matmul(c, self.x, 0, n, DIM, self.wqkv, 0, S.DType.Q4_1, qkv_w, None, 0, self.qkv, 0)
        S.rope(c, self.rope, self.qkv, 0, qkv_w, n, self.slots, self.rows, 0)
        k_off, v_off = 4 * HEADS * HD, 4 * (HEADS + KV_HEADS) * HD
        S.kv_store(c, self.slots, 0, self.qkv, k_off, qkv_w, self.qkv, v_off, qkv_w, self.rows, 0, n)
        S.attention(c, self.slots, 0, self.qkv, 0, qkv_w, n, HEADS, self.rows, 0, 0.25, self.att, 0)
        S.silu_mul(c, self.att, 0, HEADS * HD, self.att, 0, HEADS * HD, self.att, 4 * n * HEADS * HD, n, HEADS * HD)
        S.gelu(c, self.att, 0, self.att, 0, n * HEADS * HD)
        S.matmul(c, self.att, 0, n, HEADS * HD * 4, self.wo, 0, S.DType.Q4_K, DIM, None, 0, self.h, 0, True)
        S.add(c, self.h, 0, self.x, 0, self.h, 0, n * DIM)
        S.matmul(c, self.h, 0, n, DIM, self.emb, 0, S.DType.Q8_0, VOCAB, None, 0, self.x, 0)
        S.argmax(c, self.x, 0, n, VOCAB, self.out_ids, 0)
        S.sample(c, self.x, 0, n, VOCAB, self.params, 0, self.out_ids, 4 * n)
        self.h.fill(0, 0, 16)
        self.h.copy_from(self.x, 16, 0, 32)

    def outputs(self):
        return (self.x.to_numpy(np.float32, (N_ROWS * VOCAB,)), self.h.to_numpy(np.float32, (N_ROWS * DIM,)),
                self.out_ids.to_numpy(np.int32, (2 * N_ROWS,)))

    def close(self):
        for name in ("emb", "wqkv", "wo", "norm", "ids", "rows", "params", "h", "x", "qkv", "att", "out_ids", "slots"):
            getattr(self, name).close()


def same(a, b):
    return all(np.array_equal(x.view(np.uint32), y.view(np.uint32)) for x, y in zip(a, b))


def test_graph_equals_eager(ctx, rng):
    m = MiniModel(ctx, rng)
    try:
        m.set_inputs([3, 7, 11], [(0, 4), (1, 0), (0, 9)], [1, 2, 3])
        m.forward()
        eager = m.outputs()
        ctx.graph_begin()
        m.forward()
        graph = ctx.graph_end()
        m.set_inputs([0, 0, 0], [(-1, 0), (-1, 0), (-1, 0)], [0, 0, 0])
        m.forward()  # scribble over everything eagerly
        m.set_inputs([3, 7, 11], [(0, 4), (1, 0), (0, 9)], [1, 2, 3])
        graph.launch()
        assert same(m.outputs(), eager)
        graph.launch()
        assert same(m.outputs(), eager)
        # New inputs in the same buffers: the graph follows them.
        m.set_inputs([5, 5, 40], [(1, 3), (0, 2), (1, 15)], [9, 8, 7])
        m.forward()
        eager2 = m.outputs()
        assert not same(eager2, eager)
        m.set_inputs([5, 5, 40], [(1, 3), (0, 2), (1, 15)], [9, 8, 7])
        graph.launch()
        assert same(m.outputs(), eager2)
        graph.close()
    finally:
        m.close()


def test_recording_refuses_synchronous_calls(ctx):
    buf = S.Buffer(ctx, 64)
    slots = S.Slots(ctx, 1, 1, 4, 1, 2)
    ctx.graph_begin()
    for name, call in [("upload", lambda: buf.upload(b"abcd")), ("download", lambda: buf.to_numpy(np.uint8, (4,))),
                       ("synchronize", ctx.synchronize), ("nested begin", ctx.graph_begin),
                       ("slots reset", lambda: slots.reset(0)), ("positions", lambda: slots.write_positions(0, 0, [[1, 1, 1, 1]])),
                       ("buffer create", lambda: S.Buffer(ctx, 8)), ("buffer destroy", buf.close)]:
        with pytest.raises(S.StrataError) as e:
            call()
        assert e.value.status == S.Status.ERR_STATE, name
        assert "record" in e.value.message, name
    with pytest.raises(S.StrataError) as e:
        ctx.graph_end()
    assert e.value.status == S.Status.ERR_STATE and "discarded" in e.value.message and "strata_buffer_upload" in e.value.message
    buf.upload(b"abcd")  # eager again
    assert bytes(buf.to_numpy(np.uint8, (4,))) == b"abcd"
    slots.close()
    buf.close()


def test_failed_kernel_poisons_recording(ctx):
    x = S.Buffer(ctx, 64)
    ctx.graph_begin()
    x.fill(1)
    with pytest.raises(S.StrataError):
        S.add(ctx, x, 0, x, 2, x, 0, 4)  # misaligned
    with pytest.raises(S.StrataError) as e:
        ctx.graph_end()
    assert e.value.status == S.Status.ERR_STATE and "strata_add" in e.value.message and "offset 2" in e.value.message
    with pytest.raises(S.StrataError) as e:
        ctx.graph_end()
    assert e.value.status == S.Status.ERR_STATE and "not recording" in e.value.message
    x.close()


def test_graph_keeps_buffers_and_slots_alive(ctx):
    a, b = S.Buffer(ctx, 64), S.Buffer(ctx, 64)
    slots = S.Slots(ctx, 1, 1, 4, 1, 2)
    unused = S.Slots(ctx, 1, 0, 4, 1, 2)
    rows = S.Buffer.from_array(ctx, rows_array([(0, 0)]))
    ctx.graph_begin()
    a.fill(3)
    S.positions_decode(ctx, slots, rows, 0, 1)
    assert unused.length(0) == 0 and b.size == 64  # host queries are fine and pin nothing
    graph = ctx.graph_end()
    unused.close()
    for obj in (a, slots, rows):
        with pytest.raises(S.StrataError) as e:
            obj.close()
        assert e.value.status == S.Status.ERR_STATE and "graph" in e.value.message
    ctx.graph_begin()
    with pytest.raises(S.StrataError) as e:
        graph.launch()  # not while recording
    assert e.value.status == S.Status.ERR_STATE
    with pytest.raises(S.StrataError):
        ctx.graph_end()
    b.close()  # not referenced: fine
    graph.launch()
    assert (a.to_numpy(np.uint8, (64,)) == 3).all()
    graph.close()
    graph.close()  # idempotent in Python
    for obj in (a, slots, rows):
        obj.close()
    with pytest.raises(S.StrataError) as e:
        graph.launch()
    assert "after close" in e.value.message


def test_graph_counts_its_kernels(ctx):
    """Graph.kernel_count: the kernels one launch runs (fills and copies are not kernels on CUDA)."""
    x = S.Buffer(ctx, 64)
    ctx.graph_begin()
    S.add(ctx, x, 0, x, 0, x, 0, 4)
    S.add(ctx, x, 16, x, 16, x, 16, 4)
    graph = ctx.graph_end()
    assert graph.kernel_count() == 2
    graph.close()
    with pytest.raises(S.StrataError):
        graph.kernel_count()  # closed
    x.close()
