"""The CUDA prompt attention kernel (libstrata/src/cuda/cuda_attention_prompt.cu: launches of 128 rows
or more, head_dim 64 or 128) against the general kernel (STRATA_ATTENTION=legacy) and the pre-prompt
routing (STRATA_ATTENTION=noprompt), both read on every call, and against float64: the same bits for
prompt chunks from cell 0 and from mid-context (128, 256, 300 and 512 rows), for short chunks (1, 31,
32, 33 rows) riding in a launch with other slots' chunks, decode rows and padding rows (blocks that read
several slots go to the decode kernel), GQA groups 1, 3, 4, 8 and 16, F16 and int8 pools, sliding
windows on and off, NaN in every cell past each slot's written ones; and a recorded graph replays the
bits with new rows each time. GPU only: on the CPU backend the switch selects nothing."""

import numpy as np
import pytest

from attention_replay import assert_graph_replays_legacy, bits, cuda_only
from kernel_refs import attention_reference, rows_array
from strata import _ffi as S
from test_kv_int8 import quantize_reference
from test_kv_pages import attend_window, scrambled_pages

P = S.PAGE_CELLS
N_CTX = 2112
LENGTHS = [1100, 2048, 640]  # cells written per slot; every later cell holds NaN K and V


def chunk(slot, start, n):
    return [(slot, start + i) for i in range(n)]


# Each launch: its {slot, index} rows. Decode rows first, then chunks, as the runner lays them out.
LAUNCHES = {
    "512 from 0": chunk(1, 0, 512),
    "512 at 1536": chunk(1, 1536, 512),
    "300 from 0": chunk(1, 0, 300),
    "256 at 517": chunk(1, 517, 256),
    "128 at 900": chunk(1, 900, 128),
    "mixed": [(0, 700), (2, 37), (-1, 5), (0, 1099)] + chunk(1, 250, 280) + chunk(2, 64, 40) + chunk(0, 1000, 33)
             + chunk(2, 500, 31) + chunk(1, 2000, 32) + chunk(0, 5, 1) + [(-1, 0)] * 7,
    "mixed 150": [(0, 1099), (2, 600), (1, 2047)] + [(0, 900 + i) for i in range(4)] + chunk(1, 1500, 130)
                 + chunk(2, 0, 13),
}

SHAPES = [(32, 8, 128), (32, 8, 64), (9, 3, 64), (8, 8, 64), (16, 2, 128), (32, 2, 64)]  # 8B, 1B, 135M, G=1, 8, 16


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


def run_three(monkeypatch, call):
    """call() with the prompt kernel, with STRATA_ATTENTION=noprompt and with =legacy."""
    out = []
    for value in (None, "noprompt", "legacy"):
        if value is None:
            monkeypatch.delenv("STRATA_ATTENTION", raising=False)
        else:
            monkeypatch.setenv("STRATA_ATTENTION", value)
        out.append(call())
    monkeypatch.delenv("STRATA_ATTENTION", raising=False)
    return out


@pytest.mark.gpu
@pytest.mark.exactness
@pytest.mark.parametrize("kv_dtype", ["f16", "int8"])
@pytest.mark.parametrize("n_heads,n_kv,hd", SHAPES, ids=lambda v: str(v))
def test_prompt_kernel_matches_legacy_and_float64(ctx, backend, rng, monkeypatch, n_heads, n_kv, hd, kv_dtype):
    cuda_only(backend)
    layer, scale = 1, 1 / np.sqrt(hd)
    keys = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32) * 2
    values = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32)
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
        for name, pairs in LAUNCHES.items():
            n_rows = len(pairs)
            q = rng.standard_normal((n_rows, n_heads * hd), dtype=np.float32)
            for window in (0, 300):
                new, noprompt, old = run_three(
                    monkeypatch, lambda: attend_window(ctx, slots, layer, q, n_heads, pairs, scale, window))
                assert np.array_equal(bits(new), bits(old)), f"{name}, window {window}: bits differ from legacy"
                assert np.array_equal(bits(noprompt), bits(old)), f"{name}, window {window}: noprompt differs"
                for r in sorted({0, 3, n_rows // 3, n_rows // 2, n_rows - 8, n_rows - 1}):
                    s, i = pairs[r]
                    if s < 0:
                        assert not new[r].any(), "padding row must get zeros"
                        continue
                    lo = max(0, i - window + 1) if window else 0
                    ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), k64[s, lo:i + 1],
                                              v64[s, lo:i + 1], scale)
                    assert np.isfinite(new[r]).all(), f"NaN leaked into row {r} (slot {s}, index {i})"
                    assert np.abs(new[r] - ref).max() <= 2e-5 * np.abs(v64).max(), f"{name}: row {r} ({s}, {i})"


