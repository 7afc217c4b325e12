"""bench/llama_peer.py reads llama.cpp's benchmark output (the figures bench/RESULTS.md sets beside Strata's) and
bench/gpu_decode.py's table uses them: the markdown and JSON forms of llama-bench and llama-batched-bench, one
model per file, and clear refusals for files that are not what was asked for. The samples are the tools' own
output from the H200 run of 2026-12-05 (bench/RESULTS.md); the JSON ones are written with the field names of
llama-bench's json printer."""

import json

import pytest

from script_module import load_script

LLAMA_BENCH_MD = """\
| model                          |       size |     params | backend    | ngl |  fa |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | --: | --: | --------------: | -------------------: |
| llama 3B Q4_0                  |   3.92 GiB |     7.38 B | CUDA       |  99 |   1 |           pp512 |   11057.36 ± 1281.07 |
| llama 3B Q4_0                  |   3.92 GiB |     7.38 B | CUDA       |  99 |   1 |           tg128 |        351.66 ± 2.47 |

build: unknown (0)
"""
LLAMA_BENCH_MD_OTHER_MODEL = """\
| llama 1B Q4_0                  | 601.01 MiB |     1.07 B | CUDA       |  99 |   1 |           pp512 |   43012.63 ± 8485.52 |
"""
BATCHED_MD = """\
0.00.896.070 W llama_context: n_ctx is not divisible by n_seq_max - rounding down to 49152

llama_batched_bench: n_kv_max = 49152, n_batch = 2048, n_ubatch = 512, flash_attn = 1, is_pp_shared = 0

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |    128 |    1 |    256 |    0.034 |  3735.05 |    0.376 |   340.86 |    0.410 |   624.71 |
|   512 |    128 |    4 |   2560 |    0.300 |  6826.67 |    0.400 |  1280.00 |    0.700 |  3657.14 |
|   128 |    128 |   64 |  16384 |    0.713 | 11494.11 |    1.557 |  5262.06 |    2.270 |  7219.16 |
"""


def _bench_record(n_prompt, n_gen, ts, sd, model="/tmp/m.gguf"):
    return {"build_commit": "unknown", "model_filename": model, "n_prompt": n_prompt, "n_gen": n_gen,
            "n_depth": 0, "avg_ns": 1, "stddev_ns": 0, "avg_ts": ts, "stddev_ts": sd,
            "samples_ns": [1, 1, 1], "samples_ts": [ts, ts, ts]}


@pytest.fixture(scope="module")
def peer():
    return load_script("bench/llama_peer.py")


def test_llama_bench_markdown(peer):
    assert peer.read_llama_bench(LLAMA_BENCH_MD) == {"pp512": (11057.36, 1281.07), "tg128": (351.66, 2.47)}


@pytest.mark.parametrize("form", ["json", "jsonl", "two arrays"])
def test_llama_bench_json_forms(peer, form):
    records = [_bench_record(512, 0, 11057.36, 1281.07), _bench_record(0, 128, 351.66, 2.47),
               _bench_record(512, 128, 999.0, 1.0)]  # a -pg combination: not a figure the tables quote
    if form == "json":
        text = json.dumps(records, indent=2)
    elif form == "jsonl":
        text = "\n".join(json.dumps(r) for r in records) + "\n"
    else:
        text = json.dumps(records[:1]) + "\n" + json.dumps(records[1:])
    assert peer.read_llama_bench(text) == {"pp512": (11057.36, 1281.07), "tg128": (351.66, 2.47)}


def test_two_models_in_one_file_are_refused(peer):
    with pytest.raises(peer.PeerError, match="two different pp512 figures"):
        peer.read_llama_bench(LLAMA_BENCH_MD + LLAMA_BENCH_MD_OTHER_MODEL)


@pytest.mark.parametrize("text,message", [
    ("", "no pp / tg figures"),
    ("llama-bench: error: unknown argument\n", "no pp / tg figures"),
    ('[{"model_filename": "m.gguf", "n_gen": 128}]', "lacks n_prompt / n_gen / avg_ts"),
    ('[{"n_prompt": 512, "n_gen": 0, "avg_ts": 1.0', "broken JSON"),
])
def test_llama_bench_refusals(peer, text, message):
    with pytest.raises(peer.PeerError, match=message):
        peer.read_llama_bench(text)


def test_batched_markdown_keeps_the_128_plus_128_rows(peer):
    assert peer.read_llama_batched(BATCHED_MD) == {1: 340.86, 64: 5262.06}


def test_batched_jsonl(peer):
    lines = ["main: loading", json.dumps({"pp": 128, "tg": 128, "pl": 16, "n_kv": 4096, "speed_tg": 2290.5}),
             json.dumps({"pp": 128, "tg": 128, "pl": 64, "n_kv": 16384, "speed_tg": 5262.06})]
    assert peer.read_llama_batched("\n".join(lines)) == {16: 2290.5, 64: 5262.06}


@pytest.mark.parametrize("text,message", [
    ("", "no rows"),
    (BATCHED_MD.replace("|   128 |    128 |", "|   512 |    128 |"), "no rows of 128 prompt"),
    ('{"pp": 128, "tg": 128}', "lacks pp / tg / pl / speed_tg"),
])
def test_batched_refusals(peer, text, message):
    with pytest.raises(peer.PeerError, match=message):
        peer.read_llama_batched(text)


