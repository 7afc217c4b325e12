"""Loading Hugging Face Qwen2.5-VL checkpoints: config spellings, shards, weight types, refusals.

BF16 and F16 checkpoints keep their matrices in that type (the matmul reads
them) and their norms and biases in F32; their logits are compared with
transformers running the same checkpoint upcast to float32 (exact for these
types), so the tolerance is the F32 checkpoint's.
"""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from strata import _ffi
from strata.models import hf_config, safetensors_io
from strata.models.gguf_spec import ModelFormatError
from strata.models.hf_loader import load_hf_checkpoint, map_tensors, strata_name
from strata.models.loader import load_model
from strata._ffi import DType, RopeMode
from strata.models.vision_windows import window_layout

from .harness import Job, drive, encode, picture, user
from .reference import greedy, processor_inputs
from .tiny_checkpoint import IMAGE_PAD, write_checkpoint


def hub_style(config: dict) -> dict:
    """transformers 5's nested config rewritten as the hub files spell it (flat text keys, rope_scaling)."""
    flat = copy.deepcopy(config)
    text = flat.pop("text_config")
    rope = text.pop("rope_parameters")
    flat.update(text)
    flat["model_type"] = "qwen2_5_vl"
    flat["rope_theta"] = rope["rope_theta"]
    flat["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    vision = flat["vision_config"]
    vision["in_chans"] = vision.pop("in_channels")
    vision.pop("rope_parameters")
    return flat


def test_spec_from_config_in_both_spellings(checkpoint):
    config = hf_config.read_config(checkpoint)
    spec = hf_config.read_spec(config)
    assert (spec.arch, spec.rope_mode, spec.rope_sections, spec.rope_base) == ("qwen2_5_vl", RopeMode.MROPE,
                                                                              (2, 3, 3, 0), 1e6)
    assert (spec.hidden, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.vocab) == (64, 4, 2, 16, 151936)
    assert spec.qkv_bias and not spec.tied_output
    vision = hf_config.read_vision_spec(config)
    assert (vision.depth, vision.hidden, vision.fullatt_blocks, vision.window_merged, vision.patch_dim) == (
        3, 32, (1,), 4, 1176)
    assert (vision.image_pad_id, vision.vision_start_id) == (151655, 151652)
    hub = hub_style(config)
    assert hf_config.read_spec(hub) == spec and hf_config.read_vision_spec(hub) == vision


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(model_type="llava"), "model_type 'llava' is not supported"),
    (lambda c: c["text_config"]["rope_parameters"].update(rope_type="yarn"), "RoPE type 'yarn'"),
    (lambda c: c["text_config"]["rope_parameters"].update(mrope_section=[2, 2, 2]), "sums to 6"),
    (lambda c: c["text_config"].update(use_sliding_window=True), "sliding_window"),
    (lambda c: c["vision_config"].update(hidden_act="gelu"), "vision hidden_act 'gelu'"),
    (lambda c: c["text_config"].pop("hidden_size"), "lacks hidden_size"),
])
def test_config_refusals_say_what_is_supported(checkpoint, change, message):
    config = hf_config.read_config(checkpoint)
    change(config)
    with pytest.raises(ModelFormatError, match=message):
        hf_config.read_spec(config)
        hf_config.read_vision_spec(config)


def test_tensor_names_map_onto_the_decoder():
    assert strata_name("model.layers.3.self_attn.q_proj.bias") == "blk.3.attn_q.bias"
    assert strata_name("model.language_model.layers.0.mlp.down_proj.weight") == "blk.0.ffn_down.weight"
    assert strata_name("model.embed_tokens.weight") == "token_embd.weight"
    assert strata_name("lm_head.weight") == "output.weight"
    assert strata_name("visual.blocks.2.attn.qkv.weight") == "v.blocks.2.attn.qkv.weight"
    assert strata_name("model.visual.merger.mlp.0.bias") == "v.merger.mlp.0.bias"
    assert strata_name("model.rotary_emb.inv_freq") is None


