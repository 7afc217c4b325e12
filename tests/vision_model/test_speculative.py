"""Speculative decoding with images on the tiny Qwen2.5-VL checkpoint: every stream equals plain.

Image and text requests, batched with staggered admission and slot reuse,
greedy and seeded, drafted by suffix lookup and by a draft model (the
checkpoint's own decoder, which sees image placeholders as text and so
drafts imperfectly): each request's tokens equal its plain solo run, and
drafts were verified (and some accepted) along the way. Verification rows of
an image request are decode rows: their M-RoPE positions come from the
slot's rope delta, as in plain decoding.
"""

from __future__ import annotations

import dataclasses

import pytest

from strata.engine.drafting.draft_model import ModelDrafter
from strata.engine.drafting.suffix import SuffixDrafter

from .harness import Job, drive, solo
from .test_exactness import SCENARIOS

pytestmark = pytest.mark.exactness


def _longer(jobs: list[Job]) -> list[Job]:
    """More tokens per job (room to draft), every other job seeded top-p/top-k."""
    out = []
    for i, job in enumerate(jobs):
        params = dataclasses.replace(job.params, max_tokens=16)
        if i % 2:
            params = dataclasses.replace(params, temperature=0.9, top_p=0.9, top_k=20, seed=40 + i)
        out.append(dataclasses.replace(job, params=params))
    return out


@pytest.mark.parametrize("source", ["suffix", "model"])
@pytest.mark.parametrize("scenario", ["text_beside_images", "slot_reuse_image_text_image"])
async def test_images_with_drafting_equal_plain(make_engine, loaded, source, scenario):
    ctx, model = loaded
    build, shape = SCENARIOS[scenario]
    plain = make_engine(**shape)
    jobs = _longer(await build(plain))
    alone = {job.name: (await solo(make_engine, job, **shape)).tokens for job in jobs}
    drafter = SuffixDrafter(min_match=1) if source == "suffix" else ModelDrafter(ctx, model, shape["batch"], 512, 16)
    engine = make_engine(**shape, drafter=drafter, draft_max=4)
    beside_images = []          # steps that verified drafts beside a prefill chunk holding image rows
    engine.step_observers.append(lambda plan, result: beside_images.append(result.num_drafted > 0 and any(
        c.request.vision is not None and c.start < int(c.request.vision.token_rows[-1]) for c in plan.prefill)))
    batched = await drive(engine, jobs)
    for job in jobs:
        assert batched[job.name].tokens == alone[job.name], f"{job.name} with {source} drafts diverged"
    counts = engine.metrics.drafts
    assert counts.drafted.get(source, 0) > 0 and counts.accepted.get(source, 0) > 0
    if source == "model" and scenario == "text_beside_images":
        assert any(beside_images), "no step verified drafts beside an image prefill chunk"


@pytest.fixture(scope="module")
def mtp_loaded(checkpoint, device, tmp_path_factory):
    """The tiny checkpoint with a DeepSeek-V3-style MTP layer, loaded on the session's device."""
    from strata import _ffi
    from strata.models.hf_loader import load_hf_checkpoint

    from .mtp_layer import with_mtp_layer

    path = with_mtp_layer(checkpoint, tmp_path_factory.mktemp("tiny_qwen2_5_vl_mtp"))
    ctx = _ffi.Context(device)
    model = load_hf_checkpoint(path, ctx, "tiny-mtp")
    engines: list = []
    yield ctx, model, engines
    for engine in engines:
        engine.runner.close()
    model.close()
    ctx.close()


@pytest.mark.parametrize("scenario", ["text_beside_images", "image_admitted_while_image_decodes"])
async def test_images_with_batch_mtp_equal_plain(mtp_loaded, device, scenario):
    """MTP drafting (the layer's per-slot table mirrors each image prompt's M-RoPE positions): every
    stream equals its plain solo run; the HF checkpoint's nextn layer loaded."""
    from strata.config import EngineConfig
    from strata.engine.drafting.mtp import MtpDrafter
    from strata.engine.engine import Engine

    ctx, model, engines = mtp_loaded
    assert model.spec.n_nextn == 1 and model.spec.n_layers == 2
    build, shape = SCENARIOS[scenario]
    backend = "cuda" if device.startswith("cuda") else "cpu"

    def make(batch, chunk, drafted=False):
        config = EngineConfig(model="tiny-mtp", device=device, batch=batch, chunk=chunk, ctx=512,
                              draft="mtp" if drafted else None, draft_max=3).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config)
        engines.append(engine)
        assert drafted == isinstance(getattr(engine.runner.speculator, "drafter", None), MtpDrafter)
        return engine

    jobs = _longer(await build(make(**shape)))
    alone = {job.name: (await solo(lambda **kw: make(**kw), job, **shape)).tokens for job in jobs}
    engine = make(**shape, drafted=True)
    batched = await drive(engine, jobs)
    for job in jobs:
        assert batched[job.name].tokens == alone[job.name], f"{job.name} with MTP drafts diverged"
    assert engine.metrics.drafts.drafted.get("mtp", 0) > 0
