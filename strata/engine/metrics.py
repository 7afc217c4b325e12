"""The numbers the server shows: request outcomes, token counts, latencies, engine steps.

Updated by the engine loop only (one thread), read by /metrics and /slots.
Histograms use fixed buckets so Prometheus can aggregate them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# An engine step: ~1 ms (a small model's decode row) to ~100 ms (a big model's 512-token prompt chunk).
STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 5.0)
# Steps by what they hold: "decode" only decoding requests' rows, "prompt" prompt tokens too (chunked prefill
# beside the decode rows). The two cost very differently, so one mean would hide both.
STEP_KINDS = ("decode", "prompt")


@dataclass
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self):
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, ending with +Inf."""
        out, running = [], 0
        for le, n in zip([*map(repr, self.buckets), "+Inf"], self.counts):
            running += n
            out.append((le, running))
        return out


@dataclass
class DraftCounts:
    """Speculative decoding per draft source: tokens proposed (and verified), and of those accepted."""

    drafted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)

    def add(self, source: str, drafted: int, accepted: int) -> None:
        self.drafted[source] = self.drafted.get(source, 0) + drafted
        self.accepted[source] = self.accepted.get(source, 0) + accepted


@dataclass
class EngineMetrics:
    requests: dict[str, int] = field(default_factory=dict)   # outcome -> count
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0    # of prompt_tokens, those mapped from the prefix cache (not computed)
    generated_tokens: int = 0
    steps: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    itl: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)     # arrival to the end of every finished request
    drafts: DraftCounts = field(default_factory=DraftCounts)
    # Per step kind (STEP_KINDS): seconds from scheduling to the step's tokens handed out, decoding requests
    # (one row each, plus any draft rows they verify) and prompt tokens computed.
    step_seconds: dict = field(default_factory=lambda: {k: Histogram(STEP_BUCKETS) for k in STEP_KINDS})
    step_decode_requests: dict = field(default_factory=lambda: dict.fromkeys(STEP_KINDS, 0))
    step_prompt_tokens: int = 0

    def count_outcome(self, outcome: str) -> None:
        self.requests[outcome] = self.requests.get(outcome, 0) + 1

    def count_step(self, seconds: float, decode_requests: int, prompt_tokens: int) -> None:
        kind = "prompt" if prompt_tokens else "decode"
        self.steps += 1
        self.step_seconds[kind].observe(seconds)
        self.step_decode_requests[kind] += decode_requests
        self.step_prompt_tokens += prompt_tokens
