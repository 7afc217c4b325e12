"""The activation hand-off between matmuls (strata_matmul_params.handoff_*; docs/cuda_backend.md).

A decoder layer's chain o -> gate_up -> down -> the next qkv, each call preparing the next one's
activations (handoff_emit) and reading what the previous one prepared (handoff_use), gives the same
bits as the chain without it, on every backend (the CPU ignores the flags; CUDA's integer path rounds
the next call's int8 blocks in the one-row dot kernel's epilogue, from its own outputs (STRATA_HANDOFF=local)
or by the CTA completing each chunk (1), or in a pre-pass launch after the producing kernel (prepass), for
every weight type and row count. The API checks
that a handoff_use call reads exactly what the latest emitting call prepared, and refuses bad
requests with clear errors. Negative control (CUDA): a consumer that reads blocks prepared before
its x was overwritten gives other bits, so the comparison would catch a kernel reading wrong blocks.
"""

import numpy as np
import pytest

from layer_chain import EPS, F, H, P, Q
from strata import _ffi as S

pytestmark = pytest.mark.exactness


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K, S.DType.Q4_1, S.DType.F16]


@pytest.mark.parametrize("mode", ["local", "local-nopair", "1", "prepass"])
@pytest.mark.parametrize("n_rows", [1, 2, 5, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_chain_with_handoff_equals_chain_without(chain_of, dtype, n_rows, mode, monkeypatch):
    # local-nopair: gate_up's SILU_MUL emission by the pre-pass launch (STRATA_HANDOFF_PAIR=0), not by
    # the 64-output CTAs that hold both halves of their elements
    monkeypatch.setenv("STRATA_HANDOFF", mode.split("-")[0])
    monkeypatch.setenv("STRATA_HANDOFF_PAIR", "0" if mode.endswith("nopair") else "1")
    chain = chain_of(dtype, n_rows)
    plain = chain.run(handoff=False)
    handed = chain.run(handoff=True)
    for name, a, b in zip(("o", "gate_up", "down", "qkv"), plain, handed):
        assert np.array_equal(bits(a), bits(b)), f"{name} output differs with the hand-off ({dtype.name}, {n_rows} rows)"
    assert np.all(np.isfinite(handed[3]))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["local", "1"])
@pytest.mark.parametrize("n_rows", [1, 5])
def test_negative_control_stale_blocks_change_bits(ctx, chain_of, n_rows, mode, backend, monkeypatch):
    """x overwritten after o prepared gate_up's blocks (a broken contract, on purpose): on CUDA gate_up
    reads the stale blocks, so its output differs from the plain chain on the new x."""
    if not str(backend).startswith("cuda"):
        pytest.skip("the CPU ignores the hand-off (nothing prepared to go stale)")
    monkeypatch.setenv("STRATA_HANDOFF", mode)
    chain = chain_of(S.DType.Q4_0, n_rows)
    other = np.random.default_rng(5).standard_normal((n_rows, H), dtype=np.float32)

    def overwrite(c):
        c.x.upload(other)

    def plain_with_overwrite():
        c = chain
        c.att.upload(c.att0)
        c.x.upload(c.x0)
        po, pgu, _, _ = c.params(False)
        S.matmul_ex(c.ctx, po, c.att, 0, n_rows, Q, c.w["o"], 0, c.dtype, H, c.x, 0)
        c.x.upload(other)
        S.matmul_ex(c.ctx, pgu, c.x, 0, n_rows, H, c.w["gu"], 0, c.dtype, 2 * F, c.gu, 0)
        return c.gu.to_numpy(np.float32, (n_rows, 2 * F))

    want = plain_with_overwrite()
    got = chain.run(handoff=True, tamper=overwrite)[1]
    assert not np.array_equal(bits(want), bits(got)), "gate_up ignored the prepared blocks"


@pytest.mark.gpu
def test_negative_control_stale_silu_mul_blocks_change_bits(ctx, chain_of, backend, monkeypatch):
    """gate_up's [gate | up] overwritten after gate_up prepared down's blocks (its CTAs that hold both
    halves, STRATA_HANDOFF_PAIR): down reads the stale blocks, so it differs from down on the new rows."""
    if not str(backend).startswith("cuda"):
        pytest.skip("the CPU ignores the hand-off (nothing prepared to go stale)")
    monkeypatch.setenv("STRATA_HANDOFF", "local")
    monkeypatch.setenv("STRATA_HANDOFF_PAIR", "1")
    c = chain_of(S.DType.Q4_0, 1)
    other = np.random.default_rng(6).standard_normal((1, 2 * F), dtype=np.float32)
    po, pgu, pd, _ = c.params(True)
    plain_down = c.params(False)[2]
    outputs = []
    for params_down, stale in ((pd, True), (plain_down, False)):
        c.att.upload(c.att0)
        c.x.upload(c.x0)
        S.matmul_ex(c.ctx, po, c.att, 0, 1, Q, c.w["o"], 0, c.dtype, H, c.x, 0)
        S.matmul_ex(c.ctx, pgu, c.x, 0, 1, H, c.w["gu"], 0, c.dtype, 2 * F, c.gu, 0)
        c.gu.upload(other)
        S.matmul_ex(c.ctx, params_down, c.gu, 0, 1, F, c.w["down"], 0, c.dtype, H, c.x, 0)
        outputs.append(c.x.to_numpy(np.float32, (1, H)))
    assert not np.array_equal(bits(outputs[0]), bits(outputs[1])), "down ignored the blocks gate_up prepared"


def expect_invalid(fn, *words):
    with pytest.raises(S.StrataError) as exc:
        fn()
    assert exc.value.status == S.Status.ERR_INVALID_ARGUMENT
    for w in words:
        assert w in exc.value.message, exc.value.message


def test_use_is_checked_against_the_latest_emit(ctx, chain_of):
    c = chain_of(S.DType.Q4_0, 3)
    d, n = c.dtype, 3
    use = S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=c.ffn_norm, handoff_use=True)
    gu = lambda params, off=0: S.matmul_ex(c.ctx, params, c.x, off, n - off // (4 * H), H, c.w["gu"], 0, d,
                                           2 * F, c.gu, 0)
    bad = lambda: S.matmul_ex(c.ctx, S.matmul_params(7), c.x, 0, n, H, c.w["gu"], 0, d, 2 * F, c.gu, 0)
    expect_invalid(bad, "prologue=7")  # the context may be shared with earlier tests: this clears any hand-off
    expect_invalid(lambda: gu(use), "handoff_use", "no earlier call")
    po, _, _, _ = c.params(True)

    def emit():
        S.matmul_ex(c.ctx, po, c.att, 0, n, Q, c.w["o"], 0, d, H, c.x, 0)

    emit()
    gu(use)
    gu(use)  # every call of the chain may read it until the next emit
    other_norm = S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=c.attn_norm, handoff_use=True)
    mismatches = [
        (lambda: gu(other_norm), "norm_weight differs"),
        (lambda: gu(use, 4 * H), "x is not that call's y"),
        (lambda: S.matmul_ex(c.ctx, S.matmul_params(handoff_use=True), c.x, 0, n, H, c.w["gu"], 0, d, 2 * F, c.gu, 0),
         "prologue differs"),
        (lambda: S.matmul_ex(c.ctx, use, c.x, 0, n, 256, c.w["qkv"], 0, d, 32, c.gu, 0), "k differs"),
    ]
    for call, words in mismatches:
        emit()
        expect_invalid(call, "handoff_use", words)
        # A failed matmul_ex (this one included) leaves no hand-off behind.
        expect_invalid(lambda: gu(use), "no earlier call")
    emit()
    expect_invalid(bad, "prologue=7")
    expect_invalid(lambda: gu(use), "no earlier call")


