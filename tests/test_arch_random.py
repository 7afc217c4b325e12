"""Qwen3, Llama 3.x (llama3 RoPE scaling) and Qwen2.5's Q5_0/Q8_0 fallback files on random weights.

Each case is a tiny model written by transformers and converted to GGUF by
the tests (tests/random_gguf.py, the `gguf` package's writer); Strata loads
the file and must agree with transformers on the same (dequantized) weights:
the logits of every prompt position's last token within a float32/F16-cache
tolerance, and greedy continuations token for token. Plus the load-time
refusals of what is still unsupported.
"""

import numpy as np
import pytest

from strata.engine.sampling import SamplingParams

from random_gguf import Case, write_case

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)

CASES = [
    Case("qwen3", "qwen3", dict(SMALL, head_dim=32, rope_theta=1e6, tie_word_embeddings=False)),
    Case("qwen2-q5-fallback", "qwen2", dict(SMALL, hidden_size=96, intermediate_size=160, rope_theta=1e6,
                                            tie_word_embeddings=True),
         types={"attn_q": "Q5_0", "attn_k": "Q5_0", "attn_output": "Q5_0", "ffn_down": "Q5_0", "token_embd": "Q8_0"},
         default_type="Q8_0"),
    Case("llama3", "llama", dict(SMALL, rope_theta=500000.0, tie_word_embeddings=True,
                                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
         default_type="Q5_1"),
]
PROMPTS = [[1, 17, 400, 33, 1000, 5, 77], list(range(3, 120, 3)), [2000, 1500, 42]]


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case(request, tmp_path_factory):
    from strata import LLM

    path, reference = write_case(request.param, tmp_path_factory.mktemp(request.param.name))
    with LLM(str(path), device="cpu", batch=2, ctx=256) as llm:
        yield request.param, llm, reference


def reference_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def test_logits_match_transformers(case):
    spec, llm, reference = case
    for ids in PROMPTS:
        llm.generate([ids], SamplingParams(temperature=0, max_tokens=1))
        runner = llm.engine.runner
        ours = runner.act.buffer.to_numpy(np.float32, (llm.engine.model.spec.vocab,), runner.act.logits)
        ref = reference_logits(reference, ids)[-1]
        error = np.abs(ours - ref).max()
        assert error <= 2e-3 * np.abs(ref).max() + 1e-4, f"{spec.name}: max |logit error| {error:.3g} (|ref| {np.abs(ref).max():.3g})"
        assert int(np.argmax(ours)) == int(np.argmax(ref))


def test_greedy_matches_transformers(case):
    spec, llm, reference = case
    for ids in PROMPTS:
        ours = llm.generate([ids], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].token_ids
        seq = list(ids)
        for _ in range(12):
            seq.append(int(np.argmax(reference_logits(reference, seq)[-1])))
        assert ours == seq[len(ids):], f"{spec.name}: greedy tokens differ from transformers"


def test_spec_read_from_the_file(case):
    spec_case, llm, _ = case
    spec = llm.engine.model.spec
    assert spec.arch == spec_case.arch and spec.n_layers == 2
    if spec_case.name == "llama3":
        assert llm.engine.model.decoder.freq_factors is not None   # rope_freqs carries the llama3 scaling


def _header_only(path, arch, tensors=(), **keys):
    """A GGUF with `arch`'s basic keys and raw tensors (name, gguf type name, shape [rows, k])."""
    import gguf
    from gguf.constants import GGML_QUANT_SIZES

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_embedding_length(256)
    writer.add_feed_forward_length(256)
    writer.add_head_count(4)
    writer.add_context_length(128)
    for key, value in keys.items():
        if value is not None:
            writer.add_string(f"{arch}.{key}", value)
    if "vocab_size" not in keys:
        writer.add_vocab_size(8)
    for name, type_name, (rows, k) in tensors:
        qtype = gguf.GGMLQuantizationType[type_name]
        block, size = GGML_QUANT_SIZES[qtype]
        writer.add_tensor(name, np.zeros((rows, k // block * size), dtype=np.uint8), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("arch,tensors,keys,message", [
    ("qwen3", [], {"vocab_size": None}, r"lacks qwen3.vocab_size and tokenizer.ggml.tokens"),
    ("phi3", [], {}, r"architecture 'phi3' is not supported; supported: gemma3, llama, qwen2, qwen3"),
    ("llama", [("token_embd.weight", "IQ2_XXS", (8, 256))], {},
     r"token_embd.weight has type IQ2_XXS.*supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, "
     r"Q6_K, IQ4_NL, IQ3_S, IQ4_XS, BF16"),
    ("qwen2", [], {"rope.scaling.type": "yarn"}, r"RoPE scaling 'yarn' is not supported \(supported: none, linear\)"),
])
def test_unsupported_files_are_refused_at_load(tmp_path, arch, tensors, keys, message):
    from strata.models.gguf_spec import ModelFormatError, open_reader, read_spec, read_tensors

    reader = open_reader(_header_only(tmp_path / "m.gguf", arch, tensors, **keys))
    with pytest.raises(ModelFormatError, match=message):
        read_spec(reader)
        read_tensors(reader)
