"""What a Strata server's engine did during a load run's concurrent phase, read from its /metrics.

Strata's /metrics counts engine steps by kind (strata/engine/metrics.py): steps that only decode, and steps
that also compute prompt tokens (chunked prefill beside the decode rows), with their time and rows. Read
just before and just after the concurrent phase, the difference says where the run's wall went — how many
steps of each kind, how long each took on average, how many requests each decoded. Servers without these
metrics (llama-server, vLLM) give no snapshot, and the report leaves the rows out.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from ..engine.metrics import STEP_KINDS as KINDS  # the kinds the server counts steps by
from ..top.snapshot import parse_metrics  # `strata top`'s reader of the Prometheus text

GUESS_OUTCOMES = ("taken", "reused", "dropped")   # strata_decode_ahead_guesses_total (server/prometheus.py)


@dataclass(frozen=True)
class StepSnapshot:
    """Cumulative counts per step kind ("decode", "prompt"): steps, their seconds and decoding requests, and
    the prompt tokens all steps computed."""

    steps: dict[str, float]
    seconds: dict[str, float]
    decode_requests: dict[str, float]
    prompt_tokens: float
    guesses: dict[str, float] | None = None     # decode-ahead's guesses by outcome; None on older servers


def parse(text: str) -> StepSnapshot | None:
    """The step figures of a /metrics page, or None when it has none (not a Strata server, or an older one)."""
    samples = parse_metrics(text)

    def per_kind(name: str) -> dict[str, float] | None:
        values = {kind: samples.get((name, (("kind", kind),))) for kind in KINDS}
        return None if None in values.values() else values

    steps, seconds = per_kind("strata_engine_step_seconds_count"), per_kind("strata_engine_step_seconds_sum")
    decoding = per_kind("strata_engine_step_decode_requests_total")
    prompt_tokens = samples.get(("strata_engine_step_prompt_tokens_total", ()))
    if steps is None or seconds is None or decoding is None or prompt_tokens is None:
        return None
    guesses = {o: samples.get(("strata_decode_ahead_guesses_total", (("outcome", o),))) for o in GUESS_OUTCOMES}
    return StepSnapshot(steps, seconds, decoding, prompt_tokens, None if None in guesses.values() else guesses)


async def snapshot(http: httpx.AsyncClient, base_url: str) -> StepSnapshot | None:
    """GET {base_url}/metrics (the server's root, not /v1) and parse it; None on any failure: the load run's
    own figures never depend on it."""
    try:
        response = await http.get(base_url.rstrip("/") + "/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse(response.text)


def difference(before: StepSnapshot, after: StepSnapshot) -> dict:
    """The summary fields of the steps between two snapshots: per kind, the steps, their mean milliseconds and
    decoding requests; the prompt tokens a prompt step computed on average (None where no step ran); and, where
    the server counts them, decode-ahead's guesses by outcome (`guesses_taken`, `_reused`, `_dropped`)."""
    out: dict = {}
    for kind in KINDS:
        steps = after.steps[kind] - before.steps[kind]
        seconds = after.seconds[kind] - before.seconds[kind]
        decoding = after.decode_requests[kind] - before.decode_requests[kind]
        out[f"steps_{kind}"] = int(steps)
        out[f"step_ms_{kind}"] = round(1000 * seconds / steps, 3) if steps else None
        out[f"decode_requests_per_{kind}_step"] = round(decoding / steps, 2) if steps else None
    prompt_steps = out["steps_prompt"]
    tokens = after.prompt_tokens - before.prompt_tokens
    out["prompt_tokens_per_prompt_step"] = round(tokens / prompt_steps, 1) if prompt_steps else None
    if before.guesses is not None and after.guesses is not None:
        for outcome in GUESS_OUTCOMES:
            out[f"guesses_{outcome}"] = int(after.guesses[outcome] - before.guesses[outcome])
    return out
