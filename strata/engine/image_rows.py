"""Image embedding rows of admitted requests, and their injection into prefill steps.

At admission, a request's image embeddings are uploaded into a device buffer
owned by its slot: no region another slot reads is written. In a step with
prefill chunks, the decoder's inject hook copies, over the token embeddings
of each chunk's image-pad rows, the matching embedding rows — one buffer copy
per contiguous run. Decode rows are never touched, so decode graphs stay as
they are. The buffer is freed when the slot is released.
"""

from __future__ import annotations

import numpy as np

from .. import _ffi as F


class ImageRows:
    def __init__(self, ctx: F.Context, hidden: int):
        self.ctx = ctx
        self.row_bytes = hidden * 4
        self._slots: dict[int, tuple[F.Buffer, np.ndarray]] = {}   # slot -> (embeddings, token rows)

    def admit(self, request) -> None:
        vision = request.vision
        if vision is None or len(vision.token_rows) == 0:
            return
        self.release(request.slot)
        embeddings = np.ascontiguousarray(vision.embeddings, dtype=np.float32)   # [n_image_tokens, hidden]
        self._slots[request.slot] = (F.Buffer.from_array(self.ctx, embeddings),
                                     np.asarray(vision.token_rows, dtype=np.int64))

    def release(self, slot: int) -> None:
        entry = self._slots.pop(slot, None)
        if entry is not None:
            entry[0].close()

    def copies(self, plan, n_decode_rows: int | None = None) -> list[tuple[F.Buffer, int, int, int]]:
        """(source buffer, first embedding row, batch row, n rows) for each contiguous run in the step.
        Prefill rows follow the decode rows: one per decode request, more when slots verify drafts."""
        out, row = [], len(plan.decode) if n_decode_rows is None else n_decode_rows
        for chunk in plan.prefill:
            entry = self._slots.get(chunk.request.slot)
            if entry is not None:
                out += _runs(entry, chunk.start, chunk.length, row)
            row += chunk.length
        return out

    def inject_for(self, plan, n_decode_rows: int | None = None):
        """The Decoder.record inject hook for this step, or None when no chunk holds image rows."""
        copies = self.copies(plan, n_decode_rows)
        if not copies:
            return None
        size = self.row_bytes

        def inject(buffer: F.Buffer, x_offset: int) -> None:
            for source, first, batch_row, n in copies:
                buffer.copy_from(source, x_offset + batch_row * size, first * size, n * size)

        return inject

    def close(self) -> None:
        for slot in list(self._slots):
            self.release(slot)


def _runs(entry, start: int, length: int, batch_row: int) -> list[tuple[F.Buffer, int, int, int]]:
    """Runs of consecutive prompt indices among the image rows inside [start, start + length)."""
    source, token_rows = entry
    lo, hi = np.searchsorted(token_rows, [start, start + length])
    if lo == hi:
        return []
    breaks = np.flatnonzero(np.diff(token_rows[lo:hi]) != 1) + 1
    bounds = [0, *breaks.tolist(), hi - lo]
    return [(source, int(lo + a), batch_row + int(token_rows[lo + a]) - start, b - a)
            for a, b in zip(bounds, bounds[1:])]
