"""Error paths: each bad call returns the right status with a message that
says what was wrong and what is allowed, changes nothing, and never crashes;
stale and foreign handles are refused without being dereferenced."""

import threading

import numpy as np
import pytest

from strata import _ffi as S

INVALID, OOM, UNSUPPORTED, STATE = (S.Status.ERR_INVALID_ARGUMENT, S.Status.ERR_OUT_OF_MEMORY,
                                   S.Status.ERR_UNSUPPORTED, S.Status.ERR_STATE)


def expect_error(status, fragment, call, *args):
    with pytest.raises(S.StrataError) as e:
        call(*args)
    assert e.value.status == status, e.value
    assert fragment in e.value.message, e.value.message
    return e.value.message


@pytest.fixture
def bufs(ctx):
    made = {name: S.Buffer(ctx, 4096) for name in ("x", "w", "y", "rows")}
    yield made
    for b in made.values():
        b.close()


def test_matmul_argument_errors(ctx, bufs):
    x, w, y = bufs["x"], bufs["w"], bufs["y"]
    y.fill(0x5A)
    Q4_0 = S.DType.Q4_0
    msg = expect_error(INVALID, "k=100 is not a multiple of 32, the Q4_0 block size",
                       S.matmul, ctx, x, 0, 1, 100, w, 0, Q4_0, 4, None, 0, y, 0)
    assert msg.startswith("strata_matmul: ")
    expect_error(INVALID, "Q4_K (12)", S.matmul, ctx, x, 0, 1, 64, w, 0, S.DType.I32, 4, None, 0, y, 0)
    expect_error(INVALID, "w_dtype=5", S.matmul, ctx, x, 0, 1, 64, w, 0, 5, 4, None, 0, y, 0)
    expect_error(INVALID, "n_rows=0 must be > 0", S.matmul, ctx, x, 0, 0, 64, w, 0, Q4_0, 4, None, 0, y, 0)
    expect_error(INVALID, "n_out=-3 must be > 0", S.matmul, ctx, x, 0, 1, 64, w, 0, Q4_0, -3, None, 0, y, 0)
    expect_error(INVALID, "x: offset 2 is not a multiple of 4", S.matmul, ctx, x, 2, 1, 64, w, 0, Q4_0, 4, None, 0, y, 0)
    expect_error(INVALID, "w: offset 3 is not a multiple of 2", S.matmul, ctx, x, 0, 1, 64, w, 3, Q4_0, 4, None, 0, y, 0)
    expect_error(INVALID, "x needs 4096 bytes at offset 4 but its buffer holds 4096 bytes",
                 S.matmul, ctx, x, 4, 16, 64, w, 0, Q4_0, 4, None, 0, y, 0)
    expect_error(INVALID, "w needs", S.matmul, ctx, x, 0, 1, 64, w, 0, Q4_0, 1000, None, 0, y, 0)
    expect_error(INVALID, "bias needs", S.matmul, ctx, x, 0, 1, 64, w, 0, Q4_0, 4, y, 4088, y, 0)
    expect_error(INVALID, "overlap", S.matmul, ctx, x, 0, 1, 64, w, 0, Q4_0, 4, None, 0, x, 128)
    expect_error(INVALID, "more than 2^64", S.matmul, ctx, x, 0, 2 ** 40, 2 ** 40, w, 0, S.DType.F32, 4, None, 0, y, 0)
    assert (y.to_numpy(np.uint8, (4096,)) == 0x5A).all(), "a failed call must not write its output"


def test_other_kernel_argument_errors(ctx, bufs):
    x, w, y, rows = bufs["x"], bufs["w"], bufs["y"], bufs["rows"]
    expect_error(INVALID, "dtype=26 (I32) is not a weight type", S.embed, ctx, w, 0, S.DType.I32, 4, 8, x, 0, 1, y, 0)
    expect_error(INVALID, "dim=48 is not a multiple of 256, the Q6_K block size",
                 S.embed, ctx, w, 0, S.DType.Q6_K, 4, 48, x, 0, 1, y, 0)
    expect_error(INVALID, "eps must be in [0, 1]", S.rmsnorm, ctx, x, 0, w, 0, y, 0, 1, 8, -1.0)
    expect_error(INVALID, "overlap", S.rmsnorm, ctx, x, 0, w, 0, x, 4, 2, 8, 1e-5)
    expect_error(INVALID, "row stride 3 is smaller than the row width 4",
                 S.silu_mul, ctx, x, 0, 3, w, 0, 4, y, 0, 2, 4)
    expect_error(INVALID, "row_bytes=6 is not a multiple of 4", S.gather_rows, ctx, x, 0, 4, 6, rows, 0, 1, y, 0)
    expect_error(INVALID, "n_vocab=0 must be > 0", S.argmax, ctx, x, 0, 1, 0, y, 0)
    expect_error(INVALID, "params: offset 4 is not a multiple of 8", S.sample, ctx, x, 0, 1, 8, w, 4, y, 0)
    with S.Slots(ctx, 2, 2, 8, 2, 4) as slots:
        expect_error(INVALID, "layer=2 is out of range; allowed 0..1",
                     S.attention, ctx, slots, 2, x, 0, 8, 1, 2, rows, 0, 0.5, y, 0)
        expect_error(INVALID, "n_heads=3 is not a multiple of the slot set's n_kv_heads=2",
                     S.attention, ctx, slots, 0, x, 0, 12, 1, 3, rows, 0, 0.5, y, 0)
        expect_error(INVALID, "scale must be finite", S.attention, ctx, slots, 0, x, 0, 8, 1, 2, rows, 0,
                     float("nan"), y, 0)
        expect_error(INVALID, "k: row stride", S.kv_store, ctx, slots, 0, x, 0, 4, w, 0, 8, rows, 0, 1)
        bad_sections = S.rope_params(S.RopeMode.MROPE, 2, 8, 8, 10000.0, 1.0, (1, 1, 1, 0))
        expect_error(INVALID, "sum to 3 but must sum to rot_dim / 2 = 4",
                     S.rope, ctx, bad_sections, x, 0, 16, 1, slots, rows, 0)
        odd = S.rope_params(S.RopeMode.HALF, 2, 8, 5)
        expect_error(INVALID, "params.rot_dim=5 must be even", S.rope, ctx, odd, x, 0, 16, 1, slots, rows, 0)
    with S.Slots(ctx, 1, 0, 8, 1, 4) as tables_only:
        expect_error(INVALID, "no layers", S.kv_store, ctx, tables_only, 0, x, 0, 4, w, 0, 4, rows, 0, 1)


