"""Fixtures every test folder shares.

- `device`: "cpu" always, "cuda:0" (marked gpu) when libstrata sees a GPU; session-wide.
- `rng`: a NumPy generator seeded from the test's id (fixed per test, different across tests).
- `model_path`, `default_tokenizer`, `hf_gguf_tokenizer`: the default model's GGUF (the test
  skips when it is not in the cache), its tokenizer, and transformers' tokenizer of the same file.
- `byte_tokenizer`: a real byte-level BPE Tokenizer over a small vocabulary, for model-free tests.
- `model_on` and `make_engine`: a model held on a device for a folder's session-scoped `loaded`
  fixture, and engines of any shape around it (the folder defines `loaded` and `engine_defaults`).
"""

from __future__ import annotations

import contextlib
import gc
import zlib

import numpy as np
import pytest

from strata import _ffi, model_store


def _devices():
    devices = ["cpu"]
    if _ffi.cuda_device_count() > 0:
        devices.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return devices


@pytest.fixture(scope="session", params=_devices())
def device(request):
    return request.param


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ---------------------------------------------------------------- the default model and its tokenizer


@pytest.fixture(scope="session")
def model_path():
    try:
        return model_store.resolve_model(model_store.DEFAULT_MODEL)
    except model_store.ModelStoreError as exc:
        pytest.skip(f"the default model is not in the cache ({exc}); run `make model`")


@pytest.fixture(scope="session")
def default_tokenizer(model_path):
    from strata.tokenizer import Tokenizer

    return Tokenizer.from_gguf(model_path)


@pytest.fixture(scope="session")
def hf_gguf_tokenizer(model_path):
    """transformers' tokenizer converted from the same GGUF (the reference tokenizer and chat template)."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_path.parent), gguf_file=model_path.name)


# ---------------------------------------------------------------- a small real tokenizer, no model

BYTE_TOKENIZER_WORDS = ["hello", "Ġworld", "ĠSTOP", "<|im_end|>"]


@pytest.fixture(scope="session")
def byte_tokenizer():
    """Ids 0..255 are the 256 bytes (GPT-2's byte alphabet); then "hello", " world", " STOP" and the
    special, end-of-turn "<|im_end|>" (also EOS)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    from strata.tokenizer import Tokenizer, byte_to_unicode

    tokens = [byte_to_unicode()[b] for b in range(256)] + BYTE_TOKENIZER_WORDS
    vocab = {token: i for i, token in enumerate(tokens)}
    backend = HFTokenizer(models.BPE(vocab, [], ignore_merges=True))
    eos = vocab["<|im_end|>"]
    return Tokenizer(backend, tokens, special_ids=[eos], bos_id=None, eos_id=eos)


# ---------------------------------------------------------------- engines around a loaded model


@pytest.fixture(scope="session")
def model_on():
    """model_on(device, load) -> a context manager holding (ctx, load(ctx)), closed (model, then ctx) on exit.
    A folder's `loaded` fixture is `with model_on(device, its_loader) as pair: yield pair` (session scope,
    so each folder keeps its own model)."""

    @contextlib.contextmanager
    def hold(device, load):
        ctx = _ffi.Context(device)
        model = load(ctx)
        try:
            yield ctx, model
        finally:
            gc.collect()
            model.close()
            ctx.close()

    return hold


@pytest.fixture
def make_engine(loaded, device, engine_defaults):
    """make_engine(batch=, chunk=, ctx_len=, graphs=, max_queue=, drafter=, draft=, draft_max=, ...) -> an Engine
    sharing the session's model;
    unset arguments take the folder's `engine_defaults`."""
    from strata.config import EngineConfig
    from strata.engine.engine import Engine

    ctx, model = loaded
    engines = []

    def make(drafter=None, **settings):
        s = {**engine_defaults, **settings}
        backend = "cuda" if device.startswith("cuda") else "cpu"
        speculation = {k: s[k] for k in ("draft", "draft_max", "draft_model", "draft_vocab", "kv_pages",
                                         "prefix_cache", "host_cache") if k in s}
        config = EngineConfig(model=s["model"], device=device, batch=s["batch"], chunk=s["chunk"], ctx=s["ctx_len"],
                              graphs=s["graphs"], max_queue=s["max_queue"],
                              **speculation).resolve(backend, model.spec.ctx_train)
        engine = Engine(ctx, model, config, drafter=drafter)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        if engine.pool.host is not None:    # the host tier's buffers belong to the shared context
            engine.pool.host.close()
        engine.runner.close()
