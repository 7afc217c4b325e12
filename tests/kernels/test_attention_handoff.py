"""strata_attention_handoff: attention whose output rows are also prepared as the o projection's input
(the activation hand-off, docs/cuda_backend.md), so the o matmul (handoff_use) runs no pre-pass.

Against attention followed by a plain o matmul on the same backend, bit for bit: the attention output
and o's y, for 1 to 300 rows (CUDA: the decode kernel rounds the int8 blocks of its own output for up
to 255 rows of up to STRATA_HANDOFF_ATTENTION_MAX_K = 4,096 values; wider rows and the prompt kernel's
launches are followed by the pre-pass, and so is the 8B's row under a lower limit), GQA groups 1, 3, 4 and 8, head
dims 64 and 128, F16 and int8 pools, a sliding window, padding rows, every integer weight type and F16
(no integer path: nothing is prepared and o reads x), also in a recorded graph. The API checks its
arguments (a bad handoff_dtype, a k that is not whole blocks) and what the consumer may read.
Negative control (CUDA): out overwritten after the call, the consumer still reads the blocks of the
original output, so the comparison sees the prepared blocks rather than x.
"""

import numpy as np
import pytest

from kernel_refs import make_weights, paged_slots, rows_array, run_recorded
from strata import _ffi as S

pytestmark = pytest.mark.exactness

N_CTX, LAYER, N_OUT = 320, 1, 256
SHAPES = [(9, 3, 64), (8, 2, 128), (8, 1, 128), (2, 2, 64), (16, 2, 128), (32, 8, 128)]  # 135M, G=4, G=8, G=1, 1B-wide, 8B
FILLED = [319, 40, 256, 0]   # the last written cell of slots 0..3


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def row_pairs(n_rows):
    """{slot, index} rows over the four slots (contexts of one and two chunks), with padding rows."""
    pool = [(0, 319), (1, 40), (2, 256), (3, 0), (0, 100), (-1, 3), (2, 31), (0, 255), (1, 32), (5, 1)]
    return [pool[(3 * r) % len(pool)] for r in range(n_rows)]


class Setup:
    """A slot set holding random K/V, random queries and o weights; `run` attends and projects."""

    def __init__(self, ctx, rng, shape, kv_dtype, n_rows, dtype, window=0):
        self.ctx, self.n_rows, self.dtype, self.window = ctx, n_rows, dtype, window
        self.n_heads, self.n_kv, self.hd = shape
        self.k = self.n_heads * self.hd
        self.pairs = row_pairs(n_rows)
        slot_pages = -(-N_CTX // S.PAGE_CELLS)
        self.page_table = rng.permutation(4 * slot_pages).reshape(4, slot_pages).astype(np.int32)
        self.tables = np.zeros((4, N_CTX, 4), np.int32)
        self.kv_dtype = kv_dtype
        w = self.n_kv * self.hd
        self.fill = [(rng.standard_normal((n + 1, w), dtype=np.float32) * 2,
                      rng.standard_normal((n + 1, w), dtype=np.float32)) for n in FILLED]
        self.q = rng.standard_normal((n_rows, self.k), dtype=np.float32)
        self.w = make_weights(rng, dtype, N_OUT, self.k)[0]
        self.y0 = rng.standard_normal((n_rows, N_OUT), dtype=np.float32)
        self.scale = float(1 / np.sqrt(self.hd))

    def slots(self):
        ctx, w = self.ctx, self.n_kv * self.hd
        slots = paged_slots(ctx, 4, 2, N_CTX, self.n_kv, self.hd, self.page_table, self.tables, self.kv_dtype)
        for s, (k, v) in enumerate(self.fill):
            bk, bv = S.Buffer.from_array(ctx, k), S.Buffer.from_array(ctx, v)
            br = S.Buffer.from_array(ctx, rows_array([(s, j) for j in range(len(k))]))
            S.kv_store(ctx, slots, LAYER, bk, 0, w, bv, 0, w, br, 0, len(k))
            for b in (bk, bv, br):
                b.close()
        return slots

    def run(self, handoff, graph=False, tamper=None):
        """(attention output, o's y) from the same state; `tamper(out)` runs between the two calls."""
        ctx, n, k, d = self.ctx, self.n_rows, self.k, int(self.dtype)
        with self.slots() as slots:
            q, rows = S.Buffer.from_array(ctx, self.q), S.Buffer.from_array(ctx, rows_array(self.pairs))
            w, y = S.Buffer.from_array(ctx, self.w), S.Buffer.from_array(ctx, self.y0)
            out = S.Buffer(ctx, n * k * 4)
            out.fill(0x7F)
            params = S.matmul_params(accumulate=True, handoff_use=handoff)

            def attend():
                if handoff:
                    S.attention_handoff(ctx, slots, LAYER, q, 0, k, n, self.n_heads, rows, 0, self.scale,
                                        self.window, d, out, 0)
                else:
                    S.attention_window(ctx, slots, LAYER, q, 0, k, n, self.n_heads, rows, 0, self.scale,
                                       self.window, out, 0)

            def project():
                S.matmul_ex(ctx, params, out, 0, n, k, w, 0, d, N_OUT, y, 0)

            if graph:
                run_recorded(ctx, lambda: (attend(), project()))
            else:
                attend()
                if tamper is not None:
                    tamper(out)
                project()
            result = out.to_numpy(np.float32, (n, k)), y.to_numpy(np.float32, (n, N_OUT))
            for b in (q, rows, w, y, out):
                b.close()
        return result


def assert_same(a, b, what):
    assert np.array_equal(bits(a[0]), bits(b[0])), f"{what}: the attention output differs"
    assert np.array_equal(bits(a[1]), bits(b[1])), f"{what}: o's y differs"


TYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_K, S.DType.Q6_K, S.DType.F16]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_rows", [1, 3, 17])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_handoff_gives_the_same_bits(ctx, rng, shape, n_rows, dtype):
    if dtype in (S.DType.Q4_K, S.DType.Q6_K) and shape[0] * shape[2] % 256:
        pytest.skip("the K-quants need k in whole 256-value blocks")
    setup = Setup(ctx, rng, shape, "f16", n_rows, dtype)
    assert_same(setup.run(True), setup.run(False), f"{shape} rows={n_rows} {dtype.name}")


