"""The CUDA decode attention kernel (libstrata/src/cuda/cuda_attention_decode.cu) against the
general kernel it replaces for decode-sized calls (STRATA_ATTENTION=legacy, read on every call; and
its plan without query heads spread over blocks, STRATA_ATTENTION=wide, and the spread plans' blocks of
one or two heads on the kernel of as many query slots or on the 4-slot one, STRATA_ATTENTION_NARROW;
the K and V rows asked of L2 before the kernel's wait, STRATA_ATTENTION_EARLY_KV)
and against float64: the same bits for 1 to 100 rows, contexts at every tile and chunk boundary
up to 8192 (so the plans that split long rows over blocks run, with rows far shorter than the
slots allow), GQA groups 1, 3, 4 and 8, head_dim 64 and 128, F16 and int8 pools, sliding
windows and padding rows; and a recorded graph replays the split plan bit for bit.
GPU only: on the CPU backend the switch selects nothing."""

import numpy as np
import pytest

from attention_replay import assert_graph_replays_legacy, bits, cuda_only
from kernel_refs import attention_reference, rows_array
from strata import _ffi as S
from test_kv_int8 import quantize_reference
from test_kv_pages import attend_window, scrambled_pages

P = S.PAGE_CELLS
N_CTX = 8256
LENGTHS = [8192, 1000, 300]  # cells written per slot; every later cell holds NaN K and V
INDICES = [0, 1, 30, 31, 32, 33, 63, 64, 255, 256, 257, 511, 512, 1023, 2047, 2048, 4095, 8191]


def run_both(monkeypatch, call):
    """call() with the decode kernel, then with STRATA_ATTENTION=legacy; the decode kernel's plan
    without query heads spread over blocks (STRATA_ATTENTION=wide) must give the same bits."""
    monkeypatch.delenv("STRATA_ATTENTION", raising=False)
    new = call()
    monkeypatch.setenv("STRATA_ATTENTION", "wide")
    wide = call()
    assert np.array_equal(bits(new), bits(wide)), "spreading query heads over blocks changed bits"
    for narrow in ("0", "1"):  # blocks of one or two heads on the 4-slot kernel / on a kernel of their size
        monkeypatch.setenv("STRATA_ATTENTION_NARROW", narrow)
        assert np.array_equal(bits(new), bits(call())), f"STRATA_ATTENTION_NARROW={narrow} changed bits"
    monkeypatch.delenv("STRATA_ATTENTION_NARROW", raising=False)
    monkeypatch.setenv("STRATA_ATTENTION_EARLY_KV", "1")  # L2 hints before the wait: a hint, the same bits
    assert np.array_equal(bits(new), bits(call())), "STRATA_ATTENTION_EARLY_KV=1 changed bits"
    monkeypatch.delenv("STRATA_ATTENTION_EARLY_KV")
    monkeypatch.setenv("STRATA_ATTENTION", "legacy")
    old = call()
    monkeypatch.delenv("STRATA_ATTENTION", raising=False)
    return new, old


def row_pairs(n_rows):
    """n_rows {slot, index} rows cycling over boundary contexts of each slot, with padding rows."""
    pool = [(0, i) for i in INDICES] + [(1, 999), (1, 256), (2, 299), (2, 0), (-1, 4), (1, 31), (0, 7000)]
    return [pool[(5 * r) % len(pool)] for r in range(n_rows)]


def fill(ctx, slots, layer, keys, values):
    width = keys.shape[-1]
    nan = np.full((N_CTX, width), np.nan, np.float32)
    for s, n in enumerate(LENGTHS):
        for first, k, v in ((0, keys[s, :n], values[s, :n]), (n, nan[:N_CTX - n], nan[:N_CTX - n])):
            if slots.kv_dtype == "int8" and first:
                continue  # int8 pools quantize NaN rows away; unwritten pages stay unread anyway
            bk, bv = S.Buffer.from_array(ctx, np.ascontiguousarray(k)), S.Buffer.from_array(ctx, np.ascontiguousarray(v))
            br = S.Buffer.from_array(ctx, rows_array([(s, first + i) for i in range(len(k))]))
            S.kv_store(ctx, slots, layer, bk, 0, width, bv, 0, width, br, 0, len(k))
            for b in (bk, bv, br):
                b.close()


SHAPES = [(32, 8, 128), (9, 3, 64), (8, 8, 64), (16, 2, 128), (12, 4, 128)]  # 8B, 135M, G=1, G=8, G=3


