"""Fixtures for engine tests: the real default model loaded once per backend, and
engines of any slot/chunk/context shape built around it.

Backends: "cpu" always; "cuda:0" (marked gpu) when libstrata sees a GPU.
"""

import gc

import pytest

from strata import _ffi
from strata.config import EngineConfig
from strata.engine.engine import Engine
from strata.model_store import ModelStoreError, resolve_model


def _devices():
    devices = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        devices.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return devices


@pytest.fixture(scope="session")
def model_path():
    try:
        return resolve_model("smollm2-135m")
    except ModelStoreError as exc:
        pytest.skip(f"the default model is not in the cache ({exc}); run `make model`")


@pytest.fixture(scope="session", params=_devices())
def device(request):
    return request.param


@pytest.fixture(scope="session")
def loaded(device, model_path):
    from strata.models.loader import load_model

    ctx = _ffi.Context(device)
    model = load_model(str(model_path), ctx)
    yield ctx, model
    gc.collect()
    model.close()
    ctx.close()


@pytest.fixture
def make_engine(loaded, device):
    """make_engine(batch=, chunk=, ctx=, graphs=, drafter=, draft=, draft_max=) -> Engine sharing the session's model."""
    ctx, model = loaded
    engines = []

    def make(batch=2, chunk=64, ctx_len=1024, graphs=True, max_queue=64, drafter=None, **settings):
        backend = "cuda" if device.startswith("cuda") else "cpu"
        config = EngineConfig(model="smollm2-135m", device=device, batch=batch, chunk=chunk, ctx=ctx_len,
                              graphs=graphs, max_queue=max_queue, **settings).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config, drafter=drafter)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.runner.close()
