"""int8 KV pools (strata.h STRATA_KV_INT8): kv_store's rounding rule, attention and
attention_window over int8 cells, rope_kv_store, and the page calls on an int8 pool.

The rule is checked exactly against a NumPy float32 re-computation (the same IEEE
operations the kernel does) and against float64 bounds (half a step per value);
attention is checked against float64 NumPy over the dequantized cells. A row's
stored bytes depend only on that row, so any chunking of the stores gives the
same page bytes (what makes prefix-cache pages exact, docs/kv_pool.md).
Runs on every backend of the `ctx` fixture (the CPU, and cuda:0 gpu-marked); the
CUDA kernels are also run by libstrata/cuda_emu/run.sh attention."""

import numpy as np
import pytest

from kernel_refs import buffer_of, rows_array
from strata import _ffi as S
from test_attention import attend, store
from test_kv_pages import attend_window, check_rows, scrambled_pages

P = S.PAGE_CELLS


def quantize_reference(x):
    """x [..., hd] float32 -> (q int8 [..., hd], scale float32 [...]): the strata.h rule in float32."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=-1)
    scale = (amax / np.float32(127)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))[..., None]
    q = np.where(scale[..., None] > 0, np.rint(x / safe), 0)
    return np.clip(q, -127, 127).astype(np.int8), scale


def split_page(data, n_layers, n_kv, hd):
    """An int8 page's bytes -> (q [layer, 2, kv, P, hd] int8, scales [layer, 2, kv, P] float32)."""
    n = n_layers * 2 * n_kv * P * hd
    q = np.frombuffer(data[:n], np.int8).reshape(n_layers, 2, n_kv, P, hd)
    scale = np.frombuffer(data[n:], np.float32).reshape(n_layers, 2, n_kv, P)
    return q, scale


def int8_slots(ctx, *args, **kw):
    return S.Slots(ctx, *args, kv_dtype="int8", **kw)


def test_store_rounding_rule(ctx, rng):
    """Stored int8 values and scales equal the float32 rule exactly, round half to even, a zero row
    stores zeros, and every dequantized value is within half a step of the float64 input."""
    n_kv, hd = 2, 16
    with int8_slots(ctx, 1, 2, P, n_kv, hd, n_pages=2) as slots:
        slots.map_pages(0, 0, [1])
        k = rng.standard_normal((P, n_kv * hd), dtype=np.float32) * np.float32(3)
        v = rng.standard_normal((P, n_kv * hd), dtype=np.float32) * np.float32(1e-3)
        k[5, :hd] = 0.0                                           # a zero row: scale 0, q 0
        k[6, :hd] = [127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5] + [0.0] * (hd - 8)  # scale 1: exact ties
        v[7, hd:] = np.float32(-4.0)                               # all values at -amax
        store(ctx, slots, 1, k, v, [(0, i) for i in range(P)])
        q, scale = split_page(slots.read_page(1), 2, n_kv, hd)
        for which, x in ((0, k), (1, v)):
            rows = x.reshape(P, n_kv, hd).transpose(1, 0, 2)  # [kv, P, hd]
            rq, rs = quantize_reference(rows)
            assert np.array_equal(q[1, which], rq) and np.array_equal(scale[1, which].view(np.uint32), rs.view(np.uint32))
            x64 = rows.astype(np.float64)
            amax = np.abs(x64).max(axis=-1)
            assert np.allclose(scale[1, which], amax / 127, rtol=1e-7, atol=0)
            err = np.abs(q[1, which].astype(np.float64) * scale[1, which][..., None] - x64)
            assert (err <= scale[1, which][..., None].astype(np.float64) * (0.5 + 1e-6)).all()
        assert not q[1, 0, 0, 5].any() and scale[1, 0, 0, 5] == 0
        assert list(q[1, 0, 0, 6, :8]) == [127, 0, 2, 2, 0, -2, -2, 126]
        assert (q[1, 1, 1, 7] == -127).all()


def test_store_is_chunk_invariant(ctx, rng):
    """The same cells stored in one call or out of order in chunks give identical page bytes."""
    n_kv, hd = 2, 8
    k = rng.standard_normal((2 * P, n_kv * hd), dtype=np.float32)
    v = rng.standard_normal((2 * P, n_kv * hd), dtype=np.float32)
    pages = []
    for chunks in (1, 7):
        with int8_slots(ctx, 1, 1, 2 * P, n_kv, hd, n_pages=2) as slots:
            slots.map_pages(0, 0, [1, 0])
            for c in np.array_split(rng.permutation(2 * P), chunks):
                store(ctx, slots, 0, k[c], v[c], [(0, int(i)) for i in c])
            pages.append((slots.read_page(0), slots.read_page(1)))
    assert pages[0] == pages[1]


@pytest.mark.parametrize("n_heads,n_kv,hd,n_ctx,window", [(4, 2, 8, 200, 0), (9, 3, 64, 300, 0),
                                                          (6, 1, 80, 129, 0), (4, 2, 8, 200, 70)])
