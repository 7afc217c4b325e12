"""Shared pieces of the tests that hold Strata's GGUF tokenizers against transformers'.

transformers' tokenizer built from the same GGUF file, the two-way id check
(with and without the special tokens the vocabulary adds), and the cached
gemma3-270m file, skipping the calling test with the fetch command when it
is not in the model cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def gemma3_path() -> Path:
    """The cached gemma3-270m GGUF, or a skip naming the command that fetches it."""
    from strata.model_store import ModelStoreError, resolve_model

    try:
        return resolve_model("gemma3-270m")
    except ModelStoreError as exc:
        pytest.skip(f"Gemma 3 270M is not in the cache ({exc}); run `strata models fetch gemma3-270m`")


def transformers_tokenizer(path: Path):
    """transformers' tokenizer converted from the GGUF at `path` (AutoTokenizer with gguf_file)."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def assert_ids_equal(ours, theirs, text: str) -> None:
    """Strata's ids for `text` equal transformers', with the vocabulary's special tokens and without."""
    assert ours.encode(text) == theirs(text).input_ids
    assert ours.encode(text, add_special=False) == theirs(text, add_special_tokens=False).input_ids
