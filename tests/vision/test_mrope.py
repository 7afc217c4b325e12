"""Golden tests: M-RoPE positions against transformers' Qwen2_5_VLModel.get_rope_index.

The reference runs on a tiny randomly initialised Qwen2_5_VLModel (no
weights are read; get_rope_index only uses the config).
"""

from __future__ import annotations

import numpy as np
import pytest

from strata.vision.errors import VisionRecordError
from strata.vision.mrope import decode_positions, mrope_positions

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IMAGE_PAD, VISION_START, VISION_END = 151655, 151652, 151653
MERGE = 2


@pytest.fixture(scope="module")
def hf_model():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    config = transformers.Qwen2_5_VLConfig(
        text_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            vocab_size=151700, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        ),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           spatial_merge_size=MERGE, fullatt_block_indexes=[0]),
        image_token_id=IMAGE_PAD, vision_start_token_id=VISION_START,
    )
    return Qwen2_5_VLModel(config).eval()


def _prompt(*pieces) -> tuple[list[int], list[tuple[int, int, int]]]:
    """pieces: an int n = n text tokens, a tuple = an image with that patch grid."""
    ids, grids, next_text = [], [], 1000
    for piece in pieces:
        if isinstance(piece, int):
            ids += list(range(next_text, next_text + piece))
            next_text += piece
        else:
            t, h, w = piece
            ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // MERGE**2) + [VISION_END]
            grids.append(piece)
    return ids, grids


def _reference(model, ids: list[int], grids: list[tuple[int, int, int]]) -> tuple[np.ndarray, int]:
    input_ids = torch.tensor([ids])
    kwargs = {"image_grid_thw": torch.tensor(grids)} if grids else {}
    position_ids, deltas = model.get_rope_index(input_ids, mm_token_type_ids=(input_ids == IMAGE_PAD).int(), **kwargs)
    return position_ids[:, 0, :].T.numpy(), int(deltas[0, 0])  # [n_tokens, 3]


CASES = {
    "text_only": (12,),
    "single_token": (1,),
    "one_image_text_around": (5, (1, 4, 6), 7),
    "image_first": ((1, 8, 4), 3),
    "image_last": (4, (1, 6, 10)),
    "two_images_different_grids": (3, (1, 4, 4), 2, (1, 10, 6), 5),
    "two_images_back_to_back": (2, (1, 2, 2), (1, 14, 4)),
    "earlier_turn_image_then_long_text": ((1, 16, 12), 40, (1, 4, 8), 9, (1, 2, 30), 3),
    "tall_and_wide": (1, (1, 64, 2), 1, (1, 24, 72), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_transformers_get_rope_index(hf_model, name: str) -> None:
    ids, grids = _prompt(*CASES[name])
    ours = mrope_positions(ids, grids, image_pad_id=IMAGE_PAD, vision_start_id=VISION_START, spatial_merge_size=MERGE)
    ref_positions, ref_delta = _reference(hf_model, ids, grids)
    assert ours.positions.dtype == np.int32 and ours.positions.shape == (len(ids), 4)
    assert np.array_equal(ours.positions[:, :3], ref_positions)
    assert not ours.positions[:, 3].any()
    assert ours.rope_delta == ref_delta


def test_random_prompts_match_transformers(hf_model) -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        pieces = []
        for _ in range(rng.integers(1, 6)):
            if rng.random() < 0.5:
                pieces.append(int(rng.integers(1, 20)))
            else:
                pieces.append((1, 2 * int(rng.integers(1, 12)), 2 * int(rng.integers(1, 12))))
        ids, grids = _prompt(*pieces)
        ours = mrope_positions(ids, grids, image_pad_id=IMAGE_PAD, vision_start_id=VISION_START)
        ref_positions, ref_delta = _reference(hf_model, ids, grids)
        assert np.array_equal(ours.positions[:, :3], ref_positions), pieces
        assert ours.rope_delta == ref_delta, pieces


def test_worked_example() -> None:
    # "a b <vs> [2x3 merged pads] <ve> c": image starts at 3, text resumes at 3 + max(2, 3) = 6
    ids, grids = _prompt(2, (1, 4, 6), 1)
    ours = mrope_positions(ids, grids, image_pad_id=IMAGE_PAD, vision_start_id=VISION_START)
    t, h, w = ours.positions[:, 0], ours.positions[:, 1], ours.positions[:, 2]
    assert t.tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    assert h.tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    assert w.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    assert ours.rope_delta == 8 - 11


def test_decode_continues_with_rope_delta(hf_model) -> None:
    """transformers' decode step: position = cache index + rope_delta on all three axes."""
    ids, grids = _prompt(5, (1, 12, 8), 4)
    ours = mrope_positions(ids, grids, image_pad_id=IMAGE_PAD, vision_start_id=VISION_START)
    following = ours.decode_positions(len(ids), 3)
    assert following.dtype == np.int32 and following.shape == (3, 4)
    expected = np.arange(len(ids), len(ids) + 3) + ours.rope_delta
    assert np.array_equal(following[:, :3], np.repeat(expected[:, None], 3, axis=1))
    assert not following[:, 3].any()
    assert following[0, 0] == ours.positions[:, :3].max() + 1  # the first generated token follows the prompt
    assert np.array_equal(decode_positions(0, 2, 0)[:, 0], [0, 1])


@pytest.mark.parametrize(
    "ids, grids, message",
    [
        ([1, IMAGE_PAD, IMAGE_PAD, 2], [(1, 2, 4)], "do not follow <|vision_start|>"),
        ([IMAGE_PAD, 2], [(1, 2, 2)], "index 0 do not follow"),
        ([1, VISION_START, IMAGE_PAD, VISION_END], [], "1 image placeholder runs but 0 images"),
        ([1, 2], [(1, 2, 2)], "0 image placeholder runs but 1 images"),
        ([VISION_START, IMAGE_PAD, IMAGE_PAD, VISION_END], [(1, 2, 2)], r"2 placeholder tokens but its grid \(1, 2, 2\) needs"),
        ([VISION_START, IMAGE_PAD, VISION_END], [(1, 3, 4)], "multiples of the merge size 2"),
        ([VISION_START, IMAGE_PAD, VISION_END], [(0, 2, 2)], "grid t must be a positive integer"),
        ([VISION_START, IMAGE_PAD, VISION_END], [(1, 2.0, 2)], "grid h must be a positive integer"),
        ([VISION_START, IMAGE_PAD, VISION_END], [(1, 2)], r"must be \(t, h, w\)"),
        ([], [], "non-empty 1-D"),
    ],
)
def test_mismatched_prompts_are_refused(ids, grids, message) -> None:
    with pytest.raises(VisionRecordError, match=message):
        mrope_positions(ids, grids, image_pad_id=IMAGE_PAD, vision_start_id=VISION_START)
