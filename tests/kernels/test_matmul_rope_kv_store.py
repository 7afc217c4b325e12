"""strata_matmul_rope_kv_store (the qkv projection's matmul_ex, then rope_kv_store on its rows, in one
call) against the two separate calls on the same backend, bit for bit: the rotated q and k and the v
left in the rows, and every byte of the KV page pool.

On CUDA a one-row call on the integer path with an F16 pool and ADJACENT rotation runs as one kernel
(the rotation and the F16 store in the one-row dot kernel's epilogue, libstrata/src/cuda/
cuda_rope_epilogue.cuh; STRATA_MATMUL_ROPE=1, set for every test here); the other cases (NEOX-style
HALF pairs, int8 pools, several rows, STRATA_MATMUL_ROPE=0, the default) run the two launches, and the
CPU composes the two calls. Cases: the weight
types of the integer path, the RMSNORM prologue with a bias, partial rotation, Llama 3 freq_factors,
cells 0 / 31 / 32 / 1000, a padding row (no rotation, no store), an unmapped page (rotated, not
stored), the hand-off's handoff_use, and a recorded graph. Negative control: the same call at another
position gives other bits, so the comparison sees the rotation the fused kernel applied.
"""

import numpy as np
import pytest

from kernel_refs import buffer_of, make_weights, paged_slots, rows_array, run_recorded
from strata import _ffi as S

pytestmark = pytest.mark.exactness

P = S.PAGE_CELLS
N_CTX, LAYER, EPS = 1040, 1, 1e-5
HIDDEN = 512

# name, mode, n_heads, n_kv, head_dim, rot_dim, freq_factors
SHAPES = [
    ("llama-g4", S.RopeMode.ADJACENT, 8, 2, 64, 64, False),
    ("llama3-ff", S.RopeMode.ADJACENT, 4, 2, 128, 128, True),
    ("partial", S.RopeMode.ADJACENT, 6, 3, 64, 32, False),
    ("neox", S.RopeMode.HALF, 8, 2, 64, 64, False),   # CUDA: the two launches
]
DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K, S.DType.F16]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