@pytest.mark.parametrize("n_rows,window,kv_dtype", [(1, 0, "int8"), (9, 0, "int8"), (5, 37, "f16"), (300, 0, "f16")])
def test_pools_windows_and_prompt_sized_calls(ctx, rng, n_rows, window, kv_dtype):
    setup = Setup(ctx, rng, (8, 2, 128), kv_dtype, n_rows, S.DType.Q4_0, window)
    assert_same(setup.run(True), setup.run(False), f"rows={n_rows} window={window} {kv_dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("n_rows", [1, 4])
def test_recorded_graph(ctx, backend, rng, n_rows):
    if not backend.startswith("cuda"):
        pytest.skip("graph recording is the CUDA backend's")
    setup = Setup(ctx, rng, (9, 3, 64), "f16", n_rows, S.DType.Q4_0)
    assert_same(setup.run(True, graph=True), setup.run(False), f"recorded, rows={n_rows}")


@pytest.mark.gpu
@pytest.mark.parametrize("n_rows,shape", [(1, (8, 2, 128)), (17, (8, 2, 128)), (300, (8, 2, 128)), (1, (32, 8, 128))])
def test_negative_control_the_consumer_reads_the_prepared_blocks(ctx, backend, rng, n_rows, shape):
    if not backend.startswith("cuda"):
        pytest.skip("the CPU backend prepares nothing (it reads x)")
    setup = Setup(ctx, rng, shape, "f16", n_rows, S.DType.Q4_0)

    def overwrite(out):
        out.upload(np.full((n_rows, setup.k), 0.25, np.float32))

    out, y = setup.run(True, tamper=overwrite)
    ref_out, ref_y = setup.run(False)
    assert np.array_equal(bits(y), bits(ref_y)), "o did not read the blocks prepared from the attention output"
    _, y_from_x = setup.run(False, tamper=overwrite)
    assert not np.array_equal(bits(y_from_x), bits(ref_y)), "overwriting out changed nothing: the control is void"


@pytest.mark.gpu
@pytest.mark.parametrize("max_k", ["0", "2048", "4096"])
def test_width_limit_keeps_the_bits(ctx, backend, rng, monkeypatch, max_k):
    """The 8B's 4,096-wide row rounded in the attention kernel (the default limit) or by the pre-pass
    launch after it (a lower STRATA_HANDOFF_ATTENTION_MAX_K): o's y is the plain chain's either way."""
    if not backend.startswith("cuda"):
        pytest.skip("the limit is the CUDA decode kernel's")
    setup = Setup(ctx, rng, (32, 8, 128), "f16", 1, S.DType.Q4_0)
    ref = setup.run(False)
    monkeypatch.setenv("STRATA_HANDOFF_ATTENTION_MAX_K", max_k)
    assert_same(setup.run(True), ref, f"STRATA_HANDOFF_ATTENTION_MAX_K={max_k}")


@pytest.mark.gpu
@pytest.mark.parametrize("value", ["4k", "-1", "2048.0"])
def test_width_limit_refuses_what_it_does_not_take(ctx, backend, rng, monkeypatch, value):
    """A typo in STRATA_HANDOFF_ATTENTION_MAX_K fails the call with an error naming the variable."""
    if not backend.startswith("cuda"):
        pytest.skip("read by the CUDA backend only")
    setup = Setup(ctx, rng, (9, 3, 64), "f16", 1, S.DType.Q4_0)
    with setup.slots() as slots:
        q, rows = S.Buffer.from_array(ctx, setup.q), S.Buffer.from_array(ctx, rows_array(setup.pairs))
        out = S.Buffer(ctx, setup.k * 4)
        try:
            monkeypatch.setenv("STRATA_HANDOFF_ATTENTION_MAX_K", value)
            with pytest.raises(S.StrataError, match=f"STRATA_HANDOFF_ATTENTION_MAX_K={value}: expected a whole"):
                S.attention_handoff(ctx, slots, LAYER, q, 0, setup.k, 1, 9, rows, 0, setup.scale, 0,
                                    int(S.DType.Q4_0), out, 0)
            monkeypatch.delenv("STRATA_HANDOFF_ATTENTION_MAX_K")
            S.attention_handoff(ctx, slots, LAYER, q, 0, setup.k, 1, 9, rows, 0, setup.scale, 0,
                                int(S.DType.Q4_0), out, 0)
            ctx.synchronize()
        finally:
            for b in (q, rows, out):
                b.close()


def test_api_checks(ctx, rng):
    setup = Setup(ctx, rng, (9, 3, 64), "f16", 2, S.DType.Q4_0)
    n, k = 2, setup.k
    with setup.slots() as slots:
        q, rows = S.Buffer.from_array(ctx, setup.q), S.Buffer.from_array(ctx, rows_array(setup.pairs))
        out, w = S.Buffer(ctx, n * k * 4), S.Buffer.from_array(ctx, setup.w)
        y = S.Buffer.from_array(ctx, setup.y0)
        use = S.matmul_params(accumulate=True, handoff_use=True)
        for bad, words in ((99, "handoff_dtype=99 is not a weight type"), (int(S.DType.I32), "(I32)")):
            with pytest.raises(S.StrataError, match="handoff_dtype") as err:
                S.attention_handoff(ctx, slots, LAYER, q, 0, k, n, 9, rows, 0, 0.125, 0, bad, out, 0)
            assert err.value.status_name == "STRATA_ERR_INVALID_ARGUMENT" and words in str(err.value)
            # A failed call leaves no hand-off behind: the consumer is refused.
            with pytest.raises(S.StrataError, match="no earlier call on this context set handoff_emit"):
                S.matmul_ex(ctx, use, out, 0, n, k, w, 0, int(S.DType.Q4_0), N_OUT, y, 0)
        S.attention_handoff(ctx, slots, LAYER, q, 0, k, n, 9, rows, 0, 0.125, 0, int(S.DType.Q4_0), out, 0)
        with pytest.raises(S.StrataError, match="n_rows differs"):
            S.matmul_ex(ctx, use, out, 0, 1, k, w, 0, int(S.DType.Q4_0), N_OUT, y, 0)
        S.attention_handoff(ctx, slots, LAYER, q, 0, k, n, 9, rows, 0, 0.125, 0, int(S.DType.Q4_0), out, 0)
        with pytest.raises(S.StrataError, match="x is not that call's y"):
            S.matmul_ex(ctx, use, q, 0, n, k, w, 0, int(S.DType.Q4_0), N_OUT, y, 0)
        with pytest.raises(S.StrataError, match="prologue differs"):
            S.attention_handoff(ctx, slots, LAYER, q, 0, k, n, 9, rows, 0, 0.125, 0, int(S.DType.Q4_0), out, 0)
            norm = S.Buffer.from_array(ctx, np.ones(k, np.float32))
            try:
                rms = S.matmul_params(S.MatmulPrologue.RMSNORM, eps=1e-5, norm_weight=norm, handoff_use=True)
                S.matmul_ex(ctx, rms, out, 0, n, k, w, 0, int(S.DType.Q4_0), N_OUT, y, 0)
            finally:
                norm.close()
        for b in (q, rows, out, w, y):
            b.close()


def test_api_refuses_a_k_of_partial_blocks(ctx, rng):
    # head_dim 6 x 2 heads = 12 values: not whole blocks of 32 for the next matmul
    slots = paged_slots(ctx, 1, 2, 64, 2, 6, np.arange(1, dtype=np.int32).reshape(1, 1), np.zeros((1, 64, 4), np.int32))
    with slots:
        q = S.Buffer.from_array(ctx, np.ones((1, 12), np.float32))
        rows = S.Buffer.from_array(ctx, rows_array([(0, 0)]))
        out = S.Buffer(ctx, 48)
        with pytest.raises(S.StrataError, match="k = n_heads \\* head_dim = 12 is not a multiple of 32"):
            S.attention_handoff(ctx, slots, LAYER, q, 0, 12, 1, 2, rows, 0, 0.5, 0, int(S.DType.Q4_0), out, 0)
        for b in (q, rows, out):
            b.close()
