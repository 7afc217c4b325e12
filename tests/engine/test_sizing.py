"""Sizing the KV pool from free memory (strata/engine/sizing.py), no device: what fits is kept, a
default shrinks to fit, a setting the user gave that cannot fit is a one-line error naming the flag."""

from types import SimpleNamespace

import pytest

from strata.config import ConfigError, EngineConfig
from strata.engine.sizing import FREE_FRACTION, fit_pool, page_bytes

SPEC = SimpleNamespace(n_layers=32, n_kv_heads=8, head_dim=128)      # an 8B llama: 8 MiB a page
PAGE = page_bytes(SPEC)


def cfg(**kw):
    return EngineConfig(**{"batch": 32, "ctx": 8192, **kw}).resolve("cuda", 131072)


def free_for(pages):
    return int(pages * PAGE / FREE_FRACTION) + PAGE


def test_page_bytes():
    assert PAGE == 32 * 2 * 8 * 64 * 128 * 2 == 8 << 20


def test_what_fits_is_kept():
    config, line = fit_pool(cfg(), SPEC, free_for(32 * 128), frozenset())
    assert config.kv_pages == 32 * 128 and config.ctx == 8192 and "fits" in line


def test_default_pool_shrinks_to_free_memory():
    config, line = fit_pool(cfg(), SPEC, free_for(1000), frozenset())
    assert config.kv_pages == 1000 and config.ctx == 8192 and config.batch == 32
    assert "shrunk to fit" in line and "1000 pages" in line


def test_default_ctx_shrinks_when_one_request_would_not_fit():
    config, _ = fit_pool(cfg(), SPEC, free_for(50), frozenset())
    assert config.kv_pages == 50 and config.ctx == 50 * 64


def test_explicit_settings_that_cannot_fit_say_why():
    with pytest.raises(ConfigError) as e:
        fit_pool(cfg(kv_pages=5000), SPEC, free_for(1000), frozenset({"kv_pages"}))
    assert "--kv-pages 5000" in str(e.value) and "--kv-pages <= 1000" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        fit_pool(cfg(), SPEC, free_for(50), frozenset({"ctx"}))
    assert "--ctx 8192" in str(e.value) and "--ctx <= 3200" in str(e.value)
    with pytest.raises(ConfigError) as e:
        fit_pool(cfg(), SPEC, PAGE // 2, frozenset())
    assert "not even one KV page" in str(e.value)
