"""Malformed vision records and images are refused before they touch engine state; the next valid
request, in the same slot, is exact.

Records are refused by Engine.submit (whoever built them); images by
strata.inputs.chat_input (media limits, decoding, placeholders) before anything is
encoded or submitted. After every refusal the engine holds no request, no
queued work and no image rows, and a valid image request then served in the
same (only) slot equals its run on a fresh engine bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strata.engine.sampling import InvalidRequest
from strata.models.model import LoadedModel
from strata.vision.errors import MediaError, VisionError, VisionRecordError
from strata.vision.media import MediaLimits

from .harness import GREEDY, Job, drive, encode, picture, same_stream, solo, user

pytestmark = pytest.mark.exactness

CAT, WIDE = picture(170, 140, 1), picture(200, 90, 2)


def _with_vision(inputs, **changes):
    return dataclasses.replace(inputs, vision=dataclasses.replace(inputs.vision, **changes))


def malformed_records(inputs):
    """(what is wrong, a broken copy of `inputs`)."""
    emb, rows = inputs.vision.embeddings, inputs.vision.token_rows
    nan = emb.copy()
    nan[3, 5] = np.nan
    inf = emb.copy()
    inf[-1, 0] = np.inf
    moved = inputs.positions.copy()
    moved[int(rows[2])] += [0, 1, 0, 0]
    t, h, w = inputs.vision.grids[0]
    text_positions = np.zeros_like(inputs.positions)
    text_positions[:, :3] = np.arange(len(inputs.prompt_ids))[:, None]
    no_start = list(inputs.prompt_ids)
    no_start[int(rows[0]) - 1] = no_start[0]          # <|vision_start|> replaced by a text token
    return {
        "nan_embedding": _with_vision(inputs, embeddings=nan),
        "inf_embedding": _with_vision(inputs, embeddings=inf),
        "missing_row": _with_vision(inputs, embeddings=emb[:-1]),
        "extra_row": _with_vision(inputs, embeddings=np.concatenate([emb, emb[:1]])),
        "wrong_hidden": _with_vision(inputs, embeddings=emb[:, :-1].copy()),
        "float64": _with_vision(inputs, embeddings=emb.astype(np.float64)),
        "grid_not_matching_pads": _with_vision(inputs, grids=((t, h + 2, w),)),
        "odd_grid": _with_vision(inputs, grids=((t, h - 1, w),)),
        "no_grids": _with_vision(inputs, grids=()),
        "token_rows_off_by_one": _with_vision(inputs, token_rows=rows + 1),
        "moved_position": dataclasses.replace(inputs, positions=moved),
        "text_positions": dataclasses.replace(inputs, positions=text_positions),
        "no_positions": dataclasses.replace(inputs, positions=None),
        "wrong_rope_delta": dataclasses.replace(inputs, rope_delta=inputs.rope_delta + 1),
        "pads_without_images": dataclasses.replace(inputs, positions=None, vision=None),
        "pad_not_after_vision_start": dataclasses.replace(inputs, prompt_ids=no_start),
    }


def assert_untouched(engine) -> None:
    s = engine.scheduler
    assert not s.waiting and not s.running and not s.released and s.free_slots == list(range(s.num_slots))
    assert not engine._outputs and not engine.runner.images._slots and engine.metrics.steps == 0


async def test_malformed_records_refused_then_valid_request_exact(make_engine):
    engine = make_engine(batch=1, chunk=8)
    valid = await encode(engine, [user("what is in ", CAT, " this picture?")])
    for what, broken in malformed_records(valid).items():
        with pytest.raises(VisionRecordError) as refused:
            engine.submit(broken.prompt_ids, GREEDY, **broken.submit_kwargs())
        assert str(refused.value).startswith("vision record"), what
        assert_untouched(engine)
    served = (await drive(engine, [Job("valid", valid)]))["valid"]
    assert served.slot == 0 and served.error is None
    assert same_stream(served, await solo(make_engine, Job("valid", valid), batch=1, chunk=8))


def corrupt_png_url() -> str:
    from .harness import data_url

    url = data_url(CAT)
    return url[:60] + "AAAA" * 20 + url[140:]


BAD_IMAGES = {
    "not_an_image": ([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}}]}], MediaError),
    "corrupt_png": ([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": corrupt_png_url()}}]}], MediaError),
    "too_many_images": ([user(CAT, WIDE, CAT)], MediaError),
    "too_many_pixels": ([user(picture(400, 300, 9))], MediaError),
    "file_without_media_dir": ([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}], MediaError),
    "remote_not_allowed": ([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}]}], MediaError),
    "placeholder_typed_in_text": ([user("<|vision_start|><|image_pad|><|vision_end|>", CAT)], VisionError),
}


@pytest.mark.parametrize("name", list(BAD_IMAGES))
async def test_bad_images_refused_before_the_engine(make_engine, name):
    messages, error = BAD_IMAGES[name]
    engine = make_engine(batch=1, chunk=8)
    limits = MediaLimits(max_images_per_request=2, max_pixels=300 * 200)
    with pytest.raises(error) as refused:
        await encode(engine, messages, limits)
    assert refused.value.status == 400 and refused.value.message
    assert_untouched(engine)


async def test_after_refusals_a_valid_image_request_is_exact(make_engine):
    engine = make_engine(batch=1, chunk=8)
    for messages, error in BAD_IMAGES.values():
        with pytest.raises(error):
            await encode(engine, messages, MediaLimits(max_images_per_request=2, max_pixels=300 * 200))
    valid = await encode(engine, [user(WIDE, "what is it?")])
    served = (await drive(engine, [Job("valid", valid)]))["valid"]
    assert same_stream(served, await solo(make_engine, Job("valid", valid), batch=1, chunk=8))


async def test_text_model_paths_refuse_images(make_engine):
    """An engine over a model without a vision tower refuses image parts and vision records."""
    import types

    engine = make_engine(batch=1)
    text_only = types.SimpleNamespace(**{**vars(engine.model), "vision": None})
    fake = types.SimpleNamespace(model=text_only, tokenizer=engine.tokenizer, config=engine.config)
    with pytest.raises(VisionError, match="reads text only") as refused:
        await encode(fake, [user("look: ", CAT)])
    assert refused.value.code == "images_not_supported" and refused.value.param == "messages[0].content[1]"
    valid = await encode(engine, [user(CAT)])
    assert LoadedModel.submission_check(text_only, engine.config.ctx) is None
    engine._check_images = None            # as Engine.__init__ sets it for a text-only model
    with pytest.raises(InvalidRequest, match="reads text only") as refused:
        engine.submit(valid.prompt_ids, GREEDY, **valid.submit_kwargs())
    assert refused.value.code == "images_not_supported"
    assert_untouched(engine)
