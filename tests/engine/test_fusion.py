"""strata/models/fusion.py without a device: which parts get stacked under which name, and the recipe
(row_parts) the decoder follows to produce [q | k | v] and [gate | up] rows, for layers whose parts share
one type, differ in one part (llama-quantize's Q4_K_M: attn_v Q6_K beside Q4_K q / k), differ in bias
presence, or differ everywhere. Then the decoder itself, on the CPU, with the kernel calls of one
attention block counted: a mixed-type layer takes the fused path (a matmul_ex per part, rope_kv_store,
attention), not the long way (rmsnorm, three matmuls, two ropes, kv_store, attention)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from strata.engine.sampling import SamplingParams
from strata.models.fusion import GATE_UP, QKV, fuse_projections, fused_name, row_parts
from strata.models.model import TensorInfo

Q4_K, Q6_K = 12, 14  # GGUF type ids (only compared here)


def tensor(name, dtype, rows, cols=64, fill=0):
    return TensorInfo(name, dtype, (rows, cols), np.full(rows * cols // 4, fill, np.uint8))


def layer(types, biases=(False, False, False), gate_up=(Q4_K, Q4_K)):
    out = {}
    for part, dtype, rows, bias, fill in zip(QKV, types, (32, 16, 16), biases, (1, 2, 3)):
        out[f"blk.0.{part}.weight"] = tensor(f"blk.0.{part}.weight", dtype, rows, fill=fill)
        if bias:
            out[f"blk.0.{part}.bias"] = TensorInfo(f"blk.0.{part}.bias", 0, (rows,), np.full(rows * 4, fill, np.uint8))
    for part, dtype, fill in zip(GATE_UP, gate_up, (4, 5)):
        out[f"blk.0.{part}.weight"] = tensor(f"blk.0.{part}.weight", dtype, 48, fill=fill)
    return out


def recipe(tensors):
    def lookup(name):
        t = tensors.get(name)
        return None if t is None else SimpleNamespace(rows=t.shape[0])
    return row_parts(lookup, "blk.0.", QKV), row_parts(lookup, "blk.0.", GATE_UP)


def test_fused_names():
    assert fused_name(QKV) == "attn_qkv" and fused_name(QKV[:2]) == "attn_qk" and fused_name(QKV[1:]) == "attn_kv"
    assert fused_name(GATE_UP) == "ffn_gate_up" and fused_name(("attn_v",)) == "attn_v"


def test_one_type_is_one_matrix():
    fused = fuse_projections(layer((Q4_K, Q4_K, Q4_K)), 1)
    assert sorted(k for k in fused if k.startswith("blk.0.")) == ["blk.0.attn_qkv.weight", "blk.0.ffn_gate_up.weight"]
    assert fused["blk.0.attn_qkv.weight"].shape == (64, 64)
    assert recipe(fused) == ([("blk.0.attn_qkv", 0)], [("blk.0.ffn_gate_up", 0)])


def test_q4_k_m_layer_stacks_q_and_k():
    """attn_v Q6_K: q and k stacked (bytes in order), v alone at column q_dim + kv_dim."""
    fused = fuse_projections(layer((Q4_K, Q4_K, Q6_K)), 1)
    qk = fused["blk.0.attn_qk.weight"]
    assert qk.dtype == Q4_K and qk.shape == (48, 64)
    assert np.array_equal(qk.data, np.concatenate([np.full(32 * 16, 1, np.uint8), np.full(16 * 16, 2, np.uint8)]))
    assert "blk.0.attn_q.weight" not in fused and "blk.0.attn_k.weight" not in fused
    assert fused["blk.0.attn_v.weight"].dtype == Q6_K
    assert recipe(fused)[0] == [("blk.0.attn_qk", 0), ("blk.0.attn_v", 48)]


def test_first_part_differs_and_gate_up_differ():
    fused = fuse_projections(layer((Q6_K, Q4_K, Q4_K), gate_up=(Q4_K, Q6_K)), 1)
    assert recipe(fused) == ([("blk.0.attn_q", 0), ("blk.0.attn_kv", 32)],
                             [("blk.0.ffn_gate", 0), ("blk.0.ffn_up", 48)])


def test_every_part_differs():
    fused = fuse_projections(layer((Q4_K, Q6_K, Q4_K)), 1)
    assert recipe(fused)[0] == [("blk.0.attn_q", 0), ("blk.0.attn_k", 32), ("blk.0.attn_v", 48)]


def test_bias_presence_splits_a_run():
    """q and k with biases, v without: q + k stacked with their biases, v alone."""
    fused = fuse_projections(layer((Q4_K, Q4_K, Q4_K), biases=(True, True, False)), 1)
    assert recipe(fused)[0] == [("blk.0.attn_qk", 0), ("blk.0.attn_v", 48)]
    assert fused["blk.0.attn_qk.bias"].shape == (48,) and "blk.0.attn_v.bias" not in fused


def test_fuse_mixed_off_keeps_the_earlier_rule(monkeypatch):
    """STRATA_FUSE_MIXED=0: a mixed layer is left as it is stored, a one-type layer still fused."""
    monkeypatch.setenv("STRATA_FUSE_MIXED", "0")
    mixed = fuse_projections(layer((Q4_K, Q4_K, Q6_K)), 1)
    assert recipe(mixed)[0] == [("blk.0.attn_q", 0), ("blk.0.attn_k", 32), ("blk.0.attn_v", 48)]
    assert recipe(fuse_projections(layer((Q4_K, Q4_K, Q4_K)), 1))[0] == [("blk.0.attn_qkv", 0)]


def test_missing_part_gives_no_recipe():
    tensors = layer((Q4_K, Q4_K, Q4_K))
    del tensors["blk.0.attn_k.weight"]
    fused = fuse_projections(tensors, 1)
    assert recipe(fused)[0] == []


class Recorder:
    """Stands in for strata._ffi in the decoder module: records the entry points called, runs nothing."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not callable(attr) or name[0].isupper() or name in ("matmul_params", "rope_params"):
            return attr
        return lambda *args, **kwargs: self.calls.append(name)


