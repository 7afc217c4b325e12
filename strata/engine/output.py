"""Turning sampled token ids into what a client sees: text deltas, stops, logprobs.

One OutputProcessor per request. Text is decoded incrementally (never a
broken UTF-8 character), special tokens are not shown, and text that could be
the start of a stop string is held back until it is clear either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)   # (token id, logprob), best first


@dataclass
class Event:
    """What one request got from one engine step (or its end)."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None      # "stop", "length", "cancelled", "error" on the last event
    error: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0                # of prompt_tokens, those read from the prefix cache
    completion_tokens: int = 0
    choice: int = 0                       # the request's params.choice_index (n > 1 share one stream)

    @property
    def final(self) -> bool:
        return self.finish_reason is not None


class OutputProcessor:
    """Holds back the last (longest stop - 1) characters: a stop string is then always found
    whole inside the pending text, never straddling text already emitted."""

    def __init__(self, tokenizer, stop: tuple[str, ...], eos_ids: frozenset[int], stop_token_ids=()):
        self._decoder = tokenizer.stream_decoder(skip_special=True)
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1
        self._eos_ids = eos_ids
        self._stop_ids = frozenset(stop_token_ids)
        self._pending = ""       # decoded, not yet emitted

    def push(self, token_id: int) -> tuple[str, str | None]:
        """Returns (text to emit now, "stop" if this token ended the request)."""
        if token_id in self._eos_ids or token_id in self._stop_ids:
            return self.finish(), "stop"
        self._pending += self._decoder.push(token_id)
        return self._emit(hold=self._hold)

    def finish(self) -> str:
        """Text still held back, when the request ends."""
        self._pending += self._decoder.flush()
        text, _ = self._emit(hold=0)
        return text

    def _emit(self, hold: int) -> tuple[str, str | None]:
        if not self._stop:           # nothing to find or hold back (hold is 0): all of it goes out
            out, self._pending = self._pending, ""
            return out, None
        found = [at for at in (self._pending.find(stop) for stop in self._stop) if at >= 0]
        if found:
            out, self._pending = self._pending[: min(found)], ""
            return out, "stop"
        cut = len(self._pending) - min(hold, len(self._pending))
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return out, None
