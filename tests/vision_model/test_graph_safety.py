"""mrope_slot_graph_test: a slot decoding through captured graphs is untouched by what other slots do.

While request `a` (an image, M-RoPE positions with a rope delta) decodes step
after step through the captured decode graphs, other slots are admitted (an
image request), admitted and cancelled (a text request) and reused (another
image in a freed slot). Each admission writes only its own slot's position
table and delta, so `a`'s stream, and every other finished one, equals its
solo run: the same tokens and bit-identical logits at every sampled row (the
tiny random model's greedy tokens alone are too robust to catch wrong
positions, the logits are not). The negative control makes slot 1 share slot
0's table: the same check must fail.
"""

from __future__ import annotations

import dataclasses

import pytest

from .harness import GREEDY, Job, drive, encode, picture, same_stream, user

pytestmark = pytest.mark.exactness

CAT, WIDE, TALL, SMALL = picture(170, 140, 11), picture(200, 90, 12), picture(60, 130, 13), picture(56, 56, 14)


async def jobs_of(engine) -> list[Job]:
    a = await encode(engine, [user("what is in ", SMALL, "?")])
    # b's prompt is longer than a's prompt plus a's tokens: with a shared table, a's decode
    # positions land in rows b's chunked prefill still has to read. a's 32 tokens outlast b's
    # prefill, c and its cancellation, so d is admitted into c's freed slot while a still decodes
    # (with 24, a finished first once a step's prompt tokens made room for its decode rows).
    b = await encode(engine, [user(WIDE, "and", TALL, "and", CAT, "which is taller?")])
    c = await encode(engine, [user("a text request that will be cancelled")])
    d = await encode(engine, [user("then ", TALL, " once more")])
    long, short = dataclasses.replace(GREEDY, max_tokens=32), dataclasses.replace(GREEDY, max_tokens=8)
    return [Job("a", a, long), Job("b", b, short, after_tokens=("a", 2)),
            Job("c", c, long, after_tokens=("a", 4), cancel_after=2),
            Job("d", d, short, after_finish="c")]


async def batched_and_solo(make_engine, share_table=None):
    engine = make_engine(batch=3, chunk=8, graphs=True)
    jobs = await jobs_of(engine)
    if share_table is not None:
        engine.runner.slots.debug_share_table(*share_table)
    batched = await drive(engine, jobs)
    assert engine.runner.graphs, "no decode step ran through a captured graph"
    alone = {}
    for job in jobs:
        plain = Job(job.name, job.inputs, job.params)
        alone[job.name] = (await drive(make_engine(batch=3, chunk=8, graphs=True), [plain]))[job.name]
    assert len(jobs[1].inputs.prompt_ids) > len(jobs[0].inputs.prompt_ids) + jobs[0].params.max_tokens
    return jobs, batched, alone


async def test_mrope_slot_graph(make_engine):
    jobs, batched, alone = await batched_and_solo(make_engine)
    assert batched["c"].finish_reason == "cancelled"
    assert batched["c"].tokens == alone["c"].tokens[: len(batched["c"].tokens)]
    assert batched["d"].slot in (batched["b"].slot, batched["c"].slot), "d did not reuse a freed slot"
    for name in ("a", "b", "d"):
        assert batched[name].error is None
        assert same_stream(batched[name], alone[name]), f"stream {name} differs from its solo run"


async def test_mrope_slot_graph_negative_control(make_engine):
    jobs, batched, alone = await batched_and_solo(make_engine, share_table=(1, 0))
    differing = [n for n in ("a", "b", "d") if not same_stream(batched[n], alone[n])]
    print(f"\nnegative control: streams {differing} diverged from solo")
    assert differing, "a shared position table went unnoticed by the graph-safety check"
