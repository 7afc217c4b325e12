"""Matmul chains (strata_matmul_chain_begin / _end; docs/cuda_backend.md, "the one-row matmul chain").

Between begin and end only strata_matmul_ex and the end may be called on the context; the backend may
hold the calls and run them at the end. A decoder layer's o -> gate_up -> down, passing their activations
by hand-off (tests/kernels/layer_chain.py), gives the same bits in a chain as called one by one, on every
backend: the CPU runs each call at once; CUDA runs up to four one-row integer calls that read each other's
local emissions as ONE kernel with grid barriers (and anything else as before, in order); the fourth is the
next layer's qkv (STRATA_MATMUL_CHAIN=2), reading down's emission. An emission made by a pre-pass launch
(gate_up and down at 8B: STRATA_HANDOFF_PAIR=0 and STRATA_HANDOFF_LOCAL_PARTS=0 force it here) becomes a
phase of the same kernel. Recorded into a
graph, the chain replays with the same bits (the barrier words reset themselves). On CUDA at one row the
recorded chain is one kernel where every call can join it, so the comparison is of the chain kernel, not
of a fallback. The API refuses every other call while a chain is open, with a clear error, and the chain
stays open. Negative control: a chain whose down weights differ by one byte gives other bits, so the
comparison sees what the chain computes.
"""

import numpy as np
import pytest

from layer_chain import EPS, F, H, Q, QKV
from strata import _ffi as S

pytestmark = pytest.mark.exactness


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def outputs(chain):
    """gate_up's y and x after down."""
    return chain.gu.to_numpy(np.float32, (chain.n, 2 * F)), chain.x.to_numpy(np.float32, (chain.n, H))


def run(chain, chained: bool, qkv: bool = False):
    """o, gate_up and down (and with `qkv` the next layer's qkv) from the same inputs, in a matmul chain or
    one by one: gate_up's y, x after down (and qkv's y)."""
    chain.reset()
    if chained:
        S.matmul_chain_begin(chain.ctx)
    chain.layer_calls(qkv)
    if chained:
        S.matmul_chain_end(chain.ctx)
    if qkv:
        return (*outputs(chain), chain.qkv.to_numpy(np.float32, (chain.n, QKV)))
    return outputs(chain)


DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q4_1, S.DType.Q6_K, S.DType.F16]


def assert_same(a, b, what):
    for name, x, y in zip(("gate_up", "down", "qkv"), a, b):
        assert np.array_equal(bits(x), bits(y)), f"{name} output differs: {what}"


