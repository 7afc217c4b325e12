"""One request's state: its tokens, its slot, its counters and its timings.

The request owns every counter about itself (as nano-vllm's Sequence does).
The scheduler moves it WAITING -> RUNNING -> FINISHED; the runner reads its
next rows; the engine loop appends sampled tokens and emits them.
"""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from .sampling import SamplingParams

_ids = itertools.count(1)


class State(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class VisionInput:
    """Image features of a request, validated before admission (strata.vision.records)."""

    embeddings: np.ndarray        # float32 [n_image_tokens, hidden], rows in prompt order
    token_rows: np.ndarray        # int32 [n_image_tokens], prompt indices the rows replace
    grids: tuple[tuple[int, int, int], ...] = ()   # each image's patch grid (t, h, w), in prompt order
    row_digests: np.ndarray | None = None   # uint8 [n_image_tokens, 16]: page_salt.row_digests(embeddings), or None


@dataclass(eq=False)
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    positions: np.ndarray | None = None   # int32 [n_prompt, 4]; None = text (position = index)
    rope_delta: int = 0
    vision: VisionInput | None = None
    request_id: str = field(default_factory=lambda: f"req-{next(_ids)}")
    rules: object | None = None           # LogitRules when params.adjusts_logits (strata.engine.logit_rules)

    state: State = State.WAITING
    slot: int | None = None
    num_computed: int = 0                 # tokens whose K/V are in the slot's cache
    num_cached: int = 0                   # prompt tokens mapped from the prefix cache (kv_pool.py)
    kv_pages: list[int] | None = None     # pool pages of the slot's page-table entries 0.., while admitted
    kv_keys: list[bytes] = field(default_factory=list)   # prefix-cache keys of kv_pages[:len(kv_keys)]
    page_salts: dict[int, bytes | None] = field(default_factory=dict)   # page -> its salt (page_salt.py), memo
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    cancelled: bool = False
    error: str | None = None

    arrival_time: float = field(default_factory=time.monotonic)
    admit_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    num_prefill_steps: int = 0
    num_drafted: int = 0                  # speculative decoding: draft tokens verified for this request
    num_draft_accepted: int = 0           # ... and of those, kept

    @property
    def num_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def in_prefill(self) -> bool:
        return self.num_computed < self.num_prompt

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    def token_at(self, index: int) -> int:
        n = len(self.prompt_ids)
        return self.prompt_ids[index] if index < n else self.output_ids[index - n]

    def record_token(self, token_id: int, now: float) -> None:
        self.output_ids.append(token_id)
        if self.first_token_time is None:
            self.first_token_time = now
        self.last_token_time = now
        self.token_times.append(now)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed so far: tokens after the first over the time since the first (None before two)."""
        if len(self.output_ids) < 2 or self.last_token_time <= self.first_token_time:
            return None
        return (len(self.output_ids) - 1) / (self.last_token_time - self.first_token_time)

    def inter_token_latencies(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]
