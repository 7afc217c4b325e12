"""Page salts: what a KV page's bits depend on besides its token ids (the prefix cache's key, kv_pool.py).

A cell's K and V are computed from the decoder inputs of the cells up to it:
for a text row its token's embedding and its rope position, for an image row
the embedding row injected over its `<|image_pad|>` token (image_rows.py) and
its M-RoPE position. Token ids alone therefore do not name a page of an image
request: two different pictures of one size give the same pad ids, and the
text after an image sits at positions other than its cell index.

So a page that is not plain text gets a salt, a blake2b digest of

- the positions of its 64 cells on the axes the rope reads (`rope_axes`):
  prompt cells as admission writes them into the slot's table, generated
  cells as `strata_positions_decode` gives them (cell + rope_delta on every
  axis; mrope.py);
- for each image row in it: its offset in the page and a digest of the
  float32 bytes of its embedding row (`row_digests`).

The page key chains the salt in after the token ids, and the cached entry
keeps it beside the ids, compared on every hit. The embedding rows are the
exact input the decoder reads, so equal salts mean equal inputs whatever the
image's source (URL, data URL, media file) and without relying on the vision
encoder giving the same bits on every run. Hashing them costs one pass over
the request's image rows; the input pipeline does it in a worker thread
(VisionInput.row_digests, inputs/images.py), so admission, on the engine's
event loop, only hashes 16 bytes a row. A VisionInput without digests has
its rows hashed at admission instead.

A plain text page (no image rows, and positions equal to those of a text
prompt, cell c at c) has no salt: its key is a text request's key, so a
system prompt before an image is shared with text requests.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .. import _ffi
from ..config import PAGE_CELLS


def rope_axes(spec) -> tuple[int, ...]:
    """The position axes (of the table's 4) the model's rope reads: an M-RoPE section per axis, else axis 0."""
    if spec.rope_mode in (_ffi.RopeMode.MROPE, _ffi.RopeMode.VISION):
        return tuple(c for c in range(4) if spec.rope_sections[c] > 0)
    return (0,)


def row_digests(embeddings: np.ndarray) -> np.ndarray:
    """[n_rows, 16] uint8: blake2b of each embedding row's float32 bytes (VisionInput.row_digests)."""
    rows = np.ascontiguousarray(embeddings, dtype="<f4")       # [n_rows, hidden]
    out = np.empty((len(rows), 16), dtype=np.uint8)
    for i in range(len(rows)):
        out[i] = np.frombuffer(hashlib.blake2b(rows[i], digest_size=16).digest(), dtype=np.uint8)
    return out


def page_salt(request, index: int, axes: tuple[int, ...]) -> bytes | None:
    """The salt of the request's page `index` (None for a plain text page); memoized on the request."""
    if request.positions is None and request.vision is None and request.rope_delta == 0 and 3 not in axes:
        return None         # a text request: its table is the plain one on every axis the rope reads
    memo = request.page_salts
    if index not in memo:
        memo[index] = _salt(request, index, axes)
    return memo[index]


def page_salts(request, n_pages: int, axes: tuple[int, ...]) -> list[bytes | None]:
    return [page_salt(request, i, axes) for i in range(n_pages)]


def _salt(request, index: int, axes: tuple[int, ...]) -> bytes | None:
    lo, hi = index * PAGE_CELLS, (index + 1) * PAGE_CELLS
    cells = np.arange(lo, hi, dtype=np.int64)
    plain = np.stack([cells if a < 3 else np.zeros_like(cells) for a in axes], axis=1)   # a text prompt's table
    used = np.repeat((cells + request.rope_delta)[:, None], len(axes), axis=1)         # generated cells
    n = min(hi, request.num_prompt) - lo
    if n > 0:
        if request.positions is not None:
            used[:n] = np.asarray(request.positions, dtype=np.int64)[lo:lo + n][:, list(axes)]
        else:
            used[:n] = plain[:n]
    vision = request.vision
    first = last = 0
    if vision is not None:
        rows = np.asarray(vision.token_rows)
        first, last = (int(v) for v in np.searchsorted(rows, [lo, hi]))
    if first == last and np.array_equal(used, plain):
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(b"positions")
    h.update(used.astype("<i8").tobytes())
    if first < last:
        h.update(b"images")
        h.update((np.asarray(vision.token_rows[first:last], dtype=np.int64) - lo).astype("<i4").tobytes())
        digests = vision.row_digests
        h.update(row_digests(vision.embeddings[first:last]).tobytes() if digests is None else
                 np.ascontiguousarray(digests[first:last], dtype=np.uint8).tobytes())
    return h.digest()
