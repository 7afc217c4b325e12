"""The CUDA integer matmul's many-row tile kernel (libstrata/src/cuda/cuda_int_mma_tiles.cu)
against the older integer kernels (dp4a, 8/16-row int8 mma), bit for bit on the device:
STRATA_INT_MATMUL=tiles (tiles:v1..v10: one routing; tiles:128/64/32 and tiles:NOxROWSdD: one
configuration of tile shape and pipeline depth; tiles:32x64d2k / d2ok and tiles:64x64d2k / d2ok: the K
split, two warp groups on alternate slices) runs the tile kernel at every row count, =legacy never, so each case runs both on the
same buffers; STRATA_INT_TILES_KSPLIT (1 or unset, the default) puts routings v8 to v10's one-CTA-per-SM 32-output
launches and, at 17-64 rows, those whose 64 x 64 tiles give more than half the SMs one CTA (qkv's 6,144
outputs) on the K split, =0 not. Q4_0, Q8_0, Q4_K and Q6_K (the
types routed to the integer path, and Q4_1; the K-quants' k rounded down to whole 256-value super-blocks;
Q6_K's `legacy` kernel is the dp4a kernel, it has no 8/16-row int8 mma kernel), every
prologue, bias and accumulate, 1 to 512 rows, n_out and k
not multiples of a tile or a slice, misaligned weights; the results also within kernel_refs'
float64 tolerance. Q4_1 (routed since 2026-12-04: the default model's type) runs the same cases,
and libstrata/cuda_emu/test_int_tiles.cpp covers it on the CPU.
"""

import numpy as np
import pytest

from kernel_refs import make_weights
from strata import _ffi as S
from test_matmul_ex import P, PROLOGUES, assert_strided_equals_dense, check, prologue_f64, run_ex, width_of

pytestmark = pytest.mark.gpu

DTYPES = [S.DType.Q4_0, S.DType.Q8_0, S.DType.Q4_1, S.DType.Q4_K, S.DType.Q6_K]
CASES = [  # (n_rows, k, n_out, w_pad): row tiles of 64, output tiles of 128/64/32, slices of 256 values
    (1, 576, 77, 2),
    (5, 1056, 131, 0),
    (63, 1280, 45, 4),
    (64, 4096, 160, 0),
    (65, 576, 131, 6),
    (130, 14336, 40, 2),
    (512, 1056, 300, 0),
]