def test_stale_and_foreign_handles(ctx):
    lib, ffi = S.load(), S.ffi
    out = ffi.new("uint64_t *")
    buf = S.Buffer(ctx, 64)
    raw = buf._ptr
    buf.close()
    assert lib.strata_buffer_size(raw, out) == INVALID
    assert "not a live buffer" in ffi.string(lib.strata_last_error()).decode()
    assert lib.strata_buffer_destroy(raw) == INVALID  # double destroy
    junk = ffi.new("char[256]")
    assert lib.strata_buffer_size(ffi.cast("strata_buffer *", junk), out) == INVALID
    assert lib.strata_buffer_size(ffi.cast("strata_buffer *", ctx._ptr), out) == INVALID  # a context, not a buffer
    assert lib.strata_context_synchronize(ffi.cast("strata_context *", junk)) == INVALID
    assert lib.strata_buffer_size(ffi.NULL, out) == INVALID
    assert "buf is NULL" in ffi.string(lib.strata_last_error()).decode()
    live = S.Buffer(ctx, 64)
    assert lib.strata_buffer_size(live._ptr, ffi.NULL) == INVALID
    assert lib.strata_buffer_size(live._ptr, out) == 0 and out[0] == 64
    live.close()


def test_python_use_after_close(ctx):
    buf = S.Buffer(ctx, 64)
    buf.close()
    buf.close()  # idempotent
    expect_error(INVALID, "Buffer used after close()", buf.upload, b"abcd")
    expect_error(INVALID, "Buffer used after close()", S.add, ctx, buf, 0, buf, 0, buf, 0, 4)
    with S.Slots(ctx, 1, 1, 4, 1, 2) as slots:
        pass
    expect_error(INVALID, "Slots used after close()", slots.reset, 0)


def test_buffers_of_another_context(ctx):
    with S.Context("cpu", 1) as other:
        mine, theirs = S.Buffer(ctx, 64), S.Buffer(other, 64)
        expect_error(INVALID, "b belongs to a different context", S.add, ctx, mine, 0, theirs, 0, mine, 0, 4)
        expect_error(INVALID, "different context", mine.copy_from, theirs)
        theirs.close()
        mine.close()


def test_allocation_too_large(ctx):
    expect_error(OOM, "", S.Buffer, ctx, 1 << 62)
    expect_error(OOM, "", S.Slots, ctx, 1 << 20, 1 << 10, 1 << 20, 64, 512)
    expect_error(INVALID, "n_bytes must be > 0", S.Buffer, ctx, 0)
    with S.Buffer(ctx, 16) as ok:  # the context is still fine
        ok.upload(b"x" * 16)


def test_context_errors():
    expect_error(INVALID, 'device "gpu" is not understood', S.Context, "gpu")
    expect_error(INVALID, "not understood", S.Context, "cuda:x")
    expect_error(INVALID, "num_threads=-1 is out of range", S.Context, "cpu", -1)
    ctx = S.Context("cpu", 1)
    buf = S.Buffer(ctx, 8)
    slots = S.Slots(ctx, 1, 0, 2, 1, 2)
    expect_error(STATE, "still owns 1 buffer(s), 0 host buffer(s), 1 slot set(s)", ctx.close)
    buf.close()
    slots.close()
    ctx.close()
    expect_error(INVALID, "Context used after close()", ctx.synchronize)


def test_out_of_range_rows_are_padding(ctx, rng):
    """Rows that point outside the slot set are skipped, never written out of bounds."""
    with S.Slots(ctx, 1, 1, 4, 1, 8) as slots:
        bad = np.array([[0, 4], [0, -1], [1, 0], [-7, 2], [2 ** 31 - 1, 2 ** 31 - 1]], np.int32)
        rows = S.Buffer.from_array(ctx, bad)
        k = S.Buffer.from_array(ctx, rng.standard_normal((5, 8), dtype=np.float32))
        out = S.Buffer(ctx, 5 * 8 * 4)
        S.kv_store(ctx, slots, 0, k, 0, 8, k, 0, 8, rows, 0, 5)
        S.attention(ctx, slots, 0, k, 0, 8, 5, 1, rows, 0, 1.0, out, 0)
        S.positions_decode(ctx, slots, rows, 0, 5)
        assert not out.to_numpy(np.float32, (40,)).any()
        assert not slots.read_positions(0, 0, 4).any()
        for b in (rows, k, out):
            b.close()


def test_last_error_is_per_thread(ctx):
    expect_error(INVALID, "n=0 must be > 0", S.gelu, ctx, S.Buffer(ctx, 8), 0, S.Buffer(ctx, 8), 0, 0)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(S.ffi.string(S.load().strata_last_error()).decode()))
    thread.start()
    thread.join()
    assert seen == [""]
    assert "n=0 must be > 0" in S.ffi.string(S.load().strata_last_error()).decode()
