"""strata_logits_adjust (grammar masks, logit bias, penalties) on every backend:
against a float64 NumPy reference, a row's result independent of the other
rows and of its position in the batch, -inf masks honoured by argmax and the
sampler, captured graphs following new table contents, and argument errors."""

import numpy as np
import pytest

from kernel_refs import buffer_of
from strata import _ffi as S


def reference(logits, row_slots, table):
    """strata.h's rule in float64, rounding to F32 after each operation as the kernel does."""
    out = logits.astype(np.float64).copy()
    n_slots = table.shape[0]
    for r, s in enumerate(row_slots):
        if not 0 <= s < n_slots:
            continue
        x = logits[r].astype(np.float64)
        add, rep = table[s, 0].astype(np.float64), table[s, 1].astype(np.float64)
        penalised = np.where(x > 0, x / rep, x * rep)
        x = np.where(rep != 1, penalised, x).astype(np.float32).astype(np.float64)
        with np.errstate(invalid="ignore"):
            out[r] = x + add
    return out


def run(ctx, logits, row_slots, table, pad=12):
    bl, l_off = buffer_of(ctx, logits.astype(np.float32), pad)
    bs, s_off = buffer_of(ctx, np.asarray(row_slots, np.int32), 4)
    bt, t_off = buffer_of(ctx, table.astype(np.float32), 8)
    S.logits_adjust(ctx, bl, l_off, logits.shape[0], logits.shape[1], bs, s_off, bt, t_off, table.shape[0])
    out = bl.to_numpy(np.float32, logits.shape, l_off)
    for b in (bl, bs, bt):
        b.close()
    return out


def random_table(rng, n_slots, vocab):
    table = np.zeros((n_slots, 2, vocab), np.float32)
    table[:, 1] = 1.0
    for s in range(n_slots):
        kind = s % 4
        if kind == 1:        # logit bias and penalties: arbitrary additive terms
            table[s, 0] = rng.normal(0, 3, vocab).astype(np.float32)
        if kind == 2:        # repetition penalty on some tokens, a grammar mask on others
            seen = rng.random(vocab) < 0.3
            table[s, 1, seen] = rng.uniform(0.5, 2.0, seen.sum()).astype(np.float32)
            table[s, 0, rng.random(vocab) < 0.5] = -np.inf
        if kind == 3:        # everything at once
            table[s, 0] = rng.normal(0, 1, vocab).astype(np.float32)
            table[s, 1] = rng.uniform(0.8, 1.6, vocab).astype(np.float32)
    return table


@pytest.mark.parametrize("vocab", [1, 7, 1000, 49152])
def test_against_float64(ctx, rng, vocab):
    n_rows, n_slots = 6, 5
    logits = rng.normal(0, 4, (n_rows, vocab)).astype(np.float32)
    logits[0, : min(vocab, 3)] = 0.0               # l == 0 takes the l * p branch
    table = random_table(rng, n_slots, vocab)
    row_slots = [3, -1, 2, 1, 7, 0]                # -1 and 7 (>= n_slots): untouched
    got = run(ctx, logits, row_slots, table)
    want = reference(logits, row_slots, table)
    np.testing.assert_array_equal(got, want.astype(np.float32))     # one rounding per operation: exact
    finite = np.isfinite(want)
    assert np.allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got[1], logits[1])
    np.testing.assert_array_equal(got[4], logits[4])


def test_row_independent_of_batch(ctx, rng):
    vocab, n_slots = 3000, 4
    logits = rng.normal(0, 2, (8, vocab)).astype(np.float32)
    table = random_table(rng, n_slots, vocab)
    row_slots = np.array([3, 2, 1, -1, 3, 0, 2, 1], np.int32)
    full = run(ctx, logits, row_slots, table)
    for r in range(8):
        alone = run(ctx, logits[r: r + 1], row_slots[r: r + 1], table)
        np.testing.assert_array_equal(alone[0], full[r])
    order = rng.permutation(8)
    shuffled = run(ctx, logits[order], row_slots[order], table)
    np.testing.assert_array_equal(shuffled, full[order])


