"""Slot sets: position tables, lengths, reset, truncate, deltas and the debug
table share, each touching only the slot it names."""

import numpy as np
import pytest

from strata import _ffi as S


def positions(rng, n):
    return rng.integers(-50, 5000, (n, 4)).astype(np.int32)


def test_fresh_slots_are_zeroed(ctx):
    with S.Slots(ctx, 4, 2, 16, 2, 8) as slots:
        for s in range(4):
            assert slots.length(s) == 0
            assert not slots.read_positions(s, 0, 16).any()


def test_write_read_lengths(ctx, rng):
    with S.Slots(ctx, 3, 1, 12, 1, 4) as slots:
        a, b = positions(rng, 5), positions(rng, 4)
        slots.write_positions(1, 0, a)
        assert slots.length(1) == 5
        slots.write_positions(1, 5, b)              # append at the end
        assert slots.length(1) == 9
        slots.write_positions(1, 2, a[:2])          # overwrite inside keeps the length
        assert slots.length(1) == 9
        got = slots.read_positions(1, 0, 9)
        assert np.array_equal(got, np.concatenate([a[:2], a[:2], a[4:], b]))
        assert slots.length(0) == 0 and slots.length(2) == 0
        assert not slots.read_positions(0, 0, 12).any() and not slots.read_positions(2, 0, 12).any()
        with pytest.raises(S.StrataError) as e:
            slots.write_positions(1, 10, a[:1])     # would leave a gap
        assert e.value.status == S.Status.ERR_INVALID_ARGUMENT and "gap" in e.value.message
        with pytest.raises(S.StrataError):
            slots.write_positions(1, 9, positions(rng, 4))  # past n_ctx


def test_truncate_and_reset_touch_one_slot(ctx, rng):
    with S.Slots(ctx, 2, 1, 8, 1, 4) as slots:
        p0, p1 = positions(rng, 8), positions(rng, 8)
        slots.write_positions(0, 0, p0)
        slots.write_positions(1, 0, p1)
        slots.set_delta(0, 5)
        slots.truncate(0, 3)
        assert slots.length(0) == 3
        got = slots.read_positions(0, 0, 8)
        assert np.array_equal(got[:3], p0[:3]) and not got[3:].any()
        slots.truncate(0, 6)                        # never grows the length
        assert slots.length(0) == 3
        assert np.array_equal(slots.read_positions(1, 0, 8), p1)
        slots.reset(0)
        assert slots.length(0) == 0 and not slots.read_positions(0, 0, 8).any()
        assert slots.length(1) == 8 and np.array_equal(slots.read_positions(1, 0, 8), p1)


def test_debug_share_table_redirects_writes(ctx, rng):
    with S.Slots(ctx, 3, 0, 6, 1, 2) as slots:
        p = positions(rng, 6)
        slots.debug_share_table(2, 0)
        slots.write_positions(2, 0, p)
        assert np.array_equal(slots.read_positions(0, 0, 6), p), "slot 2 must write slot 0's table"
        assert np.array_equal(slots.read_positions(2, 0, 6), p)
        slots.reset(2)                               # undoes the share, zeroes slot 2's own table
        assert not slots.read_positions(2, 0, 6).any()
        assert np.array_equal(slots.read_positions(0, 0, 6), p)


@pytest.mark.parametrize("bad", [
    dict(n_slots=0), dict(n_layers=-1), dict(n_ctx=0), dict(n_kv_heads=0), dict(head_dim=3), dict(head_dim=514),
])
def test_bad_slot_params(ctx, bad):
    params = dict(n_slots=2, n_layers=1, n_ctx=4, n_kv_heads=1, head_dim=4) | bad
    with pytest.raises(S.StrataError) as e:
        S.Slots(ctx, **params)
    assert e.value.status == S.Status.ERR_INVALID_ARGUMENT
    assert next(iter(bad)) in e.value.message


def test_slot_index_out_of_range(ctx):
    with S.Slots(ctx, 2, 1, 4, 1, 4) as slots:
        for call in (lambda: slots.reset(2), lambda: slots.length(-1), lambda: slots.set_delta(5, 0),
                     lambda: slots.truncate(0, 5), lambda: slots.debug_share_table(0, 2),
                     lambda: slots.read_positions(1, 3, 2)):
            with pytest.raises(S.StrataError) as e:
                call()
            assert e.value.status == S.Status.ERR_INVALID_ARGUMENT and "out of range" in e.value.message
