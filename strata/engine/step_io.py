"""The per-step inputs and outputs on the device, packed into one buffer.

Layout (fixed for the runner's life, so captured graphs can read it):
  params    strata_sampling_params [max_logits]   (32 B each, 8-aligned)
  ids       int32 [max_rows]                      token id of each row
  rows      int32 [max_rows, 2]                   {slot, cache index}
  logit_idx int32 [max_logits]                    rows whose logits are sampled
  adjust    int32 [max_logits]                    each sampled row's slot in the LogitTable, -1 = none
  out_ids   int32 [max_logits]                    sampled token ids
Everything up to out_ids goes to the device in one upload per step.
"""

from __future__ import annotations

import numpy as np

from .. import _ffi

PARAMS = _ffi.SAMPLING_PARAMS_DTYPE


class StepIO:
    def __init__(self, ctx: _ffi.Context, max_rows: int, max_logits: int):
        self.max_rows, self.max_logits = max_rows, max_logits
        self.params_off = 0
        self.ids_off = self.params_off + PARAMS.itemsize * max_logits
        self.rows_off = self.ids_off + 4 * max_rows
        self.logit_idx_off = self.rows_off + 8 * max_rows
        self.adjust_off = self.logit_idx_off + 4 * max_logits
        self.out_off = self.adjust_off + 4 * max_logits
        self.nbytes = self.out_off + 4 * max_logits
        self.buffer = _ffi.Buffer(ctx, self.nbytes)
        self.host = np.zeros(self.out_off, dtype=np.uint8)
        self.params = self.host[: self.ids_off].view(PARAMS)                              # [max_logits]
        self.ids = self.host[self.ids_off: self.rows_off].view(np.int32)                  # [max_rows]
        self.rows = self.host[self.rows_off: self.logit_idx_off].view(np.int32).reshape(max_rows, 2)
        self.logit_idx = self.host[self.logit_idx_off: self.adjust_off].view(np.int32)   # [max_logits]
        self.adjust = self.host[self.adjust_off: self.out_off].view(np.int32)            # [max_logits]
        self.adjust[:] = -1
        # Set by whoever records a step: True when rows [0, n_rows) are decode rows of distinct slots
        # (no prompt chunk, no draft rows), so no row reads a cell another row writes. The decoder may
        # then fuse rope, the KV store and attention (strata_rope_kv_store_attention).
        self.distinct_slots = False
        self._out = np.zeros(max_logits, dtype=np.int32)
        # An unused sample row i reads row i (mod max_rows): a valid row, its token thrown away.
        self._pad_logit_idx = np.arange(max_logits, dtype=np.int32) % max(max_rows, 1)

    def clear(self, n_rows: int, n_logits: int) -> None:
        """Rows past n_rows become padding (slot -1); unused sample rows greedy."""
        self.ids[n_rows:] = 0
        self.rows[n_rows:] = (-1, 0)
        self.params[n_logits:] = 0
        self.adjust[n_logits:] = -1
        self.logit_idx[n_logits:] = self._pad_logit_idx[n_logits:]

    def upload(self) -> None:
        self.buffer.upload(self.host)

    def download_ids(self, n: int) -> np.ndarray:
        return self.buffer.download(self._out[:n], self.out_off).copy()

    def close(self) -> None:
        self.buffer.close()