def test_masked_tokens_never_chosen(ctx, rng):
    vocab = 500
    logits = rng.normal(0, 1, (4, vocab)).astype(np.float32)
    table = np.zeros((2, 2, vocab), np.float32)
    table[:, 1] = 1
    allowed = [17, 230, 499]
    table[0, 0] = -np.inf
    table[0, 0, allowed] = 0
    adjusted = run(ctx, logits, [0, 0, 0, 0], table)
    bl, _ = buffer_of(ctx, adjusted)
    out = S.Buffer(ctx, 16)
    S.argmax(ctx, bl, 0, 4, vocab, out, 0)
    assert set(out.to_numpy(np.int32, (4,)).tolist()) <= set(allowed)
    params = np.zeros(4, S.SAMPLING_PARAMS_DTYPE)
    params["temperature"] = 5.0                    # hot: without the mask any token could come up
    params["top_p"] = 1.0
    params["seed"] = 1234
    params["position"] = np.arange(4)
    bp, _ = buffer_of(ctx, params)
    S.sample(ctx, bl, 0, 4, vocab, bp, 0, out, 0)
    assert set(out.to_numpy(np.int32, (4,)).tolist()) <= set(allowed)
    for b in (bl, bp, out):
        b.close()


def test_graph_reads_table_and_slots_at_launch(ctx, rng):
    vocab, n_rows, n_slots = 300, 3, 3
    logits = rng.normal(0, 2, (n_rows, vocab)).astype(np.float32)
    src = S.Buffer.from_array(ctx, logits)
    work = S.Buffer(ctx, logits.nbytes)
    slots_buf = S.Buffer(ctx, 4 * n_rows)
    table_buf = S.Buffer(ctx, 4 * n_slots * 2 * vocab)
    idx = S.Buffer.from_array(ctx, np.arange(n_rows, dtype=np.int32))
    ctx.graph_begin()
    S.gather_rows(ctx, src, 0, n_rows, 4 * vocab, idx, 0, n_rows, work, 0)
    S.logits_adjust(ctx, work, 0, n_rows, vocab, slots_buf, 0, table_buf, 0, n_slots)
    graph = ctx.graph_end()
    try:
        for trial in range(3):
            table = random_table(rng, n_slots, vocab)
            row_slots = rng.integers(-1, n_slots, n_rows).astype(np.int32)
            table_buf.upload(table)
            slots_buf.upload(row_slots)
            graph.launch()
            got = work.to_numpy(np.float32, logits.shape)
            np.testing.assert_array_equal(got, reference(logits, row_slots, table).astype(np.float32))
    finally:
        graph.close()
        for b in (src, work, slots_buf, table_buf, idx):
            b.close()


def test_argument_errors(ctx):
    vocab = 16
    logits = S.Buffer(ctx, 4 * 2 * vocab)
    slots_buf = S.Buffer(ctx, 8)
    table = S.Buffer(ctx, 4 * 2 * vocab)
    before = logits.to_numpy(np.uint8, (logits.size,))
    with pytest.raises(S.StrataError, match="n_rows"):
        S.logits_adjust(ctx, logits, 0, 0, vocab, slots_buf, 0, table, 0, 1)
    with pytest.raises(S.StrataError, match="n_slots"):
        S.logits_adjust(ctx, logits, 0, 2, vocab, slots_buf, 0, table, 0, 0)
    with pytest.raises(S.StrataError, match="table"):
        S.logits_adjust(ctx, logits, 0, 2, vocab, slots_buf, 0, table, 0, 2)     # 2 slots need twice the bytes
    with pytest.raises(S.StrataError, match="row_slots"):
        S.logits_adjust(ctx, logits, 0, 2, vocab, slots_buf, 4, table, 0, 1)
    with pytest.raises(S.StrataError, match="logits"):
        S.logits_adjust(ctx, logits, 0, 2, vocab, slots_buf, 0, logits, 0, 1)    # table overlaps logits
    np.testing.assert_array_equal(logits.to_numpy(np.uint8, (logits.size,)), before)
    for b in (logits, slots_buf, table):
        b.close()
