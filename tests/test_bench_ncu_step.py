"""bench/ncu_step.py: Nsight Compute's raw CSV of one captured step turned into a per-layer table (the
profile that says where a decode step's time goes). Runs on a CSV written here in ncu's layout."""

import csv

import pytest

from script_module import load_script

NS = "strata::cuda::(anonymous namespace)::"
GEMV = f"void {NS}int_gemv_kernel<2, 1>({NS}GemvParams)"
ATT = f"void {NS}attention_decode_kernel<128, 4, false, 0>({NS}DecodePlan)"
ROPE = f"void {NS}rope_kv_store_kernel({NS}RopeKvStoreArgs)"
EMBED = f"void {NS}embed_kernel(const float *, int)"


@pytest.fixture(scope="module")
def ncu_step():
    return load_script("bench/ncu_step.py")


def write_csv(path, kernels, time_unit="usecond", bytes_unit="Mbyte"):
    header = ["ID", "Process ID", "Kernel Name", "dram__bytes_read.sum", "gpu__time_duration.sum", "launch__grid_size"]
    with open(path, "w", newline="") as f:
        f.write("==PROF== Connected to process 1\n")  # ncu's own log lines are not CSV rows
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(header)
        w.writerow(["", "", "", bytes_unit, time_unit, ""])
        for i, (name, t, mb, grid) in enumerate(kernels):
            w.writerow([str(i), "1", name, f"{mb}", f"{t}", str(grid)])


def test_short_names(ncu_step):
    assert ncu_step.short_name(GEMV) == "int_gemv_kernel<2, 1>"
    assert ncu_step.short_name(ATT) == "attention_decode_kernel<128, 4, false, 0>"
    assert ncu_step.short_name(EMBED) == "embed_kernel"
    # ncu's own spelling of an anonymous namespace (as an H100 run printed it)
    assert ncu_step.short_name("void <unnamed>::int_dot_kernel<2, 1, 0>(<unnamed>::IntParams)") == "int_dot_kernel<2, 1, 0>"
    assert ncu_step.short_name("unnamed>::int_dot_kernel<2, 1, 0>(unnamed>::IntParams)") == "int_dot_kernel<2, 1, 0>"


def test_layer_table(ncu_step, tmp_path):
    layer = [(GEMV, 8.0, 14.0, 396), (ROPE, 3.0, 0.1, 8), (ATT, 9.0, 0.5, 8), (GEMV, 6.0, 9.0, 396)]
    kernels = [(EMBED, 2.0, 0.0, 1)] + layer * 3 + [(GEMV, 30.0, 100.0, 396)]
    p = tmp_path / "step.csv"
    write_csv(p, kernels)
    rows = ncu_step.read_rows(str(p))
    assert len(rows) == 14
    assert rows[1]["us"] == 8.0 and rows[1]["bytes"] == 14e6 and rows[1]["grid"] == 396
    assert ncu_step.layer_period([r["name"] for r in rows])[:2] == (4, 1)
    text = ncu_step.report(rows, graph_ms=0.2, roofline_tbs=4.0)
    assert "14 kernels, durations summed: 110.0 us" in text
    assert "between and across kernels: 90.0 us" in text
    assert "per layer: 4 kernels repeated 3 times from kernel 1" in text
    # gemv at 8 us moving 14 MB: 1,750 GB/s, 44 % of 4 TB/s
    assert "| 0 | `int_gemv_kernel<2, 1>` | 396 | 8.00 | 21.8 % | 14.00 | 1,750 | 44 % |" in text
    assert "one layer: 26.00 us; outside the layers: 32.0 us over 2 kernels" in text
    # kernels measured alone can add up to more than the graph, whose kernels overlap
    assert "the kernels alone add up to 10.0 us more (10.0 %)" in ncu_step.report(rows, graph_ms=0.1, roofline_tbs=None)


def test_units_are_converted(ncu_step, tmp_path):
    p = tmp_path / "ns.csv"
    write_csv(p, [(GEMV, 8000.0, 1.0, 1)], time_unit="nsecond", bytes_unit="Kbyte")
    rows = ncu_step.read_rows(str(p))
    assert rows[0]["us"] == pytest.approx(8.0) and rows[0]["bytes"] == pytest.approx(1e3)


def test_unknown_unit_is_refused(ncu_step, tmp_path):
    p = tmp_path / "bad.csv"
    write_csv(p, [(GEMV, 1.0, 1.0, 1)], time_unit="fortnight")
    with pytest.raises(SystemExit, match="unknown duration unit"):
        ncu_step.read_rows(str(p))
