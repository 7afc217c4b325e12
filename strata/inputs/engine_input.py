"""EngineInput: one request's prompt as Engine.submit takes it, whatever built it.

Text prompts are ids alone. A prompt with images also carries its M-RoPE
positions, rope_delta and a VisionInput (every image's embedding rows in
prompt order, the prompt indices they replace, the grids); `from_record`
builds that from a validated vision record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.engine.request import VisionInput
from strata.vision.records import VisionRecord


@dataclass(frozen=True)
class EngineInput:
    prompt_ids: list[int]
    positions: np.ndarray | None = None   # int32 [n_prompt, 4]; None for text
    rope_delta: int = 0
    vision: VisionInput | None = None

    def submit_kwargs(self) -> dict:
        return {"positions": self.positions, "rope_delta": self.rope_delta, "vision": self.vision}


def from_record(record: VisionRecord, image_pad_id: int) -> EngineInput:
    ids = np.asarray(record.token_ids)
    vision = VisionInput(
        embeddings=np.concatenate([image.embeddings for image in record.images]).astype(np.float32, copy=False),
        token_rows=np.flatnonzero(ids == image_pad_id).astype(np.int32),
        grids=tuple(tuple(int(v) for v in image.grid_thw) for image in record.images))
    return EngineInput([int(t) for t in ids], record.positions, int(record.rope_delta), vision)
