"""What a loaded model is, shared by both loaders (GGUF in loader.py, Hugging Face in hf_loader.py).

LoadedModel is everything the engine needs from a checkpoint; TensorInfo is one weight as
either file format describes it; ModelFormatError is how either loader says a file can't be run.
Both loaders import this module and neither imports the other's types.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..chat_template import ChatTemplate
    from ..tokenizer import Tokenizer
    from .decoder import Decoder
    from .spec import ModelSpec
    from .weights import WeightArena


class ModelFormatError(ValueError):
    """The file is not a model Strata can run; the message says why and what is supported."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: int                # GGUF/libstrata type id
    shape: tuple[int, ...]    # row-major, outermost first (HF orientation: [n_out, k])
    data: np.ndarray          # the raw bytes, memory-mapped

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass
class LoadedModel:
    name: str
    path: Path
    spec: ModelSpec
    weights: WeightArena
    decoder: Decoder
    tokenizer: Tokenizer
    chat_template: ChatTemplate
    vision: object | None = None      # the vision encoder, when the checkpoint has one

    def submission_check(self, n_ctx: int):
        """What Engine.submit runs on a request's positions and images (given by the vision
        encoder), or None for a text model, which takes neither."""
        return None if self.vision is None else self.vision.submission_check(self.spec, n_ctx)

    def close(self) -> None:
        if self.vision is not None:
            self.vision.close()
        self.weights.close()
