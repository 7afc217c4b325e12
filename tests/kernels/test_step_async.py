"""Host buffers, markers and step_advance: the pieces a decode loop uses to run one step ahead."""

import numpy as np
import pytest

from strata import _ffi as S


def test_copy_to_host_arrives_by_the_marker(ctx, rng):
    data = rng.integers(-1000, 1000, 257).astype(np.int32)
    with S.Buffer.from_array(ctx, data) as buf, S.HostBuffer(ctx, 4 * 300) as host:
        host.array[:] = 0
        host.copy_from(buf, 4 * 3, 0, data.nbytes)
        S.wait(ctx, S.marker(ctx))
        assert np.array_equal(host.array[12: 12 + data.nbytes].view(np.int32), data)


def test_markers_increase_and_unknown_marker_fails(ctx):
    a, b = S.marker(ctx), S.marker(ctx)
    assert b > a >= 1
    S.wait(ctx, a)
    S.wait(ctx, b)
    if ctx.info().backend == S.Backend.CUDA:
        with pytest.raises(S.StrataError, match="no such marker"):
            S.wait(ctx, b + 1000)


def test_host_copy_bounds_and_recording_refused(ctx):
    with S.Buffer(ctx, 64) as buf, S.HostBuffer(ctx, 16) as host:
        with pytest.raises(S.StrataError, match="outside the host buffer"):
            host.copy_from(buf, 8, 0, 16)
        with pytest.raises(S.StrataError, match="src"):
            host.copy_from(buf, 0, 60, 8)
        ctx.graph_begin()
        try:
            with pytest.raises(S.StrataError) as err:
                host.copy_from(buf, 0, 0, 8)
            assert err.value.status_name == "STRATA_ERR_STATE"
        finally:
            with pytest.raises(S.StrataError):
                ctx.graph_end()


def test_step_advance_moves_real_rows_only(ctx, rng):
    n = 37
    ids_off, rows_off, params_off, out_off = 0, 256, 1024, 4096
    host = np.zeros(8192, np.uint8)
    ids = rng.integers(0, 5000, n).astype(np.int32)
    rows = np.stack([rng.integers(-1, 4, n), rng.integers(0, 100, n)], axis=1).astype(np.int32)
    params = np.zeros(n, S.SAMPLING_PARAMS_DTYPE)
    params["position"] = rng.integers(0, 1000, n)
    params["seed"] = rng.integers(0, 1 << 62, n)
    out = rng.integers(0, 5000, n).astype(np.int32)
    host[ids_off: ids_off + 4 * n] = ids.view(np.uint8)
    host[rows_off: rows_off + 8 * n] = rows.reshape(-1).view(np.uint8)
    host[params_off: params_off + 32 * n] = params.view(np.uint8)
    host[out_off: out_off + 4 * n] = out.view(np.uint8)
    with S.Buffer.from_array(ctx, host) as io:
        S.step_advance(ctx, io, ids_off, rows_off, params_off, out_off, n)
        got_ids = io.to_numpy(np.int32, n, ids_off)
        got_rows = io.to_numpy(np.int32, (n, 2), rows_off)
        got_params = io.to_numpy(S.SAMPLING_PARAMS_DTYPE, n, params_off)
    real = rows[:, 0] >= 0
    assert real.any() and (~real).any()
    assert np.array_equal(got_ids, np.where(real, out, ids))
    assert np.array_equal(got_rows[:, 0], rows[:, 0])
    assert np.array_equal(got_rows[:, 1], rows[:, 1] + real)
    assert np.array_equal(got_params["position"], params["position"] + real)
    assert np.array_equal(got_params["seed"], params["seed"])


def test_step_advance_checks_operands(ctx):
    with S.Buffer(ctx, 256) as io:
        with pytest.raises(S.StrataError, match="out_ids"):
            S.step_advance(ctx, io, 0, 64, 128, 248, 4)
        with pytest.raises(S.StrataError, match="n_rows"):
            S.step_advance(ctx, io, 0, 64, 128, 200, 0)
