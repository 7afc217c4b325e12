"""(gpu) Programmatic dependent launch (libstrata/src/cuda/cuda_pdl.cuh) changes no bit: a chain
of dependent kernels equals its float32 NumPy reference with STRATA_PDL on and off, eagerly and
replayed from a recorded graph many times (a kernel touching memory before its wait would read a
stale operand or race the next kernel's write, and show up here); the mini forward pass of
test_graphs.py (embed, rmsnorm, integer and tensor-core matmuls, rope, kv_store, attention,
elementwise, argmax, sample) gives the same bits either way; a bad STRATA_PDL value is a clear
error that enqueues nothing. PDL is a CUDA launch mode: the CPU backend does not read STRATA_PDL."""

import numpy as np
import pytest

from strata import _ffi as S
from test_graphs import MiniModel, same

pytestmark = pytest.mark.gpu

N = 1 << 18  # floats per buffer: several waves of blocks per kernel, so consecutive kernels overlap
ROUNDS = 60  # 3 kernels per round


def chain(ctx, a, b, c):
    """a = a + b; c = a * 0.5; b = c + a (a grows 2.5x a round), ROUNDS times: each kernel reads
    what the one before it wrote and writes what the one before it read."""
    for _ in range(ROUNDS):
        S.add(ctx, a, 0, b, 0, a, 0, N)
        S.scale(ctx, a, 0, c, 0, N, 0.5)
        S.add(ctx, c, 0, a, 0, b, 0, N)


def chain_reference(a, b):
    a, b = a.copy(), b.copy()
    for _ in range(ROUNDS):
        a = a + b
        c = a * np.float32(0.5)
        b = c + a
    return a, b, c


@pytest.mark.parametrize("pdl", ["1", "0"])
def test_dependent_chain_equals_reference(cuda_ctx, pdl, monkeypatch):
    monkeypatch.setenv("STRATA_PDL", pdl)
    rng = np.random.default_rng(11)
    a0 = (rng.standard_normal(N) * 1e-6).astype(np.float32)  # x2.5 a round: 2.5^60 * 1e-6 stays finite
    b0 = (rng.standard_normal(N) * 1e-6).astype(np.float32)
    want = chain_reference(a0, b0)
    bufs = [S.Buffer.from_array(cuda_ctx, a0), S.Buffer.from_array(cuda_ctx, b0), S.Buffer(cuda_ctx, 4 * N)]
    try:
        def check(what):
            got = [x.to_numpy(np.float32, (N,)) for x in bufs]
            for name, g, w in zip("abc", got, want):
                assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), f"STRATA_PDL={pdl}, {what}: {name} differs"

        chain(cuda_ctx, *bufs)
        check("eager")
        cuda_ctx.graph_begin()
        chain(cuda_ctx, *bufs)
        graph = cuda_ctx.graph_end()
        assert graph.kernel_count() == 3 * ROUNDS
        for i in range(10):
            bufs[0].upload(a0)
            bufs[1].upload(b0)
            bufs[2].fill(0)
            graph.launch()
            check(f"graph launch {i}")
        graph.close()
    finally:
        for x in bufs:
            x.close()


def run_mini(ctx, rng_seed):
    """The mini forward pass eagerly, then from a graph launched 5 times: every output, in order."""
    m = MiniModel(ctx, np.random.default_rng(rng_seed))
    try:
        inputs = ([3, 7, 11], [(0, 4), (1, 0), (0, 9)], [1, 2, 3])
        m.set_inputs(*inputs)
        m.forward()
        outs = [m.outputs()]
        ctx.graph_begin()
        m.forward()
        graph = ctx.graph_end()
        for _ in range(5):
            m.set_inputs(*inputs)
            graph.launch()
            outs.append(m.outputs())
        graph.close()
        return outs
    finally:
        m.close()


def test_mini_forward_same_bits_with_and_without_pdl(cuda_ctx, monkeypatch):
    monkeypatch.setenv("STRATA_PDL", "0")
    off = run_mini(cuda_ctx, 5)
    monkeypatch.setenv("STRATA_PDL", "1")
    on = run_mini(cuda_ctx, 5)
    for i, (x, y) in enumerate(zip(off, on)):
        assert same(x, y), f"run {i} (0 = eager, then graph launches) differs between STRATA_PDL=0 and 1"
        assert same(x, off[0]), f"STRATA_PDL=0 run {i} differs from the eager run"


def test_bad_value_is_a_clear_error(cuda_ctx, monkeypatch):
    x = S.Buffer.from_array(cuda_ctx, np.arange(4, dtype=np.float32))
    try:
        monkeypatch.setenv("STRATA_PDL", "yes")
        with pytest.raises(S.StrataError) as e:
            S.add(cuda_ctx, x, 0, x, 0, x, 0, 4)
        assert e.value.status == S.Status.ERR_INVALID_ARGUMENT and "STRATA_PDL=yes" in e.value.message
        assert "0" in e.value.message and "1" in e.value.message
        monkeypatch.delenv("STRATA_PDL")
        assert np.array_equal(x.to_numpy(np.float32, (4,)), np.arange(4, dtype=np.float32))  # nothing ran
        S.add(cuda_ctx, x, 0, x, 0, x, 0, 4)  # and the context still works
        assert np.array_equal(x.to_numpy(np.float32, (4,)), 2 * np.arange(4, dtype=np.float32))
    finally:
        x.close()
