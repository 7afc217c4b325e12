"""strata_rope_kv_store_attention (rope_kv_store then attention_window in one call, for rows of
distinct slots) against the two separate calls on the same backend, bit for bit: the attention
output, the rotated q and k left in the qkv rows, and every byte of the KV page pool (values and
int8 scales). Decode rows of distinct slots at cells 0, 31, 32, 255, 256 and 1000, padding rows,
a slot whose page at the row's cell is unmapped (nothing stored, the null page read); cells past
each row's end hold NaN (F16 pools) and must never reach an output. Head dims 64 and 128 (the
fused CUDA kernel) and 80 (the CUDA backend runs the two launches), GQA groups 1, 3, 4, 6 and 8,
sliding windows, F16 and int8 pools, the rope modes rope_kv_store supports, Llama 3 freq_factors.
On the CPU backend the fused call is the two calls composed; on CUDA (gpu) it is one kernel
(libstrata/src/cuda/cuda_attention_decode.cu) for up to 255 rows, also checked in a recorded graph.
"""

import numpy as np
import pytest

from kernel_refs import buffer_of, paged_slots, rows_array, run_recorded
from strata import _ffi as S

P = S.PAGE_CELLS
N_CTX, LAYER = 1040, 1
INDICES = [0, 31, 32, 255, 256, 1000]

CASES = [
    # mode, n_heads, n_kv, head_dim, rot_dim, sections, freq_factors, window
    (S.RopeMode.HALF, 9, 3, 64, 64, (0, 0, 0, 0), False, 0),        # SmolLM2 (G = 3)
    (S.RopeMode.ADJACENT, 8, 2, 128, 128, (0, 0, 0, 0), True, 0),   # Llama 3 (G = 4, freq_factors)
    (S.RopeMode.HALF, 8, 1, 128, 128, (0, 0, 0, 0), False, 0),      # G = 8
    (S.RopeMode.HALF, 2, 2, 64, 32, (0, 0, 0, 0), False, 37),       # G = 1, partial rotation, window
    (S.RopeMode.MROPE, 6, 1, 64, 64, (8, 12, 12, 0), False, 0),     # G = 6, M-RoPE
    (S.RopeMode.HALF, 4, 2, 128, 128, (0, 0, 0, 0), False, 100),    # G = 2, window
    (S.RopeMode.HALF, 6, 2, 80, 64, (0, 0, 0, 0), False, 0),        # head_dim 80: never fused on CUDA
]


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def decode_rows(n_rows):
    """{slot, index} rows of distinct slots (slot r for row r), with padding rows among them; the
    last real row's slot has the page of its cell unmapped."""
    pairs = [(r, INDICES[r % len(INDICES)]) for r in range(n_rows)]
    if n_rows > 3:
        pairs[2] = (-1, 5)          # padding
        pairs[3] = (n_rows + 5, 1)  # out-of-range slot: padding too
    return pairs


