"""`strata top`'s reading of /metrics without a server: Prometheus text parsing, histogram percentiles, rates."""

from __future__ import annotations

import pytest

from strata.top.snapshot import Rates, Snapshot, histogram_quantile, parse_metrics

TEXT = """# HELP strata_requests_total Requests by outcome.
# TYPE strata_requests_total counter
strata_requests_total{outcome="length"} 3
strata_requests_total{outcome="stop"} 5
strata_generation_tokens_total 400
strata_time_to_first_token_seconds_bucket{le="0.1"} 2
strata_time_to_first_token_seconds_bucket{le="0.5"} 6
strata_time_to_first_token_seconds_bucket{le="1.0"} 10
strata_time_to_first_token_seconds_bucket{le="+Inf"} 10
strata_time_to_first_token_seconds_count 10
"""


def test_parse_metrics_reads_labels_and_values():
    metrics = parse_metrics(TEXT)
    assert metrics[("strata_requests_total", (("outcome", "stop"),))] == 5
    assert metrics[("strata_generation_tokens_total", ())] == 400
    assert len(metrics) == 8


def test_histogram_quantile_interpolates_within_the_bucket():
    snap = Snapshot(0.0, {"slots": [], "num_slots": 1}, parse_metrics(TEXT))
    assert snap.quantile("strata_time_to_first_token_seconds", 0.5) == pytest.approx(0.1 + 0.4 * 3 / 4)
    assert snap.quantile("strata_time_to_first_token_seconds", 0.99) == pytest.approx(0.5 + 0.5 * 3.9 / 4)
    assert snap.quantile("strata_time_to_first_token_seconds", 0.1) == pytest.approx(0.05)
    assert histogram_quantile(0.5, [(1.0, 0), (float("inf"), 0)]) is None
    assert histogram_quantile(0.99, [(1.0, 1), (float("inf"), 4)]) == 1.0   # beyond the last bound: the bound


def test_rates_and_kv_use():
    slots = {"num_slots": 2, "slot_ctx": 100, "slots": [{"cached_tokens": 30}, {"cached_tokens": 20}]}
    before = Snapshot(10.0, slots, parse_metrics("strata_generation_tokens_total 100\n"))
    after = Snapshot(12.0, slots, parse_metrics(TEXT))
    rates = Rates.between(before, after)
    assert rates.generated_per_s == 150.0 and rates.requests_per_s == 4.0
    assert after.kv_used == (50, 200)