def k_for(dtype, k):
    """k for `dtype`: Q4_K and Q6_K take whole super-blocks of 256 values (at least one)."""
    return max(256, k // 256 * 256) if dtype in (S.DType.Q4_K, S.DType.Q6_K) else k


def random_blocks(rng, dtype, n_out, k):
    """Raw Q4_0/Q8_0/Q4_1/Q4_K/Q6_K rows of random quants with finite f16 scales (large shapes: no float64 copy)."""
    if dtype == S.DType.Q6_K:  # per super-block: random ql, qh and int8 scales, then the f16 d at byte 208
        raw = rng.integers(0, 256, (n_out, k // 256, 210), dtype=np.uint8)
        raw[:, :, 208:] = rng.uniform(0.00005, 0.0004, (n_out, k // 256, 1)).astype(np.float16).view(np.uint8) \
            .reshape(n_out, k // 256, 2)
        return raw.reshape(n_out, -1)
    if dtype == S.DType.Q4_K:  # per super-block: f16 d and dmin, then random scales/mins and nibbles
        raw = rng.integers(0, 256, (n_out, k // 256, 144), dtype=np.uint8)
        raw[:, :, :4] = rng.uniform(0.0005, 0.004, (n_out, k // 256, 2)).astype(np.float16).view(np.uint8) \
            .reshape(n_out, k // 256, 4)
        return raw.reshape(n_out, -1)
    block = {S.DType.Q4_0: 18, S.DType.Q4_1: 20}.get(dtype, 34)
    raw = rng.integers(0, 256, (n_out, k // 32, block), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.02, (n_out, k // 32)).astype(np.float16)
    raw[:, :, :2] = scales.view(np.uint8).reshape(n_out, k // 32, 2)
    if dtype == S.DType.Q4_1:  # then the f16 minimum m (a block's values are d·q + m, q in 0..15)
        mins = rng.uniform(-0.16, 0.0, (n_out, k // 32)).astype(np.float16)
        raw[:, :, 2:4] = mins.view(np.uint8).reshape(n_out, k // 32, 2)
    return raw.reshape(n_out, -1)


def both(monkeypatch, run, tiles="tiles"):
    """run() with the legacy kernels, then with the tile kernel (`tiles`: a STRATA_INT_MATMUL value)."""
    out = []
    for kernel in ("legacy", tiles):
        monkeypatch.setenv("STRATA_INT_MATMUL", kernel)
        out.append(run())
    monkeypatch.delenv("STRATA_INT_MATMUL")
    return out


# Every configuration the kernel file instantiates (cuda_int_mma_tiles.cu: each shape at depths 0-2, and
# with Q4_0's offset out of the nibbles at depths 0 and 2; the 128-row shape's depth 1 is its 0) and
# the ten routings.
ROUTINGS = ["tiles:v1", "tiles:v2", "tiles:v3", "tiles:v4", "tiles:v5", "tiles:v6", "tiles:v7", "tiles:v8", "tiles:v9",
            "tiles:v10"]
CONFIGS = ["tiles:128", "tiles:64", "tiles:32"] + [
    f"tiles:{no}x{rows}d{d}{o}" for o in ("", "o") for d in (0, 1, 2) for no, rows in
    ((128, 64), (64, 64), (32, 64), (128, 128), (128, 16), (128, 32), (128, 48))
    if (o or d or rows != 64) and (d != 1 or not (o or rows == 128))
] + ["tiles:32x64d2k", "tiles:32x64d2ok", "tiles:64x64d2k", "tiles:64x64d2ok"] + ROUTINGS


@pytest.mark.exactness
@pytest.mark.parametrize("shape", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tiles_bit_identical_to_legacy(cuda_ctx, rng, monkeypatch, dtype, shape):
    """Every case of CASES, the prologues in turn (each one at least twice per configuration)."""
    for i, (n_rows, k, n_out, w_pad) in enumerate(CASES):
        prologue = PROLOGUES[(i + CONFIGS.index(shape)) % len(PROLOGUES)]
        k = k_for(dtype, k)
        raw, w = make_weights(rng, dtype, n_out, k)
        width = width_of(prologue, k)
        x = rng.standard_normal((n_rows, width + 1), dtype=np.float32)  # misaligned rows
        x[0, :32] = 0.0  # a zero block: dx = 0
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32) if i % 2 else None
        y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32) if i % 3 == 1 else None

        def run():
            return run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None, width + 1, 4,
                          w_pad)

        legacy, tiles = both(monkeypatch, run, shape)
        differ = int((legacy.view(np.uint32) != tiles.view(np.uint32)).sum())
        assert differ == 0, f"{n_rows}x{k}->{n_out}: {differ} outputs differ between the legacy and tile kernels"
        check(cuda_ctx, tiles, prologue_f64(x, prologue, k, norm), w, dtype, k, bias, y0)


@pytest.mark.exactness
@pytest.mark.parametrize("n_rows", [16, 24, 40, 48, 64, 512])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tiles_bit_identical_on_llama_8b_shapes(cuda_ctx, rng, monkeypatch, dtype, n_rows):
    """The benchmark's shapes under every routing (each shape and depth they pick: 1024 to 28672 outputs;
    at 16 and 24 rows v7 takes the 16- and 32-row tiles for gate_up, at 40 rows v8 the 64-row route on every
    matrix)."""
    for n_out, k in [(4096, 4096), (1024, 4096), (6144, 4096), (4096, 14336), (28672, 4096)]:
        raw = random_blocks(rng, dtype, n_out, k)
        x = rng.standard_normal((n_rows, k), dtype=np.float32)

        def run():
            return run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM, np.ones(k, np.float32))

        monkeypatch.setenv("STRATA_INT_MATMUL", "legacy")
        legacy = run()
        for routing in ROUTINGS + ["tiles:v8+ksplit", "auto+ksplit", "auto+default"]:
            # +ksplit: STRATA_INT_TILES_KSPLIT=1 (q/o, k/v and down at 40 and 64 rows take the 32 x 64 split,
            # qkv from 17 rows (Q4_K: 9) to 64 the 64 x 64 one); +default: unset (the same); the routings alone: =0
            monkeypatch.setenv("STRATA_INT_MATMUL", routing.split("+")[0])
            if routing.endswith("+default"):
                monkeypatch.delenv("STRATA_INT_TILES_KSPLIT", raising=False)
            else:
                monkeypatch.setenv("STRATA_INT_TILES_KSPLIT", "1" if routing.endswith("+ksplit") else "0")
            tiles = run()
            differ = int((legacy.view(np.uint32) != tiles.view(np.uint32)).sum())
            assert differ == 0, f"{routing} {n_rows}x{k}->{n_out}: {differ} outputs differ from the legacy kernels"
        monkeypatch.delenv("STRATA_INT_MATMUL")
        monkeypatch.delenv("STRATA_INT_TILES_KSPLIT", raising=False)


@pytest.mark.exactness
@pytest.mark.parametrize("routing", ["tiles:v2", "tiles:v5", "tiles:v6", "tiles:v7", "tiles:v8", "tiles:v9", "tiles:v10"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tiles_rows_independent_of_batch(cuda_ctx, rng, monkeypatch, dtype, routing):
    """Forced to the tile kernel: every row the same alone, in a 64-row tile and in a 700-row batch
    (whose routing picks another shape or depth than the smaller batches')."""
    k, n_out = 1280, 131
    raw, _ = make_weights(rng, dtype, n_out, k)
    x = rng.standard_normal((700, k), dtype=np.float32)
    monkeypatch.setenv("STRATA_INT_MATMUL", routing)
    full = run_ex(cuda_ctx, x, k, raw, dtype, n_out)
    for rows in (np.arange(1), np.arange(64), np.arange(3, 70), rng.permutation(700)[:129]):
        part = run_ex(cuda_ctx, x[rows], k, raw, dtype, n_out)
        assert np.array_equal(part.view(np.uint32), full[rows].view(np.uint32)), f"{len(rows)} rows differ"


def rows_keep_their_bits(ctx, monkeypatch, x, k, raw, dtype, n_out, step, sizes, second_route, control):
    """Every `step`-th row of x alone (the one-row kernel), then in batches of each of `sizes` rows under the
    default routing and of 40 rows under `second_route`: the same bits. Negative control: in a batch of
    control = (size, row) rows, one element of that row moved by 0.5 (about 25 steps of its int8 block) must
    change its bits."""
    monkeypatch.delenv("STRATA_INT_MATMUL", raising=False)
    picked = range(0, len(x), step)
    alone = np.concatenate([run_ex(ctx, x[r:r + 1], k, raw, dtype, n_out) for r in picked])

    def check(batch, size, where):
        for i, r in enumerate(picked):
            if r < size:
                assert np.array_equal(batch[r].view(np.uint32), alone[i].view(np.uint32)), f"row {r} differs {where}"

    for size in sizes:
        check(run_ex(ctx, x[:size], k, raw, dtype, n_out), size, f"in a batch of {size} rows")
    monkeypatch.setenv("STRATA_INT_MATMUL", second_route)
    batch = run_ex(ctx, x[:40], k, raw, dtype, n_out)
    monkeypatch.delenv("STRATA_INT_MATMUL")
    check(batch, 40, f"({second_route}, 40 rows)")
    size, row = control
    nudged = x[:size].copy()
    nudged[row, 5] += np.float32(0.5)
    batch = run_ex(ctx, nudged, k, raw, dtype, n_out)
    assert not np.array_equal(batch[row].view(np.uint32), alone[row // step].view(np.uint32)), \
        "the control changed no bit"


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q6_K], ids=lambda d: d.name)
def test_decode_batches_of_every_size_give_each_row_its_bits(cuda_ctx, rng, monkeypatch, dtype):
    """The default routing on a matrix wide enough for the 16- and 32-row tiles (more 128-output tiles
    than SMs, as the 8B's gate_up and lm_head): each row's outputs are the same alone, in batches of 9-16
    and 17-32 rows (the 16- and 32-row tiles), 33-48 rows (the 48-row tiles, routing v9), 49 and 70 rows (the
    64-row tiles), and 40 rows under auto:v6 (the 16-row int8 mma kernel); with the nudged-row control."""
    k, n_out = 1024, 128 * 160
    raw = random_blocks(rng, dtype, n_out, k)
    x = rng.standard_normal((70, k), dtype=np.float32)
    rows_keep_their_bits(cuda_ctx, monkeypatch, x, k, raw, dtype, n_out, 7, (9, 16, 17, 24, 32, 33, 40, 48, 49, 70),
                         "auto:v6", (16, 7))
    # and 40 rows under auto:v8 (the 64-row tiles v9 replaces there): the same bits too
    rows_keep_their_bits(cuda_ctx, monkeypatch, x, k, raw, dtype, n_out, 7, (), "auto:v8", (40, 21))


@pytest.mark.exactness
@pytest.mark.parametrize("n_out", [1024, 4608])
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q4_K, S.DType.Q6_K], ids=lambda d: d.name)
def test_decode_batches_on_a_narrow_matrix_give_each_row_its_bits(cuda_ctx, rng, monkeypatch, dtype, n_out):
    """The default routing on a matrix of fewer 128-output tiles than SMs (as the 8B's q/o, qkv and down)
    at k beyond the short-k rule: each row's outputs are the same alone, in batches of 6 rows (the gemv or
    dot kernels), 12 rows (the 4,608-output Q4_K: v8's tile route, where the int8 mma 8-row tiles ran), 24
    rows (Q4_0 at 1,024 outputs: the few-row kernel; 4,608 outputs, as qkv, and the K-quants: v8's tile
    route), 33-63 rows (v8: the 64-row tile route) and 64 rows, and 40 rows under auto:v7 (the 16-row int8
    mma kernel or dp4a tiles, which v7 kept there); with the nudged-row control."""
    k = 2048
    raw = random_blocks(rng, dtype, n_out, k)
    x = rng.standard_normal((64, k), dtype=np.float32)
    rows_keep_their_bits(cuda_ctx, monkeypatch, x, k, raw, dtype, n_out, 5, (6, 12, 24, 33, 40, 48, 63, 64), "auto:v7",
                         (48, 35))


def refused_and_y_kept(ctx, rng, monkeypatch, settings, match):
    """A matmul of 70 rows under the STRATA_* `settings` must fail with `match` and leave y as it was."""
    k, n_out = 256, 40
    raw, _ = make_weights(rng, S.DType.Q4_0, n_out, k)
    x = rng.standard_normal((70, k), dtype=np.float32)
    y0 = rng.standard_normal((70, n_out)).astype(np.float32)
    bx, bw, by = (S.Buffer.from_array(ctx, a) for a in (x, raw, y0))
    for var, value in settings.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(S.StrataError, match=match):
        S.matmul(ctx, bx, 0, 70, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
    for var in settings:
        monkeypatch.delenv(var)
    ctx.synchronize()
    assert np.array_equal(by.to_numpy(np.float32, (70, n_out)).view(np.uint32), y0.view(np.uint32))
    for b in (bx, bw, by):
        b.close()


@pytest.mark.parametrize("name", ["tile", "tiles:96", "tiles:v11", "tiles:v01", "tiles:64x128d0", "tiles:32x64d3", "tiles:32x64d2x",
                                  "tiles:32x64d1o", "tiles:64x16d0", "tiles:128x48d1o", "tiles:64x48d0", "auto:v11",
                                  "auto:v0", "auto:v", "auto:v01", "auto:v100",
                                  "tiles:32x64d0k", "tiles:128x64d2k", "tiles:32x64d2ko", "tiles:32x64d2kk"])
def test_unknown_kernel_name_is_refused(cuda_ctx, rng, monkeypatch, name):
    """A typo in STRATA_INT_MATMUL is an error naming the choices, and y is left as it was."""
    refused_and_y_kept(cuda_ctx, rng, monkeypatch, {"STRATA_INT_MATMUL": name}, "expected auto, tiles")


# Launches with warps none of whose rows is live (the last row tile of a launch that is not a multiple of
# the tile's rows): the 128-row tile at 131, 200 and 400 rows (12, 4 and 12 of the last tile's 16 warps
# idle), the 64-row tiles and the K split at 70 and 100 rows; forced configurations and the default routing.
SKIP_DEAD_CASES = [("tiles:128x128d2o", 131), ("tiles:128x128d2", 200), ("tiles:128x128d0o", 400),
                   ("tiles:32x64d2ok", 70), ("tiles:64x64d2k", 100), ("tiles:128x64d0", 70), ("tiles:32x64d0o", 100),
                   ("auto", 400), ("auto", 40)]


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_skipping_idle_warps_keeps_the_bits(cuda_ctx, rng, monkeypatch, dtype):
    """STRATA_INT_TILES_SKIP_DEAD=1 (a warp with no live row skips its products and folds but still stages and
    hands slices over) against =0, bit for bit, every prologue in turn, on row counts that leave idle warps.
    Negative control: the same inputs with one row changed must change that row's outputs (so the compared
    outputs are the rows the idle warps sit beside, not constants)."""
    k, n_out = k_for(dtype, 1280), 300
    raw = random_blocks(rng, dtype, n_out, k)
    for i, (kernel, n_rows) in enumerate(SKIP_DEAD_CASES):
        prologue = PROLOGUES[i % len(PROLOGUES)]
        x = rng.standard_normal((n_rows, width_of(prologue, k)), dtype=np.float32)
        norm = np.ones(k, np.float32) if prologue == P.RMSNORM else None
        monkeypatch.setenv("STRATA_INT_MATMUL", kernel)
        out = {}
        for skip in ("0", "1"):
            monkeypatch.setenv("STRATA_INT_TILES_SKIP_DEAD", skip)
            out[skip] = run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm)
        differ = int((out["0"].view(np.uint32) != out["1"].view(np.uint32)).sum())
        assert differ == 0, f"{kernel} at {n_rows} rows: {differ} outputs differ with the idle warps skipping"
        x2 = x.copy()
        x2[-1] += 1.0
        last = run_ex(cuda_ctx, x2, k, raw, dtype, n_out, prologue, norm)
        assert not np.array_equal(last[-1].view(np.uint32), out["1"][-1].view(np.uint32)), "the last row is not computed"
    monkeypatch.delenv("STRATA_INT_MATMUL")
    monkeypatch.delenv("STRATA_INT_TILES_SKIP_DEAD")


# The tail split (STRATA_INT_TILES_TAIL): row counts one past a whole 64- or 128-row tile (a one-row tail on
# the dot kernel), 3 past (2-8 rows: the gemv kernel for Q4_0 / Q8_0 at this k and n_out) and 72 past
# (72 rows on their own route: the tiles again), and serve_load's 387 (31 decode rows + 356 prompt tokens).
TAIL_ROWS = [65, 129, 131, 200, 387]


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tail_split_keeps_the_bits(cuda_ctx, rng, monkeypatch, dtype):
    """STRATA_INT_TILES_TAIL=127:always (a routed call's rows short of a whole last row tile run on the route their
    own count takes, whether the split pays or not, reading the same prepared blocks) against =0 and against the legacy kernels, bit for bit,
    every prologue in turn, with bias and accumulate on alternate cases; then y rows wider than n_out (the
    tail's rows written at their stride, nothing else touched). Negative control: changing the last row's
    input changes that row's outputs, so the tail rows are computed, not left as they were."""
    k, n_out = k_for(dtype, 2048), 2100
    raw = random_blocks(rng, dtype, n_out, k)
    for i, n_rows in enumerate(TAIL_ROWS):
        prologue = PROLOGUES[i % len(PROLOGUES)]
        x = rng.standard_normal((n_rows, width_of(prologue, k)), dtype=np.float32)
        norm = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32) if prologue == P.RMSNORM else None
        bias = rng.standard_normal(n_out).astype(np.float32) if i % 2 else None
        y0 = rng.standard_normal((n_rows, n_out)).astype(np.float32) if i % 2 == 0 else None
        out = {}
        for tail in ("0", "127:always"):
            monkeypatch.setenv("STRATA_INT_TILES_TAIL", tail)
            out[tail] = run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None)
        monkeypatch.setenv("STRATA_INT_MATMUL", "legacy")
        legacy = run_ex(cuda_ctx, x, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None)
        monkeypatch.delenv("STRATA_INT_MATMUL")
        for name, ref in (("without the split", out["0"]), ("in the legacy kernels", legacy)):
            differ = int((out["127:always"].view(np.uint32) != ref.view(np.uint32)).sum())
            assert differ == 0, f"{dtype.name} at {n_rows} rows: {differ} outputs differ from the call {name}"
        x2 = x.copy()
        x2[-1] += 1.0
        monkeypatch.setenv("STRATA_INT_TILES_TAIL", "127:always")
        last = run_ex(cuda_ctx, x2, k, raw, dtype, n_out, prologue, norm, bias, y0, y0 is not None)
        assert not np.array_equal(last[-1].view(np.uint32), out["127:always"][-1].view(np.uint32)), "the last row is not computed"
    assert_strided_equals_dense(cuda_ctx, rng, dtype, 131, k, n_out, P.RMSNORM, raw)
    monkeypatch.delenv("STRATA_INT_TILES_TAIL")


# Routing v10 (cuda_int_mma_tiles.cu, `route`): where v9 takes the 128 x 128 tiles, the 128 x 64 ones when they put
# less work on the busiest SM, each counted with the tail split it would take. On GPUs of ~132 SMs it switches the
# 8B's gate_up (28,672 outputs) at 401-448 rows and lm_head (49,152) at 161-448; 387 keeps 128 x 128 with its split,
# 512 the whole 128-row tiles (equal work).
V10_ROWS = [161, 320, 387, 448, 512]


@pytest.mark.exactness
@pytest.mark.parametrize("dtype", [S.DType.Q4_0, S.DType.Q4_K, S.DType.Q6_K], ids=lambda d: d.name)
def test_routing_v10_keeps_the_bits(cuda_ctx, rng, monkeypatch, dtype):
    """auto:v10 against auto:v9 and the legacy kernels, bit for bit, on the two wide 8B matrices at the row counts
    where v10 changes the tile shape (and around them), with the tail split at its default (v10 applies to Q4_0 and
    Q6_K; Q4_K keeps v9's shapes, so it runs here as the types v10 leaves alone)."""
    k = 4096
    monkeypatch.delenv("STRATA_INT_TILES_TAIL", raising=False)
    for n_out in (28672, 49152):
        raw = random_blocks(rng, dtype, n_out, k)
        for n_rows in V10_ROWS:
            x = rng.standard_normal((n_rows, k), dtype=np.float32)
            out = {}
            for routing in ("legacy", "auto:v9", "auto:v10"):
                monkeypatch.setenv("STRATA_INT_MATMUL", routing)
                out[routing] = run_ex(cuda_ctx, x, k, raw, dtype, n_out, P.RMSNORM, np.ones(k, np.float32))
            monkeypatch.delenv("STRATA_INT_MATMUL")
            for ref in ("legacy", "auto:v9"):
                differ = int((out["auto:v10"].view(np.uint32) != out[ref].view(np.uint32)).sum())
                assert differ == 0, f"{dtype.name} {n_rows}x{k}->{n_out}: {differ} outputs of auto:v10 differ from {ref}"


def test_tail_split_is_a_launch_of_its_own(cuda_ctx, rng, monkeypatch):
    """The split happens where it should and only there. A recorded 131-row call on a wide matrix (16,384
    outputs: the whole call's tiles put about twice the head's work on the busiest SM on any GPU of 100-132
    SMs) is one kernel more with STRATA_INT_TILES_TAIL=8 (its 3 last rows get their own launch) than with =0
    or =2 (fewer rows than the tail). A 65-row call on a narrow matrix (256 outputs: one wave either way) is
    not split at =8, where the split cannot pay, and is at =8:always. A configuration forced by
    STRATA_INT_MATMUL is never split."""
    k = 2048

    def kernels(n_rows, n_out, raw, tail, matmul=None):
        x = rng.standard_normal((n_rows, k), dtype=np.float32)
        bx, bw, by = (S.Buffer.from_array(cuda_ctx, a) for a in (x, raw, np.zeros((n_rows, n_out), np.float32)))
        monkeypatch.setenv("STRATA_INT_TILES_TAIL", tail)
        if matmul:
            monkeypatch.setenv("STRATA_INT_MATMUL", matmul)
        try:
            cuda_ctx.graph_begin()
            S.matmul(cuda_ctx, bx, 0, n_rows, k, bw, 0, S.DType.Q4_0, n_out, None, 0, by, 0, False)
            graph = cuda_ctx.graph_end()
            try:
                return graph.kernel_count()
            finally:
                graph.close()
        finally:
            monkeypatch.delenv("STRATA_INT_MATMUL", raising=False)
            for b in (bx, bw, by):
                b.close()

    wide, _ = make_weights(rng, S.DType.Q4_0, 16384, k)
    narrow, _ = make_weights(rng, S.DType.Q4_0, 256, k)
    try:
        plain = kernels(131, 16384, wide, "0")
        assert kernels(131, 16384, wide, "8") == plain + 1
        assert kernels(131, 16384, wide, "2") == plain
        assert kernels(131, 16384, wide, "8", "tiles:128x64d2") == kernels(131, 16384, wide, "0", "tiles:128x64d2")
        plain = kernels(65, 256, narrow, "0")
        assert kernels(65, 256, narrow, "8") == plain, "a split that cannot pay was taken"
        assert kernels(65, 256, narrow, "8:always") == plain + 1
    finally:
        monkeypatch.delenv("STRATA_INT_TILES_TAIL")


@pytest.mark.parametrize("value", ["-1", "128", "yes", "3 rows", "0:always", "8:sometimes", "+8", " 8"])
def test_unknown_tail_value_is_refused(cuda_ctx, rng, monkeypatch, value):
    """STRATA_INT_TILES_TAIL takes 0 to 127, or 1 to 127 with :always; anything else is an error naming them, and y is left as it was."""
    refused_and_y_kept(cuda_ctx, rng, monkeypatch, {"STRATA_INT_TILES_TAIL": value}, "from 0 to 127")


@pytest.mark.parametrize("value", ["2", "yes", "on", "-1"])
def test_unknown_skip_dead_value_is_refused(cuda_ctx, rng, monkeypatch, value):
    """STRATA_INT_TILES_SKIP_DEAD takes 0 or 1; anything else is an error naming them, and y is left as it was."""
    refused_and_y_kept(cuda_ctx, rng, monkeypatch, {"STRATA_INT_MATMUL": "tiles", "STRATA_INT_TILES_SKIP_DEAD": value},
                       "expected 0 or 1")


@pytest.mark.parametrize("value", ["2", "yes", "on", "-1"])
def test_unknown_ksplit_value_is_refused(cuda_ctx, rng, monkeypatch, value):
    """STRATA_INT_TILES_KSPLIT takes 0 or 1; anything else is an error naming them, and y is left as it was."""
    refused_and_y_kept(cuda_ctx, rng, monkeypatch, {"STRATA_INT_MATMUL": "tiles", "STRATA_INT_TILES_KSPLIT": value},
                       "expected 0 or 1")