LONG_WAY = ["rmsnorm", "matmul", "matmul", "matmul", "rope", "rope", "kv_store", "attention", "matmul"]


def attention_calls(dec, index, monkeypatch):
    """The entry points one attention block of layer `index` calls (nothing runs)."""
    from strata import _ffi
    from strata.models import decoder as decoder_module

    recorder = Recorder(_ffi)
    act = SimpleNamespace(buffer=None, **{n: 0 for n in ("x", "h", "q", "k", "v", "qkv", "att", "gu")})
    io = SimpleNamespace(buffer=None, rows_off=0, distinct_slots=False)
    with monkeypatch.context() as patch:
        patch.setattr(decoder_module, "F", recorder)
        dec._attention_block(index, dec.layers[index], io, act, None, 1)
    return recorder.calls


def test_mixed_layer_takes_the_fused_path(tmp_path_factory, monkeypatch):
    """The tiny Q4_K_M synth on the CPU: layer 1 (attn_v Q6_K) is [attn_qk | attn_v] from two matmul_ex calls
    (the norm fused in, rows q_dim + 2 kv_dim apart), then rope_kv_store and attention: 5 kernel calls with
    the output projection where the long way (STRATA_FUSE_MIXED=0) makes 9."""
    from strata import _ffi

    from .synth_models import loaded_model, tiny_gguf

    path = tiny_gguf(tmp_path_factory, "Q4_K_M", seed=5, folder="fusion", pure=False)
    monkeypatch.delenv("STRATA_FUSE_MIXED", raising=False)
    gen = loaded_model("cpu", path)
    _, _, model = next(gen)
    try:
        spec, dec = model.spec, model.decoder
        width = spec.q_dim + 2 * spec.kv_dim
        mixed = [i for i, layer in enumerate(dec.layers) if len(layer.qkv_parts) > 1]
        assert mixed, "the Q4_K_M synth has no mixed-type q/k/v layer"
        for i, layer in enumerate(dec.layers):
            assert layer.qkv_parts and layer.gate_up_parts, f"layer {i} takes the long way"
            assert [c for _, c, _ in layer.qkv_parts] == ([0, spec.q_dim + spec.kv_dim] if i in mixed else [0])
            assert sum(w.rows for w, _, _ in layer.qkv_parts) == width
        part_qk, part_v = dec.layers[mixed[0]].qkv_parts
        assert part_qk[0].dtype == _ffi.DType.Q4_K and part_v[0].dtype == _ffi.DType.Q6_K
        assert part_qk[2].y_row_stride == width and part_v[2].y_row_stride == width
        assert dec.layers[mixed[0]].q is None and dec.layers[mixed[0]].v is part_v[0]
        assert attention_calls(dec, mixed[0], monkeypatch) == ["matmul_ex", "matmul_ex", "rope_kv_store",
                                                               "attention", "matmul"]
    finally:
        next(gen, None)       # closes the model and its context
    monkeypatch.setenv("STRATA_FUSE_MIXED", "0")
    gen = loaded_model("cpu", path)
    _, _, model = next(gen)
    try:
        assert not model.decoder.layers[mixed[0]].qkv_parts
        assert attention_calls(model.decoder, mixed[0], monkeypatch) == LONG_WAY
    finally:
        next(gen, None)       # closes the model and its context


@pytest.mark.gpu
async def test_mixed_layers_record_fewer_kernels_on_cuda(tmp_path_factory, monkeypatch):
    """The tiny Q4_K_M synth on CUDA: the one-row decode graph (Graph.kernel_count) has at least 4 kernels
    fewer per mixed layer than with STRATA_FUSE_MIXED=0 (long way: rmsnorm, three pre-pass + matmul pairs,
    two ropes, kv_store; fused: two pre-pass + matmul pairs, rope_kv_store). The tokens may differ between
    the two (the norm fused into the matmul rounds differently on CUDA); each is batch-invariant
    (tests/engine/test_int_tiles_exactness.py)."""
    from strata import _ffi

    from .harness import solo
    from .synth_models import engine_factory, loaded_model, tiny_gguf

    if _ffi.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    path = tiny_gguf(tmp_path_factory, "Q4_K_M", seed=5, folder="fusion_gpu", pure=False)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    counts = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("STRATA_FUSE_MIXED", setting)
        gen = loaded_model("cuda:0", path)
        loaded = next(gen)
        try:
            model = loaded[2]
            n_mixed = sum(len(layer.qkv_parts) > 1 for layer in model.decoder.layers)
            factory = engine_factory(loaded, "fusion", 256)
            make = next(factory)
            engine = make(batch=1, chunk=64)
            await solo(engine, model.tokenizer.encode("Hello there, how are you?"), params)
            graph = engine.runner.graphs.get(1)
            assert graph is not None, "no one-row decode graph was captured"
            counts[setting] = (graph.kernel_count(), n_mixed)
            next(factory, None)   # closes the engines
        finally:
            next(gen, None)       # closes the model and its context
    (fused, n_mixed), (long_way, none) = counts["1"], counts["0"]
    assert n_mixed > 0 and none == 0
    assert long_way - fused >= 4 * n_mixed, f"fused {fused} kernels, long way {long_way}, {n_mixed} mixed layers"