@pytest.mark.gpu
@pytest.mark.exactness
@pytest.mark.parametrize("kv_dtype", ["f16", "int8"])
@pytest.mark.parametrize("n_heads,n_kv,hd", SHAPES, ids=lambda v: str(v))
def test_decode_kernel_matches_legacy_and_float64(ctx, backend, rng, monkeypatch, n_heads, n_kv, hd, kv_dtype):
    cuda_only(backend)
    layer, scale = 1, 1 / np.sqrt(hd)
    keys = rng.standard_normal((3, LENGTHS[0], n_kv * hd), dtype=np.float32) * 2
    values = rng.standard_normal((3, LENGTHS[0], n_kv * hd), dtype=np.float32)
    slot_pages = -(-N_CTX // P)
    n_pages = 3 * slot_pages + 3
    with S.Slots(ctx, 3, 2, N_CTX, n_kv, hd, n_pages=n_pages, kv_dtype=kv_dtype) as slots:
        for s, row in enumerate(scrambled_pages(rng, 3, slot_pages, n_pages)):
            slots.map_pages(s, 0, row)
        fill(ctx, slots, layer, keys, values)
        if kv_dtype == "int8":
            kq, ks = quantize_reference(keys.reshape(3, -1, n_kv, hd))
            vq, vs = quantize_reference(values.reshape(3, -1, n_kv, hd))
            k64, v64 = kq.astype(np.float64) * ks[..., None], vq.astype(np.float64) * vs[..., None]
        else:
            k64 = keys.astype(np.float16).astype(np.float64).reshape(3, -1, n_kv, hd)
            v64 = values.astype(np.float16).astype(np.float64).reshape(3, -1, n_kv, hd)
        for n_rows in (1, 2, 16, 64, 100):
            pairs = row_pairs(n_rows)
            q = rng.standard_normal((n_rows, n_heads * hd), dtype=np.float32)
            for window in (0, 300):
                new, old = run_both(monkeypatch, lambda: attend_window(ctx, slots, layer, q, n_heads, pairs, scale,
                                                                       window))
                assert np.array_equal(bits(new), bits(old)), f"{n_rows} rows, window {window}: bits differ"
                for r, (s, i) in enumerate(pairs[:24]):
                    if s < 0:
                        assert not new[r].any(), "padding row must get zeros"
                        continue
                    lo = max(0, i - window + 1) if window else 0
                    ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), k64[s, lo:i + 1],
                                              v64[s, lo:i + 1], scale)
                    assert np.isfinite(new[r]).all(), f"NaN leaked into row {r} (slot {s}, index {i})"
                    assert np.abs(new[r] - ref).max() <= 2e-5 * np.abs(v64).max(), f"row {r} (slot {s}, index {i})"


@pytest.mark.gpu
@pytest.mark.parametrize("n_rows", [1, 16])
def test_decode_split_plan_replays_in_a_graph(ctx, backend, rng, monkeypatch, n_rows):
    """A graph recorded with the split plan (long slots, short and long rows) replays, with new rows
    each time, the bits of the legacy kernel run eagerly: the arrival counters are back at zero
    after every call."""
    cuda_only(backend)
    n_heads, n_kv, hd, layer, scale = 32, 8, 128, 0, 0.0883883
    width = n_heads * hd
    keys = rng.standard_normal((3, LENGTHS[0], n_kv * hd), dtype=np.float32)
    values = rng.standard_normal((3, LENGTHS[0], n_kv * hd), dtype=np.float32)
    with S.Slots(ctx, 3, 1, N_CTX, n_kv, hd) as slots:
        fill(ctx, slots, layer, keys, values)
        steps = []
        for step in range(3):
            pairs = row_pairs(n_rows + 3 * step)[3 * step:]
            steps.append((rng.standard_normal((n_rows, width), dtype=np.float32), rows_array(pairs)))
        assert_graph_replays_legacy(ctx, slots, layer, monkeypatch, steps, n_heads, hd, scale)


@pytest.mark.gpu
@pytest.mark.parametrize("var", ["STRATA_ATTENTION_NARROW", "STRATA_ATTENTION_EARLY_KV"])
def test_narrow_switch_refuses_other_values(ctx, backend, rng, monkeypatch, var):
    """STRATA_ATTENTION_NARROW and STRATA_ATTENTION_EARLY_KV take 0 or 1: anything else fails the call with an
    error naming the variable, rather than silently timing one side of an A/B twice."""
    cuda_only(backend)
    n_heads, n_kv, hd, layer = 8, 2, 128, 0
    keys = rng.standard_normal((3, LENGTHS[0], n_kv * hd), dtype=np.float32)
    with S.Slots(ctx, 3, 1, N_CTX, n_kv, hd) as slots:
        fill(ctx, slots, layer, keys, keys)
        q = rng.standard_normal((1, n_heads * hd), dtype=np.float32)
        monkeypatch.setenv(var, "yes")
        with pytest.raises(S.StrataError, match=var):
            attend_window(ctx, slots, layer, q, n_heads, [(0, 40)], 0.088, 0)
        monkeypatch.delenv(var)
        assert np.isfinite(attend_window(ctx, slots, layer, q, n_heads, [(0, 40)], 0.088, 0)).all()
