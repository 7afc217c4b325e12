"""bench/sample_ab_table.py: the side-by-side table of sampler versions (scripts/gpu_sample_ab.sh)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import sample_ab_table as T  # noqa: E402

RUN = """setting                    vocab  rows    us/call           ids hash
greedy (T=0)               49152     1       4.42   44ed9fd4741f4cb5
top-k 40                   49152    64      {k:.2f}   {h}
"""


def runs(*versions):
    return "".join(f"== {name} {i}\n" + RUN.format(k=k, h=h) for name, i, k, h in versions)


def test_each_version_in_its_column_with_the_rounds_in_order():
    text = runs(("old", 1, 33.86, "eb747032ddab24d8"), ("new", 1, 28.30, "eb747032ddab24d8"),
                ("old", 2, 33.90, "eb747032ddab24d8"), ("new", 2, 28.27, "eb747032ddab24d8"))
    times, hashes, versions = T.parse(text)
    assert versions == ["old", "new"]
    assert times[("top-k 40", 49152, 64, "old")] == [33.86, 33.90]
    assert times[("top-k 40", 49152, 64, "new")] == [28.30, 28.27]
    lines = T.table(text).splitlines()
    assert lines[0].split()[-4:] == ["old", "new", "same", "ids"]
    row = next(line for line in lines if line.startswith("top-k 40"))
    assert "33.86 / 33.90" in row and "28.30 / 28.27" in row and row.endswith("yes")


def test_different_ids_are_flagged_and_fail_the_run(tmp_path):
    text = runs(("old", 1, 33.86, "eb747032ddab24d8"), ("new", 1, 28.30, "0000000000000001"))
    row = next(line for line in T.table(text).splitlines() if line.startswith("top-k 40"))
    assert row.endswith("NO")
    greedy = next(line for line in T.table(text).splitlines() if line.startswith("greedy"))
    assert greedy.endswith("yes")
    f = tmp_path / "runs.txt"
    f.write_text(text)
    assert T.main([str(f)]) == 1


def test_runs_that_printed_nothing_fail(tmp_path, capsys):
    f = tmp_path / "runs.txt"
    f.write_text("== old 1\nstream: CUDA driver version is insufficient for CUDA runtime version\n")
    assert T.main([str(f)]) == 1
    assert "no timed lines" in capsys.readouterr().err
    f.write_text(runs(("old", 1, 33.86, "eb747032ddab24d8")))
    assert T.main([str(f)]) == 0