def test_attention_int8_reference(ctx, rng, n_heads, n_kv, hd, n_ctx, window):
    """float64 attention over the dequantized cells, through a scrambled page table; a row's bits do
    not depend on the other rows of the call."""
    n_slots, layer, scale = 3, 1, 1 / np.sqrt(hd)
    slot_pages = -(-n_ctx // P)
    n_pages = n_slots * slot_pages + 5
    lengths = [n_ctx, int(rng.integers(P + 1, n_ctx)), 1]
    keys = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32) * 2
    values = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32)
    pairs = [(s, int(i)) for s in range(n_slots) for i in rng.choice(lengths[s], min(5, lengths[s]), replace=False)]
    pairs += [(0, P - 1), (0, P), (1, lengths[1] - 1)]
    pairs.insert(2, (-1, 5))
    q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
    table = scrambled_pages(rng, n_slots, slot_pages, n_pages)
    with int8_slots(ctx, n_slots, 2, n_ctx, n_kv, hd, n_pages=n_pages) as slots:
        for s in range(n_slots):
            slots.map_pages(s, 0, table[s])
            for chunk in np.array_split(rng.permutation(lengths[s]), 3):
                if len(chunk):
                    store(ctx, slots, layer, keys[s, chunk], values[s, chunk], [(s, int(i)) for i in chunk])
        run = (lambda qq, pp: attend_window(ctx, slots, layer, qq, n_heads, pp, scale, window)) if window else \
              (lambda qq, pp: attend(ctx, slots, layer, qq, n_heads, pp, scale))
        got = run(q, pairs)
        alone = np.stack([run(q[r:r + 1], [pairs[r]])[0] for r in (0, 3, len(pairs) - 1)])
    assert np.array_equal(alone.view(np.uint32), got[[0, 3, len(pairs) - 1]].view(np.uint32)), "batch changed bits"
    kq, ks = quantize_reference(keys.reshape(n_slots, n_ctx, n_kv, hd))
    vq, vs = quantize_reference(values.reshape(n_slots, n_ctx, n_kv, hd))
    k8 = kq.astype(np.float64) * ks[..., None]
    v8 = vq.astype(np.float64) * vs[..., None]
    check_rows(got, q, k8, v8, pairs, n_heads, scale, window)


def test_rope_kv_store_int8(ctx, rng):
    """The fused rope + store writes the int8 rule applied to the rotated K and the raw V."""
    n_q, n_kv, hd, n_ctx = 4, 2, 16, 100
    qp, kp = S.rope_params(S.RopeMode.HALF, n_q, hd), S.rope_params(S.RopeMode.HALF, n_kv, hd)
    width = (n_q + 2 * n_kv) * hd
    pairs = [(0, i) for i in range(n_ctx)]
    qkv = rng.standard_normal((n_ctx, width), dtype=np.float32)
    with int8_slots(ctx, 1, 1, n_ctx, n_kv, hd, n_pages=3) as slots:
        slots.map_pages(0, 0, [2, 0])
        slots.write_positions(0, 0, np.tile(np.arange(n_ctx, dtype=np.int32)[:, None] * 3, (1, 4)))
        buf, off = buffer_of(ctx, qkv)
        br, _ = buffer_of(ctx, rows_array(pairs))
        S.rope_kv_store(ctx, qp, kp, slots, 0, buf, off, width, n_ctx, br, 0)
        rotated = buf.to_numpy(np.float32, (n_ctx, width))
        buf.close()
        br.close()
        for page, cells in ((2, range(0, P)), (0, range(P, n_ctx))):
            q, scale = split_page(slots.read_page(page), 1, n_kv, hd)
            c = np.array(cells)
            for which, lo in ((0, n_q * hd), (1, (n_q + n_kv) * hd)):
                rows = rotated[c, lo:lo + n_kv * hd].reshape(len(c), n_kv, hd).transpose(1, 0, 2)
                rq, rs = quantize_reference(rows)
                assert np.array_equal(q[0, which, :, :len(c)], rq)
                assert np.array_equal(scale[0, which, :, :len(c)], rs)


def test_int8_page_calls(ctx, rng):
    """Page size, read/write/copy round trips (values then scales), and what attention reads."""
    n_kv, hd, n_heads, n_layers = 2, 8, 4, 3
    with int8_slots(ctx, 2, n_layers, 2 * P, n_kv, hd, n_pages=4) as slots:
        size = slots.page_bytes()
        assert size == n_layers * 2 * n_kv * P * (hd + 4)
        slots.map_pages(0, 0, [1])
        for layer in range(n_layers):
            store(ctx, slots, layer, rng.standard_normal((P, n_kv * hd), dtype=np.float32),
                  rng.standard_normal((P, n_kv * hd), dtype=np.float32), [(0, i) for i in range(P)])
        data = slots.read_page(1)
        assert len(data) == size
        slots.write_page(2, data)
        slots.copy_page(3, 1)
        assert slots.read_page(2) == data == slots.read_page(3)
        q = rng.standard_normal((1, n_heads * hd), dtype=np.float32)
        ref = attend(ctx, slots, 2, q, n_heads, [(0, P - 1)], 0.4)
        for page in (2, 3):
            slots.map_pages(1, 0, [page])
            got = attend(ctx, slots, 2, q, n_heads, [(1, P - 1)], 0.4)
            assert np.array_equal(ref.view(np.uint32), got.view(np.uint32))
        with pytest.raises(S.StrataError):
            slots.write_page(2, data[:-4])


def test_kv_dtype_errors(ctx):
    with pytest.raises(ValueError):
        S.Slots(ctx, 1, 1, P, 1, 8, n_pages=1, kv_dtype="int4")
    with pytest.raises(ValueError):
        S.Slots(ctx, 1, 1, P, 1, 8, kv_dtype="int8")  # an int8 pool must be paged