@pytest.mark.parametrize("n_rows", [1, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_chain_equals_calls_one_by_one(chain_of, dtype, n_rows):
    # F16 (not the integer path) and 3 rows are not held on CUDA: they run in order at once, and must give
    # the same bits too. Q6_K's gate_up emits through a pre-pass, a phase of the chain.
    layer = chain_of(dtype, n_rows)
    plain = run(layer, chained=False)
    chained = run(layer, chained=True)
    assert_same(plain, chained, f"{dtype.name}, {n_rows} rows")
    assert np.all(np.isfinite(chained[1]))


@pytest.mark.parametrize("n_rows", [1, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_chain_with_next_qkv_equals_calls_one_by_one(chain_of, dtype, n_rows):
    # STRATA_MATMUL_CHAIN=2's chain: the next layer's qkv (RMSNORM of down's local emission) held too
    layer = chain_of(dtype, n_rows)
    plain = run(layer, chained=False, qkv=True)
    chained = run(layer, chained=True, qkv=True)
    assert_same(plain, chained, f"{dtype.name}, {n_rows} rows, with qkv")
    assert np.all(np.isfinite(chained[2]))


@pytest.mark.parametrize("prepass", [False, True], ids=["local", "prepass"])
@pytest.mark.parametrize("qkv", [False, True], ids=["layer", "with-qkv"])
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K], ids=lambda d: d.name)
def test_recorded_chain_replays_with_the_same_bits(ctx, chain_of, dtype, backend, qkv, prepass, monkeypatch):
    # prepass: every emission through the pre-pass (no local one, gate_up not paired), each pre-pass a phase
    # of the chain kernel on CUDA (the 8B's route)
    if prepass:
        monkeypatch.setenv("STRATA_HANDOFF_LOCAL_PARTS", "0")
        monkeypatch.setenv("STRATA_HANDOFF_PAIR", "0")
    layer = chain_of(dtype, 1)
    plain = run(layer, chained=False, qkv=qkv)
    assert_same(plain, run(layer, chained=True, qkv=qkv), f"{dtype.name}, prepass {prepass}")
    layer.reset()
    ctx.graph_begin()
    S.matmul_chain_begin(ctx)
    layer.layer_calls(qkv)
    S.matmul_chain_end(ctx)
    graph = ctx.graph_end()
    try:
        if str(backend).startswith("cuda"):
            # o's own pre-pass (its x is not a hand-off here), then o, gate_up, down (and qkv), and any
            # pre-pass emissions, in one kernel: the chain kernel ran, not three to seven launches
            assert graph.kernel_count() == 2
        for _ in range(3):  # each replay crosses the barriers again from the words the last one left
            layer.reset()
            graph.launch()
            got = (*outputs(layer), layer.qkv.to_numpy(np.float32, (1, QKV))) if qkv else outputs(layer)
            assert_same(plain, got, f"{dtype.name}, prepass {prepass}, a replay of the recorded chain")
    finally:
        graph.close()


def test_negative_control_other_weights_change_bits(chain_of):
    """One byte of down's weights changed: the chain's output differs, so the comparison above sees what the
    chain computes (a chain that skipped or repeated a call would be caught the same way)."""
    layer = chain_of(S.DType.Q4_0, 1)
    chained = run(layer, chained=True)
    down = layer.w["down"]
    raw = down.to_numpy(np.uint8, (down.size,))
    raw[5] ^= 0x11  # a quant byte of the first block of row 0
    down.upload(raw)
    other = run(layer, chained=True)
    assert not np.array_equal(bits(chained[1]), bits(other[1]))
    assert np.array_equal(bits(chained[0]), bits(other[0]))  # gate_up comes before down: unchanged


def test_only_matmul_ex_inside_a_chain(ctx, chain_of):
    layer = chain_of(S.DType.Q4_0, 1)
    plain = run(layer, chained=False)
    layer.reset()
    S.matmul_chain_begin(ctx)
    try:
        with pytest.raises(S.StrataError, match="strata_matmul_chain_begin: a matmul chain is open"):
            S.matmul_chain_begin(ctx)
        with pytest.raises(S.StrataError, match="strata_rmsnorm: a matmul chain is open on this context"):
            S.rmsnorm(ctx, layer.x, 0, layer.ffn_norm, 0, layer.gu, 0, 1, H, EPS)
        with pytest.raises(S.StrataError, match="a matmul chain is open") as err:
            layer.x.to_numpy(np.float32, (1, H))
        assert err.value.status == S.Status.ERR_STATE
        with pytest.raises(S.StrataError, match="a matmul chain is open"):
            ctx.synchronize()
        with pytest.raises(S.StrataError, match="a matmul chain is open"):
            ctx.graph_begin()
        layer.layer_calls()  # the refusals left the chain open and its calls still allowed
    finally:
        S.matmul_chain_end(ctx)
    assert_same(plain, outputs(layer), "after refused calls inside the chain")
    with pytest.raises(S.StrataError, match="strata_matmul_chain_end: no matmul chain is open"):
        S.matmul_chain_end(ctx)


def test_a_failed_call_inside_a_chain_leaves_it_usable(ctx, chain_of):
    layer = chain_of(S.DType.Q4_0, 1)
    plain = run(layer, chained=False)
    layer.reset()
    po = layer.params(True)[0]
    S.matmul_chain_begin(ctx)
    try:
        S.matmul_ex(ctx, po, layer.att, 0, 1, Q, layer.w["o"], 0, layer.dtype, H, layer.x, 0)
        with pytest.raises(S.StrataError, match="k=100 is not a multiple of 32"):  # refused, nothing held
            S.matmul_ex(ctx, S.matmul_params(), layer.att, 0, 1, 100, layer.w["o"], 0, layer.dtype, H, layer.gu, 0)
        # the failed call cleared the hand-off record; another emitting call may follow
        S.matmul_ex(ctx, po, layer.att, 0, 1, Q, layer.w["o"], 0, layer.dtype, H, layer.gu, 0)
    finally:
        S.matmul_chain_end(ctx)
    assert_same(plain, run(layer, chained=False), "a chain after a failed one")