class Setup:
    """Weights, a norm and bias, x rows, a paged pool with a scrambled page table, and the rows' cells."""

    def __init__(self, ctx, rng, shape, dtype, pairs, kv_dtype="f16", unmapped=None):
        _, mode, n_heads, n_kv, hd, rot, use_ff = shape
        self.ctx, self.dtype, self.pairs, self.kv_dtype, self.unmapped = ctx, dtype, pairs, kv_dtype, unmapped
        self.n_heads, self.n_kv, self.hd = n_heads, n_kv, hd
        self.n_out = (n_heads + 2 * n_kv) * hd
        self.n_slots = 3
        self.slot_pages = -(-N_CTX // P)
        self.n_pages = self.n_slots * self.slot_pages
        self.page_table = rng.permutation(self.n_pages).reshape(self.n_slots, self.slot_pages).astype(np.int32)
        self.tables = rng.integers(0, 3000, (self.n_slots, N_CTX, 4)).astype(np.int32)
        self.w = make_weights(rng, dtype, self.n_out, HIDDEN)[0]
        self.norm = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
        self.bias = (0.1 * rng.standard_normal(self.n_out)).astype(np.float32)
        self.x = rng.standard_normal((len(pairs), HIDDEN), dtype=np.float32)
        self.ff = rng.uniform(1, 8, rot // 2).astype(np.float32) if use_ff else None
        self.pq = S.rope_params(mode, n_heads, hd, rot, 10000.0, 1.0)
        self.pk = S.rope_params(mode, n_kv, hd, rot, 10000.0, 1.0)

    def slots(self):
        return paged_slots(self.ctx, self.n_slots, 2, N_CTX, self.n_kv, self.hd, self.page_table, self.tables,
                           self.kv_dtype, self.unmapped)

    def run(self, fused, graph=False, handoff=False, pairs=None):
        """(qkv rows after the call, every page's bytes)."""
        ctx, n, pairs = self.ctx, len(self.pairs), pairs or self.pairs
        with self.slots() as slots:
            wb = S.Buffer.from_array(ctx, self.w)
            nb, bb = S.Buffer.from_array(ctx, self.norm), S.Buffer.from_array(ctx, self.bias)
            xb = S.Buffer.from_array(ctx, self.x)
            yb, y_off = buffer_of(ctx, np.zeros((n, self.n_out), np.float32), 16)
            rb, r_off = buffer_of(ctx, rows_array(pairs), 8)
            fb = S.Buffer.from_array(ctx, self.ff) if self.ff is not None else None
            params = S.matmul_params(S.MatmulPrologue.RMSNORM, eps=EPS, norm_weight=nb, bias=bb,
                                     handoff_use=handoff)
            d = int(self.dtype)

            def call():
                if handoff:  # a producer that prepares x for the qkv call (the decoder's down)
                    S.matmul_ex(ctx, S.matmul_params(handoff_emit=True, handoff_prologue=S.MatmulPrologue.RMSNORM,
                                                     handoff_dtype=d, handoff_norm_weight=nb),
                                pb, 0, n, HIDDEN, pw, 0, S.DType.Q8_0, HIDDEN, xb, 0)
                if fused:
                    S.matmul_rope_kv_store(ctx, params, xb, 0, n, HIDDEN, wb, 0, d, self.n_out, yb, y_off, self.pq,
                                           self.pk, slots, LAYER, rb, r_off, fb, 0)
                else:
                    S.matmul_ex(ctx, params, xb, 0, n, HIDDEN, wb, 0, d, self.n_out, yb, y_off)
                    S.rope_kv_store(ctx, self.pq, self.pk, slots, LAYER, yb, y_off, self.n_out, n, rb, r_off, fb, 0)

            if handoff:
                rng = np.random.default_rng(5)
                pw = S.Buffer.from_array(ctx, make_weights(rng, S.DType.Q8_0, HIDDEN, HIDDEN)[0])
                pb = S.Buffer.from_array(ctx, rng.standard_normal((n, HIDDEN), dtype=np.float32))
            if graph:
                run_recorded(ctx, call)
            else:
                call()
            qkv = yb.to_numpy(np.float32, (n, self.n_out), y_off)
            pool = b"".join(slots.read_page(p) for p in range(self.n_pages))
            for b in (wb, nb, bb, xb, yb, rb, fb) + ((pw, pb) if handoff else ()):
                if b is not None:
                    b.close()
        return qkv, pool


@pytest.fixture(autouse=True)
def one_kernel(monkeypatch):
    """The one-kernel form (off by default, strata/env.py STRATA_MATMUL_ROPE) in every fused call here."""
    monkeypatch.setenv("STRATA_MATMUL_ROPE", "1")


def check_same(a, b, what):
    (qkv_a, pool_a), (qkv_b, pool_b) = a, b
    assert np.array_equal(bits(qkv_a), bits(qkv_b)), f"{what}: the qkv rows differ"
    assert pool_a == pool_b, f"{what}: the KV pool differs"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s[0])
@pytest.mark.parametrize("cell", [0, 31, 32, 1000])
def test_one_row_equals_separate_calls(ctx, rng, shape, dtype, cell):
    setup = Setup(ctx, rng, shape, dtype, [(1, cell)])
    check_same(setup.run(True), setup.run(False), f"{shape[0]} {dtype.name} cell {cell}")


@pytest.mark.parametrize("kv_dtype", ["f16", "int8"])
@pytest.mark.parametrize("pairs", [[(-1, 5)], [(0, 40), (2, 7), (-1, 3)]], ids=["padding", "three-rows"])
def test_padding_and_several_rows(ctx, rng, pairs, kv_dtype):
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, pairs, kv_dtype=kv_dtype)
    check_same(setup.run(True), setup.run(False), f"{pairs} {kv_dtype}")


def test_unmapped_page_is_rotated_not_stored(ctx, rng):
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, [(2, 300)], unmapped=(2, 300))
    fused, separate = setup.run(True), setup.run(False)
    check_same(fused, separate, "unmapped page")
    assert fused[1] == setup.run(True, pairs=[(-1, 300)])[1], "a cell of an unmapped page was stored"


def test_int8_pool_one_row(ctx, rng):
    setup = Setup(ctx, rng, SHAPES[1], S.DType.Q4_0, [(0, 77)], kv_dtype="int8")
    check_same(setup.run(True), setup.run(False), "int8 pool")


def test_with_the_handoff(ctx, rng):
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, [(1, 9)])
    check_same(setup.run(True, handoff=True), setup.run(False, handoff=True), "handoff_use")


