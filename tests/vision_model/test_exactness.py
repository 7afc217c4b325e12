"""Exactness with images: every stream, batched with others, equals its solo run bit for bit.

Tokens and the logits of every sampled row must be identical to the same
request served alone, whatever else shares the batch: an image request
admitted while another decodes, text beside images, a slot reused from image
to text and text to image, images of different grids. Admission points are
exact (submitted from a step observer once a stream has N tokens), prefill is
chunked small so image rows straddle chunks and decode rows share steps with
them. The negative control makes two slots share one position table
(Slots.debug_share_table) and shows the same check catching the divergence.
"""

from __future__ import annotations

import dataclasses

import pytest

from .harness import GREEDY, Job, drive, encode, picture, same_stream, solo, user

pytestmark = pytest.mark.exactness

CAT, WIDE, TALL, SMALL = picture(170, 140, 1), picture(200, 90, 2), picture(60, 130, 3), picture(56, 56, 4)


def tokens(n: int):
    return dataclasses.replace(GREEDY, max_tokens=n)


async def image_after_image_decodes(engine):
    a = await encode(engine, [user("what is in ", CAT, " this picture?")])
    b = await encode(engine, [user(WIDE, "and", TALL, "which one is taller?")])
    return [Job("a", a, tokens(14)), Job("b", b, tokens(6), after_tokens=("a", 2))]


async def text_beside_images(engine):
    t1 = await encode(engine, [user("the cat sat on the mat and then it ran")])
    i1 = await encode(engine, [user(CAT, "describe the picture")])
    t2 = await encode(engine, [user("another text request here")])
    i2 = await encode(engine, [user("is this ", TALL, " tall?")])
    return [Job("t1", t1, tokens(10)), Job("i1", i1, tokens(8)), Job("t2", t2, after_tokens=("i1", 1)),
            Job("i2", i2, after_tokens=("t1", 3))]


async def slot_reuse(engine):
    i1 = await encode(engine, [user(CAT, "what is it?")])
    t1 = await encode(engine, [user("and now only text")])
    i2 = await encode(engine, [user("then ", WIDE, " again")])
    return [Job("i1", i1), Job("t1", t1, after_finish="i1"), Job("i2", i2, after_finish="t1")]


async def different_grids(engine):
    jobs, previous = [], None
    for name, image in (("cat", CAT), ("wide", WIDE), ("tall", TALL), ("small", SMALL)):
        inputs = await encode(engine, [user("look: ", image)])
        jobs.append(Job(name, inputs, tokens(8), after_tokens=(previous, 1) if previous else None))
        previous = name
    return jobs


SCENARIOS = {
    "image_admitted_while_image_decodes": (image_after_image_decodes, dict(batch=2, chunk=8)),
    "text_beside_images": (text_beside_images, dict(batch=3, chunk=8)),
    "slot_reuse_image_text_image": (slot_reuse, dict(batch=1, chunk=8)),
    "images_of_different_grids": (different_grids, dict(batch=3, chunk=16)),
}


async def run_batched_and_solo(make_engine, name, share_table=None):
    build, shape = SCENARIOS[name]
    engine = make_engine(**shape)
    jobs = await build(engine)
    if share_table is not None:
        engine.runner.slots.debug_share_table(*share_table)
    steps: list = []
    batched = await drive(engine, jobs, steps=steps)
    alone = {job.name: await solo(make_engine, job, **shape) for job in jobs}
    return jobs, batched, alone, steps


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_stream_equals_its_solo_run(make_engine, name):
    jobs, batched, alone, steps = await run_batched_and_solo(make_engine, name)
    for job in jobs:
        assert batched[job.name].error is None, batched[job.name].error
        assert len(batched[job.name].tokens) == job.params.max_tokens
        assert same_stream(batched[job.name], alone[job.name]), f"{name}: stream {job.name} differs from solo"
    if name == "image_admitted_while_image_decodes":
        b_prefill = [i for i, (_, prefill) in enumerate(steps) if "b" in prefill]
        assert len(b_prefill) > 3 and all("a" in steps[i][0] for i in b_prefill), "a did not decode beside b"
    if name == "slot_reuse_image_text_image":
        assert {batched[j.name].slot for j in jobs} == {0}


async def test_negative_control_shared_position_table_is_caught(make_engine):
    """Slot 1 reads and writes slot 0's position table: decode positions of the request in slot 0
    land in the rows the other request's prefill still has to read, and the check must see it."""
    jobs, batched, alone, _ = await run_batched_and_solo(make_engine, "image_admitted_while_image_decodes",
                                                         share_table=(1, 0))
    assert batched["b"].slot == 1 and batched["a"].slot == 0
    differing = [job.name for job in jobs if not same_stream(batched[job.name], alone[job.name])]
    print(f"\nnegative control: streams {differing} diverged from solo")
    assert differing, "sharing one position table between two slots went unnoticed by the exactness check"
