"""Engine tests on tiny `strata synth --pure` models: the device list, the file, the loaded model and
an engine factory that the per-type exactness tests (test_low_bit_exactness, test_int_tiles_exactness)
share."""

from __future__ import annotations

import gc

import pytest

from strata import _ffi
from strata.config import EngineConfig
from strata.engine.engine import Engine


def devices() -> list:
    """The CPU, and cuda:0 (gpu-marked) when there is a CUDA device."""
    found = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        found.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return found


def tiny_gguf(tmp_path_factory, dtype: str, seed: int, folder: str, pure: bool = True):
    """A tiny llama GGUF with every matrix in `dtype` (pure=False: llama-quantize's mix for a mix
    name such as Q4_K_M); skips when no tokenizer GGUF is at hand."""
    from strata.synth.shapes import SynthError
    from strata.synth.tokenizer import find_tokenizer_gguf
    from strata.synth.writer import write_llama_gguf

    try:
        find_tokenizer_gguf()
    except SynthError as exc:
        pytest.skip(f"no tokenizer GGUF for strata synth: {exc}")
    path = tmp_path_factory.mktemp(folder) / f"tiny-{dtype}.gguf"
    return write_llama_gguf(path, "tiny", dtype, seed=seed, pure=pure).path


def loaded_model(device: str, path):
    """Yields (device, context, model) and closes both afterwards (a fixture body)."""
    from strata.models.loader import load_model

    ctx = _ffi.Context(device)
    model = load_model(str(path), ctx)
    yield device, ctx, model
    gc.collect()
    model.close()
    ctx.close()


def engine_factory(loaded, name: str, ctx_len: int):
    """Yields make(batch, chunk) -> Engine on the loaded model and closes every engine afterwards."""
    device, ctx, model = loaded
    engines = []

    def make(batch, chunk):
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(model=name, device=device, batch=batch, chunk=chunk, ctx=ctx_len,
                              graphs=True, max_queue=8).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.runner.close()
