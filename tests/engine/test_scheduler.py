"""The scheduler alone, without a model: admission, decode rows, prefill chunks within the budget
(BYIELD/resume, docs/design.md), the queue bound, cancellation and slot reuse."""

from __future__ import annotations

import pytest

from strata.engine.request import Request, State
from strata.engine.sampling import SamplingParams
from strata.engine.scheduler import QueueFull, Scheduler, StepPlan


def request(n_prompt: int) -> Request:
    return Request(list(range(1, n_prompt + 1)), SamplingParams())


def submitted(scheduler: Scheduler, *prompt_lens: int) -> list[Request]:
    requests = [request(n) for n in prompt_lens]
    for r in requests:
        scheduler.submit(r)
    return requests


def chunks(plan: StepPlan) -> list[tuple[Request, int, int]]:
    return [(c.request, c.start, c.length) for c in plan.prefill]


def run_step(scheduler: Scheduler) -> StepPlan:
    """One step as the engine runs it: schedule, then advance computed counts and sample one token each."""
    plan = scheduler.schedule()
    scheduler.return_slots(scheduler.take_released())
    for chunk in plan.prefill:
        chunk.request.num_computed += chunk.length
    for r in plan.decode:
        r.num_computed += 1
    for r in plan.sampled_requests():
        r.record_token(7, 0.0)
    return plan



def test_admits_in_arrival_order_into_the_lowest_free_slots():
    s = Scheduler(num_slots=2, chunk=64, max_queue=4)
    a, b, c = submitted(s, 3, 4, 5)
    plan = s.schedule()
    assert plan.admitted == [a, b] and (a.slot, b.slot) == (0, 1)
    assert a.state is b.state is State.RUNNING and c.state is State.WAITING and s.queue_len == 1
    assert chunks(plan) == [(a, 0, 3), (b, 0, 4)]
    assert plan.decode == [] and plan.num_rows == 7
    assert plan.sampled_requests() == [a, b]          # both prompts complete in this step


@pytest.mark.parametrize("align, expected", [(False, [(0, 8), (8, 8), (16, 4)]), (True, [(0, 7), (7, 7), (14, 6)])])
def test_a_long_prompt_yields_at_each_chunk_and_decoding_never_waits(align, expected):
    s = Scheduler(num_slots=2, chunk=8, max_queue=0, align=align)
    short, long = request(3), request(20)
    s.submit(short)
    run_step(s)                                     # short: prompt read, first token
    s.submit(long)
    chunks, decode_rows = [], []
    for _ in range(3):
        plan = run_step(s)
        chunks += [(c.start, c.length) for c in plan.prefill]
        decode_rows.append([r.slot for r in plan.decode])
        if align and plan.prefill and not plan.prefill[-1].completes_prompt:
            assert plan.num_rows == 8                 # aligned: decode row + prompt tokens fill the chunk
    # unaligned, budget 8 per step: one decode row (short) leaves the chunk its 8 tokens (decode rows are
    # extra); aligned: the decode row takes one of the 8
    assert chunks == expected
    assert decode_rows == [[0], [0], [0]]            # a token for `short` in every step
    assert not long.in_prefill and len(long.output_ids) == 1
    plan = s.schedule()
    assert plan.decode == [short, long] and plan.prefill == []


def test_prefill_budget_is_shared_oldest_admission_first():
    s = Scheduler(num_slots=3, chunk=10, max_queue=0)
    a, b, _ = submitted(s, 6, 6, 6)
    plan = s.schedule()
    assert chunks(plan) == [(a, 0, 6), (b, 0, 4)]
    assert plan.sampled_requests() == [a]            # b's prompt is not complete: no token for it yet


def test_queue_bound_counts_free_slots_and_refuses_past_it():
    s = Scheduler(num_slots=2, chunk=16, max_queue=1)
    submitted(s, 2, 2, 2)                            # 2 free slots + 1 queue place
    with pytest.raises(QueueFull, match="2 slots are busy"):
        s.submit(request(2))
    assert s.queue_len == 3


def test_cancelled_requests_leave_and_their_slot_is_reused_after_the_runner_resets_it():
    s = Scheduler(num_slots=1, chunk=16, max_queue=2)
    first, waiting_cancelled, second = submitted(s, 2, 2, 2)
    run_step(s)
    first.cancelled = waiting_cancelled.cancelled = True
    plan = s.schedule()
    assert first.finish_reason == waiting_cancelled.finish_reason == "cancelled"
    assert plan.admitted == [] and plan.empty        # slot 0 is released but not reset yet
    assert s.take_released() == [0]
    s.return_slots([0])
    plan = s.schedule()
    assert plan.admitted == [second] and second.slot == 0


def test_finish_is_idempotent_and_frees_the_slot_once():
    s = Scheduler(num_slots=2, chunk=16, max_queue=0)
    r = request(2)
    s.submit(r)
    s.schedule()
    s.finish(r, "stop")
    s.finish(r, "length")
    assert r.finish_reason == "stop" and s.released == [r.slot] and s.busy_slots == 0
    assert s.has_work()                              # the released slot still needs its reset
    s.return_slots(s.take_released())
    assert not s.has_work() and s.free_slots == [0, 1]


def test_a_waiting_request_finished_before_admission_never_gets_a_slot():
    s = Scheduler(num_slots=1, chunk=16, max_queue=2)
    _, waiting = submitted(s, 2, 2)
    s.schedule()
    s.finish(waiting, "error")
    assert s.queue_len == 0 and waiting.slot is None and waiting.finished