class Setup:
    """A paged pool (scrambled page table) whose slots hold random K/V before each row's cell and NaN
    after it, and random qkv rows; `run(fused)` starts from that state every time."""

    def __init__(self, ctx, rng, case, kv_dtype, n_rows):
        mode, n_heads, n_kv, hd, rot_dim, sections, use_ff, window = case
        self.ctx, self.case, self.kv_dtype, self.n_rows = ctx, case, kv_dtype, n_rows
        self.n_heads, self.n_kv, self.hd, self.window = n_heads, n_kv, hd, window
        self.pairs = decode_rows(n_rows)
        self.n_slots = n_rows
        self.slot_pages = -(-N_CTX // P)
        self.n_pages = self.n_slots * self.slot_pages
        self.page_table = rng.permutation(self.n_pages).reshape(self.n_slots, self.slot_pages).astype(np.int32)
        self.unmapped = None
        real = [(s, i) for s, i in self.pairs if 0 <= s < self.n_slots]
        if len(real) > 2:
            self.unmapped = real[-1]    # its cell's page stays unmapped: nothing stored there
        kv_w = n_kv * hd
        self.fill = {s: (rng.standard_normal((i, kv_w), dtype=np.float32) * 2,
                         rng.standard_normal((i, kv_w), dtype=np.float32)) for s, i in real}
        self.tables = rng.integers(0, 3000, (self.n_slots, N_CTX, 4)).astype(np.int32)
        self.stride = (n_heads + 2 * n_kv) * hd + 3
        self.qkv = rng.standard_normal((n_rows, self.stride), dtype=np.float32)
        self.ff = rng.uniform(1, 8, rot_dim // 2).astype(np.float32) if use_ff else None
        self.pq = S.rope_params(mode, n_heads, hd, rot_dim, 10000.0, 1.0, sections)
        self.pk = S.rope_params(mode, n_kv, hd, rot_dim, 10000.0, 1.0, sections)
        self.scale = float(1 / np.sqrt(hd))

    def slots(self):
        ctx, kv_w = self.ctx, self.n_kv * self.hd
        slots = paged_slots(ctx, self.n_slots, 2, N_CTX, self.n_kv, self.hd, self.page_table, self.tables,
                            self.kv_dtype, self.unmapped)
        for s, (k, v) in self.fill.items():
            i = len(k)
            chunks = [(0, k, v)]
            if self.kv_dtype == "f16":  # NaN past the row's cell (int8 pools would quantize it away)
                nan = np.full((N_CTX - i - 1, kv_w), np.nan, np.float32)
                chunks.append((i + 1, nan, nan))
            for first, kk, vv in chunks:
                if len(kk) == 0:
                    continue
                bk, bv = S.Buffer.from_array(ctx, np.ascontiguousarray(kk)), S.Buffer.from_array(ctx, np.ascontiguousarray(vv))
                br = S.Buffer.from_array(ctx, rows_array([(s, first + j) for j in range(len(kk))]))
                S.kv_store(ctx, slots, LAYER, bk, 0, kv_w, bv, 0, kv_w, br, 0, len(kk))
                for b in (bk, bv, br):
                    b.close()
        return slots

    def run(self, fused, graph=False):
        """(out, qkv after the call, every page's bytes)."""
        ctx, n = self.ctx, self.n_rows
        width = self.n_heads * self.hd
        with self.slots() as slots:
            buf, off = buffer_of(ctx, self.qkv, 12)
            br, r_off = buffer_of(ctx, rows_array(self.pairs), 8)
            bf = S.Buffer.from_array(ctx, self.ff) if self.ff is not None else None
            out = S.Buffer(ctx, n * width * 4)
            out.fill(0x7F)

            def call():
                if fused:
                    S.rope_kv_store_attention(ctx, self.pq, self.pk, slots, LAYER, buf, off, self.stride, n, br, r_off,
                                              bf, 0, self.scale, self.window, out, 0)
                else:
                    S.rope_kv_store(ctx, self.pq, self.pk, slots, LAYER, buf, off, self.stride, n, br, r_off, bf, 0)
                    S.attention_window(ctx, slots, LAYER, buf, off, self.stride, n, self.n_heads, br, r_off,
                                       self.scale, self.window, out, 0)

            if graph:
                run_recorded(ctx, call)
            else:
                call()
            got = out.to_numpy(np.float32, (n, width))
            qkv = buf.to_numpy(np.float32, self.qkv.shape, off)
            pool = b"".join(slots.read_page(p) for p in range(self.n_pages))
            for b in (buf, br, bf, out):
                if b is not None:
                    b.close()
        return got, qkv, pool


def check_same(a, b, what):
    (out_a, qkv_a, pool_a), (out_b, qkv_b, pool_b) = a, b
    assert np.array_equal(bits(qkv_a), bits(qkv_b)), f"{what}: rotated q/k differ"
    assert pool_a == pool_b, f"{what}: KV pool differs"
    assert np.array_equal(bits(out_a), bits(out_b)), f"{what}: attention output differs"


@pytest.mark.exactness
@pytest.mark.parametrize("kv_dtype", ["f16", "int8"])
@pytest.mark.parametrize("n_rows", [1, 9])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}x{c[2]}-hd{c[3]}-rot{c[4]}-w{c[7]}")
def test_fused_equals_separate_calls(ctx, rng, case, n_rows, kv_dtype):
    setup = Setup(ctx, rng, case, kv_dtype, n_rows)
    fused = setup.run(True)
    separate = setup.run(False)
    check_same(fused, separate, "fused vs rope_kv_store + attention")
    out = fused[0]
    for r, (s, _) in enumerate(setup.pairs):
        if 0 <= s < setup.n_slots:
            assert np.isfinite(out[r]).all(), f"row {r}: a NaN cell reached the output"
        else:
            assert not out[r].any(), f"padding row {r} not zero"
    assert setup.run(True)[2] == fused[2], "the fused call is not deterministic"


@pytest.mark.gpu
@pytest.mark.exactness
@pytest.mark.parametrize("kv_dtype", ["f16", "int8"])
def test_fused_in_a_recorded_graph(ctx, backend, rng, kv_dtype):
    if backend == "cpu":
        pytest.skip("graphs record CUDA launches")
    setup = Setup(ctx, rng, CASES[1], kv_dtype, 40)
    check_same(setup.run(True, graph=True), setup.run(False), "recorded fused vs separate calls")


def test_fused_checks(ctx):
    with S.Slots(ctx, 1, 1, 4, 2, 8) as slots:
        qkv = S.Buffer(ctx, 4 * 64 * 4)
        rows = S.Buffer.from_array(ctx, rows_array([(0, 0)]))
        out = S.Buffer(ctx, 4 * 32 * 4)
        pq, pk = S.rope_params(S.RopeMode.HALF, 4, 8), S.rope_params(S.RopeMode.HALF, 2, 8)
        with pytest.raises(S.StrataError, match="k_params.n_heads=3 must equal"):
            S.rope_kv_store_attention(ctx, pq, S.rope_params(S.RopeMode.HALF, 3, 8), slots, 0, qkv, 0, 64, 1, rows, 0,
                                      None, 0, 0.5, 0, out, 0)
        with pytest.raises(S.StrataError, match="window"):
            S.rope_kv_store_attention(ctx, pq, pk, slots, 0, qkv, 0, 64, 1, rows, 0, None, 0, 0.5, -1, out, 0)
        with pytest.raises(S.StrataError, match="scale"):
            S.rope_kv_store_attention(ctx, pq, pk, slots, 0, qkv, 0, 64, 1, rows, 0, None, 0, float("nan"), 0, out, 0)
        with pytest.raises(S.StrataError, match="out"):   # out overlapping the qkv rows
            S.rope_kv_store_attention(ctx, pq, pk, slots, 0, qkv, 0, 64, 1, rows, 0, None, 0, 0.5, 0, qkv, 128)
        S.rope_kv_store_attention(ctx, pq, pk, slots, 0, qkv, 0, 64, 1, rows, 0, None, 0, 0.5, 0, out, 0)
        for b in (qkv, rows, out):
            b.close()
