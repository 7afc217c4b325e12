"""Fixtures for the kernel tests: `backend` (the shared `device`: "cpu", and "cuda:0" marked gpu
when the library sees a CUDA device), a shared context per backend, `cuda_ctx` (a CUDA context
per module, for the CUDA-only files), `closing` (objects closed after the test) and `chain_of` (a decoder
layer's hand-off chain, layer_chain.py). `rng` comes from tests/conftest.py."""

import gc
import warnings

import pytest

from strata import _ffi as S


@pytest.fixture(scope="session")
def backend(device):
    """The shared `device` fixture (tests/conftest.py) under the name kernel tests use."""
    return device


@pytest.fixture(scope="session")
def ctx(backend):
    context = S.Context(backend)
    yield context
    gc.collect()  # buffers a failed test left behind
    try:
        context.close()
    except S.StrataError as exc:
        warnings.warn(f"kernel tests leaked objects on {backend}: {exc}")


@pytest.fixture(scope="module")
def cuda_ctx():
    """A cuda:0 context for the module, for tests of CUDA-only kernels and switches; skips without a device."""
    if S.cuda_device_count() == 0:
        pytest.skip("no CUDA device")
    context = S.Context("cuda:0")
    yield context
    context.close()


@pytest.fixture
def closing():
    """A list for objects with close() that a test makes (buffer sets, layers): each is closed after the test,
    in the order made."""
    made = []
    yield made
    for obj in made:
        obj.close()


@pytest.fixture
def chain_of(ctx, rng, closing):
    """Makes a decoder layer's hand-off chain (layer_chain.Chain) of a dtype and row count on `ctx`, closed
    after the test."""
    from layer_chain import Chain

    def make(dtype, n_rows):
        closing.append(Chain(ctx, rng, dtype, n_rows))
        return closing[-1]

    return make