@pytest.mark.parametrize("num_decode, budget", [(0, 512), (1, 511), (64, 448), (384, 128), (385, 512), (511, 512),
                                                (512, 512), (600, 424), (1000, 512)])
def test_the_prefill_budget_ends_the_steps_rows_on_a_multiple_of_the_chunk(num_decode, budget):
    s = Scheduler(num_slots=1, chunk=512, max_queue=0, align=True)
    assert s.prefill_budget(num_decode) == budget
    assert (num_decode + budget) % 512 == 0 or budget == 512     # whole chunks of rows, or the whole chunk
    assert 4 * budget >= 512                                        # prompts always get a quarter chunk
    assert Scheduler(num_slots=1, chunk=512, max_queue=0, align=False).prefill_budget(num_decode) == 512


def test_the_alignment_follows_its_environment_switch(monkeypatch):
    monkeypatch.setenv("STRATA_PREFILL_ALIGN", "0")
    assert not Scheduler(num_slots=1, chunk=8, max_queue=0).align
    monkeypatch.delenv("STRATA_PREFILL_ALIGN")
    assert Scheduler(num_slots=1, chunk=8, max_queue=0).align


@pytest.mark.parametrize("bad", [dict(num_slots=0, chunk=1, max_queue=0), dict(num_slots=1, chunk=0, max_queue=0),
                                 dict(num_slots=1, chunk=1, max_queue=-1)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        Scheduler(**bad)


def decoding_with(s: Scheduler, n_decode: int) -> list[Request]:
    """n_decode requests whose prompts are read, so the next steps decode them."""
    rs = submitted(s, *([2] * n_decode))
    run_step(s)
    assert all(not r.in_prefill for r in rs)
    return rs


def test_the_prefill_hold_leaves_fresh_prompts_for_a_fuller_step(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("strata.engine.scheduler.time.monotonic", lambda: clock[0])
    s = Scheduler(num_slots=4, chunk=16, max_queue=4, align=False, hold_ms=30)
    decoding = decoding_with(s, 2)
    fresh = submitted(s, 5)[0]
    plan = run_step(s)                                 # 5 prompt tokens < the 16 budget, admitted just now
    assert plan.admitted == [fresh] and plan.prefill == [] and plan.decode == decoding
    clock[0] += 0.020
    second = submitted(s, 6)[0]
    assert run_step(s).prefill == []                    # 11 < 16, the oldest waited 20 ms < 30
    clock[0] += 0.015                                   # the oldest has waited 35 ms: both are read
    plan = run_step(s)
    assert chunks(plan) == [(fresh, 0, 5), (second, 0, 6)] and plan.decode == decoding


def test_the_prefill_hold_ends_when_the_prompts_fill_the_budget(monkeypatch):
    monkeypatch.setattr("strata.engine.scheduler.time.monotonic", lambda: 50.0)
    s = Scheduler(num_slots=4, chunk=16, max_queue=4, align=False, hold_ms=1000)
    decoding_with(s, 1)
    a = submitted(s, 9)[0]
    assert run_step(s).prefill == []
    b = submitted(s, 9)[0]                              # 18 >= 16: a whole budget's worth, read at once
    assert chunks(run_step(s)) == [(a, 0, 9), (b, 0, 7)]


def test_the_prefill_hold_never_idles_the_device_or_delays_a_partly_read_prompt(monkeypatch):
    monkeypatch.setattr("strata.engine.scheduler.time.monotonic", lambda: 7.0)
    s = Scheduler(num_slots=4, chunk=16, max_queue=4, align=False, hold_ms=1000)
    alone = submitted(s, 3)[0]
    assert chunks(run_step(s)) == [(alone, 0, 3)]       # nothing decodes: never held
    long = submitted(s, 20)[0]
    assert chunks(run_step(s)) == [(long, 0, 16)]       # a full budget's worth
    assert chunks(run_step(s)) == [(long, 16, 4)]       # its tail, though 4 < 16 and the hold is long


@pytest.mark.parametrize("value, hold_s", [(None, 0.0), ("0", 0.0), ("25", 0.025), ("2.5", 0.0025)])
def test_the_prefill_hold_follows_its_environment_switch(monkeypatch, value, hold_s):
    if value is None:
        monkeypatch.delenv("STRATA_PREFILL_HOLD_MS", raising=False)
    else:
        monkeypatch.setenv("STRATA_PREFILL_HOLD_MS", value)
    assert Scheduler(num_slots=1, chunk=8, max_queue=0).hold_s == hold_s


@pytest.mark.parametrize("value", ["soon", "-1", "10001", "nan"])
def test_a_bad_prefill_hold_is_refused_with_its_name(monkeypatch, value):
    monkeypatch.setenv("STRATA_PREFILL_HOLD_MS", value)
    with pytest.raises(ValueError, match="STRATA_PREFILL_HOLD_MS|prefill hold"):
        Scheduler(num_slots=1, chunk=8, max_queue=0)


def test_the_prefill_hold_counts_a_prefix_cache_hit_as_unread(monkeypatch):
    monkeypatch.setattr("strata.engine.scheduler.time.monotonic", lambda: 3.0)
    s = Scheduler(num_slots=4, chunk=16, max_queue=4, align=False, hold_ms=1000)
    decoding_with(s, 1)
    cached = submitted(s, 12)[0]
    cached.num_computed = cached.num_cached = 8      # as kv_pool's admission maps a cached prefix
    assert run_step(s).prefill == []                   # 4 tokens left, fresh: held
    cached.num_cached = 0                              # the same 8 read by an earlier step: a resumed tail
    assert chunks(run_step(s)) == [(cached, 8, 4)]
