"""Fixtures for the vision-model tests: the tiny random Qwen2.5-VL checkpoint (written once per
session by transformers), loaded once per backend ("cpu"; "cuda:0" marked gpu when libstrata sees
a GPU), engines of any shape around it, and transformers' reference model."""

from __future__ import annotations

import gc

import pytest

from strata import _ffi
from strata.config import EngineConfig
from strata.engine.engine import Engine

from .tiny_checkpoint import write_checkpoint


def _devices():
    devices = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        devices.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return devices


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    pytest.importorskip("transformers")
    return write_checkpoint(tmp_path_factory.mktemp("tiny_qwen2_5_vl"))


@pytest.fixture(scope="session", params=_devices())
def device(request):
    return request.param


@pytest.fixture(scope="session")
def loaded(device, checkpoint):
    from strata.models.hf_loader import load_hf_checkpoint

    ctx = _ffi.Context(device)
    model = load_hf_checkpoint(checkpoint, ctx, "tiny-qwen2.5-vl")
    yield ctx, model
    gc.collect()
    model.close()
    ctx.close()


@pytest.fixture
def make_engine(loaded, device):
    """make_engine(batch=, chunk=, ctx_len=, graphs=, drafter=, draft_max=) -> an Engine sharing the session's model."""
    ctx, model = loaded
    engines = []

    def make(batch=2, chunk=16, ctx_len=512, graphs=True, drafter=None, **settings):
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(model="tiny", device=device, batch=batch, chunk=chunk, ctx=ctx_len,
                              graphs=graphs, **settings).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config, drafter=drafter)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.runner.close()


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
