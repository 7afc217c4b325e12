"""The vLLM-named series of /metrics, for the Grafana dashboards written for vLLM.

Same numbers as the strata_* series (server.prometheus), under vLLM's names
and with its `model_name` label (the served model name):
  vllm:num_requests_running      requests holding a slot
  vllm:num_requests_waiting      requests queued for one
  vllm:kv_cache_usage_perc       cached tokens of the running requests / all slots' cells (0..1)
  vllm:prompt_tokens_total, vllm:generation_tokens_total
  vllm:time_to_first_token_seconds, vllm:e2e_request_latency_seconds   (histograms)
"""

from __future__ import annotations




def render(state, family, histogram_lines) -> list[str]:
    """The lines of every vllm:* family; `family`/`histogram_lines` are server.prometheus' writers."""
    engine = state.engine
    m, sched = engine.metrics, engine.scheduler
    label = {"model_name": state.settings.model_name}
    cells = engine.config.batch * engine.config.ctx
    cached = sum(r.num_computed for r in sched.running.values())
    out: list[str] = []
    family(out, "vllm:num_requests_running", "gauge", "Requests holding a slot.", [(label, sched.busy_slots)])
    family(out, "vllm:num_requests_waiting", "gauge", "Requests waiting for a slot.", [(label, sched.queue_len)])
    family(out, "vllm:kv_cache_usage_perc", "gauge", "Fraction of the KV cache cells in use (1 = full).",
           [(label, cached / cells if cells else 0.0)])
    family(out, "vllm:prompt_tokens_total", "counter", "Prompt tokens processed.", [(label, m.prompt_tokens)])
    family(out, "vllm:generation_tokens_total", "counter", "Tokens generated.", [(label, m.generated_tokens)])
    histogram_lines(out, "vllm:time_to_first_token_seconds", "Seconds from arrival to the first token.", m.ttft,
                    label)
    histogram_lines(out, "vllm:e2e_request_latency_seconds", "Seconds from arrival to the end of a request.",
                    m.e2e, label)
    return out



