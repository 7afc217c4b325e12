"""`strata synth`: random-weight llama GGUFs load in gguf and transformers, with the stated statistics.

Measured with seed 0 on the tiny shape (vocab 512), over every matrix of the
file (pooled std; range of per-tensor stds; the Q6_K output matrix of Q4_*
files included):

    F32, F16, BF16  0.02000  0.0199-0.0201     Q4_1  0.01999  0.0199-0.0201
    Q8_0            0.01998  0.0198-0.0201     Q4_K  0.02005  0.0196-0.0203
    Q4_0            0.02001  0.0199-0.0201     Q6_K  0.01999  0.0196-0.0203

The tests allow 0.019-0.021 pooled and 0.017-0.023 per tensor (a small
tensor has few block scales to average over), and |mean| < 0.002.

Needs SmolLM2-135M's GGUF for the tokenizer (`make model`); skipped without it.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGUFReader, GGMLQuantizationType as QT, quants

from strata import synth
from strata.synth.blocks import Q6_K_SCALES, draw_rows, pack_q4_k_scales
from strata.synth.plan import FILE_TYPES, plan_tensors
from strata.synth.shapes import SynthError, resolve_shape
from strata.synth.stream import CHUNK_BYTES, chunks_of
from strata.synth.tokenizer import find_tokenizer_gguf, read_tokenizer_fields, resize_vocab
from strata.synth.writer import write_llama_gguf

MIB, GIB = 1 << 20, 1 << 30
SMALL_VOCAB = 512  # keeps gguf's (slow, per-string) reader and transformers quick
STD_POOLED = (0.019, 0.021)
STD_TENSOR = (0.017, 0.023)


@pytest.fixture(scope="module")
def tokenizer_gguf():
    try:
        return find_tokenizer_gguf()
    except SynthError as exc:
        pytest.skip(f"no tokenizer GGUF: {exc}")


@pytest.fixture(scope="module")
def tiny_files(tokenizer_gguf, tmp_path_factory):
    """One tiny file per type, seed 0, written once for the module."""
    folder = tmp_path_factory.mktemp("synth")
    return {dtype: write_llama_gguf(folder / f"tiny-{dtype}.gguf", "tiny", dtype, vocab=SMALL_VOCAB).path
            for dtype in FILE_TYPES}


def _values(reader: GGUFReader) -> dict:
    return {key: field.contents() for key, field in reader.fields.items()}


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("dtype", list(FILE_TYPES))
def test_tiny_file_has_llama_metadata_and_planned_tensors(tiny_files, tokenizer_gguf, dtype):
    reader = GGUFReader(tiny_files[dtype])
    meta = _values(reader)
    assert meta["general.architecture"] == "llama"
    assert meta["general.file_type"] == int(FILE_TYPES[dtype][1])
    expected = {"llama.block_count": 2, "llama.embedding_length": 256, "llama.feed_forward_length": 512,
                "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
                "llama.rope.dimension_count": 64, "llama.context_length": 8192, "llama.vocab_size": SMALL_VOCAB}
    assert {key: meta[key] for key in expected} == expected
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    source = {f.key: f.value for f in read_tokenizer_fields(tokenizer_gguf)}
    assert meta["tokenizer.ggml.tokens"] == source["tokenizer.ggml.tokens"][:SMALL_VOCAB]
    assert meta["tokenizer.chat_template"] == source["tokenizer.chat_template"]
    assert meta["tokenizer.ggml.eos_token_id"] == source["tokenizer.ggml.eos_token_id"]
    plan = plan_tensors(resolve_shape("tiny", vocab=SMALL_VOCAB), dtype)
    assert [(t.name, list(t.shape), t.tensor_type) for t in reader.tensors] == \
           [(s.name, list(reversed(s.shape)), s.qtype) for s in plan]  # GGUF lists ne[0] (the row) first


def test_quantized_files_mirror_llama_quantize_mix():
    tiny = resolve_shape("tiny")
    types = lambda dtype, **kw: {s.name: s.qtype for s in plan_tensors(tiny, dtype, **kw)}  # noqa: E731
    assert types("Q4_0")["token_embd.weight"] == QT.Q6_K  # tied: token_embd is the output matrix
    assert types("Q4_0")["blk.0.attn_q.weight"] == QT.Q4_0
    assert types("Q4_0", pure=True)["token_embd.weight"] == QT.Q4_0
    assert types("Q8_0")["token_embd.weight"] == QT.Q8_0
    assert types("Q4_K")["blk.1.attn_norm.weight"] == QT.F32
    # Q4_K_M: Q6_K attn_v / ffn_down where llama.cpp's use_more_bits says (32 layers: 0-3, 6, 9, ..., 27, 28-31).
    m = {s.name: s.qtype for s in plan_tensors(resolve_shape("8b"), "Q4_K_M")}
    wide = [i for i in range(32) if m[f"blk.{i}.ffn_down.weight"] == QT.Q6_K]
    assert wide == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert all(m[f"blk.{i}.attn_v.weight"] == m[f"blk.{i}.ffn_down.weight"] for i in range(32))
    assert m["blk.4.attn_q.weight"] == m["blk.4.ffn_down.weight"] == QT.Q4_K
    assert (m["output.weight"], m["token_embd.weight"]) == (QT.Q6_K, QT.Q4_K)
    eight = {s.name: s.qtype for s in plan_tensors(resolve_shape("8b"), "Q4_0")}
    assert (eight["output.weight"], eight["token_embd.weight"]) == (QT.Q6_K, QT.Q4_0)
    # hidden 576 isn't a multiple of 256: llama-quantize's Q6_K -> Q8_0 fallback, and --pure refuses.
    assert {s.name: s.qtype for s in plan_tensors(resolve_shape("135m"), "Q4_0")}["token_embd.weight"] == QT.Q8_0
    with pytest.raises(SynthError, match="multiple of the Q4_K block"):
        plan_tensors(resolve_shape("135m"), "Q4_K", pure=True)


@pytest.mark.parametrize("dtype", list(FILE_TYPES))
def test_dequantized_weights_are_finite_with_std_0_02(tiny_files, dtype):
    reader = GGUFReader(tiny_files[dtype])
    pooled = []
    for tensor in reader.tensors:
        x = quants.dequantize(tensor.data, tensor.tensor_type)
        assert np.isfinite(x).all(), tensor.name
        if tensor.name.endswith("_norm.weight"):
            assert tensor.tensor_type == QT.F32 and np.all(x == 1.0), tensor.name
            continue
        assert STD_TENSOR[0] < x.std() < STD_TENSOR[1], (tensor.name, x.std())
        assert abs(x.mean()) < 0.002, (tensor.name, x.mean())
        pooled.append(x.ravel())
    pooled = np.concatenate(pooled)
    assert STD_POOLED[0] < pooled.std() < STD_POOLED[1], pooled.std()


def test_q4_k_scale_packing_matches_ggufs_dequantizer():
    rng = np.random.default_rng(3)
    num_blocks = 64
    scales, mins = (rng.integers(0, 64, size=(num_blocks, 8), dtype=np.uint8) for _ in range(2))
    d, dmin = np.float16(0.5), np.float16(0.25)
    blocks = np.zeros((num_blocks, 144), dtype=np.uint8)
    blocks[:, 0:2] = np.full(num_blocks, d).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:4] = np.full(num_blocks, dmin).view(np.uint8).reshape(-1, 2)
    blocks[:, 4:16] = pack_q4_k_scales(scales, mins)
    blocks[:, 16:] = rng.integers(0, 256, size=(num_blocks, 128), dtype=np.uint8)
    got = quants.dequantize(blocks, QT.Q4_K).reshape(num_blocks, 8, 32)
    qs = blocks[:, 16:].reshape(num_blocks, 4, 32)  # chunk c: low nibbles -> sub-block 2c, high -> 2c+1
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(num_blocks, 8, 32)
    want = float(d) * scales[..., None] * q - float(dmin) * mins[..., None]
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_q6_k_blocks_dequantize_to_d_times_scale_times_six_bit_values():
    rng = np.random.Generator(np.random.SFC64(5))
    blocks = draw_rows(rng, QT.Q6_K, 4, 1024, 0.02).reshape(-1, 210)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float64)  # [blocks, 1]: d is last
    scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float64)  # [blocks, 16]
    assert np.all((np.abs(scales) >= Q6_K_SCALES[0]) & (np.abs(scales) <= Q6_K_SCALES[1]))
    x = quants.dequantize(blocks, QT.Q6_K).reshape(-1, 16, 16).astype(np.float64)
    q = x / (d[:, :, None] * scales[:, :, None])
    np.testing.assert_allclose(q, np.round(q), atol=1e-3)
    assert q.min() >= -32.001 and q.max() <= 31.001 and q.min() < -31 and q.max() > 30


def test_same_seed_same_bytes_whatever_the_thread_count(tokenizer_gguf, tmp_path):
    one = write_llama_gguf(tmp_path / "a.gguf", "tiny", "Q4_K", seed=7, vocab=SMALL_VOCAB, num_threads=1).path
    many = write_llama_gguf(tmp_path / "b.gguf", "tiny", "Q4_K", seed=7, vocab=SMALL_VOCAB, num_threads=3).path
    other = write_llama_gguf(tmp_path / "c.gguf", "tiny", "Q4_K", seed=8, vocab=SMALL_VOCAB).path
    assert _sha256(one) == _sha256(many)
    a, c = GGUFReader(one), GGUFReader(other)
    assert not np.array_equal(a.tensors[2].data, c.tensors[2].data)
    assert one.stat().st_size == other.stat().st_size


@pytest.mark.parametrize("shape, dtype, anchor", [
    ("135m", "Q4_0", 86 * MIB), ("135m", "Q8_0", 136 * MIB), ("135m", "F16", 257 * MIB),
    ("1b", "Q4_0", 601 * MIB), ("1b", "Q8_0", 1.06 * GIB), ("1b", "F16", 2.00 * GIB),
    ("8b", "Q4_0", 3.92 * GIB), ("8b", "Q8_0", 7.31 * GIB), ("8b", "F16", 13.75 * GIB),
])
def test_planned_sizes_match_llama_cpp_anchors(shape, dtype, anchor):
    tensor_bytes = sum(s.num_bytes for s in plan_tensors(resolve_shape(shape), dtype))
    assert abs(tensor_bytes / anchor - 1) < 0.01, tensor_bytes / MIB


def test_135m_q4_0_file_is_86_mib(tokenizer_gguf, tmp_path):
    report = write_llama_gguf(tmp_path / "135m.gguf", "135m", "Q4_0")
    assert report.file_bytes == report.path.stat().st_size
    assert abs(report.file_bytes / (86 * MIB) - 1) < 0.02, report.file_bytes / MIB
    assert report.num_params == pytest.approx(134.5e6, rel=0.002)


def test_chunks_stay_bounded_for_8b_tensors():
    for spec in plan_tensors(resolve_shape("8b"), "F32"):
        pieces = list(chunks_of(spec))
        rows = spec.shape[0] if len(spec.shape) > 1 else 1
        assert pieces[0].row_start == 0 and pieces[-1].row_stop == rows and pieces[-1].is_last
        assert all((p.row_stop - p.row_start) * spec.row_bytes <= max(CHUNK_BYTES, spec.row_bytes) for p in pieces)


def test_vocab_is_cut_with_its_merges_or_padded(tokenizer_gguf):
    fields = read_tokenizer_fields(tokenizer_gguf)
    source = {f.key: f.value for f in fields}
    cut = {f.key: f.value for f in resize_vocab(fields, 1000)}
    kept = set(cut["tokenizer.ggml.tokens"])
    assert len(cut["tokenizer.ggml.tokens"]) == len(cut["tokenizer.ggml.token_type"]) == 1000
    assert 0 < len(cut["tokenizer.ggml.merges"]) < len(source["tokenizer.ggml.merges"])
    for merge in cut["tokenizer.ggml.merges"]:
        left, right = merge.split(" ")
        assert {left, right, left + right} <= kept
    padded = {f.key: f.value for f in resize_vocab(fields, 49160)}
    assert padded["tokenizer.ggml.tokens"][-1] == "[PAD49159]" and padded["tokenizer.ggml.token_type"][-1] == 5
    assert padded["tokenizer.ggml.merges"] == source["tokenizer.ggml.merges"]
    with pytest.raises(SynthError, match="eos_token_id"):
        resize_vocab(fields, 2)


@pytest.mark.parametrize("dtype", ["F16", "Q8_0", "Q4_0"])
def test_transformers_loads_the_file_and_its_forward_pass_is_finite(tiny_files, dtype):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = tiny_files[dtype]
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    assert (model.config.num_hidden_layers, model.config.num_key_value_heads, model.config.vocab_size) == \
           (2, 2, SMALL_VOCAB)
    assert model.config.tie_word_embeddings
    embd = next(t for t in GGUFReader(path).tensors if t.name == "token_embd.weight")
    np.testing.assert_array_equal(model.model.embed_tokens.weight.detach().numpy(),
                                  quants.dequantize(embd.data, embd.tensor_type))
    with torch.no_grad():
        logits = model(torch.tensor([[1, 17, 300, 42, 2]])).logits  # [batch, tokens, vocab]
    assert logits.shape == (1, 5, SMALL_VOCAB)
    assert torch.isfinite(logits).all() and 0.05 < logits.std() < 5


def test_cli_writes_a_file_and_reports(tokenizer_gguf, tmp_path, capsys):
    out = tmp_path / "cli.gguf"
    status = synth.main(["--shape", "tiny", "--dtype", "q8_0", "--out", str(out), "--seed", "3",
                         "--layers", "1", "--vocab", str(SMALL_VOCAB)])
    captured = capsys.readouterr()
    assert status == 0 and out.is_file()
    assert "llama tiny Q8_0" in captured.out and "M params" in captured.out and " s, seed 3" in captured.out
    assert "[1/3] token_embd" in captured.err and "[2/3] blk.0" in captured.err
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("argv, message", [
    (["--shape", "tiny", "--dtype", "Q5_0"], "invalid choice: 'Q5_0'"),
    (["--shape", "70b", "--dtype", "Q4_0"], "invalid choice: '70b'"),
    (["--shape", "tiny", "--dtype", "Q4_0", "--layers", "0"], "must be a positive integer"),
    (["--shape", "tiny", "--dtype", "Q4_0", "--seed", "x"], "not an integer"),
])
def test_cli_rejects_bad_arguments(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        synth.main([*argv, "--out", str(tmp_path / "x.gguf")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--shape", "tiny", "--dtype", "Q4_0", "--heads", "3"], "--hidden 256 must be a multiple of --heads 3"),
    (["--shape", "tiny", "--dtype", "Q4_0", "--kv-heads", "3"], "must be a multiple of --kv-heads 3"),
    (["--shape", "tiny", "--dtype", "Q4_0", "--ffn", "100"], "not a multiple of the Q4_0 block"),
    (["--shape", "135m", "--dtype", "Q4_K", "--pure"], "drop --pure"),
])
def test_cli_explains_impossible_shapes(tmp_path, capsys, argv, message):
    assert synth.main([*argv, "--out", str(tmp_path / "x.gguf")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


def test_cli_reports_a_missing_output_directory(tokenizer_gguf, tmp_path, capsys):
    assert synth.main(["--shape", "tiny", "--dtype", "F16", "--out", str(tmp_path / "no" / "x.gguf")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_q5_k_m_and_iq4_xs_mixes_follow_llama_quantize():
    eight = lambda dtype: {s.name: s.qtype for s in plan_tensors(resolve_shape("8b"), dtype)}  # noqa: E731
    q5 = eight("Q5_K_M")
    assert q5["output.weight"] == QT.Q6_K and q5["blk.0.attn_q.weight"] == QT.Q5_K
    # use_more_bits over 32 layers: the first and last 4, and every third from layer 6.
    more = [i for i in range(32) if q5[f"blk.{i}.attn_v.weight"] == QT.Q6_K]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert more == [i for i in range(32) if q5[f"blk.{i}.ffn_down.weight"] == QT.Q6_K]
    iq4 = eight("IQ4_XS")
    assert iq4["blk.3.attn_v.weight"] == QT.Q5_K and iq4["blk.3.ffn_up.weight"] == QT.IQ4_XS
    assert iq4["output.weight"] == QT.Q6_K
    small = {s.name: s.qtype for s in plan_tensors(resolve_shape("135m"), "IQ4_XS")}
    assert small["blk.0.attn_q.weight"] == QT.IQ4_NL    # rows of 576: IQ4_XS -> IQ4_NL
    assert {s.name: s.qtype for s in plan_tensors(resolve_shape("135m"), "Q5_K_M")}["blk.0.attn_q.weight"] == QT.Q5_1


def test_low_bit_mixes_follow_llama_quantize():
    eight = lambda dtype: {s.name: s.qtype for s in plan_tensors(resolve_shape("8b"), dtype)}  # noqa: E731
    q3 = eight("Q3_K_M")    # 32 layers, 32 heads / 8 KV heads
    assert (q3["output.weight"], q3["token_embd.weight"], q3["blk.5.attn_q.weight"]) == (QT.Q6_K, QT.Q3_K, QT.Q3_K)
    assert [q3[f"blk.{i}.attn_v.weight"] for i in (0, 1, 2, 31)] == [QT.Q5_K, QT.Q5_K, QT.Q4_K, QT.Q4_K]
    assert [q3[f"blk.{i}.ffn_down.weight"] for i in (0, 1, 2, 31)] == [QT.Q5_K, QT.Q5_K, QT.Q4_K, QT.Q4_K]
    assert q3["blk.7.attn_output.weight"] == QT.Q4_K and q3["blk.7.ffn_up.weight"] == QT.Q3_K
    q2 = eight("Q2_K")
    assert (q2["output.weight"], q2["blk.3.attn_q.weight"], q2["blk.3.attn_v.weight"]) == (QT.Q6_K, QT.Q2_K, QT.Q4_K)
    assert q2["blk.3.attn_output.weight"] == q2["blk.3.ffn_down.weight"] == QT.Q3_K
    iq3 = eight("IQ3_S")
    assert (iq3["output.weight"], iq3["blk.0.ffn_gate.weight"], iq3["blk.0.attn_v.weight"]) == \
           (QT.Q6_K, QT.IQ3_S, QT.Q4_K)
    tiny = lambda dtype: {s.name: s.qtype for s in plan_tensors(resolve_shape("tiny"), dtype)}  # noqa: E731
    assert tiny("Q2_K")["blk.0.attn_v.weight"] == QT.Q3_K and tiny("IQ3_S")["blk.0.attn_v.weight"] == QT.IQ3_S
    small = lambda dtype: {s.name: s.qtype for s in plan_tensors(resolve_shape("135m"), dtype)}  # noqa: E731
    for dtype in ("Q3_K_M", "Q2_K", "IQ3_S"):    # rows of 576: -> IQ4_NL, as llama-quantize
        assert small(dtype)["blk.0.ffn_gate.weight"] == QT.IQ4_NL


@pytest.mark.parametrize("dtype", ["Q5_K_M", "IQ4_XS", "Q3_K_M", "Q2_K", "IQ3_S"])
def test_strata_runs_the_new_mixes(tiny_files, dtype):
    from strata import LLM
    from strata.engine.sampling import SamplingParams

    with LLM(str(tiny_files[dtype]), device="cpu", batch=1, ctx=64) as llm:
        out = llm.generate([[1, 2, 3, 4]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0]
    assert len(out.token_ids) == 4


def test_tokenizer_source_from_the_environment(tokenizer_gguf, monkeypatch, tmp_path):
    """STRATA_SYNTH_TOKENIZER stands in for --tokenizer-from (a lent GPU has no default model); an explicit
    path still wins, and a missing file is an error naming the variable."""
    monkeypatch.setenv("STRATA_SYNTH_TOKENIZER", str(tokenizer_gguf))
    assert find_tokenizer_gguf() == tokenizer_gguf
    assert find_tokenizer_gguf(tokenizer_gguf) == tokenizer_gguf
    missing = tmp_path / "nothing.gguf"
    monkeypatch.setenv("STRATA_SYNTH_TOKENIZER", str(missing))
    with pytest.raises(SynthError, match=f"STRATA_SYNTH_TOKENIZER {missing}: no such file"):
        find_tokenizer_gguf()
    with pytest.raises(SynthError, match="--tokenizer-from"):
        find_tokenizer_gguf(missing)
