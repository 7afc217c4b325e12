"""`strata bench` against `strata serve --device cuda`: 32 staggered streaming clients (and 16 three-turn chats that hit
the prefix cache), every stream equal to its
solo rerun by token ids (the GPU side of tests/server/test_bench.py; needs a CUDA device)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from server_helpers import start_server

from strata import _ffi

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_server(model_available, tmp_path_factory):
    if _ffi.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    server = start_server(tmp_path_factory.mktemp("gpu_server"), "--device", "cuda", "--ctx", "4096",
                          "--batch", "16", "--chunk", "256")
    yield server
    server.stop()


def test_bench_on_the_gpu_every_stream_equals_solo(gpu_server):
    command = [sys.executable, "-m", "strata.cli", "bench", "--url", gpu_server.url, "--clients", "32",
               "--prompt-tokens", "6,80,700,1800", "--max-tokens", "48", "--stagger-ms", "15", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["ok"], summary["errors"], summary["solo_errors"]) == (32, 0, 0)
    assert summary["compared_by"] == "token ids"
    assert (summary["compared"], summary["equal_solo"], summary["differ"]) == (32, 32, [])


def test_bench_conversations_on_the_gpu_hit_the_cache_and_equal_solo(gpu_server):
    command = [sys.executable, "-m", "strata.cli", "bench", "--url", gpu_server.url, "--clients", "16",
               "--prompt-tokens", "80,700", "--max-tokens", "32", "--stagger-ms", "15", "--turns", "3", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["ok"], summary["errors"], summary["solo_errors"]) == (48, 0, 0)
    assert (summary["compared"], summary["equal_solo"], summary["differ"]) == (48, 48, [])
    assert all(turn["cached_tokens"] > 0 for turn in summary["per_turn"][1:])
