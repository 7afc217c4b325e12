"""strata/loadgen/server_steps.py: a Strata server's engine steps by kind, read from /metrics around a load
run's concurrent phase (the live server's side: tests/server/test_admin.py and test_bench.py)."""

from __future__ import annotations

import pytest

from strata.loadgen import server_steps
from strata.loadgen.report import format_table

PAGE = """# HELP strata_engine_steps_total Engine steps run.
# TYPE strata_engine_steps_total counter
strata_engine_steps_total {steps}
# HELP strata_engine_step_seconds Seconds an engine step takes.
# TYPE strata_engine_step_seconds histogram
strata_engine_step_seconds_bucket{{kind="decode",le="0.001"}} 0
strata_engine_step_seconds_bucket{{kind="decode",le="+Inf"}} {dn}
strata_engine_step_seconds_sum{{kind="decode"}} {ds}
strata_engine_step_seconds_count{{kind="decode"}} {dn}
strata_engine_step_seconds_bucket{{kind="prompt",le="+Inf"}} {pn}
strata_engine_step_seconds_sum{{kind="prompt"}} {ps}
strata_engine_step_seconds_count{{kind="prompt"}} {pn}
# TYPE strata_engine_step_decode_requests_total counter
strata_engine_step_decode_requests_total{{kind="decode"}} {dr}
strata_engine_step_decode_requests_total{{kind="prompt"}} {pr}
# TYPE strata_engine_step_prompt_tokens_total counter
strata_engine_step_prompt_tokens_total {pt}
"""


def page(dn, ds, pn, ps, dr, pr, pt):
    return PAGE.format(steps=dn + pn, dn=dn, ds=ds, pn=pn, ps=ps, dr=dr, pr=pr, pt=pt)


def test_difference_of_two_pages_is_the_run_s_steps():
    before = server_steps.parse(page(10, 0.5, 2, 0.1, 40, 0, 300))
    after = server_steps.parse(page(110, 1.5, 12, 0.7, 3240, 150, 5420))
    assert server_steps.difference(before, after) == {
        "steps_decode": 100, "step_ms_decode": 10.0, "decode_requests_per_decode_step": 32.0,
        "steps_prompt": 10, "step_ms_prompt": 60.0, "decode_requests_per_prompt_step": 15.0,
        "prompt_tokens_per_prompt_step": 512.0,
    }


GUESSES = """# TYPE strata_decode_ahead_guesses_total counter
strata_decode_ahead_guesses_total{{outcome="taken"}} {taken}
strata_decode_ahead_guesses_total{{outcome="reused"}} {reused}
strata_decode_ahead_guesses_total{{outcome="dropped"}} {dropped}
"""


def test_decode_ahead_guesses_are_counted_where_the_server_shows_them():
    before = server_steps.parse(page(10, 0.5, 2, 0.1, 40, 0, 300) + GUESSES.format(taken=5, reused=1, dropped=0))
    after = server_steps.parse(page(110, 1.5, 12, 0.7, 3240, 150, 5420) + GUESSES.format(taken=95, reused=9,
                                                                                        dropped=2))
    out = server_steps.difference(before, after)
    assert (out["guesses_taken"], out["guesses_reused"], out["guesses_dropped"]) == (90, 8, 2)
    older = server_steps.parse(page(110, 1.5, 12, 0.7, 3240, 150, 5420))     # no guess counters: no such keys
    assert older.guesses is None and "guesses_taken" not in server_steps.difference(before, older)


def test_no_steps_of_a_kind_gives_no_means():
    same = server_steps.parse(page(5, 0.05, 1, 0.02, 5, 0, 8))
    out = server_steps.difference(same, same)
    assert out["steps_decode"] == out["steps_prompt"] == 0
    assert out["step_ms_decode"] is None and out["prompt_tokens_per_prompt_step"] is None


@pytest.mark.parametrize("text", [
    "",
    "# llama-server's metrics\nllamacpp:prompt_tokens_total 120\nllamacpp:tokens_predicted_total 400\n",
    # a Strata page from before the step metrics: no kinds
    "strata_engine_steps_total 12\nstrata_generation_tokens_total 40\n",
    # one kind missing
    'strata_engine_step_seconds_sum{kind="decode"} 1\nstrata_engine_step_seconds_count{kind="decode"} 3\n'
    'strata_engine_step_decode_requests_total{kind="decode"} 3\nstrata_engine_step_prompt_tokens_total 0\n',
])
def test_pages_without_the_step_metrics_give_none(text):
    assert server_steps.parse(text) is None


def test_the_table_says_where_the_steps_went():
    summary = {"ok": 64, "errors": 0, "clients": 64, "stagger_ms": 50.0, "prompt_tokens": [8, 1200],
               "max_tokens": 128, "sampling": "mix", "turns": 1, "cache_prompt": None, "generated_tokens": 8192,
               "wall_s": 4.9, "peak_in_flight": 64, "tokens_per_s": 1671.8, "ttft_p50_ms": 110.0,
               "ttft_p99_ms": 238.0, "itl_p50_ms": 13.1, "itl_p99_ms": 65.0, "first_errors": [],
               "solo_checked": False,
               "engine_steps": {"steps_decode": 300, "step_ms_decode": 9.04, "decode_requests_per_decode_step": 34.5,
                                "steps_prompt": 60, "step_ms_prompt": 58.2, "decode_requests_per_prompt_step": 20.1,
                                "prompt_tokens_per_prompt_step": 441.7}}
    table = format_table(summary)
    assert "decode-only steps        300, 9.04 ms each, 34.50 decoding requests a step" in table
    assert "steps with a prompt      60, 58.20 ms each, 20.10 decoding requests and 441.70 prompt tokens" in table
    assert "guesses" not in table
    summary["engine_steps"] |= {"guesses_taken": 250, "guesses_reused": 40, "guesses_dropped": 3}
    assert "decode-ahead guesses     250 taken, 40 reused by a changed plan, 3 dropped" in format_table(summary)
    del summary["engine_steps"]                       # another server: no such rows
    assert "steps" not in format_table(summary)
