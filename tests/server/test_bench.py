"""`strata bench` against a live Strata server: every stream equals its solo rerun, by token ids.

Six streaming clients with staggered arrivals, prompts from a few tokens to
several 32-token prefill chunks, greedy and seeded requests; the command is
run as a user runs it (a subprocess) and its JSON read back. The negative
control (a server whose answers change under load) is tests/loadgen.
"""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_against_strata(server):
    command = [sys.executable, "-m", "strata.cli", "bench", "--url", server.url, "--clients", "6",
               "--prompt-tokens", "6,60,200", "--max-tokens", "12", "--stagger-ms", "40", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["model"] == "smollm2-135m"
    assert (summary["ok"], summary["errors"], summary["solo_errors"]) == (6, 0, 0)
    assert summary["generated_tokens"] == 6 * 12             # ignore_eos: every request runs to max_tokens
    assert summary["compared_by"] == "token ids"
    assert (summary["compared"], summary["equal_solo"], summary["differ"]) == (6, 6, [])
    assert summary["tokens_per_s"] > 0
    assert 0 < summary["ttft_p50_ms"] <= summary["ttft_p99_ms"]
    assert 0 < summary["itl_p50_ms"] <= summary["itl_p99_ms"]
    # what the engine did meanwhile, from the server's /metrics: prompt steps read the six prompts (the
    # longest in 32-token chunks), decode-only steps the rest
    steps = summary["engine_steps"]
    assert steps["steps_prompt"] >= 6 and steps["steps_decode"] >= 1
    assert steps["step_ms_prompt"] > 0 and steps["step_ms_decode"] > 0
    assert 1 <= steps["decode_requests_per_decode_step"] <= 6
    assert steps["prompt_tokens_per_prompt_step"] > 0


def test_bench_table_and_api_key(key_server):
    command = [sys.executable, "-m", "strata.cli", "bench", "--url", key_server.url + "/v1", "--clients", "2",
               "--prompt-tokens", "6", "--max-tokens", "4", "--api-key", key_server.api_key, "--require-equal"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "streams equal to solo    2 / 2 (by token ids)" in done.stdout
    assert "aggregate tokens/s" in done.stdout and "decode-only steps" in done.stdout

    refused = subprocess.run(command[:-3], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2
    assert "401" in refused.stderr and "API key" in refused.stderr


def test_bench_conversations_hit_the_prefix_cache(server):
    """Two-turn chats: turn 2 is served partly from the prefix cache and still equals its solo replay."""
    command = [sys.executable, "-m", "strata.cli", "bench", "--url", server.url, "--clients", "4",
               "--prompt-tokens", "60,200", "--max-tokens", "8", "--stagger-ms", "30", "--turns", "2", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["ok"], summary["errors"], summary["solo_errors"]) == (8, 0, 0)
    assert summary["compared_by"] == "token ids"
    assert (summary["compared"], summary["equal_solo"], summary["differ"]) == (8, 8, [])
    first, second = summary["per_turn"]
    assert second["prompt_tokens"] > first["prompt_tokens"]
    assert second["cached_tokens"] > 0
