"""Page salts (strata/engine/page_salt.py) without a model: which pages get one, what changes it, and that
a chat's next turn computes the salts its previous turn's pages were cached under (positions of the text
after an image and of the generated answer included). Through KvPool: the same ids with other image rows
never hit, the same image rows do."""

import dataclasses

import numpy as np

from strata import _ffi
from strata.config import PAGE_CELLS as P
from strata.engine.kv_pool import KvPool
from strata.engine.page_salt import page_salt, page_salts, rope_axes, row_digests
from strata.engine.request import Request, VisionInput
from strata.engine.sampling import SamplingParams
from strata.vision.mrope import mrope_positions

PAD, START, END = 151655, 151652, 151653
AXES = (0, 1, 2)
HIDDEN = 8


@dataclasses.dataclass
class Spec:
    rope_mode: _ffi.RopeMode
    rope_sections: tuple = (0, 0, 0, 0)


def image_prompt(n_before: int, grid=(1, 8, 8), n_after: int = 20, seed: int = 0, tail=()):
    """Text, one image of `grid` (patches), text; positions from mrope; embedding rows drawn from `seed`."""
    n_pads = grid[0] * grid[1] * grid[2] // 4
    ids = list(range(1000, 1000 + n_before)) + [START] + [PAD] * n_pads + [END] + \
        list(range(2000, 2000 + n_after)) + list(tail)
    mrope = mrope_positions(ids, [grid], image_pad_id=PAD, vision_start_id=START)
    rows = np.flatnonzero(np.asarray(ids) == PAD).astype(np.int32)
    embeddings = np.random.default_rng(seed).standard_normal((n_pads, HIDDEN)).astype(np.float32)
    return ids, mrope, VisionInput(embeddings, rows, (grid,))


def request(ids, mrope=None, vision=None, max_tokens=8) -> Request:
    return Request(list(ids), SamplingParams(max_tokens=max_tokens), positions=None if mrope is None else
                   mrope.positions, rope_delta=0 if mrope is None else mrope.rope_delta, vision=vision)


def test_rope_axes():
    assert rope_axes(Spec(_ffi.RopeMode.MROPE, (16, 24, 24, 0))) == (0, 1, 2)
    assert rope_axes(Spec(_ffi.RopeMode.MROPE, (8, 8, 8, 8))) == (0, 1, 2, 3)
    assert rope_axes(Spec(_ffi.RopeMode.HALF)) == (0,)


def test_plain_text_pages_have_no_salt():
    text = request(range(3 * P))
    assert page_salts(text, 4, AXES) == [None] * 4 and text.page_salts == {}     # nothing to hash
    ids, mrope, vision = image_prompt(P + 10)
    r = request(ids, mrope, vision)
    salts = page_salts(r, 3, AXES)
    assert salts[0] is None                      # text before the image: a text request's key
    assert salts[1] is not None and salts[2] is not None     # image rows; text after at shifted positions


def test_generated_cells_get_the_positions_of_the_next_turn():
    """Turn 1's pages, prompt and answer, cached under salts the next turn's fresh positions reproduce;
    with a fourth rope axis the text table (axis 3 = 0) differs from decoding's (c + delta): salted."""
    ids, mrope, vision = image_prompt(30, n_after=40)
    first = request(ids, mrope, vision)
    answer = list(range(3000, 3000 + 2 * P))
    n = len(ids) + len(answer)
    ids2, mrope2, vision2 = image_prompt(30, n_after=40, tail=answer + list(range(4000, 4010)))
    second = request(ids2, mrope2, vision2)
    assert page_salts(first, n // P, AXES) == page_salts(second, n // P, AXES)
    assert page_salt(request(range(P), max_tokens=P), 1, (0, 1, 2, 3)) is not None    # generated text, axis 3
    assert page_salt(request(range(2 * P)), 1, (0, 1, 2, 3)) is None                   # prompt text, axis 3


def test_what_changes_a_salt():
    ids, mrope, vision = image_prompt(P + 10, seed=1)
    base = page_salt(request(ids, mrope, vision), 1, AXES)
    same = image_prompt(P + 10, seed=1)
    assert page_salt(request(ids, same[1], same[2]), 1, AXES) == base
    other = image_prompt(P + 10, seed=2)
    assert page_salt(request(ids, other[1], other[2]), 1, AXES) != base              # other image rows
    one_row = dataclasses.replace(vision, embeddings=vision.embeddings.copy())
    one_row.embeddings[-1, 3] = np.nextafter(one_row.embeddings[-1, 3], np.float32(np.inf))
    assert page_salt(request(ids, mrope, one_row), 1, AXES) != base                  # one ulp of one value
    wide = image_prompt(P + 10, grid=(1, 4, 16))                                     # same pad count, other grid
    assert wide[0] == ids and page_salt(request(ids, wide[1], vision), 1, AXES) != base


def test_precomputed_row_digests_give_the_same_salts():
    """The input pipeline hashes the rows off the event loop (VisionInput.row_digests); admission then
    hashes the digests, and must get the salts it would get from the rows."""
    ids, mrope, vision = image_prompt(P + 10, seed=3)
    digested = dataclasses.replace(vision, row_digests=row_digests(vision.embeddings))
    assert page_salts(request(ids, mrope, vision), 3, AXES) == page_salts(request(ids, mrope, digested), 3, AXES)


def test_pool_keys_image_pages_by_their_rows():
    pool = KvPool(n_pages=20, ctx=8 * P, axes=AXES)
    ids, mrope, vision = image_prompt(P + 10, seed=1, n_after=80)
    a = request(ids, mrope, vision)
    assert pool.admit(a)
    a.num_computed = len(ids) - 1
    pool.release(a)
    b = request(ids, *image_prompt(P + 10, seed=2, n_after=80)[1:])      # same ids, other picture
    assert pool.admit(b) and b.num_cached == P               # only the plain text page
    pool.release(b, keep=False)
    c = request(ids, *image_prompt(P + 10, seed=1, n_after=80)[1:])      # the same picture again
    assert pool.admit(c) and c.num_cached == P * ((len(ids) - 1) // P) > P
