"""The load generator (strata/loadgen) without a model: workloads, percentiles, and a fake server.

The fake server (fake_openai.py) streams text only and changes its seeded
answers under concurrency, so the streams-equal-solo count must come out
below the total, compared by text — the negative control of the check that
`strata bench` reports as all-equal against Strata (tests/server/test_bench.py).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from strata.loadgen import cli
from strata.loadgen.client import StreamResult
from strata.loadgen.report import peak_in_flight, percentile, summarize
from strata.loadgen.runner import Target, run_load
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


def test_conversation_bodies_carry_the_replies():
    w = Workload(model="m", num_requests=2, prompt_tokens=(4,), turns=3, cache_prompt=False)
    first, third = w.body(1), w.body(1, ("one", "two"))
    assert first["cache_prompt"] is False and "cache_prompt" not in Workload(model="m", num_requests=1).body(0)
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert third["messages"][0] == first["messages"][0]
    assert [third["messages"][1]["content"], third["messages"][3]["content"]] == ["one", "two"]
    assert {k: v for k, v in third.items() if k != "messages"} == {k: v for k, v in first.items() if k != "messages"}
    with pytest.raises(ValueError, match="3 turn"):
        w.body(0, ("a", "b", "c"))


@pytest.mark.parametrize("bad", [dict(num_requests=0), dict(prompt_tokens=()), dict(max_tokens=0),
                                 dict(sampling="beam"), dict(turns=0)])
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


def test_bench_conversations_report_turns_and_cached_tokens(capsys):
    with FakeServer(gather=2) as fake:
        status = cli.main(["--url", fake.url, "--clients", "2", "--turns", "3", "--stagger-ms", "0",
                           "--cache-prompt", "on", "--json"])
        bodies = list(fake.bodies)
    summary = json.loads(capsys.readouterr().out)
    assert status == 0
    assert (summary["ok"], summary["turns"], summary["cache_prompt"]) == (6, 3, True)
    assert [(t["turn"], t["streams"], t["prompt_tokens"], t["cached_tokens"]) for t in summary["per_turn"]] == [
        (1, 2, 20, 0), (2, 2, 60, 40), (3, 2, 100, 80)]
    # Turn 3 of each conversation carries the replies of its own turns 1 and 2.
    third = [b for b in bodies if len(b["messages"]) == 5]
    assert len(third) == 4 and all(b["messages"][1]["content"].startswith("alpha beta gamma") for b in third)
    assert all(b["cache_prompt"] is True for b in bodies)
    assert summary["compared"] == 6
    assert summary["differ"] == [1]              # the seeded conversation saw a batch of 2 in its first turn
    assert 3 <= summary["equal_solo"] <= 5


def test_bench_conversation_table(capsys):
    with FakeServer(gather=1) as fake:
        status = cli.main(["--url", fake.url, "--clients", "1", "--turns", "2", "--cache-prompt", "off"])
    out = capsys.readouterr().out
    assert status == 0
    assert "turns, cache_prompt      2, false" in out
    assert "| 2 | 1 |" in out and out.rstrip().endswith("| 30 | 0 |")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_bench_reports_the_server_cpu_per_token(capsys):
    with FakeServer(gather=2) as fake:           # it serves from this process: its CPU is ours
        status = cli.main(["--url", fake.url, "--clients", "2", "--stagger-ms", "0", "--no-solo", "--json",
                           "--server-pid", str(os.getpid())])
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    main, every = summary["server_cpu_main_us_per_token"], summary["server_cpu_all_us_per_token"]
    assert summary["generated_tokens"] > 0 and 0 <= main <= every
    with FakeServer(gather=1) as fake:
        status = cli.main(["--url", fake.url, "--clients", "1", "--no-solo", "--server-pid", str(os.getpid())])
    assert status == 0 and "server CPU per token" in capsys.readouterr().out


def test_bench_server_cpu_covers_the_concurrent_phase_only(capsys, monkeypatch):
    """The per-token figure divides by the concurrent phase's tokens, so the solo reruns (as many tokens
    again, most of the time spent waiting on the device) must not be inside its CPU window."""
    from strata.loadgen import runner, server_cpu

    events = []

    def snapshot(pid):
        events.append("snapshot")
        n = len(events)
        return server_cpu.CpuSnapshot(pid, {pid: n, pid + 1: 2 * n}, tick_hz=1000)

    real_solo = runner.run_solo

    async def solo(target, workload):
        events.append("solo")
        return await real_solo(target, workload)

    monkeypatch.setattr(server_cpu, "snapshot", snapshot)
    monkeypatch.setattr(runner, "run_solo", solo)
    with FakeServer(gather=1) as fake:
        status = cli.main(["--url", fake.url, "--clients", "1", "--json", "--server-pid", "1"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 0 and events == ["snapshot", "snapshot", "solo"]
    tokens = summary["generated_tokens"]
    assert summary["server_cpu_main_us_per_token"] == pytest.approx(1000 / tokens)
    assert summary["server_cpu_all_us_per_token"] == pytest.approx(3000 / tokens)  # main 1 tick + the other 2


def test_server_cpu_per_thread_differences():
    """Threads that end or start between the snapshots never make the figure negative or let the main
    thread's exceed the total (the CI failure of 2026-12-04: 1428.57142857216 > 1428.57142857013 from
    summing float seconds in two orders)."""
    from strata.loadgen import server_cpu

    before = server_cpu.CpuSnapshot(10, {10: 100, 11: 500, 12: 7}, tick_hz=100)
    after = server_cpu.CpuSnapshot(10, {10: 103, 12: 7, 13: 2}, tick_hz=100)   # 11 ended, 13 started
    got = server_cpu.per_token_us(before, after, 10)
    assert got == {"server_cpu_main_us_per_token": 3 * 1e6 / 100 / 10, "server_cpu_all_us_per_token": 5 * 1e6 / 100 / 10}
    assert server_cpu.per_token_us(before, after, 0)["server_cpu_main_us_per_token"] is None


def test_bench_server_pid_that_is_not_here_is_a_clear_error(capsys):
    with FakeServer(gather=1) as fake:
        status = cli.main(["--url", fake.url, "--clients", "1", "--server-pid", "999999999"])
    assert status == 2
    assert "--server-pid 999999999: no such process here" in capsys.readouterr().err


def test_wall_ends_with_the_last_request_not_the_last_client():
    """Clients share one queue of requests: where the server answers faster than the stagger, client 0 takes
    all three requests and clients 1 and 2 wake (at 0.5 and 1.0 s) to an empty queue. Their sleep is not the
    server's time: the wall ends with the last request. (It ended with the last client until 2026-12-05, so the
    default model's serve_load on the H200 measured the arrival window, 63 x 50 ms, not the server.) The old
    wall here would be at least 1.0 s, the last client's sleep."""
    with FakeServer(gather=1) as fake:
        workload = Workload(model="fake-model", num_requests=3, prompt_tokens=(4,), max_tokens=3)
        run = asyncio.run(run_load(Target(fake.url), workload, 3, stagger_s=0.5, solo_check=False))
    assert len(run.concurrent) == 3 and all(r.ok for r in run.concurrent)
    assert run.wall_s == max(r.end for r in run.concurrent) - run.started
    assert run.wall_s < 1.0, f"the wall ({run.wall_s:.3f} s) holds the idle clients' sleep"
    assert summarize(run)["peak_in_flight"] == 1            # client 0 ran the three one after another


def test_peak_in_flight_counts_open_requests():
    """The fake server holds its first four requests until all four are in (a barrier), so four are open at
    once; a request that ends when another starts is not counted with it."""
    with FakeServer(gather=4) as fake:
        workload = Workload(model="fake-model", num_requests=4, prompt_tokens=(4,), max_tokens=3)
        run = asyncio.run(run_load(Target(fake.url), workload, 4, stagger_s=0.0, solo_check=False))
    assert summarize(run)["peak_in_flight"] == 4
    a, b = StreamResult(index=0, start=0.0, end=1.0), StreamResult(index=1, start=1.0, end=2.0)
    assert peak_in_flight([a, b]) == 1 and peak_in_flight([]) == 0
