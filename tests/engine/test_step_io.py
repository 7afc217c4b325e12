"""StepIO and DecodeAhead without a model: the step buffer's fixed layout, padding, one upload per step,
and the decode-ahead guess (taken only for exactly the rows it computed, its tokens in alternating halves
of the host buffer, the next step's inputs advanced on the device)."""

from __future__ import annotations

import numpy as np
import pytest

from strata import _ffi as F
from strata.engine.decode_ahead import DecodeAhead
from strata.engine.step_io import PARAMS, StepIO


@pytest.fixture
def ctx(device):
    context = F.Context(device, 1)
    yield context
    context.close()


@pytest.fixture
def io(ctx):
    step = StepIO(ctx, max_rows=6, max_logits=3)
    yield step
    step.close()


def test_layout_is_packed_aligned_and_fixed(io):
    assert PARAMS.itemsize == 32 and io.params_off == 0
    assert io.ids_off == 3 * 32 and io.rows_off == io.ids_off + 6 * 4 and io.logit_idx_off == io.rows_off + 6 * 8
    assert io.adjust_off == io.logit_idx_off + 3 * 4 and io.out_off == io.adjust_off + 3 * 4
    assert io.nbytes == io.out_off + 3 * 4
    assert all(off % 4 == 0 for off in (io.ids_off, io.rows_off, io.logit_idx_off, io.adjust_off, io.out_off))
    assert io.params_off % 8 == 0
    # the host views share one array, so one upload carries them all
    for view in (io.params, io.ids, io.rows, io.logit_idx, io.adjust):
        assert np.shares_memory(view, io.host)


def test_clear_makes_the_unused_rows_padding_and_the_unused_samples_greedy(io):
    io.ids[:] = 9
    io.rows[:] = (3, 7)
    io.params["temperature"] = 0.7
    io.logit_idx[:] = 5
    io.clear(n_rows=2, n_logits=1)
    assert io.ids.tolist() == [9, 9, 0, 0, 0, 0]
    assert io.rows.tolist() == [[3, 7]] * 2 + [[-1, 0]] * 4
    assert io.params["temperature"].tolist() == pytest.approx([0.7, 0.0, 0.0])
    assert io.logit_idx.tolist() == [5, 1, 2]        # valid row indices, whatever they hold


def test_upload_then_the_device_copy_holds_the_host_bytes(ctx, io, rng):
    io.ids[:] = rng.integers(0, 1000, io.max_rows)
    io.rows[:] = rng.integers(-1, 4, (io.max_rows, 2))
    io.upload()
    assert np.array_equal(io.buffer.to_numpy(np.uint8, io.out_off), io.host)


def write_out_ids(io: StepIO, ids: list[int]) -> None:
    """What the sampler leaves in out_ids at the end of a step."""
    io.buffer.upload(np.asarray(ids, dtype=np.int32), io.out_off)


def test_launched_tokens_land_in_alternating_halves_and_stay_apart(ctx, io):
    ahead = DecodeAhead(ctx, io, io.max_logits)
    try:
        write_out_ids(io, [11, 12, 13])
        first = ahead._collect(3)
        write_out_ids(io, [21, 22, 23])
        second = ahead._collect(2)
        assert (first.turn, second.turn) == (0, 1)
        assert ahead.tokens(first) == [11, 12, 13] and ahead.tokens(second) == [21, 22]
    finally:
        ahead.close()


def test_a_guess_is_taken_only_for_exactly_its_rows(ctx, io):
    ahead = DecodeAhead(ctx, io, io.max_logits)
    try:
        write_out_ids(io, [1, 2])
        guess = ahead._collect(2)
        guess.expected = [(0, 5), (1, 9)]
        ahead.guess = guess
        assert ahead.take([(0, 5), (1, 9)]) is guess and (ahead.hits, ahead.misses) == (1, 0)
        for other in ([(0, 5)], [(1, 9), (0, 5)], [(0, 5), (1, 10)]):
            ahead.guess = guess
            assert ahead.take(other) is None and ahead.guess is None
        assert (ahead.hits, ahead.misses) == (1, 3)
        ahead.drop()                                   # nothing queued: not a miss
        ahead.guess = guess
        ahead.drop()
        assert ahead.guess is None and ahead.misses == 4
    finally:
        ahead.close()


def test_a_guessed_step_starts_from_the_last_tokens_one_position_on(ctx, io):
    """launch_guess advances the inputs on the device (ids <- sampled, index + 1, position + 1)
    before replaying the step: here a graph that copies row 0's (slot, index) to out_ids stands for the model."""
    n = 2
    io.clear(n_rows=n, n_logits=n)
    io.ids[:n] = (5, 6)
    io.rows[:n] = ((0, 3), (2, 8))
    io.params["position"][:n] = (3, 8)
    io.upload()
    write_out_ids(io, [41, 42])
    ctx.graph_begin()
    try:
        io.buffer.copy_from(io.buffer, dst_offset=io.out_off, src_offset=io.rows_off, n_bytes=8)
    finally:
        graph = ctx.graph_end()
    ahead = DecodeAhead(ctx, io, io.max_logits)
    try:
        ahead.launch_guess(graph, n, n, [(0, 3), (2, 8)])
        guess = ahead.take([(0, 4), (2, 9)])
        assert guess is not None and ahead.tokens(guess) == [0, 4]     # run after the advance
        rows = io.buffer.to_numpy(np.int32, (n, 2), io.rows_off)
        params = io.buffer.to_numpy(PARAMS, n, io.params_off)
        assert rows.tolist() == [[0, 4], [2, 9]] and params["position"].tolist() == [4, 9]
        assert io.buffer.to_numpy(np.int32, n, io.ids_off).tolist() == [41, 42]
    finally:
        ahead.close()
        graph.close()
