"""The paged KV pool: kv_store, rope_kv_store, attention and attention_window
read and write a slot's cells through its page table.

Checked against float64 NumPy through a scrambled (non-identity) page table,
bit for bit against the same cells in a slot set of fixed per-slot pages
(ABI 2's layout), and the page calls themselves: mapping, unmapping, the free
count, copy, sharing a page between slots, unmapped cells (stores skipped,
reads zero, nothing of another slot) and argument errors that change nothing.
Runs on every backend of the `ctx` fixture (the CPU, and cuda:0 gpu-marked)."""

import re
from pathlib import Path

import numpy as np
import pytest

from kernel_refs import attention_reference, buffer_of, rows_array
from strata import _ffi as S
from test_attention import attend, store

P = S.PAGE_CELLS


def scrambled_pages(rng, n_slots, slot_pages, n_pages):
    """A page table [n_slots, slot_pages] mapping distinct pool pages in random order."""
    return rng.permutation(n_pages)[:n_slots * slot_pages].reshape(n_slots, slot_pages).astype(np.int32)


def attend_window(ctx, slots, layer, q, n_heads, pairs, scale, window):
    n_rows = q.shape[0]
    bq, q_off = buffer_of(ctx, q, 8)
    br, _ = buffer_of(ctx, rows_array(pairs))
    out = S.Buffer(ctx, n_rows * n_heads * slots.head_dim * 4)
    out.fill(0x7F)
    S.attention_window(ctx, slots, layer, bq, q_off, q.shape[1], n_rows, n_heads, br, 0, scale, window, out, 0)
    got = out.to_numpy(np.float32, (n_rows, n_heads * slots.head_dim))
    for b in (bq, br, out):
        b.close()
    return got


def test_page_size_matches_library():
    text = (Path(S.__file__).resolve().parent.parent / "libstrata/include/strata.h").read_text()
    assert int(re.search(r"STRATA_PAGE_CELLS = (\d+)", text).group(1)) == P == 64


@pytest.mark.parametrize("n_heads,n_kv,hd,n_ctx,window", [(4, 2, 8, 200, 0), (9, 3, 64, 300, 0),
                                                          (6, 1, 80, 129, 0), (4, 2, 8, 200, 70)])
def test_attention_through_scrambled_pages(ctx, rng, n_heads, n_kv, hd, n_ctx, window):
    """float64 reference of attention over cells stored through a scrambled page table, and the same
    bits as a set of fixed per-slot pages holding the same cells."""
    n_slots, layer, scale = 3, 1, 1 / np.sqrt(hd)
    slot_pages = -(-n_ctx // P)
    n_pages = n_slots * slot_pages + 5
    lengths = [n_ctx, int(rng.integers(P + 1, n_ctx)), 1]
    keys = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32) * 2
    values = rng.standard_normal((n_slots, n_ctx, n_kv * hd), dtype=np.float32)
    pairs = [(s, int(i)) for s in range(n_slots) for i in rng.choice(lengths[s], min(5, lengths[s]), replace=False)]
    pairs += [(0, P - 1), (0, P), (1, lengths[1] - 1)]  # the cells either side of a page boundary
    pairs.insert(2, (-1, 5))
    q = rng.standard_normal((len(pairs), n_heads * hd), dtype=np.float32)
    table = scrambled_pages(rng, n_slots, slot_pages, n_pages)
    outs = []
    for paged in (True, False):
        with S.Slots(ctx, n_slots, 2, n_ctx, n_kv, hd, n_pages=n_pages if paged else None) as slots:
            if paged:
                for s in range(n_slots):
                    slots.map_pages(s, 0, table[s])
                    assert np.array_equal(slots.read_pages(s), table[s])
            for s in range(n_slots):
                cells = rng.permutation(lengths[s])  # out of order, in chunks: addressed by index only
                for chunk in np.array_split(cells, 3):
                    if len(chunk):
                        store(ctx, slots, layer, keys[s, chunk], values[s, chunk], [(s, int(i)) for i in chunk])
            outs.append(attend_window(ctx, slots, layer, q, n_heads, pairs, scale, window) if window
                        else attend(ctx, slots, layer, q, n_heads, pairs, scale))
    got, fixed = outs
    assert np.array_equal(got.view(np.uint32), fixed.view(np.uint32)), "paging changed the bits"
    k16 = keys.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    v16 = values.astype(np.float16).astype(np.float64).reshape(n_slots, n_ctx, n_kv, hd)
    check_rows(got, q, k16, v16, pairs, n_heads, scale, window)


def check_rows(got, q, keys, values, pairs, n_heads, scale, window) -> None:
    """Each attention output row against the float64 reference over the K/V the cache holds
    (keys, values: float64 [n_slots, n_ctx, n_kv, hd]); padding rows (slot -1) must be zeros."""
    hd = keys.shape[-1]
    for r, (s, i) in enumerate(pairs):
        if s < 0:
            assert not got[r].any(), "padding row must get zeros"
            continue
        lo = max(0, i - window + 1) if window else 0
        ref = attention_reference(q[r].reshape(n_heads, hd).astype(np.float64), keys[s, lo:i + 1],
                                  values[s, lo:i + 1], scale)
        assert np.abs(got[r] - ref).max() <= 2e-5 * np.abs(values).max(), f"row {r} (slot {s}, index {i})"


