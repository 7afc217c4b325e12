"""Shared by the CUDA attention kernel tests (test_attention_decode.py, test_attention_prompt.py): the
bit view, the CUDA-only skip, and the check that a recorded attention graph replays, with new queries and
rows each time, the bits of the legacy kernel (STRATA_ATTENTION=legacy) run eagerly — with eager calls
between replays, so that kernels keeping state between calls (the decode kernel's arrival counters) are
seen to leave it clean."""

import os

import numpy as np
import pytest

from strata import _ffi as S


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def cuda_only(backend):
    if backend == "cpu":
        pytest.skip("STRATA_ATTENTION selects between CUDA kernels")


def assert_graph_replays_legacy(ctx, slots, layer, monkeypatch, steps, n_heads, head_dim, scale):
    """steps: (queries [n_rows, n_heads * head_dim] float32, rows array) per replay; every step has the
    same n_rows. Records one default-routed attention call and replays it twice over the steps."""
    monkeypatch.delenv("STRATA_ATTENTION", raising=False)
    n_rows, width = steps[0][0].shape[0], n_heads * head_dim
    bq = S.Buffer(ctx, n_rows * width * 4)
    br = S.Buffer(ctx, n_rows * 8)
    out = S.Buffer(ctx, n_rows * width * 4)

    def enqueue():
        S.attention(ctx, slots, layer, bq, 0, width, n_rows, n_heads, br, 0, scale, out, 0)

    def result():
        return bits(out.to_numpy(np.float32, (n_rows, width)))

    graph = None
    try:
        want = []
        monkeypatch.setenv("STRATA_ATTENTION", "legacy")
        for x, r in steps:
            bq.upload(x)
            br.upload(r)
            enqueue()
            want.append(result())
        monkeypatch.delenv("STRATA_ATTENTION")
        ctx.graph_begin()
        enqueue()
        graph = ctx.graph_end()
        for _ in range(2):
            for (x, r), w in zip(steps, want):
                bq.upload(x)
                br.upload(r)
                graph.launch()
                assert np.array_equal(result(), w), "the graph replay differs from the legacy kernel"
                enqueue()  # eager calls between replays share the kernel's state
                assert np.array_equal(result(), w), "an eager call after a replay differs"
    finally:
        if graph is not None:
            graph.close()
        for b in (bq, br, out):
            b.close()
    assert "STRATA_ATTENTION" not in os.environ
