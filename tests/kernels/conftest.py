"""Fixtures for the kernel tests: a `backend` parametrized over "cpu" and, when
the library sees a CUDA device, "cuda:0" (marked gpu); a shared context per
backend; and an `rng` seeded from the test's id (fixed per test, different
across tests)."""

import gc
import warnings
import zlib

import numpy as np
import pytest

from strata import _ffi as S


def _backends():
    params = ["cpu"]
    if S.cuda_device_count() > 0:
        params.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return params


@pytest.fixture(scope="session", params=_backends())
def backend(request):
    return request.param


@pytest.fixture(scope="session")
def ctx(backend):
    context = S.Context(backend)
    yield context
    gc.collect()  # buffers a failed test left behind
    try:
        context.close()
    except S.StrataError as exc:
        warnings.warn(f"kernel tests leaked objects on {backend}: {exc}")


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
