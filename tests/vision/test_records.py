"""validate_record: the valid record passes, and each malformed field is refused with a precise message."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from strata.vision.errors import VisionError, VisionRecordError
from strata.vision.mrope import mrope_positions
from strata.vision.records import ImageEmbedding, RecordLimits, VisionRecord, validate_record

PAD, START, END = 151655, 151652, 151653
LIMITS = RecordLimits(hidden_size=16, n_ctx=256, vocab_size=151936, image_pad_id=PAD, vision_start_id=START,
                      max_patches=1024, max_images=3)
GRIDS = [(1, 4, 6), (1, 8, 2)]  # 6 and 4 merged tokens


def _record(grids=GRIDS) -> VisionRecord:
    """text, image 0, text, image 1, text: the way a two-turn chat with two pictures looks."""
    ids = [10, 11, 12]
    for grid in grids:
        ids += [START] + [PAD] * (grid[0] * grid[1] * grid[2] // 4) + [END, 20, 21]
    token_ids = np.array(ids, dtype=np.int64)
    mrope = mrope_positions(token_ids, grids, image_pad_id=PAD, vision_start_id=START)
    rng = np.random.default_rng(0)
    images = [
        ImageEmbedding(rng.standard_normal((g[0] * g[1] * g[2] // 4, 16)).astype(np.float32), g) for g in grids
    ]
    return VisionRecord(token_ids=token_ids, positions=mrope.positions, rope_delta=mrope.rope_delta, images=images)


def _with_image(record: VisionRecord, index: int, **changes) -> VisionRecord:
    images = list(record.images)
    images[index] = dataclasses.replace(images[index], **changes)
    return dataclasses.replace(record, images=images)


def _with_positions(record: VisionRecord, edit) -> VisionRecord:
    positions = record.positions.copy()
    edit(positions)
    return dataclasses.replace(record, positions=positions)


def _with_token(record: VisionRecord, index: int, value: int) -> VisionRecord:
    token_ids = record.token_ids.copy()
    token_ids[index] = value
    return dataclasses.replace(record, token_ids=token_ids)


def test_valid_records_pass() -> None:
    validate_record(_record(), LIMITS)
    validate_record(_record([]), LIMITS)  # text only
    validate_record(_record([(1, 2, 2)] * 3), LIMITS)


def _nan_at(record: VisionRecord, row: int, col: int, value: float) -> VisionRecord:
    embeddings = record.images[1].embeddings.copy()
    embeddings[row, col] = value
    return _with_image(record, 1, embeddings=embeddings)


R = _record()
FIRST_PAD = 4  # index of image 0's first placeholder
CASES = {
    # token ids
    "ids_2d": (dataclasses.replace(R, token_ids=R.token_ids[None]), "token_ids must be a 1-D integer array"),
    "ids_float": (dataclasses.replace(R, token_ids=R.token_ids.astype(np.float32)), "1-D integer array, got float32"),
    "ids_list": (dataclasses.replace(R, token_ids=list(R.token_ids)), "1-D integer array, got list"),
    "ids_empty": (dataclasses.replace(R, token_ids=R.token_ids[:0]), "0 tokens; 1 to 256"),
    "ids_beyond_ctx": (
        dataclasses.replace(R, token_ids=np.zeros(300, np.int64)), "300 tokens; 1 to 256 .the context size."
    ),
    "id_beyond_vocab": (_with_token(R, 1, 151936), r"token 1 has id 151936, outside the vocabulary \[0, 151936\)"),
    "id_negative": (_with_token(R, 2, -5), "token 2 has id -5"),
    # placeholders
    "pad_without_vision_start": (_with_token(R, FIRST_PAD - 1, 7), "at index 4 do not follow <|vision_start|>"),
    "stray_pad_in_text": (_with_token(R, 0, PAD), "at index 0 do not follow"),
    "fewer_images_than_runs": (dataclasses.replace(R, images=R.images[:1]), "2 image placeholder runs but the record has 1"),
    "too_many_images": (dataclasses.replace(R, images=list(R.images) * 2), "at most 3 images per prompt, got 4"),
    "images_not_a_list": (dataclasses.replace(R, images=None), "at most 3 images per prompt, got NoneType"),
    "image_not_embedding": (dataclasses.replace(R, images=[R.images[0], "pixels"]), "image 1 must be an ImageEmbedding"),
    "rows_vs_pad_run": (
        dataclasses.replace(R, images=[R.images[0], ImageEmbedding(np.zeros((6, 16), np.float32), (1, 4, 6))]),
        r"image 1 has 6 embedding rows but 4 placeholder tokens \(from token 14\)",
    ),
    # grids
    "grid_zero": (_with_image(R, 0, grid_thw=(1, 0, 6)), "image 0: image grid h must be a positive integer"),
    "grid_negative": (_with_image(R, 0, grid_thw=(1, 4, -6)), "image 0: image grid w must be a positive integer"),
    "grid_float": (_with_image(R, 0, grid_thw=(1.0, 4, 6)), "image grid t must be a positive integer, got 1.0"),
    "grid_bool": (_with_image(R, 0, grid_thw=(True, 4, 6)), "image grid t must be a positive integer, got True"),
    "grid_two_values": (_with_image(R, 0, grid_thw=(4, 6)), r"image 0: image grid must be \(t, h, w\)"),
    "grid_not_a_sequence": (_with_image(R, 0, grid_thw=24), "image 0: "),
    "grid_odd": (_with_image(R, 1, grid_thw=(1, 8, 3)), "multiples of the merge size 2"),
    "grid_t_over_limit": (_with_image(R, 0, grid_thw=(2, 4, 6)), "has t=2 and 48 patches; at most t=1 and 1024"),
    "grid_too_many_patches": (_with_image(R, 0, grid_thw=(1, 64, 32)), "2048 patches; at most t=1 and 1024 patches"),
    # embeddings
    "emb_float64": (_with_image(R, 0, embeddings=R.images[0].embeddings.astype(np.float64)), "float32 .rows, hidden. array, got float64"),
    "emb_float16": (_with_image(R, 0, embeddings=R.images[0].embeddings.astype(np.float16)), "got float16"),
    "emb_1d": (_with_image(R, 0, embeddings=R.images[0].embeddings.ravel()), r"got float32 array of shape \[96\]"),
    "emb_list": (_with_image(R, 0, embeddings=R.images[0].embeddings.tolist()), "array, got list"),
    "emb_wrong_hidden": (
        _with_image(R, 0, embeddings=np.zeros((6, 8), np.float32)), r"are \[6, 8\], but grid \(1, 4, 6\) and the model need \[6, 16\]"
    ),
    "emb_wrong_rows": (_with_image(R, 1, embeddings=np.zeros((5, 16), np.float32)), r"are \[5, 16\].*need \[4, 16\]"),
    "emb_nan": (_nan_at(R, 2, 7, np.nan), "non-finite value .nan. at row 2, column 7"),
    "emb_inf": (_nan_at(R, 3, 0, -np.inf), "non-finite value .-inf. at row 3, column 0"),
    # positions
    "pos_int64": (dataclasses.replace(R, positions=R.positions.astype(np.int64)), "positions must be an int32 array"),
    "pos_three_axes": (dataclasses.replace(R, positions=R.positions[:, :3].copy()), r"shape \[21, 4\], got int32 array of shape \[21, 3\]"),
    "pos_short": (dataclasses.replace(R, positions=R.positions[:-1]), r"shape \[21, 4\]"),
    "pos_list": (dataclasses.replace(R, positions=R.positions.tolist()), "got list"),
    "pos_reserved_nonzero": (_with_positions(R, lambda p: p.__setitem__((5, 3), 1)), "reserved 4th component must be 0 .token 5."),
    "pos_negative": (_with_positions(R, lambda p: p.__setitem__((0, slice(0, 3)), -1)), r"token 0 are \[-1, -1, -1\]; all must lie in \[0, 256\)"),
    "pos_beyond_ctx": (_with_positions(R, lambda p: p.__setitem__((20, 1), 256)), r"token 20 .*must lie in \[0, 256\)"),
    "pos_text_uneven": (_with_positions(R, lambda p: p.__setitem__((1, 2), 3)), "text token 1 must have T = H = W"),
    "pos_text_backwards": (_with_positions(R, lambda p: p.__setitem__((2, slice(0, 3)), 0)), r"T must increase .* \(token 2\)"),
    "pos_image_shifted": (_with_positions(R, lambda p: p.__setitem__((FIRST_PAD + 1, 2), 9)), r"token 5 are \[4, 4, 9\], but M-RoPE gives \[4, 4, 5\]"),
    "pos_as_cache_index": (  # what an engine that forgot M-RoPE would send
        dataclasses.replace(R, positions=np.arange(21, dtype=np.int32)[:, None] * np.array([1, 1, 1, 0], np.int32)),
        r"token 5 are \[5, 5, 5\], but M-RoPE gives \[4, 4, 5\]",
    ),
    # rope delta
    "rope_delta_wrong": (dataclasses.replace(R, rope_delta=0), r"rope_delta is 0, but the positions give -\d+"),
    "rope_delta_float": (dataclasses.replace(R, rope_delta=float(R.rope_delta)), "rope_delta is -"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_record_is_refused(name: str) -> None:
    record, message = CASES[name]
    with pytest.raises(VisionRecordError, match=message) as info:
        validate_record(record, LIMITS)
    assert str(info.value).startswith("vision record: ")
    assert isinstance(info.value, VisionError) and info.value.status == 400


def test_valid_record_is_left_untouched() -> None:
    record = _record()
    before = (record.token_ids.copy(), record.positions.copy(), [im.embeddings.copy() for im in record.images])
    validate_record(record, LIMITS)
    assert np.array_equal(record.token_ids, before[0]) and np.array_equal(record.positions, before[1])
    assert all(np.array_equal(im.embeddings, b) for im, b in zip(record.images, before[2]))
