"""The load generator (strata/loadgen) without a model: workloads, percentiles, and a fake server.

The fake server (fake_openai.py) streams text only and changes its seeded
answers under concurrency, so the streams-equal-solo count must come out
below the total, compared by text — the negative control of the check that
`strata bench` reports as all-equal against Strata (tests/server/test_bench.py).
"""

from __future__ import annotations

import json

import pytest

from strata.loadgen import cli
from strata.loadgen.report import percentile
from strata.loadgen.workload import Workload

from .fake_openai import FakeServer


def test_workload_is_deterministic_and_mixed():
    w = Workload(model="m", num_requests=8, prompt_tokens=(4, 300), max_tokens=5)
    again = Workload(model="m", num_requests=8, prompt_tokens=(4, 300), max_tokens=5)
    bodies = [w.body(i) for i in range(8)]
    assert bodies == [again.body(i) for i in range(8)]
    assert len(bodies[1]["messages"][0]["content"].split()) > 150 > len(bodies[0]["messages"][0]["content"].split())
    assert [b["temperature"] == 0.0 for b in bodies] == [True, False] * 4
    seeded = bodies[1::2]
    assert len({b["seed"] for b in seeded}) == 4
    assert any("top_p" in b for b in seeded) and any("top_k" in b for b in seeded)
    assert all(b["stream"] and b["return_token_ids"] and b["ignore_eos"] and b["max_tokens"] == 5 for b in bodies)
    assert Workload(model="m", num_requests=2, seed=99).body(1) != Workload(model="m", num_requests=2).body(1)


@pytest.mark.parametrize("bad", [dict(num_requests=0), dict(prompt_tokens=()), dict(max_tokens=0),
                                 dict(sampling="beam")])
def test_workload_refuses_bad_settings(bad):
    with pytest.raises(ValueError):
        Workload(**{"model": "m", "num_requests": 1, **bad})


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_bench_counts_streams_that_differ_from_solo(capsys):
    with FakeServer(gather=4) as fake:
        status = cli.main(["--url", fake.url, "--clients", "4", "--stagger-ms", "0", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 0
    assert summary["model"] == "fake-model"
    assert (summary["ok"], summary["errors"]) == (4, 0)
    assert summary["compared_by"] == "text"
    assert summary["compared"] == 4
    assert summary["equal_solo"] == 2          # the greedy ones
    assert summary["differ"] == [1, 3]         # the seeded ones saw a batch of 4, then 1
    assert summary["generated_tokens"] == 4 * 3 + 2
    assert summary["ttft_p50_ms"] is not None and summary["itl_p99_ms"] is not None


def test_bench_require_equal_fails_on_a_difference(capsys):
    with FakeServer(gather=2) as fake:
        status = cli.main(["--url", fake.url + "/v1", "--clients", "2", "--stagger-ms", "0", "--require-equal"])
    out = capsys.readouterr().out
    assert status == 3
    assert "streams equal to solo    1 / 2 (by text)" in out


def test_bench_reports_errors(capsys):
    with FakeServer(gather=1) as fake:
        status = cli.main(["--url", fake.url, "--model", "other", "--clients", "1", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 1
    assert summary["errors"] == 1 and "HTTP 404: no such model" in summary["first_errors"][0]


def test_bench_unreachable_server_is_a_clear_error(capsys):
    status = cli.main(["--url", "http://127.0.0.1:9", "--clients", "1"])
    assert status == 2
    assert "error:" in capsys.readouterr().err
