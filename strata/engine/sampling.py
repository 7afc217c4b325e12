"""Sampling parameters of one request, checked at the boundary.

The device sampler (libstrata's strata_sample) draws with randomness keyed by
(seed, position) only, so a request's tokens never depend on its slot, its
batch or timing. A request without a seed gets a fresh random one here,
once, so that its whole stream is still reproducible from the seed it got.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace

from ..grammar.spec import GrammarSpec

MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 300          # entries; each value in [-100, 100] as OpenAI


class InvalidRequest(ValueError):
    """A request that cannot be served as asked; the message says what is allowed.

    param names the field at fault ("prompt" means the request's prompt, whatever its form);
    code is the machine-readable reason, when there is one."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    # Per-row logit adjustments (strata.engine.logit_rules): OpenAI's penalties on generated
    # tokens, vLLM's repetition penalty on prompt and generated tokens, a bias per token id.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_tokens: int = 0
    grammar: GrammarSpec | None = None
    # n > 1: choice i draws with its own key (sampler_seed); choice 0 is the plain request.
    choice_index: int = 0
    speculative: bool = True           # False: never draft for this request (the tokens are the same either way)
    cache_prompt: bool = True          # False: neither map cached prefix pages nor leave pages in the cache
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    @property
    def adjusts_logits(self) -> bool:
        """Whether the request needs per-row logit adjustments (strata.engine.logit_rules)."""
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0
                    or self.logit_bias or self.min_tokens or self.grammar is not None)

    @property
    def sampler_seed(self) -> int:
        """The seed the device sampler draws with: the request's own for choice 0, and for
        choice i > 0 splitmix64(seed ^ splitmix64(i)), a key of (seed, choice index) alone, so
        choice i is the same whether asked alone (choice_index=i) or as one of n."""
        if not self.choice_index:
            return self.seed
        return _splitmix64(self.seed ^ _splitmix64(self.choice_index))

    def validated(self) -> "SamplingParams":
        """Returns these parameters with a seed filled in, or raises InvalidRequest."""
        _check_int("max_tokens", self.max_tokens, 1, 1 << 30)
        _check_float("temperature", self.temperature, 0.0, 100.0)
        _check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_int("top_k", self.top_k, -1, 1 << 30)
        _check_float("min_p", self.min_p, 0.0, 1.0, high_open=True)
        _check_int("top_logprobs", self.top_logprobs, 0, MAX_TOP_LOGPROBS)
        if self.top_logprobs and not self.logprobs:
            raise InvalidRequest("top_logprobs requires logprobs to be true", "top_logprobs")
        if not isinstance(self.cache_prompt, bool):
            raise InvalidRequest(f"cache_prompt must be a boolean, got {type(self.cache_prompt).__name__}",
                                 "cache_prompt")
        if not isinstance(self.speculative, bool):
            raise InvalidRequest(f"speculative must be a boolean, got {type(self.speculative).__name__}", "speculative")
        if self.seed is not None:
            _check_int("seed", self.seed, -(1 << 63), (1 << 64) - 1)
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if len(stop) > 16 or any(not isinstance(s, str) or not s or len(s) > 256 for s in stop):
            raise InvalidRequest("stop must be at most 16 non-empty strings of at most 256 characters", "stop")
        for t in self.stop_token_ids:
            _check_int("stop_token_ids", t, 0, 1 << 31)
        _check_float("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_float("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _check_float("repetition_penalty", self.repetition_penalty, 0.0, 2.0, low_open=True)
        _check_int("min_tokens", self.min_tokens, 0, self.max_tokens)
        _check_int("choice_index", self.choice_index, 0, 1 << 20)
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise InvalidRequest(f"logit_bias may hold at most {MAX_LOGIT_BIAS} entries, got {len(self.logit_bias)}",
                                 "logit_bias")
        for token, bias in self.logit_bias:
            _check_int("logit_bias", token, 0, 1 << 31)
            _check_float("logit_bias", bias, -100.0, 100.0)
        if self.grammar is not None and not isinstance(self.grammar, GrammarSpec):
            raise InvalidRequest("grammar must be a GrammarSpec", "response_format")
        seed = self.seed if self.seed is not None else secrets.randbits(63)
        return replace(self, seed=seed % (1 << 64), stop=stop, top_k=max(self.top_k, 0),
                       presence_penalty=float(self.presence_penalty), frequency_penalty=float(self.frequency_penalty),
                       repetition_penalty=float(self.repetition_penalty),
                       logit_bias=tuple((int(t), float(b)) for t, b in self.logit_bias),
                       # A slot has one adjustment row (strata.engine.logit_table), right for its next
                       # token only, so a drafted slot's later verification rows would read a wrong one.
                       speculative=self.speculative and not self.adjusts_logits)


_MASK64 = (1 << 64) - 1


def _splitmix64(z: int) -> int:
    """The standard 64-bit finalizer of z + golden ratio (as the device sampler's key mixing, strata.h)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _check_int(name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer, got {type(value).__name__}", name)
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}, got {value}", name)


def _check_float(name: str, value, low: float, high: float, low_open=False, high_open=False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a number, got {type(value).__name__}", name)
    value = float(value)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if value != value or too_low or too_high:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise InvalidRequest(f"{name} must be in {lo}{low:g}, {high:g}{hi}, got {value:g}", name)