def test_load_peers_keys_by_the_resolved_model_path(peer, tmp_path):
    (tmp_path / "lb.md").write_text(LLAMA_BENCH_MD)
    (tmp_path / "lbb.log").write_text(BATCHED_MD)
    model = tmp_path / "sub" / ".." / "m.gguf"
    peers = peer.load_peers([f"{model}={tmp_path / 'lb.md'}"], [f"{tmp_path / 'm.gguf'}={tmp_path / 'lbb.log'}"])
    assert list(peers) == [str((tmp_path / "m.gguf").resolve())]
    only = peers[str((tmp_path / "m.gguf").resolve())]
    assert only.tests["tg128"] == (351.66, 2.47) and only.s_tg == {1: 340.86, 64: 5262.06}


@pytest.mark.parametrize("spec,message", [("lb.md", "expected GGUF=FILE"), ("m.gguf=", "expected GGUF=FILE"),
                                          ("m.gguf=missing.md", "missing.md: No such file")])
def test_load_peers_refusals(peer, tmp_path, monkeypatch, spec, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(peer.PeerError, match=message):
        peer.load_peers([spec], [])


def test_gpu_decode_table_uses_the_same_run_figures(peer, capsys, monkeypatch):
    pytest.importorskip("anyio")
    bench = load_script("bench/gpu_decode.py", "gpu_decode_bench")  # imports llama_peer: the fixture's module
    same_run = bench.Peer(tests={"pp512": (11057.36, 1.0), "tg128": (351.66, 2.47)}, s_tg={64: 5262.06})
    rows = [
        {"shape": "8b", "dtype": "Q4_0", "path": "/m/8b.gguf", "devices": "cuda:0", "weight_bytes": 4011 * 2**20,
         "pp512": 9589.0, "tg128": 435.83, "concurrent": {64: 5837.0}},
        {"shape": "1b", "dtype": "Q4_0", "path": "/m/1b.gguf", "devices": "cuda:0", "weight_bytes": 601 * 2**20,
         "pp512": 44508.0, "tg128": 1425.58, "concurrent": {64: 9000.0}},
    ]
    bench.print_table(rows, [64], {"/m/8b.gguf": same_run})
    lines = capsys.readouterr().out.splitlines()
    assert "| 9,589 (11,057, 0.87x) | 436 (43%, 352, 1.24x) | 5,837 (5,262, 1.11x) | this run |" in lines[2]
    # no figures of this run for the 1B: its ratios come from the anchors, and the row says so
    anchor_pp = bench.ANCHORS[("1b", "Q4_0")][0]
    assert f"44,508 ({44508.0 / anchor_pp:.2f}x)" in lines[3] and lines[3].endswith("| anchors |")


LLAMA_BENCH_DEPTH_MD = """\
| model                          |       size |     params | backend    | ngl |  fa |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | --: | --: | --------------: | -------------------: |
| llama 8B Q4_0                  |   4.33 GiB |     8.03 B | CUDA       |  99 |   1 |           tg128 |        351.66 ± 2.47 |
| llama 8B Q4_0                  |   4.33 GiB |     8.03 B | CUDA       |  99 |   1 |   tg128 @ d4096 |        301.20 ± 1.05 |
"""


def test_llama_bench_depth_tests_in_markdown_and_json(peer):
    """llama-bench -d N names its tests "tg128 @ dN" (markdown) or gives n_depth (JSON): read as tg128@dN,
    beside the plain tg128 of the same file."""
    want = {"tg128": (351.66, 2.47), "tg128@d4096": (301.20, 1.05)}
    assert peer.read_llama_bench(LLAMA_BENCH_DEPTH_MD) == want
    deep = _bench_record(0, 128, 301.20, 1.05)
    deep["n_depth"] = 4096
    assert peer.read_llama_bench(json.dumps([_bench_record(0, 128, 351.66, 2.47), deep])) == want


def test_gpu_decode_depth_table(peer, capsys):
    """--depth's table: Strata's tg128 after each context, against llama.cpp's tg128 @ dN of this run where given."""
    pytest.importorskip("anyio")
    bench = load_script("bench/gpu_decode.py", "gpu_decode_bench")
    same_run = bench.Peer(tests={"tg128@d4096": (301.20, 1.05)})
    rows = [{"shape": "8b", "dtype": "Q4_0", "path": "/m/8b.gguf", "devices": "cuda:0", "depth": {4096: 390.4}},
            {"shape": "1b", "dtype": "Q4_0", "path": "/m/1b.gguf", "devices": "cuda:0", "depth": {4096: 1200.0}}]
    bench.print_depth_table(rows, [4096], {"/m/8b.gguf": same_run})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "| model | devices | type | tg128 @ d4096 tok/s (x llama.cpp) |"
    assert lines[3] == "| 8b | cuda:0 | Q4_0 | 390 (301, 1.30x) |"
    assert lines[4] == "| 1b | cuda:0 | Q4_0 | 1,200 |"  # no figure of this run: no ratio (no anchors at depth)
