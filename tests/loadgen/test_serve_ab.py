"""bench/serve_ab.py, the serving A/B: its settings parsing, and a real run on the CPU — two settings, each
against its own `strata serve` with the default model, one table row per run, the last run's streams checked
against their solo reruns, the JSON summaries; a typo'd variable or a server that cannot start is a clear
error before or instead of a timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from script_module import ROOT, load_script

serve_ab = load_script("bench/serve_ab.py")
SCRIPT = ROOT / "bench" / "serve_ab.py"


def test_settings_parse_into_declared_variables():
    assert serve_ab.parse_setting("-") == {}
    assert serve_ab.parse_setting("STRATA_PREFILL_HOLD_MS=50") == {"STRATA_PREFILL_HOLD_MS": "50"}
    assert serve_ab.parse_setting("STRATA_DECODE_AHEAD_REUSE=0, STRATA_DECODE_BUCKET_48=1") == {
        "STRATA_DECODE_AHEAD_REUSE": "0", "STRATA_DECODE_BUCKET_48": "1"}


@pytest.mark.parametrize("bad", ["STRATA_PREFIL_HOLD_MS=50", "PREFILL_HOLD_MS=5", "STRATA_PDL", "=1", ""])
def test_undeclared_or_malformed_settings_are_refused(bad):
    with pytest.raises(ValueError, match="setting"):
        serve_ab.parse_setting(bad)


def test_means_give_each_setting_its_ratio_to_llama_server():
    results = [{"setting": "llama-server", "tokens_per_s": 1000.0}, {"setting": "-", "tokens_per_s": 1500.0},
               {"setting": "A=1", "tokens_per_s": 1400.0}, {"setting": "-", "tokens_per_s": 1700.0},
               {"setting": "A=1", "tokens_per_s": 1600.0}, {"setting": "llama-server", "tokens_per_s": 1200.0}]
    lines = serve_ab.means(results).splitlines()
    assert lines[2:] == ["| llama-server | 2 | 1,100.00 |  |", "| - | 2 | 1,600.00 | 1.45x |", "| A=1 | 2 | 1,500.00 | 1.36x |"]
    assert serve_ab.means(results[1:3]).splitlines()[2:] == ["| - | 1 | 1,500.00 |  |", "| A=1 | 1 | 1,400.00 |  |"], \
        "without llama-server there is no ratio"


def run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_a_typo_stops_the_run_before_any_server(tmp_path, model_path):
    done = run("--model", str(model_path), "--device", "cpu", "--logs", str(tmp_path), "-", "STRATA_DECODE_AHEAD_REUS=0")
    assert done.returncode == 2
    assert "STRATA_DECODE_AHEAD_REUS is not a declared STRATA_* variable" in done.stderr
    assert not list(tmp_path.iterdir()), "a server was started"


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path):
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not a gguf file")
    done = run("--model", str(bogus), "--device", "cpu", "--logs", str(tmp_path), "--startup-timeout", "120", "-")
    assert done.returncode == 2
    assert "error: - #1: the server exited with" in done.stderr


def test_two_settings_on_the_cpu(tmp_path, model_path):
    out = tmp_path / "runs.json"
    done = run("--model", str(model_path), "--device", "cpu", "--batch", "4", "--ctx", "512", "--rounds", "1",
               "--clients", "2", "--max-tokens", "4", "--logs", str(tmp_path), "--json", str(out),
               "-", "STRATA_DECODE_AHEAD_REUSE=0,STRATA_PREFILL_HOLD_MS=5")
    assert done.returncode == 0, done.stderr
    table, _, means = done.stdout.partition("\n\n")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [line.split("|")[1].strip() for line in means.splitlines()[2:]] == [
        "-", "STRATA_DECODE_AHEAD_REUSE=0,STRATA_PREFILL_HOLD_MS=5"]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["- #1", "STRATA_DECODE_AHEAD_REUSE=0,STRATA_PREFILL_HOLD_MS=5 #1"]
    assert rows[1].rstrip().endswith("|  |"), "only the last Strata run reruns each request alone"
    assert rows[2].rstrip().endswith("| 2 / 2 |"), rows[2]
    runs = json.loads(out.read_text())
    assert [r["setting"] for r in runs] == ["-", "STRATA_DECODE_AHEAD_REUSE=0,STRATA_PREFILL_HOLD_MS=5"]
    assert [r["settings"] for r in runs] == [{}, {"STRATA_DECODE_AHEAD_REUSE": "0", "STRATA_PREFILL_HOLD_MS": "5"}]
    assert all(r["generated_tokens"] == 8 and r["errors"] == 0 for r in runs)
    assert all(r["engine_steps"]["steps_prompt"] >= 1 for r in runs), "the step rows come from /metrics"
    assert (tmp_path / "serve_ab_1.log").exists() and (tmp_path / "serve_ab_2.log").exists()