@pytest.mark.gpu
def test_prompt_kernel_replays_in_a_graph(ctx, backend, rng, monkeypatch):
    """A graph recorded with a 512-row prompt launch replays, with new rows and queries each time
    (a chunk from 0, a chunk mid-context, a mixed launch), the bits of the legacy kernel run eagerly."""
    cuda_only(backend)
    n_heads, n_kv, hd, layer, scale = 32, 8, 128, 0, 0.0883883
    width, n_rows = n_heads * hd, 512
    keys = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32)
    values = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32)
    with S.Slots(ctx, 3, 1, N_CTX, n_kv, hd) as slots:
        fill(ctx, slots, layer, keys, values)
        mixed = (LAUNCHES["mixed"] + [(-1, 0)] * n_rows)[:n_rows]
        steps = [(rng.standard_normal((n_rows, width), dtype=np.float32), rows_array(p))
                 for p in (chunk(1, 0, 512), chunk(1, 1536, 512), mixed)]
        assert_graph_replays_legacy(ctx, slots, layer, monkeypatch, steps, n_heads, hd, scale)


@pytest.mark.gpu
@pytest.mark.parametrize("value", ["nopromt", "LEGACY", "1", "prompt"])
def test_unknown_route_is_refused(ctx, backend, rng, monkeypatch, value):
    """STRATA_ATTENTION takes legacy, wide or noprompt (libstrata/src/core/env_switch.h, cuda_attention_route.cuh):
    any other value is an error naming them, for a prompt launch and a decode one, and out keeps its bytes.
    Before 2026-12-06 a typo silently ran the default kernels, so an A/B timed one kernel twice. Control: the
    same calls run once the variable is removed."""
    cuda_only(backend)
    n_heads, n_kv, hd, layer, scale = 9, 3, 64, 0, 0.125
    keys = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32)
    values = rng.standard_normal((3, max(LENGTHS), n_kv * hd), dtype=np.float32)
    with S.Slots(ctx, 3, 1, N_CTX, n_kv, hd) as slots:
        fill(ctx, slots, layer, keys, values)
        for pairs in (chunk(1, 0, 300), [(0, 700), (2, 37)]):
            n_rows, width = len(pairs), n_heads * hd
            bq = S.Buffer.from_array(ctx, rng.standard_normal((n_rows, width), dtype=np.float32))
            br = S.Buffer.from_array(ctx, rows_array(pairs))
            out = S.Buffer(ctx, n_rows * width * 4)
            try:
                out.fill(0x7F)
                monkeypatch.setenv("STRATA_ATTENTION", value)
                with pytest.raises(S.StrataError, match=rf"STRATA_ATTENTION={value}: expected legacy, wide or noprompt"):
                    S.attention_window(ctx, slots, layer, bq, 0, width, n_rows, n_heads, br, 0, scale, 0, out, 0)
                ctx.synchronize()
                assert (out.to_numpy(np.uint8, (n_rows * width * 4,)) == 0x7F).all(), "out was written"
                monkeypatch.delenv("STRATA_ATTENTION")
                S.attention_window(ctx, slots, layer, bq, 0, width, n_rows, n_heads, br, 0, scale, 0, out, 0)
                assert np.isfinite(out.to_numpy(np.float32, (n_rows, width))).all()
            finally:
                for b in (bq, br, out):
                    b.close()
