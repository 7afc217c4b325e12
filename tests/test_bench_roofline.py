"""bench/roofline.py: the card's name and measured copy bandwidth that the GPU benchmarks' "% of roofline"
columns divide by (they used to divide by an H200's constant whatever the card). Runs on the CPU backend:
the figure is meaningless there, the code path is the same."""

import math

import pytest

from script_module import load_script
from strata import _ffi as S


@pytest.fixture(scope="module")
def roofline():
    return load_script("bench/roofline.py")


def test_copy_bandwidth_is_a_positive_rate(roofline):
    ctx = S.Context("cpu", 1)
    try:
        rate = roofline.copy_bandwidth(ctx, n_bytes=1 << 20, copies=2)
    finally:
        ctx.close()
    assert math.isfinite(rate) and rate > 0


@pytest.mark.parametrize("n_bytes,copies", [(0, 1), (1 << 20, 0), (-1, 1)])
def test_copy_bandwidth_refuses_empty_work(roofline, n_bytes, copies):
    ctx = S.Context("cpu", 1)
    try:
        with pytest.raises(ValueError, match="positive size"):
            roofline.copy_bandwidth(ctx, n_bytes=n_bytes, copies=copies)
    finally:
        ctx.close()


def test_a_given_figure_is_used_as_is_and_named(roofline):
    name, rate = roofline.card_roofline("cpu", tbs=3.35)
    assert rate == pytest.approx(3.35e12) and name
    assert roofline.describe(name, rate, True) == f"# roofline: {name}, 3.35 TB/s (given)"
    with pytest.raises(ValueError, match="expected a positive figure"):
        roofline.card_roofline("cpu", tbs=0.0)


def test_the_measured_figure_is_cached_per_device(roofline, monkeypatch):
    calls = []
    monkeypatch.setattr(roofline, "copy_bandwidth", lambda ctx: calls.append(ctx) or 1.0e12)
    monkeypatch.setattr(roofline, "_MEASURED", {})
    first = roofline.card_roofline("cpu")
    assert roofline.card_roofline("cpu") == first and first[1] == 1.0e12 and len(calls) == 1
    assert "measured" in roofline.describe(*first, False)


def test_gpu_decode_divides_by_the_roofline_it_is_given(roofline, capsys):
    pytest.importorskip("anyio")
    load_script("bench/llama_peer.py")  # the modules gpu_decode.py imports from beside it
    bench = load_script("bench/gpu_decode.py", "gpu_decode_bench")
    row = {"shape": "8b", "dtype": "Q4_0", "path": "/m/8b.gguf", "devices": "cuda:0", "weight_bytes": 4011 * 2**20,
           "pp512": 9589.0, "tg128": 435.83, "concurrent": {}}
    bench.print_table([row], [])                      # the old constant: an H200's 4.27 TB/s
    bench.print_table([row], [], roofline=3.35e12)    # an H100-like card: the same speed is a larger share
    lines = capsys.readouterr().out.splitlines()
    assert "| 436 (43%" in lines[2] and "| 436 (55%" in lines[5]