def test_rope_kv_store_through_pages(ctx, rng):
    """The fused rope + store writes the same bits through a scrambled table as into fixed pages."""
    n_q, n_kv, hd, n_ctx = 4, 2, 16, 150
    qp, kp = S.rope_params(S.RopeMode.HALF, n_q, hd), S.rope_params(S.RopeMode.HALF, n_kv, hd)
    width = (n_q + 2 * n_kv) * hd
    pairs = [(s, i) for s in (0, 1) for i in range(n_ctx if s else 70)] + [(-1, 2)]
    n_rows = len(pairs)
    qkv = rng.standard_normal((n_rows, width), dtype=np.float32)
    probes = [(0, 63), (0, 64), (0, 69), (1, 0), (1, 127), (1, 128), (1, 149)]
    q_probe = rng.standard_normal((len(probes), n_q * hd), dtype=np.float32)
    outs = []
    for paged in (True, False):
        with S.Slots(ctx, 2, 1, n_ctx, n_kv, hd, n_pages=9 if paged else None) as slots:
            if paged:
                slots.map_pages(0, 0, [7, 2, 5])
                slots.map_pages(1, 0, [0, 8, 4])
            for s in (0, 1):
                slots.write_positions(s, 0, np.tile(np.arange(n_ctx, dtype=np.int32)[:, None] * 3, (1, 4)))
            buf, off = buffer_of(ctx, qkv)
            br, _ = buffer_of(ctx, rows_array(pairs))
            S.rope_kv_store(ctx, qp, kp, slots, 0, buf, off, width, n_rows, br, 0)
            rotated = buf.to_numpy(np.float32, (n_rows, width))
            buf.close()
            br.close()
            outs.append((rotated, attend(ctx, slots, 0, q_probe, n_q, probes, 0.25)))
    assert np.array_equal(outs[0][0], outs[1][0])
    assert np.array_equal(outs[0][1].view(np.uint32), outs[1][1].view(np.uint32))


def test_map_unmap_counts_and_errors(ctx):
    with S.Slots(ctx, 3, 2, 2 * P + 1, 1, 4, n_pages=6) as slots:
        assert slots.slot_pages == 3 and slots.pages() == (6, 6)
        assert (slots.read_pages(0) == -1).all()
        slots.map_pages(0, 0, [4, 1])
        slots.map_pages(1, 0, [4])            # shared: one page, two entries
        assert slots.pages() == (6, 4)
        with pytest.raises(S.StrataError) as e:
            slots.map_pages(2, 0, [0, 6])     # 6 is not a pool page: nothing changes
        assert e.value.status == S.Status.ERR_INVALID_ARGUMENT and "0..5" in e.value.message
        assert (slots.read_pages(2) == -1).all() and slots.pages() == (6, 4)
        with pytest.raises(S.StrataError):
            slots.map_pages(2, 2, [0, 1])     # past the slot's 3 entries
        with pytest.raises(S.StrataError):
            slots.map_pages(3, 0, [0])        # no slot 3
        with pytest.raises(S.StrataError):
            slots.copy_page(2, 2)
        slots.unmap_pages(0, 0, 1)
        assert slots.pages() == (6, 4)        # page 4 is still mapped by slot 1
        slots.unmap_pages(1, 0, 1)
        assert slots.pages() == (6, 5)
        slots.map_pages(0, 1, [-1])
        assert slots.pages() == (6, 6) and (slots.read_pages(0) == -1).all()
    with S.Slots(ctx, 2, 1, 100, 1, 4) as fixed:  # ABI 2's layout: every slot owns its pages
        assert fixed.pages() == (4, 0)
        assert list(fixed.read_pages(1)) == [2, 3]


