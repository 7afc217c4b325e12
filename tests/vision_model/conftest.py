"""Fixtures for the vision-model tests: the tiny random Qwen2.5-VL checkpoint (written once per
session by transformers) loaded once per device, the defaults of the engines the shared `make_engine`
(tests/conftest.py) builds around it, and transformers' reference model."""

from __future__ import annotations

import pytest

from .tiny_checkpoint import write_checkpoint


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return write_checkpoint(tmp_path_factory.mktemp("tiny_qwen2_5_vl"))


@pytest.fixture(scope="session")
def loaded(device, checkpoint, model_on):
    """The tiny checkpoint on `device`, once per session; the shared `make_engine` builds engines around it."""
    from strata.models.hf_loader import load_hf_checkpoint

    with model_on(device, lambda ctx: load_hf_checkpoint(checkpoint, ctx, "tiny-qwen2.5-vl")) as pair:
        yield pair


@pytest.fixture(scope="session")
def engine_defaults():
    return {"model": "tiny", "batch": 2, "chunk": 16, "ctx_len": 512, "graphs": True, "max_queue": 256}


@pytest.fixture(scope="session")
def hf_model(checkpoint):
    """transformers' model in float32 (sdpa attention): the independent reference."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def hf_model_f16_cache(checkpoint):
    """The same reference with K and V rounded to float16 before attention, as Strata's KV cache stores them."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen2_5_VLForConditionalGeneration

    from .reference import register_f16_cache_attention

    name = register_f16_cache_attention()
    return Qwen2_5_VLForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation={"text_config": name, "vision_config": "sdpa", "": "sdpa"}
    ).eval()
