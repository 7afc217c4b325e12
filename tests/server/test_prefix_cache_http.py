"""The prefix cache over HTTP: a repeated prompt reports its cached tokens in OpenAI's usage shape
(whole and streamed) and in /metrics, gives the same tokens, `cache_prompt: false` opts out, and a
non-boolean `cache_prompt` is a 400 naming the field. Slot files: POST /slots/{id}?action=save|restore."""

from __future__ import annotations

from server_helpers import MODEL, metric, metrics, sse_events, start_server, wait_idle

PROMPT = [(7 * i + 11) % 3000 + 100 for i in range(200)]      # 200 token ids: 3 full pages below the last
CACHED = 64 * ((len(PROMPT) - 1) // 64)


def complete(http, **extra):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, **extra}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_repeated_prompt_is_cached_and_identical(server, http):
    wait_idle(server)
    first = complete(http)
    before = metrics(server)
    second = complete(http)
    after = metrics(server)
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": CACHED}
    assert second["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
    assert metric(after, "strata_prompt_cached_tokens_total") - metric(before, "strata_prompt_cached_tokens_total") \
        == CACHED
    assert 0 < metric(after, "strata_prefix_cache_hit_rate") <= 1
    assert metric(after, "strata_kv_pages", state="cached") >= 3

    off = complete(http, cache_prompt=False)
    assert off["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert off["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]

    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/completions", json=body) as r:
        events = [e for e in sse_events(r.iter_lines()) if e != "[DONE]"]
    usage = events[-1]["usage"]
    assert usage["prompt_tokens_details"] == {"cached_tokens": CACHED}


def test_cache_prompt_must_be_a_boolean(http):
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2, "cache_prompt": "yes"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "cache_prompt"


def test_slot_save_restore_routes(model_available, tmp_path):
    """POST /slots/{id}?action=save|restore under --slot-save-path: the files appear there, a restored
    prefix serves the same tokens; bad actions, names and missing files get OpenAI-shaped errors."""
    save_dir = tmp_path / "slots"
    save_dir.mkdir()
    server = start_server(tmp_path, "--batch", "1", "--slot-save-path", str(save_dir))
    try:
        with server.http() as http:
            first = complete(http)
            r = http.post("/slots/0", params={"action": "save", "filename": "p200.bin"})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["id_slot"] == 0 and body["filename"] == "p200.bin" and body["n_saved"] == CACHED
            assert (save_dir / "p200.bin").stat().st_size == body["n_written"]
            r = http.post("/slots/0", params={"action": "restore", "filename": "p200.bin"})
            assert r.status_code == 200 and r.json()["n_restored"] == CACHED
            again = complete(http)
            assert again["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == CACHED
            for params, status, param in [({"action": "load", "filename": "a"}, 400, "action"),
                                          ({"action": "save", "filename": "../a"}, 400, "filename"),
                                          ({"action": "restore", "filename": "nope.bin"}, 404, "filename"),
                                          ({"action": "save", "filename": "a.bin"}, 400, "id_slot")]:
                slot = 0 if param != "id_slot" else 3
                r = http.post(f"/slots/{slot}", params=params)
                assert r.status_code == status and r.json()["error"]["param"] == param, r.text
    finally:
        server.stop()


def test_slot_files_are_off_without_a_directory(http):
    r = http.post("/slots/0", params={"action": "save", "filename": "a.bin"})
    assert r.status_code == 400 and "--slot-save-path" in r.json()["error"]["message"]
