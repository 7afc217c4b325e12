"""One reading of a server's /slots and /metrics, and the rates between two readings.

The Prometheus text is Strata's own (server/prometheus.py): `name{labels} value`
lines, histograms as cumulative `_bucket{le=...}` counts. Percentiles of TTFT
and inter-token latency are estimated from the buckets by linear interpolation
inside the bucket that holds the rank (as Prometheus' histogram_quantile does),
over everything the server has served since it started.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

import httpx

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class ScrapeError(RuntimeError):
    """The server could not be read; the text says why (unreachable, 401, ...)."""


@dataclass
class Snapshot:
    taken_at: float                       # time.monotonic() of the reading
    slots: dict                           # the /slots JSON
    metrics: dict[tuple[str, tuple], float] = field(default_factory=dict)   # (name, sorted labels) -> value

    def value(self, name: str, **labels) -> float:
        return self.metrics.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str) -> float:
        """The sum of a family's samples over all labels."""
        return sum(v for (n, _), v in self.metrics.items() if n == name)

    def quantile(self, histogram: str, q: float) -> float | None:
        return histogram_quantile(q, self.buckets(histogram))

    def buckets(self, histogram: str) -> list[tuple[float, float]]:
        """(upper bound, cumulative count) pairs in order, +Inf last."""
        out = [(float(dict(labels)["le"]), value) for (name, labels), value in self.metrics.items()
               if name == histogram + "_bucket"]
        return sorted(out)

    @property
    def kv_used(self) -> tuple[int, int]:
        """(tokens held in slot caches, slots x tokens per slot)."""
        held = sum(s.get("cached_tokens", 0) for s in self.slots["slots"])
        return held, self.slots["num_slots"] * self.slots.get("slot_ctx", 0)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile (0..1) of a cumulative histogram; None when it is empty."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound            # past the last finite bucket: its bound is all we know
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line.strip())
        if match is None:
            continue
        name, labels, value = match.groups()
        pairs = tuple(sorted(LABEL.findall(labels or "")))
        out[(name, pairs)] = float(value)
    return out


def read(http: httpx.Client) -> Snapshot:
    """GET /slots and /metrics from the client's base URL."""
    try:
        slots = http.get("/slots")
        metrics = http.get("/metrics")
    except httpx.HTTPError as exc:
        raise ScrapeError(f"cannot reach {http.base_url}: {exc}") from None
    for response in (slots, metrics):
        if response.status_code != 200:
            raise ScrapeError(f"GET {response.url} answered {response.status_code}: {_message(response)}")
    return Snapshot(time.monotonic(), slots.json(), parse_metrics(metrics.text))


def _message(response: httpx.Response) -> str:
    try:
        return response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


@dataclass(frozen=True)
class Rates:
    """Per-second rates between two snapshots."""

    seconds: float
    generated_per_s: float
    prompt_per_s: float
    requests_per_s: float

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot) -> "Rates":
        dt = max(after.taken_at - before.taken_at, 1e-9)

        def rate(name: str) -> float:
            return max(after.total(name) - before.total(name), 0.0) / dt

        return cls(dt, rate("strata_generation_tokens_total"), rate("strata_prompt_tokens_total"),
                   rate("strata_requests_total"))
