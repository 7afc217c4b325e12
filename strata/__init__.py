"""Strata: an LLM inference server whose answers never depend on who else is being served.

The package face imports nothing heavy: `LLM` and `SamplingParams` load (with cffi, numpy and the
engine) on first use, so `import strata.client` (the SDK, httpx only) needs no native code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine.sampling import SamplingParams
    from .llm import LLM

__all__ = ["LLM", "SamplingParams"]

_LAZY = {"LLM": ".llm", "SamplingParams": ".engine.sampling"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'strata' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
