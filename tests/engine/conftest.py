"""Engine tests run on the real default model, loaded once per device; the shared `make_engine`
(tests/conftest.py) builds engines of any shape around it with this folder's defaults."""

import pytest


@pytest.fixture(scope="session")
def loaded(device, model_path, model_on):
    from strata.models.loader import load_model

    with model_on(device, lambda ctx: load_model(str(model_path), ctx)) as pair:
        yield pair


@pytest.fixture(scope="session")
def engine_defaults():
    return {"model": "smollm2-135m", "batch": 2, "chunk": 64, "ctx_len": 1024, "graphs": True, "max_queue": 64}
