"""GET /metrics in the Prometheus text exposition format (version 0.0.4).

Counters and histograms come from the engine's EngineMetrics (outcomes,
tokens, time to first token, inter-token latency, engine steps by kind) plus the requests the HTTP
layer refused before they reached the engine; gauges are read at scrape
time (queue length, busy slots).
"""

from __future__ import annotations

from strata.engine.metrics import STEP_KINDS, Histogram

from . import h11_errors, prometheus_vllm
from .state import ServerState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("stop", "length", "cancelled", "error", "rejected", "invalid", "unauthorized")


def render(state: ServerState) -> str:
    engine = state.engine
    m = engine.metrics
    out: list[str] = []
    outcomes = {o: 0 for o in OUTCOMES} | m.requests
    for outcome, count in state.outcomes.items():           # both sides count `cancelled` and `rejected`
        outcomes[outcome] = outcomes.get(outcome, 0) + count
    _family(out, "strata_requests_total", "counter",
            "Requests by outcome: stop/length finished, cancelled (client gone or shutdown), error (engine failure), "
            "rejected (queue full), invalid (bad input), unauthorized (missing or wrong API key).",
            [({"outcome": o}, n) for o, n in sorted(outcomes.items())])
    responses = dict(state.responses)
    for status, count in h11_errors.COUNTS.items():
        responses[status] = responses.get(status, 0) + count
    _family(out, "strata_http_responses_total", "counter",
            "HTTP responses by status code, every route, errors answered below the app (malformed HTTP) included.",
            [({"code": str(s)}, n) for s, n in sorted(responses.items())])
    _family(out, "strata_prompt_tokens_total", "counter", "Prompt tokens of requests that produced a token.",
            [({}, m.prompt_tokens)])
    _family(out, "strata_prompt_cached_tokens_total", "counter",
            "Prompt tokens read from the prefix cache instead of computed (of strata_prompt_tokens_total).",
            [({}, m.cached_prompt_tokens)])
    _family(out, "strata_prefix_cache_hit_rate", "gauge",
            "Cached prompt tokens / prompt tokens since the start (0 before the first request).",
            [({}, round(m.cached_prompt_tokens / m.prompt_tokens, 6) if m.prompt_tokens else 0)])
    pool = engine.pool
    _family(out, "strata_kv_pages", "gauge", "KV pool pages (64 tokens each) by state: held by running requests, "
            "cached (kept for prefix hits, evictable), free.",
            [({"state": "held"}, pool.n_pages - pool.num_free), ({"state": "cached"}, len(pool.idle)),
             ({"state": "free"}, len(pool.free))])
    host = pool.host       # the host tier (--host-cache); zeros when it is off
    _family(out, "strata_host_cache_bytes", "gauge",
            "Bytes of evicted KV pages held in host memory (--host-cache), and the limit.",
            [({"state": "used"}, host.num_bytes if host else 0), ({"state": "limit"}, host.limit_bytes if host else 0)])
    _family(out, "strata_host_cache_pages_total", "counter",
            "KV pages moved by the host tier: spilled from the device, restored for a prefix hit, dropped (oldest) "
            "to stay within the limit.",
            [({"event": e}, getattr(host, f"num_{e}", 0) if host else 0) for e in ("spilled", "restored", "dropped")])
    _family(out, "strata_host_cache_hit_tokens_total", "counter",
            "Prompt tokens served from pages the host tier brought back (of strata_prompt_cached_tokens_total).",
            [({}, host.restored_tokens if host else 0)])
    _family(out, "strata_generation_tokens_total", "counter", "Tokens generated.", [({}, m.generated_tokens)])
    _family(out, "strata_engine_steps_total", "counter", "Engine steps run.", [({}, m.steps)])
    _histograms(out, "strata_engine_step_seconds",
                "Seconds an engine step takes, from scheduling to its tokens handed out, by kind: decode (decoding "
                "requests' rows only) or prompt (prompt tokens too, beside any decoding rows).",
                [({"kind": k}, m.step_seconds[k]) for k in STEP_KINDS])
    _family(out, "strata_engine_step_decode_requests_total", "counter",
            "Decoding requests summed over engine steps, by step kind (each decodes one row a step, plus any draft "
            "rows it verifies).", [({"kind": k}, m.step_decode_requests[k]) for k in STEP_KINDS])
    _family(out, "strata_engine_step_prompt_tokens_total", "counter",
            "Prompt tokens computed by engine steps (prompt-cache hits are not computed).", [({}, m.step_prompt_tokens)])
    ahead = getattr(engine.runner, "ahead", None)       # CUDA's decode-ahead (strata/engine/decode_ahead.py)
    _family(out, "strata_decode_ahead_guesses_total", "counter",
            "Decode steps queued on the device ahead of the host (CUDA), by outcome: taken (the next step was the "
            "one guessed), reused (the plan changed, the guess still served its decode rows), dropped (computed "
            "for nothing). Zeros where decode-ahead is off.",
            [({"outcome": o}, getattr(ahead, a, 0) if ahead is not None else 0)
             for o, a in (("taken", "hits"), ("reused", "reused"), ("dropped", "misses"))])
    _family(out, "strata_queue_length", "gauge", "Requests waiting for a slot.", [({}, engine.scheduler.queue_len)])
    _family(out, "strata_busy_slots", "gauge", "Slots holding a request.", [({}, engine.scheduler.busy_slots)])
    _family(out, "strata_slots", "gauge", "Slots of the engine.", [({}, engine.config.batch)])
    _family(out, "strata_request_workers_pending", "gauge",
            "Requests whose CPU work (parsing, templating, tokenizing, images) runs or waits in the worker pool.",
            [({}, state.workers.num_pending)])
    _family(out, "strata_engine_up", "gauge", "1 while the engine loop runs.", [({}, int(state.engine_running))])
    configured = getattr(engine.config, "draft", None)       # shown at 0 before the first draft
    sources = sorted({*m.drafts.drafted, *([configured] if configured else [])})
    _family(out, "strata_draft_tokens_total", "counter",
            "Speculative decoding: draft tokens verified, by draft source.",
            [({"source": s}, m.drafts.drafted.get(s, 0)) for s in sources])
    _family(out, "strata_draft_accepted_tokens_total", "counter",
            "Speculative decoding: verified draft tokens equal to the sampled token (kept), by draft source.",
            [({"source": s}, m.drafts.accepted.get(s, 0)) for s in sources])
    _histogram(out, "strata_time_to_first_token_seconds", "Seconds from arrival to the first generated token.",
               m.ttft)
    _histogram(out, "strata_inter_token_latency_seconds", "Seconds between consecutive tokens of a request.", m.itl)
    _histogram(out, "strata_e2e_request_latency_seconds", "Seconds from arrival to the end of a request.", m.e2e)
    out += prometheus_vllm.render(state, _family, _histogram)
    return "\n".join(out) + "\n"


def _family(out: list[str], name: str, kind: str, help_text: str, samples) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        out.append(f"{name}{_labels(labels)} {_number(value)}")


def _histogram(out: list[str], name: str, help_text: str, hist: Histogram, labels: dict | None = None) -> None:
    _histograms(out, name, help_text, [(labels or {}, hist)])


def _histograms(out: list[str], name: str, help_text: str, series) -> None:
    """One histogram family: HELP and TYPE once, then each (labels, Histogram)'s buckets, sum and count."""
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} histogram")
    for labels, hist in series:
        for le, count in hist.cumulative():
            out.append(f"{name}_bucket{_labels({**labels, 'le': le})} {count}")
        out.append(f"{name}_sum{_labels(labels)} {_number(hist.total)}")
        out.append(f"{name}_count{_labels(labels)} {hist.count}")


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    escaped = (f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
               for k, v in labels.items())
    return "{" + ",".join(escaped) + "}"


def _number(value) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)
