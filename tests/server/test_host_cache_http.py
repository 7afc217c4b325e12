"""The host tier over HTTP: with --kv-pages 4 a second prompt evicts the first one's cached pages to host
memory (--host-cache); the first prompt sent again is served from there, reports them in usage's
cached_tokens, gives the same tokens, and /metrics counts the host tier's bytes, pages and hit tokens."""

from __future__ import annotations

from server_helpers import MODEL, metric, metrics, start_server

PROMPT = [(7 * i + 11) % 3000 + 100 for i in range(200)]      # 3 full pages below the last token
OTHER = [(13 * i + 5) % 3000 + 100 for i in range(200)]
CACHED = 64 * ((len(PROMPT) - 1) // 64)


def complete(http, prompt):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_hit_from_the_host_tier(model_available, tmp_path):
    server = start_server(tmp_path, "--batch", "1", "--kv-pages", "4", "--host-cache", "0.05")
    try:
        with server.http() as http:
            first = complete(http, PROMPT)             # 4 pages reserved: the whole pool
            complete(http, OTHER)                      # evicts PROMPT's 3 cached pages: they spill
            before = metrics(server)
            assert metric(before, "strata_host_cache_pages_total", event="spilled") == 3
            assert metric(before, "strata_host_cache_bytes", state="used") > 0
            assert metric(before, "strata_host_cache_bytes", state="limit") == int(0.05 * (1 << 30))
            again = complete(http, PROMPT)
            after = metrics(server)
            assert again["usage"]["prompt_tokens_details"] == {"cached_tokens": CACHED}
            assert again["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
            assert metric(after, "strata_host_cache_pages_total", event="restored") == 3
            assert metric(after, "strata_host_cache_hit_tokens_total") == CACHED
            assert metric(after, "strata_prompt_cached_tokens_total") \
                - metric(before, "strata_prompt_cached_tokens_total") == CACHED
    finally:
        server.stop()