def test_switch_off_gives_the_same_bits(ctx, rng, monkeypatch):
    setup = Setup(ctx, rng, SHAPES[1], S.DType.Q4_K, [(0, 513)])
    on = setup.run(True)
    monkeypatch.setenv("STRATA_MATMUL_ROPE", "0")
    check_same(on, setup.run(True), "STRATA_MATMUL_ROPE=0 vs 1")


@pytest.mark.parametrize("value", ["yes", "2", "on"])
def test_unknown_switch_value_is_refused(ctx, backend, rng, monkeypatch, value):
    """STRATA_MATMUL_ROPE takes 0 or 1 (libstrata/src/core/env_switch.h); before 2026-12-06 any other value
    silently meant 0, so a typo timed the two launches in an A/B of the one kernel."""
    if backend == "cpu":
        pytest.skip("the switch is the CUDA backend's")
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, [(1, 9)])
    monkeypatch.setenv("STRATA_MATMUL_ROPE", value)
    with pytest.raises(S.StrataError, match=rf"STRATA_MATMUL_ROPE={value}: expected 0"):
        setup.run(True)


def test_negative_control_position_matters(ctx, rng):
    """The comparison sees the rotation: another cell's position gives other q/k bits and other pages."""
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, [(1, 32)])
    a, b = setup.run(True), setup.run(True, pairs=[(1, 33)])
    assert not np.array_equal(bits(a[0]), bits(b[0])), "the rotation did not depend on the row's cell"
    assert a[1] != b[1]


@pytest.mark.gpu
def test_in_a_recorded_graph(ctx, backend, rng):
    if backend == "cpu":
        pytest.skip("graphs record CUDA launches")
    setup = Setup(ctx, rng, SHAPES[1], S.DType.Q4_0, [(2, 200)])
    check_same(setup.run(True, graph=True), setup.run(False), "recorded fused vs separate calls")


def test_checks(ctx, rng):
    setup = Setup(ctx, rng, SHAPES[0], S.DType.Q4_0, [(0, 1)])
    with setup.slots() as slots:
        wb = S.Buffer.from_array(ctx, setup.w)
        xb = S.Buffer.from_array(ctx, setup.x)
        yb = S.Buffer(ctx, setup.n_out * 4)
        rb = S.Buffer.from_array(ctx, rows_array([(0, 1)]))
        plain = S.matmul_params()
        d = int(S.DType.Q4_0)
        with pytest.raises(S.StrataError, match="qkv row's width"):
            S.matmul_rope_kv_store(ctx, plain, xb, 0, 1, HIDDEN, wb, 0, d, setup.n_out - 64, yb, 0, setup.pq,
                                   setup.pk, slots, LAYER, rb, 0)
        with pytest.raises(S.StrataError, match="handoff_emit"):
            S.matmul_rope_kv_store(ctx, S.matmul_params(handoff_emit=True, handoff_dtype=d), xb, 0, 1, HIDDEN, wb,
                                   0, d, setup.n_out, yb, 0, setup.pq, setup.pk, slots, LAYER, rb, 0)
        with pytest.raises(S.StrataError, match="k_params.n_heads=3 must equal"):
            S.matmul_rope_kv_store(ctx, plain, xb, 0, 1, HIDDEN, wb, 0, d, setup.n_out, yb, 0, setup.pq,
                                   S.rope_params(S.RopeMode.ADJACENT, 3, 64), slots, LAYER, rb, 0)
        with pytest.raises(S.StrataError, match="layer"):
            S.matmul_rope_kv_store(ctx, plain, xb, 0, 1, HIDDEN, wb, 0, d, setup.n_out, yb, 0, setup.pq, setup.pk,
                                   slots, 7, rb, 0)
        with pytest.raises(S.StrataError, match="rows"):   # rows overlapping y
            S.matmul_rope_kv_store(ctx, plain, xb, 0, 1, HIDDEN, wb, 0, d, setup.n_out, yb, 0, setup.pq, setup.pk,
                                   slots, LAYER, yb, 0)
        S.matmul_rope_kv_store(ctx, plain, xb, 0, 1, HIDDEN, wb, 0, d, setup.n_out, yb, 0, setup.pq, setup.pk,
                               slots, LAYER, rb, 0)
        for b in (wb, xb, yb, rb):
            b.close()
