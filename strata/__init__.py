"""Strata: an LLM inference server whose answers never depend on who else is being served."""

from .engine.sampling import SamplingParams
from .llm import LLM

__all__ = ["LLM", "SamplingParams"]