def test_copy_share_and_unmapped_cells(ctx, rng):
    """A copied page reads like its source; a page shared by two slots gives both the same bits;
    a store to an unmapped cell is skipped and reads as zeros, never another slot's cells."""
    n_kv, hd, n_heads, n_ctx = 1, 8, 2, 2 * P
    k = rng.standard_normal((P, n_kv * hd), dtype=np.float32)
    v = rng.standard_normal((P, n_kv * hd), dtype=np.float32) + 3
    q = rng.standard_normal((1, n_heads * hd), dtype=np.float32)
    with S.Slots(ctx, 3, 1, n_ctx, n_kv, hd, n_pages=4) as slots:
        slots.map_pages(0, 0, [2])
        store(ctx, slots, 0, k, v, [(0, i) for i in range(P)])
        slots.map_pages(1, 0, [2])            # slot 1 shares slot 0's page
        slots.copy_page(3, 2)
        slots.map_pages(2, 0, [3])            # slot 2 reads a copy
        outs = [attend(ctx, slots, 0, q, n_heads, [(s, P - 1)], 0.3) for s in range(3)]
        assert all(np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)) for o in outs)
        ref = attention_reference(q[0].reshape(n_heads, hd).astype(np.float64),
                                  k.astype(np.float16).astype(np.float64).reshape(P, n_kv, hd),
                                  v.astype(np.float16).astype(np.float64).reshape(P, n_kv, hd), 0.3)
        assert np.abs(outs[0][0] - ref).max() <= 2e-5 * 4 * np.abs(v).max()
        # Slot 1's second page is unmapped: the store is skipped, the cells read as zeros.
        store(ctx, slots, 0, k[:1] + 100, v[:1] + 100, [(1, P)])
        got = attend(ctx, slots, 0, q, n_heads, [(1, P)], 0.3)
        k_all = np.concatenate([k, np.zeros_like(k[:1])]).astype(np.float16).astype(np.float64)
        v_all = np.concatenate([v, np.zeros_like(v[:1])]).astype(np.float16).astype(np.float64)
        ref = attention_reference(q[0].reshape(n_heads, hd).astype(np.float64), k_all.reshape(P + 1, n_kv, hd),
                                  v_all.reshape(P + 1, n_kv, hd), 0.3)
        assert np.abs(got[0] - ref).max() <= 2e-5 * 4 * np.abs(v).max()
        # Nothing reached the pool: every mapped page still reads as before.
        assert np.array_equal(attend(ctx, slots, 0, q, n_heads, [(0, P - 1)], 0.3).view(np.uint32),
                              outs[0].view(np.uint32))
        assert slots.pages() == (4, 2)


def test_read_write_page_round_trip(ctx, rng):
    """A page written from host memory reads back byte for byte and is what attention reads;
    a wrong size or page is refused."""
    n_kv, hd, n_heads = 2, 8, 4
    with S.Slots(ctx, 2, 3, 2 * P, n_kv, hd, n_pages=3) as slots:
        size = slots.page_bytes()
        assert size == 3 * 2 * n_kv * P * hd * 2
        k = rng.standard_normal((P, n_kv * hd), dtype=np.float32)
        v = rng.standard_normal((P, n_kv * hd), dtype=np.float32)
        slots.map_pages(0, 0, [1])
        for layer in range(3):
            store(ctx, slots, layer, k + layer, v - layer, [(0, i) for i in range(P)])
        data = slots.read_page(1)
        assert len(data) == size
        halves = np.frombuffer(data, np.uint16).reshape(3, 2, n_kv, P, hd)
        assert np.array_equal(halves[2, 1], (v - 2).astype(np.float16).view(np.uint16).reshape(P, n_kv, hd)
                              .transpose(1, 0, 2))
        slots.write_page(2, data)
        assert slots.read_page(2) == data
        slots.map_pages(1, 0, [2])
        q = rng.standard_normal((1, n_heads * hd), dtype=np.float32)
        a = attend(ctx, slots, 2, q, n_heads, [(0, P - 1)], 0.4)
        b = attend(ctx, slots, 2, q, n_heads, [(1, P - 1)], 0.4)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        with pytest.raises(S.StrataError):
            slots.write_page(2, data[:-2])
        with pytest.raises(S.StrataError):
            slots.read_page(3)


def test_graph_reads_the_page_table_at_launch(ctx, rng):
    """A captured attention reads the page table when it runs: remapping the slot between launches
    changes what the same graph reads, exactly as eager attention over the new mapping would."""
    n_kv, hd, n_heads = 1, 8, 2
    with S.Slots(ctx, 1, 1, P, n_kv, hd, n_pages=2) as slots:
        for page, shift in ((0, 0.0), (1, 5.0)):
            slots.map_pages(0, 0, [page])
            k = rng.standard_normal((P, n_kv * hd), dtype=np.float32)
            store(ctx, slots, 0, k, k + shift, [(0, i) for i in range(P)])
        q = rng.standard_normal((1, n_heads * hd), dtype=np.float32)
        eager = []
        for page in (0, 1):
            slots.map_pages(0, 0, [page])
            eager.append(attend(ctx, slots, 0, q, n_heads, [(0, P - 1)], 0.3))
        assert not np.array_equal(eager[0], eager[1])
        bq, q_off = buffer_of(ctx, q)
        br, _ = buffer_of(ctx, rows_array([(0, P - 1)]))
        out = S.Buffer(ctx, n_heads * hd * 4)
        ctx.graph_begin()
        S.attention(ctx, slots, 0, bq, q_off, q.shape[1], 1, n_heads, br, 0, 0.3, out, 0)
        graph = ctx.graph_end()
        try:
            for page in (0, 1, 0):
                slots.map_pages(0, 0, [page])
                graph.launch()
                got = out.to_numpy(np.float32, (1, n_heads * hd))
                assert np.array_equal(got.view(np.uint32), eager[page].view(np.uint32))
        finally:
            graph.close()
            for b in (bq, br, out):
                b.close()