def test_sharded_checkpoint_reads_the_same_tensors(checkpoint, hf_model, tmp_path):
    hf_model.save_pretrained(tmp_path, max_shard_size="20MB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    single, sharded = safetensors_io.read_tensors(checkpoint), safetensors_io.read_tensors(tmp_path)
    assert len(safetensors_io.checkpoint_files(tmp_path)) > 1 and single.keys() == sharded.keys()
    for name, t in single.items():
        assert (t.dtype, t.shape) == (sharded[name].dtype, sharded[name].shape)
        assert np.array_equal(np.asarray(t.data), np.asarray(sharded[name].data)), name


def test_missing_tensor_and_unsupported_dtype_refused(checkpoint, tmp_path):
    from safetensors.numpy import save_file

    config = hf_config.read_config(checkpoint)
    spec, vision = hf_config.read_spec(config), hf_config.read_vision_spec(config)
    tensors = safetensors_io.read_tensors(checkpoint)
    del tensors["visual.blocks.1.attn.qkv.bias"]
    with pytest.raises(ModelFormatError, match="lacks tensors for v.blocks.1.attn.qkv.bias"):
        map_tensors(tensors, spec, vision, checkpoint)
    save_file({"model.norm.weight": np.ones(4, dtype=np.float64)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelFormatError, match="dtype F64; supported: F32, F16, BF16"):
        safetensors_io.read_tensors(tmp_path)
    with pytest.raises(ModelFormatError, match="has no config.json"):
        load_hf_checkpoint(tmp_path, None, "empty")


def test_window_layout_matches_transformers():
    torch = pytest.importorskip("torch")
    from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

    for grid in [(1, 4, 4), (1, 8, 8), (1, 10, 6), (1, 16, 12), (1, 34, 18), (2, 12, 20)]:
        index, cu = get_vision_window_index(torch.tensor([grid]), 2, 112, 14)
        positions = get_vision_position_ids(torch.tensor([grid]), 2).numpy()
        layout = window_layout(grid, 2, 4)
        order = (index[:, None] * 4 + torch.arange(4)).reshape(-1).numpy()
        assert np.array_equal(layout.patch_order, order), grid
        assert np.array_equal(layout.merged_restore, torch.argsort(index).numpy()), grid
        assert np.array_equal(layout.positions[:, :2], positions[order]), grid
        assert np.array_equal(layout.window_segments, cu.numpy()), grid


@pytest.mark.parametrize("dtype, tied", [("bfloat16", True), ("float16", False)])
async def test_half_precision_checkpoints_match_transformers(tmp_path_factory, device, dtype, tied):
    torch = pytest.importorskip("torch")
    from transformers import Qwen2_5_VLForConditionalGeneration

    from strata.config import EngineConfig
    from strata.engine.engine import Engine

    directory = write_checkpoint(tmp_path_factory.mktemp(dtype), dtype=dtype, tied=tied, seed=1)
    ctx = _ffi.Context(device)
    model = load_model(str(directory), ctx)
    try:
        wanted = {"bfloat16": 30, "float16": 1}[dtype]
        w = model.weights
        assert w["blk.0.attn_qkv.weight"].dtype == wanted and w["v.blocks.0.attn.qkv.weight"].dtype == wanted
        assert w["blk.0.attn_qkv.bias"].dtype == DType.F32 and w["output_norm.weight"].dtype == DType.F32
        assert model.spec.tied_output == tied and (w.get("output.weight") is None) == tied
        backend = "cuda" if device.startswith("cuda") else "cpu"
        engine = Engine(ctx, model, EngineConfig(model="t", device=device, batch=1, chunk=16, ctx=512)
                        .resolve(backend, model.spec.ctx_train))
        image = picture(170, 140, 7)
        inputs = await encode(engine, [user("what is ", image, "?")])
        ours = (await drive(engine, [Job("x", inputs)]))["x"]
        engine.runner.close()
        reference = Qwen2_5_VLForConditionalGeneration.from_pretrained(directory, dtype=torch.float32).eval()
        tokens, logits = greedy(reference, inputs.prompt_ids, processor_inputs(directory, [image]), len(ours.tokens),
                                IMAGE_PAD)
        error = float(np.abs(ours.logits - logits).max())
        print(f"\n{dtype} checkpoint (tied={tied}): max |logit error| vs transformers {error:.2e}")
        # The CUDA backend rounds activations to the weights' 16-bit type inside its tensor-core matmuls
        # (docs/cuda_backend.md); the CPU backend keeps them in float32.
        tolerance = {"cpu": 3e-3, "cuda": {"float16": 2e-2, "bfloat16": 8e-2}[dtype]}[backend]
        assert ours.tokens == tokens and error < tolerance
    finally:
        model.close()
        ctx.close()


def test_tokenizer_and_config_must_agree_on_image_tokens(checkpoint, tmp_path):
    for item in checkpoint.iterdir():
        (tmp_path / item.name).symlink_to(item)
    config = json.loads((checkpoint / "config.json").read_text())
    config["image_token_id"] = 151654
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps(config))
    wrong = re.escape("<|image_pad|> at id 151654 but tokenizer.json has it at 151655")
    with pytest.raises(ModelFormatError, match=wrong):
        load_hf_checkpoint(tmp_path, None, "mismatch")
