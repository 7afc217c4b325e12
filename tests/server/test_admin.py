"""The operator routes: /health, /metrics (parsed by prometheus_client, counters moving with the
work done), /slots, /tokenize and /detokenize (round trips), /v1/models, --served-model-name."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import CTX, MODEL, chat_body, metric, metrics, wait_idle

HISTOGRAMS = ("strata_time_to_first_token_seconds", "strata_inter_token_latency_seconds")


def test_health(http):
    r = http.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok", "model": MODEL}


def test_metrics_parse_as_prometheus_text(server, http):
    http.post("/v1/chat/completions", json=chat_body("Hi", max_tokens=3))
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert families["strata_requests"].type == "counter"
    assert {s.labels["outcome"] for s in families["strata_requests"].samples} >= {
        "stop", "length", "cancelled", "error", "rejected", "invalid"}
    for name in ("strata_queue_length", "strata_busy_slots", "strata_slots"):
        assert families[name].type == "gauge"
    assert metric(r.text, "strata_slots") == 4
    for name in HISTOGRAMS:
        family = families[name]
        assert family.type == "histogram"
        buckets = [s for s in family.samples if s.name == name + "_bucket"]
        counts = [s.value for s in buckets]
        assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf"
        assert metric(r.text, name + "_count") == counts[-1] > 0
    steps = families["strata_engine_step_seconds"]          # one histogram per step kind
    assert steps.type == "histogram"
    for kind in ("decode", "prompt"):
        buckets = [s for s in steps.samples if s.name.endswith("_bucket") and s.labels["kind"] == kind]
        counts = [s.value for s in buckets]
        assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf"
        assert metric(r.text, "strata_engine_step_seconds_count", kind=kind) == counts[-1] > 0
    guesses = families["strata_decode_ahead_guesses"]      # CUDA's decode-ahead; this CPU server shows zeros
    assert guesses.type == "counter"
    assert {s.labels["outcome"]: s.value for s in guesses.samples if s.name.endswith("_total")} == {
        "taken": 0, "reused": 0, "dropped": 0}


def test_metrics_move_with_the_work(server, http):
    wait_idle(server)
    before = metrics(server)
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": [1, 2, 3, 4, 5], "max_tokens": 4,
                                           "ignore_eos": True}).json()
    after = metrics(server)
    assert r["usage"]["completion_tokens"] == 4
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before, name, **labels)  # noqa: E731
    assert delta("strata_requests_total", outcome="length") == 1
    assert delta("strata_prompt_tokens_total") == 5
    assert delta("strata_generation_tokens_total") == 4
    assert delta("strata_time_to_first_token_seconds_count") == 1
    assert delta("strata_inter_token_latency_seconds_count") == 3
    # engine steps by kind: the prompt (5 tokens, or fewer where the prefix cache had them) in steps of the
    # "prompt" kind, whose last gives the first token; the other 3 tokens from decode-only steps (a step may
    # hold both kinds of rows only when requests overlap, and this one ran alone)
    steps = {k: delta("strata_engine_step_seconds_count", kind=k) for k in ("decode", "prompt")}
    assert steps["decode"] >= 3 and steps["prompt"] >= 1
    assert sum(steps.values()) == delta("strata_engine_steps_total")
    assert delta("strata_engine_step_decode_requests_total", kind="decode") == 3
    assert delta("strata_engine_step_decode_requests_total", kind="prompt") == 0
    assert 1 <= delta("strata_engine_step_prompt_tokens_total") <= 5
    assert delta("strata_engine_step_seconds_sum", kind="decode") > 0
    assert metric(after, "strata_busy_slots") == 0 and metric(after, "strata_queue_length") == 0


def test_busy_slots_and_queue_show_in_metrics_and_slots(server, http):
    wait_idle(server)
    body = {"model": MODEL, "prompt": "Count: 1, 2,", "max_tokens": 300, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        streams = [client.stream("POST", "/v1/completions", json=body) for _ in range(5)]
        responses = [s.__enter__() for s in streams]
        try:
            lines = [response.iter_lines() for response in responses]     # kept: dropping one closes it
            for line in lines[:4]:
                next(line)                           # four slots decoding, the fifth request waits
            state = http.get("/slots").json()
            text = http.get("/metrics").text
            assert state["num_slots"] == 4 and state["busy_slots"] == 4 and state["queue_len"] == 1
            assert {s["state"] for s in state["slots"]} <= {"prefill", "decode"}
            assert all(s["prompt_tokens"] > 0 and "request_id" in s for s in state["slots"])
            assert metric(text, "strata_busy_slots") == 4 and metric(text, "strata_queue_length") == 1
        finally:
            for s in streams:
                s.__exit__(None, None, None)
    wait_idle(server)
    assert [s["state"] for s in http.get("/slots").json()["slots"]] == ["idle"] * 4


def test_tokenize_detokenize_round_trip(http):
    texts = ["Hello, world!", "  leading spaces and\nnew lines\t", "émigré naïve 東京 🙂", "<|im_start|>user"]
    for text in texts:
        r = http.post("/tokenize", json={"prompt": text}).json()
        assert r["count"] == len(r["tokens"]) > 0 and r["max_model_len"] == CTX
        assert http.post("/detokenize", json={"tokens": r["tokens"]}).json() == {"prompt": text}


def test_tokenize_special_tokens_and_messages(http):
    parsed = http.post("/tokenize", json={"prompt": "<|im_start|>"}).json()["tokens"]
    assert len(parsed) == 1                            # a control token written in text is that token
    messages = [{"role": "user", "content": "What is 2+2?"}]
    ids = http.post("/tokenize", json={"messages": messages}).json()["tokens"]
    usage = http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 1}).json()
    assert usage["usage"]["prompt_tokens"] == len(ids)
    assert http.post("/detokenize", json={"tokens": ids}).json()["prompt"].endswith("<|im_start|>assistant\n")


def test_models(http):
    body = http.get("/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["id"] == MODEL and card["object"] == "model" and card["max_model_len"] == CTX


def test_served_model_name(tiny_server):
    with tiny_server.http() as http:
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["tiny"]
        ok = http.post("/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 1})
        assert ok.status_code == 200 and ok.json()["model"] == "tiny"
        assert http.post("/v1/completions", json={"model": MODEL, "prompt": "Hi"}).status_code == 404
        assert http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1}).status_code == 200