def test_bad_emit_requests_are_refused(ctx, chain_of):
    c = chain_of(S.DType.Q4_0, 2)
    d, n = c.dtype, 2

    def emit(n_out=H, y_stride=0, **kw):
        params = S.matmul_params(accumulate=True, y_row_stride=y_stride, handoff_emit=True, **kw)
        S.matmul_ex(c.ctx, params, c.att, 0, n, Q, c.w["o"], 0, d, n_out, c.gu, 0)

    expect_invalid(lambda: emit(handoff_prologue=5), "handoff_prologue=5")
    expect_invalid(lambda: emit(handoff_dtype=99), "handoff_dtype")
    expect_invalid(lambda: emit(y_stride=H + 8), "dense y")
    expect_invalid(lambda: emit(n_out=96, handoff_prologue=P.SILU_MUL), "not a multiple of 32")
    expect_invalid(lambda: emit(n_out=97, handoff_prologue=P.SILU_MUL), "even n_out")
    expect_invalid(lambda: emit(handoff_prologue=P.RMSNORM), "handoff_norm_weight is NULL")
    expect_invalid(lambda: emit(handoff_norm_weight=c.ffn_norm), "handoff_prologue is not RMSNORM")
    emit(n_out=H, handoff_prologue=P.RMSNORM, handoff_norm_weight=c.ffn_norm)  # a good one still works
