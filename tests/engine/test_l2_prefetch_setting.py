"""STRATA_L2_PREFETCH_MB, read when a decode step is recorded (strata/models/decoder.py l2_prefetch_mb):
off on the CPU whatever it says, a whole number of MB on CUDA, and a clear error for anything else.
Its effect on tokens (none) is checked on the device by tests/engine/test_int_tiles_exactness.py."""

import types

import pytest

from strata.models.decoder import l2_prefetch_mb

CUDA = types.SimpleNamespace(device="cuda:0")
CPU = types.SimpleNamespace(device="cpu")


@pytest.mark.parametrize("value,mb", [(None, 0), ("", 0), ("0", 0), ("16", 16), (" 24 ", 24), ("1024", 1024)])
def test_whole_megabytes_on_cuda(monkeypatch, value, mb):
    if value is None:
        monkeypatch.delenv("STRATA_L2_PREFETCH_MB", raising=False)
    else:
        monkeypatch.setenv("STRATA_L2_PREFETCH_MB", value)
    assert l2_prefetch_mb(CUDA) == mb
    assert l2_prefetch_mb(CPU) == 0


@pytest.mark.parametrize("value", ["16MB", "1.5", "-1", "1025", "lots"])
def test_other_values_are_refused(monkeypatch, value):
    monkeypatch.setenv("STRATA_L2_PREFETCH_MB", value)
    with pytest.raises(ValueError, match="STRATA_L2_PREFETCH_MB"):
        l2_prefetch_mb(CUDA)
