"""strata._ffi — the binding to libstrata; the only module that imports cffi.

ABI mode: the library is opened with ``ffi.dlopen`` and declared with the text
between STRATA_CDEF_BEGIN and STRATA_CDEF_END of strata.h, read verbatim from
the header that ships beside the library (``build/strata.h``; the repository's
``libstrata/include/strata.h`` as a fallback). The library is ``$STRATA_LIB``
or ``<repo>/build/libstrata.so``.

Every bad status raises StrataError(status, message). The wrappers own their
handles (``close()`` is idempotent, ``with`` closes) and refuse use after
close in Python, before C sees it. Kernels are plain functions taking
(Buffer, byte offset) operands, kept thin: they run hundreds of times per
decode step.
"""

from __future__ import annotations

import enum
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import cffi
import numpy as np

from .env import get as get_env

__all__ = [
    "StrataError", "DType", "RopeMode", "SAMPLING_PARAMS_DTYPE", "Context", "Buffer", "Slots", "Graph",
    "DeviceInfo", "load", "cuda_device_count", "abi_version", "build_info", "dtype_block", "random_uniform",
    "status_name", "rope_params", "embed", "rmsnorm", "matmul", "MatmulPrologue", "matmul_params", "matmul_ex",
    "matmul_prefetch", "matmul_chain_begin", "matmul_chain_end",
    "rope", "kv_store", "rope_kv_store", "rope_kv_store_attention", "matmul_rope_kv_store", "attention",
    "attention_handoff",
    "attention_dense", "silu_mul", "gelu", "add", "gather_rows", "positions_decode", "argmax", "sample",
    "HostBuffer", "step_advance", "logits_adjust",
]

_REPO = Path(__file__).resolve().parent.parent
_CDEF = re.compile(r"/\* STRATA_CDEF_BEGIN \*/(.*?)/\* STRATA_CDEF_END \*/", re.S)
_ABI = re.compile(r"STRATA_ABI_VERSION\s*=\s*(\d+)")

ffi = cffi.FFI()
_lib = None
_declared = False
_load_lock = threading.Lock()

class Status(enum.IntEnum):
    """enum strata_status (the names without their STRATA_ prefix)."""

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_OUT_OF_MEMORY = 2
    ERR_UNSUPPORTED = 3
    ERR_DEVICE = 4
    ERR_STATE = 5
    ERR_INTERNAL = 6


STATUS_NAMES = {int(s): f"STRATA_{s.name}" for s in Status}


class Backend(enum.IntEnum):
    """enum strata_backend."""

    CPU = 0
    CUDA = 1


class StrataError(RuntimeError):
    """A libstrata call failed: `status` (enum strata_status), its name, and the library's message."""

    def __init__(self, status: int, message: str):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "unknown")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class DType(enum.IntEnum):
    """enum strata_dtype (GGUF's ggml_type ids)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    IQ4_NL = 20
    IQ3_S = 21
    IQ4_XS = 23
    I32 = 26
    BF16 = 30


class MatmulPrologue(enum.IntEnum):
    """enum strata_matmul_prologue."""

    NONE = 0
    RMSNORM = 1
    SILU_MUL = 2


class RopeMode(enum.IntEnum):
    """enum strata_rope_mode."""

    ADJACENT = 0
    HALF = 1
    MROPE = 2
    VISION = 3


# One strata_sampling_params (32 bytes); build an array of these and upload it.
SAMPLING_PARAMS_DTYPE = np.dtype([
    ("temperature", "<f4"), ("top_p", "<f4"), ("min_p", "<f4"), ("top_k", "<i4"),
    ("seed", "<u8"), ("position", "<i8"),
])


# ---------------------------------------------------------------- loading

def library_path() -> Path:
    """$STRATA_LIB, else <repo>/build/libstrata.so."""
    env = get_env("STRATA_LIB")
    return Path(env) if env else _REPO / "build" / "libstrata.so"


def header_path(lib_path: Path) -> Path:
    """strata.h beside the library, else the repository's copy."""
    for candidate in (lib_path.parent / "strata.h", _REPO / "libstrata" / "include" / "strata.h"):
        if candidate.is_file():
            return candidate
    raise StrataError(Status.ERR_UNSUPPORTED, f"strata.h not found beside {lib_path} nor in {_REPO / 'libstrata/include'}; run `make lib`")


def header_cdef(text: str) -> str:
    """The declarations between STRATA_CDEF_BEGIN and STRATA_CDEF_END."""
    match = _CDEF.search(text)
    if match is None:
        raise StrataError(Status.ERR_INTERNAL, "strata.h has no STRATA_CDEF_BEGIN/STRATA_CDEF_END region")
    return match.group(1)


def load():
    """Opens libstrata once (thread-safe) and returns the cffi library object."""
    global _lib
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not path.is_file():
            raise StrataError(Status.ERR_UNSUPPORTED, f"libstrata not found at {path}; run `make lib` (or set STRATA_LIB)")
        text = header_path(path).read_text()
        global _declared
        if not _declared:  # cdef once, even if a load failed after it
            ffi.cdef(header_cdef(text))
            _declared = True
        try:
            lib = ffi.dlopen(str(path))
        except OSError as exc:
            raise StrataError(Status.ERR_UNSUPPORTED, f"cannot load {path} ({exc}); rebuild it with `make lib`") from exc
        expected = int(_ABI.search(text).group(1))
        if lib.strata_abi_version() != expected:
            raise StrataError(Status.ERR_UNSUPPORTED, f"{path} implements ABI {lib.strata_abi_version()} but strata.h describes "
                                 f"ABI {expected}; rebuild with `make lib`")
        _lib = lib
    return _lib


def _raise(status: int):
    raise StrataError(status, ffi.string(_lib.strata_last_error()).decode("utf-8", "replace"))


def _check(status: int):
    if status:
        _raise(status)


def _closed(obj):
    raise StrataError(Status.ERR_INVALID_ARGUMENT, f"{type(obj).__name__} used after close()")


# ---------------------------------------------------------------- library-wide

def abi_version() -> int:
    return load().strata_abi_version()


def build_info() -> str:
    return ffi.string(load().strata_build_info()).decode()


def status_name(status: int) -> str:
    return ffi.string(load().strata_status_name(status)).decode()


def cuda_device_count() -> int:
    """CUDA devices usable by this build (0 without the CUDA backend, a driver or a GPU)."""
    out = ffi.new("int32_t *")
    _check(load().strata_cuda_device_count(out))
    return out[0]


def dtype_block(dtype: int) -> tuple[int, int]:
    """(values per block, bytes per block) of a dtype."""
    values, nbytes = ffi.new("int64_t *"), ffi.new("int64_t *")
    _check(load().strata_dtype_block(int(dtype), values, nbytes))
    return values[0], nbytes[0]


def random_uniform(seed: int, position: int) -> float:
    """The sampler's draw in [0, 1) for (seed, position)."""
    return load().strata_random_uniform(seed, position)


# ---------------------------------------------------------------- handles

class _Owned:
    """Owns one libstrata handle (`_ptr`): close() destroys it once, `with` closes it, and so does the
    finalizer (quietly: a handle the library still refuses to free stays allocated)."""

    __slots__ = ()
    _destroy = ""      # the strata_*_destroy function of the subclass's handle

    def close(self):
        if self._ptr is not None:
            _check(getattr(_lib, self._destroy)(self._ptr))
            self._ptr = None

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class DeviceInfo:
    backend: Backend
    device_index: int
    num_threads: int
    compute_capability: int
    free_bytes: int
    total_bytes: int
    name: str


class Context(_Owned):
    """A device context: "cpu" or "cuda:N"; num_threads = CPU workers (0 = one per core)."""

    _destroy = "strata_context_destroy"

    __slots__ = ("_ptr", "device", "__weakref__")

    def __init__(self, device: str = "cpu", num_threads: int = 0):
        self._ptr = None
        lib = load()
        out = ffi.new("strata_context **")
        _check(lib.strata_context_create(device.encode(), num_threads, out))
        self._ptr = out[0]
        self.device = device

    def info(self) -> DeviceInfo:
        raw = ffi.new("strata_device_info *")
        _check(_lib.strata_context_info(self._ptr or _closed(self), raw))
        return DeviceInfo(Backend(raw.backend), raw.device_index, raw.num_threads, raw.compute_capability,
                          raw.free_bytes, raw.total_bytes, ffi.string(raw.name).decode("utf-8", "replace"))

    def synchronize(self):
        _check(_lib.strata_context_synchronize(self._ptr or _closed(self)))

    def graph_begin(self):
        _check(_lib.strata_graph_begin(self._ptr or _closed(self)))

    def graph_end(self) -> Graph:
        out = ffi.new("strata_graph **")
        _check(_lib.strata_graph_end(self._ptr or _closed(self), out))
        return Graph(self, out[0])

    def __repr__(self):
        return f"Context({self.device!r}{', closed' if self._ptr is None else ''})"


class Buffer(_Owned):
    """Device memory of a fixed size; offsets and sizes in bytes."""

    _destroy = "strata_buffer_destroy"

    __slots__ = ("_ptr", "ctx", "size", "__weakref__")

    def __init__(self, ctx: Context, n_bytes: int):
        self._ptr = None
        out = ffi.new("strata_buffer **")
        _check(_lib.strata_buffer_create(ctx._ptr or _closed(ctx), n_bytes, out))
        self._ptr = out[0]
        self.ctx = ctx
        self.size = int(n_bytes)

    @classmethod
    def from_array(cls, ctx: Context, array) -> Buffer:
        """A new buffer holding a copy of `array` (any dtype, made C-contiguous)."""
        array = np.ascontiguousarray(array)
        buf = cls(ctx, max(array.nbytes, 1))
        buf.upload(array)
        return buf

    def upload(self, data, offset: int = 0):
        """Copies a numpy array or bytes-like object into the buffer at `offset`."""
        if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        src = ffi.from_buffer(data)
        _check(_lib.strata_buffer_upload(self._ptr or _closed(self), offset, src, len(src)))

    def download(self, out: np.ndarray, offset: int = 0) -> np.ndarray:
        """Fills the C-contiguous array `out` from the buffer at `offset` and returns it."""
        dst = ffi.from_buffer(out, require_writable=True)
        _check(_lib.strata_buffer_download(self._ptr or _closed(self), offset, dst, len(dst)))
        return out

    def to_numpy(self, dtype, shape, offset: int = 0) -> np.ndarray:
        """A new array of `dtype` and `shape` read from `offset`."""
        return self.download(np.empty(shape, dtype=dtype), offset)

    def fill(self, value: int = 0, offset: int = 0, n_bytes: int | None = None):
        n = self.size - offset if n_bytes is None else n_bytes
        _check(_lib.strata_buffer_fill(self._ptr or _closed(self), offset, n, value))

    def copy_from(self, src: Buffer, dst_offset: int = 0, src_offset: int = 0, n_bytes: int | None = None):
        n = src.size - src_offset if n_bytes is None else n_bytes
        _check(_lib.strata_buffer_copy(self._ptr or _closed(self), dst_offset, src._ptr or _closed(src),
                                       src_offset, n))

    def __repr__(self):
        return f"Buffer({self.size} bytes{', closed' if self._ptr is None else ''})"


PAGE_CELLS = 64  # STRATA_PAGE_CELLS: cells per KV page (checked against the library in Slots)


KV_DTYPES = {"f16": 0, "int8": 1}   # strata.h enum strata_kv_dtype


class Slots(_Owned):
    """A slot set: per-slot page table into a shared KV page pool, position table, rope delta and length.

    n_pages=None gives every slot its own pages, mapped once (the fixed regions of ABI 2); an int
    creates a pool of that many pages with every page-table entry unmapped (map_pages before use).
    kv_dtype "f16" or "int8" (a paged pool only; per-row scales, strata.h STRATA_KV_INT8)."""

    _destroy = "strata_slots_destroy"

    __slots__ = ("_ptr", "ctx", "n_slots", "n_layers", "n_ctx", "n_kv_heads", "head_dim", "n_pages",
                 "slot_pages", "kv_dtype", "__weakref__")

    def __init__(self, ctx: Context, n_slots: int, n_layers: int, n_ctx: int, n_kv_heads: int, head_dim: int,
                 n_pages: int | None = None, kv_dtype: str = "f16"):
        self._ptr = None
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
        if n_pages is None and kv_dtype != "f16":
            raise ValueError("an int8 KV pool must be paged: pass n_pages")
        params = ffi.new("strata_slots_params *", {
            "n_slots": n_slots, "n_layers": n_layers, "n_ctx": n_ctx, "n_kv_heads": n_kv_heads,
            "head_dim": head_dim})
        out = ffi.new("strata_slots **")
        if n_pages is None:
            _check(_lib.strata_slots_create(ctx._ptr or _closed(ctx), params, out))
        else:
            _check(_lib.strata_slots_create_paged(ctx._ptr or _closed(ctx), params, n_pages, KV_DTYPES[kv_dtype],
                                                  out))
        self._ptr = out[0]
        self.ctx = ctx
        self.n_slots, self.n_layers, self.n_ctx = n_slots, n_layers, n_ctx
        self.n_kv_heads, self.head_dim, self.kv_dtype = n_kv_heads, head_dim, kv_dtype
        self.slot_pages = -(-n_ctx // PAGE_CELLS)
        self.n_pages = self.pages()[0]

    def pages(self) -> tuple[int, int]:
        """(pages in the pool, pages no page-table entry maps)."""
        n, free = ffi.new("int32_t *"), ffi.new("int32_t *")
        _check(_lib.strata_slots_pages(self._ptr or _closed(self), n, free))
        return n[0], free[0]

    def map_pages(self, slot: int, first: int, pages):
        """Entries first.. of the slot's page table := pages (pool page ids, -1 unmaps)."""
        pages = np.ascontiguousarray(pages, dtype=np.int32).reshape(-1)  # [n]
        ptr = ffi.cast("const int32_t *", ffi.from_buffer(pages)) if len(pages) else ffi.NULL
        _check(_lib.strata_slots_map_pages(self._ptr or _closed(self), slot, first, len(pages), ptr))

    def unmap_pages(self, slot: int, first: int, n: int):
        _check(_lib.strata_slots_unmap_pages(self._ptr or _closed(self), slot, first, n))

    def read_pages(self, slot: int, first: int = 0, n: int | None = None) -> np.ndarray:
        n = self.slot_pages - first if n is None else n
        out = np.empty(n, dtype=np.int32)  # [n]
        ptr = ffi.cast("int32_t *", ffi.from_buffer(out, require_writable=True)) if n else ffi.NULL
        _check(_lib.strata_slots_read_pages(self._ptr or _closed(self), slot, first, n, ptr))
        return out

    def copy_page(self, dst: int, src: int):
        _check(_lib.strata_slots_copy_page(self._ptr or _closed(self), dst, src))

    def page_bytes(self) -> int:
        out = ffi.new("uint64_t *")
        _check(_lib.strata_slots_page_bytes(self._ptr or _closed(self), out))
        return out[0]

    def read_page(self, page: int, out=None) -> bytes | None:
        """Every layer's K and V of a pool page (F16 bits, [layer][K|V][kv_head][cell][head_dim]); into
        `out` (a writable buffer of page_bytes, e.g. a HostBuffer's array) when given, returning None."""
        into = out
        if into is None:
            into = bytearray(self.page_bytes())
        dst = ffi.from_buffer(into, require_writable=True)
        _check(_lib.strata_slots_read_page(self._ptr or _closed(self), page, dst, len(dst)))
        return bytes(into) if out is None else None

    def write_page(self, page: int, data: bytes):
        src = ffi.from_buffer(data)
        _check(_lib.strata_slots_write_page(self._ptr or _closed(self), page, src, len(data)))

    def reset(self, slot: int):
        _check(_lib.strata_slots_reset(self._ptr or _closed(self), slot))

    def truncate(self, slot: int, n_tokens: int):
        _check(_lib.strata_slots_truncate(self._ptr or _closed(self), slot, n_tokens))

    def length(self, slot: int) -> int:
        out = ffi.new("int32_t *")
        _check(_lib.strata_slots_length(self._ptr or _closed(self), slot, out))
        return out[0]

    def write_positions(self, slot: int, first_row: int, positions):
        """positions: int32 [n_rows, 4] (T, H, W, E; plain RoPE reads column 0)."""
        positions = np.ascontiguousarray(positions, dtype=np.int32).reshape(-1, 4)
        ptr = ffi.cast("const int32_t *", ffi.from_buffer(positions))
        _check(_lib.strata_slots_write_positions(self._ptr or _closed(self), slot, first_row, len(positions), ptr))

    def read_positions(self, slot: int, first_row: int, n_rows: int) -> np.ndarray:
        out = np.empty((n_rows, 4), dtype=np.int32)  # [n_rows, 4]
        ptr = ffi.cast("int32_t *", ffi.from_buffer(out, require_writable=True))
        _check(_lib.strata_slots_read_positions(self._ptr or _closed(self), slot, first_row, n_rows, ptr))
        return out

    def set_delta(self, slot: int, delta: int):
        _check(_lib.strata_slots_set_delta(self._ptr or _closed(self), slot, delta))

    def debug_share_table(self, slot: int, target: int):
        """Negative-control switch for tests only: `slot` uses `target`'s position table."""
        _check(_lib.strata_slots_debug_share_table(self._ptr or _closed(self), slot, target))


class HostBuffer(_Owned):
    """Host memory the device copies into asynchronously (page-locked on CUDA); `array` views it."""

    _destroy = "strata_host_buffer_destroy"

    __slots__ = ("_ptr", "ctx", "size", "array", "__weakref__")

    def __init__(self, ctx: Context, n_bytes: int):
        self._ptr = None
        out, data = ffi.new("strata_host_buffer **"), ffi.new("void **")
        _check(_lib.strata_host_buffer_create(ctx._ptr or _closed(ctx), n_bytes, out, data))
        self._ptr = out[0]
        self.ctx = ctx
        self.size = int(n_bytes)
        self.array = np.frombuffer(ffi.buffer(data[0], n_bytes), dtype=np.uint8)   # [n_bytes] view

    def copy_from(self, src: Buffer, dst_offset: int, src_offset: int, n_bytes: int):
        """Enqueues a device-to-host copy; read `array` after waiting for a later marker."""
        _check(_lib.strata_buffer_copy_to_host(self._ptr or _closed(self), dst_offset, src._ptr or _closed(src),
                                               src_offset, n_bytes))

    def close(self):
        self.array = None
        super().close()


def marker(ctx: Context) -> int:
    """Enqueues a marker; wait(ctx, marker) returns once the work enqueued before it is done."""
    out = ffi.new("uint64_t *")
    _check(_lib.strata_context_marker(ctx._ptr or _closed(ctx), out))
    return out[0]


def wait(ctx: Context, marker_id: int):
    _check(_lib.strata_context_wait(ctx._ptr or _closed(ctx), marker_id))


class Graph(_Owned):
    """A recorded sequence of kernel launches (Context.graph_begin / graph_end).

    The library refuses to free buffers and slot sets a live graph uses, so keep
    their Python objects alive as long as the graph: one collected earlier
    cannot be freed by its finalizer and stays allocated."""

    _destroy = "strata_graph_destroy"

    __slots__ = ("_ptr", "ctx", "__weakref__")

    def __init__(self, ctx: Context, ptr):
        self._ptr = ptr
        self.ctx = ctx

    def launch(self):
        _check(_lib.strata_graph_launch(self._ptr or _closed(self)))

    def kernel_count(self) -> int:
        """Kernels one launch runs (CUDA kernel nodes; CPU recorded calls)."""
        out = ffi.new("int64_t *")
        _check(_lib.strata_graph_kernel_count(self._ptr or _closed(self), out))
        return int(out[0])


# ---------------------------------------------------------------- kernels

def rope_params(mode: int, n_heads: int, head_dim: int, rot_dim: int | None = None, theta_base: float = 10000.0,
                freq_scale: float = 1.0, sections=(0, 0, 0, 0)):
    """A strata_rope_params cdata; build it once and reuse it across calls."""
    load()
    return ffi.new("strata_rope_params *", {
        "mode": int(mode), "n_heads": n_heads, "head_dim": head_dim,
        "rot_dim": head_dim if rot_dim is None else rot_dim, "theta_base": theta_base, "freq_scale": freq_scale,
        "sections": list(sections) + [0] * (4 - len(sections))})


def embed(ctx, table, table_offset, dtype, n_vocab, dim, ids, ids_offset, n_rows, out, out_offset):
    st = _lib.strata_embed(ctx._ptr or _closed(ctx), table._ptr or _closed(table), table_offset, dtype, n_vocab,
                           dim, ids._ptr or _closed(ids), ids_offset, n_rows, out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def rmsnorm(ctx, x, x_offset, weight, weight_offset, out, out_offset, n_rows, dim, eps):
    st = _lib.strata_rmsnorm(ctx._ptr or _closed(ctx), x._ptr or _closed(x), x_offset,
                             weight._ptr or _closed(weight), weight_offset, out._ptr or _closed(out), out_offset,
                             n_rows, dim, eps)
    if st:
        _raise(st)


def matmul(ctx, x, x_offset, n_rows, k, w, w_offset, w_dtype, n_out, bias, bias_offset, y, y_offset,
           accumulate=False):
    st = _lib.strata_matmul(ctx._ptr or _closed(ctx), x._ptr or _closed(x), x_offset, n_rows, k,
                            w._ptr or _closed(w), w_offset, w_dtype, n_out,
                            ffi.NULL if bias is None else (bias._ptr or _closed(bias)), bias_offset,
                            y._ptr or _closed(y), y_offset, 1 if accumulate else 0)
    if st:
        _raise(st)


def matmul_params(prologue=MatmulPrologue.NONE, accumulate=False, eps=0.0, norm_weight=None, norm_weight_offset=0,
                  bias=None, bias_offset=0, x_row_stride=0, y_row_stride=0, handoff_emit=False, handoff_use=False,
                  handoff_prologue=MatmulPrologue.NONE, handoff_dtype=0, handoff_norm_weight=None,
                  handoff_norm_weight_offset=0):
    """A strata_matmul_params cdata for matmul_ex; build it once per call site and reuse it. It holds the
    buffers' handles, not the Buffer objects: keep them open while it is used. y_row_stride > n_out writes
    each row's n_out values into columns of a wider row (elements between y rows; 0: dense).

    The activation hand-off (strata.h): handoff_emit also prepares y as the x of the next call that sets
    handoff_use (its prologue, weight dtype and norm weight given here); handoff_use reads x as prepared
    by the latest emitting call on the context (checked). No result depends on either."""
    load()
    out = ffi.new("strata_matmul_params *", {
        "prologue": int(prologue), "accumulate": 1 if accumulate else 0, "eps": eps, "y_row_stride": y_row_stride,
        "norm_weight": ffi.NULL if norm_weight is None else (norm_weight._ptr or _closed(norm_weight)),
        "norm_weight_offset": norm_weight_offset,
        "bias": ffi.NULL if bias is None else (bias._ptr or _closed(bias)), "bias_offset": bias_offset,
        "x_row_stride": x_row_stride})
    _set_handoff(out, handoff_emit, handoff_use, handoff_prologue, handoff_dtype, handoff_norm_weight,
                 handoff_norm_weight_offset)
    return out


def matmul_params_handoff(params, handoff_emit=False, handoff_use=False, handoff_prologue=MatmulPrologue.NONE,
                          handoff_dtype=0, handoff_norm_weight=None, handoff_norm_weight_offset=0):
    """A copy of the matmul_params cdata `params` (same prologue, norm, bias, strides) with these handoff_*
    options instead (matmul_params says what they mean)."""
    out = ffi.new("strata_matmul_params *")
    out[0] = params[0]
    _set_handoff(out, handoff_emit, handoff_use, handoff_prologue, handoff_dtype, handoff_norm_weight,
                 handoff_norm_weight_offset)
    return out


def _set_handoff(out, emit, use, prologue, dtype, norm_weight, norm_weight_offset):
    """The handoff_* fields of a strata_matmul_params cdata (matmul_params says what they mean)."""
    out.handoff_emit = 1 if emit else 0
    out.handoff_use = 1 if use else 0
    out.handoff_prologue = int(prologue)
    out.handoff_dtype = int(dtype)
    out.handoff_norm_weight = ffi.NULL if norm_weight is None else (norm_weight._ptr or _closed(norm_weight))
    out.handoff_norm_weight_offset = norm_weight_offset


def matmul_ex(ctx, params, x, x_offset, n_rows, k, w, w_offset, w_dtype, n_out, y, y_offset):
    """y = prologue(x)·Wᵀ (+ bias) (+ y) with the options of a matmul_params() cdata."""
    st = _lib.strata_matmul_ex(ctx._ptr or _closed(ctx), params, x._ptr or _closed(x), x_offset, n_rows, k,
                               w._ptr or _closed(w), w_offset, w_dtype, n_out, y._ptr or _closed(y), y_offset)
    if st:
        _raise(st)


def matmul_rope_kv_store(ctx, params, x, x_offset, n_rows, k, w, w_offset, w_dtype, n_out, y, y_offset, q_params,
                         k_params, slots, layer, rows, rows_offset, freq_factors=None, freq_factors_offset=0):
    """matmul_ex into whole [q | k | v] rows, then rope_kv_store on them, in one call: the same bits as the
    two calls (on CUDA one kernel at one row; strata.h)."""
    st = _lib.strata_matmul_rope_kv_store(
        ctx._ptr or _closed(ctx), params, x._ptr or _closed(x), x_offset, n_rows, k, w._ptr or _closed(w), w_offset,
        w_dtype, n_out, y._ptr or _closed(y), y_offset, q_params, k_params, slots._ptr or _closed(slots), layer,
        rows._ptr or _closed(rows), rows_offset,
        ffi.NULL if freq_factors is None else (freq_factors._ptr or _closed(freq_factors)), freq_factors_offset)
    if st:
        _raise(st)


def matmul_chain_begin(ctx):
    """Opens a matmul chain on ctx: until matmul_chain_end only matmul_ex may be called on it, and the backend
    may hold those calls and run them at the end, with the same bits (on CUDA: a decoder layer's one-row o,
    gate_up and down as one kernel; strata.h)."""
    st = _lib.strata_matmul_chain_begin(ctx._ptr or _closed(ctx))
    if st:
        _raise(st)


def matmul_chain_end(ctx):
    """Closes the chain matmul_chain_begin opened and runs what it holds."""
    st = _lib.strata_matmul_chain_end(ctx._ptr or _closed(ctx))
    if st:
        _raise(st)


def matmul_prefetch(ctx, w, offset, n_bytes):
    """A hint for the next matmul / matmul_ex call on ctx: it also brings bytes [offset, offset + n_bytes)
    of w into the GPU's L2 while it runs (the CPU ignores it; no result depends on it). n_bytes 0 drops
    a pending hint."""
    st = _lib.strata_matmul_prefetch(ctx._ptr or _closed(ctx), ffi.NULL if w is None else (w._ptr or _closed(w)),
                                     offset, n_bytes)
    if st:
        _raise(st)


def rope(ctx, params, x, x_offset, x_row_stride, n_rows, slots, rows, rows_offset, freq_factors=None,
         freq_factors_offset=0):
    st = _lib.strata_rope(ctx._ptr or _closed(ctx), params, x._ptr or _closed(x), x_offset, x_row_stride, n_rows,
                          slots._ptr or _closed(slots), rows._ptr or _closed(rows), rows_offset,
                          ffi.NULL if freq_factors is None else (freq_factors._ptr or _closed(freq_factors)),
                          freq_factors_offset)
    if st:
        _raise(st)


def kv_store(ctx, slots, layer, k, k_offset, k_row_stride, v, v_offset, v_row_stride, rows, rows_offset, n_rows):
    st = _lib.strata_kv_store(ctx._ptr or _closed(ctx), slots._ptr or _closed(slots), layer, k._ptr or _closed(k),
                              k_offset, k_row_stride, v._ptr or _closed(v), v_offset, v_row_stride,
                              rows._ptr or _closed(rows), rows_offset, n_rows)
    if st:
        _raise(st)


def rope_kv_store(ctx, q_params, k_params, slots, layer, qkv, qkv_offset, row_stride, n_rows, rows, rows_offset,
                  freq_factors=None, freq_factors_offset=0):
    """rope(q), rope(k) in place and kv_store(k, v) for rows [q | k | v] of one buffer, in one call."""
    st = _lib.strata_rope_kv_store(ctx._ptr or _closed(ctx), q_params, k_params, slots._ptr or _closed(slots), layer,
                                   qkv._ptr or _closed(qkv), qkv_offset, row_stride, n_rows,
                                   rows._ptr or _closed(rows), rows_offset,
                                   ffi.NULL if freq_factors is None else (freq_factors._ptr or _closed(freq_factors)),
                                   freq_factors_offset)
    if st:
        _raise(st)


def rope_kv_store_attention(ctx, q_params, k_params, slots, layer, qkv, qkv_offset, row_stride, n_rows, rows,
                            rows_offset, freq_factors, freq_factors_offset, scale, window, out, out_offset):
    """rope_kv_store then attention_window on the same rows in one call: the same bits, provided no row
    reads a cell another row of the call writes (decode rows of distinct slots; strata.h)."""
    st = _lib.strata_rope_kv_store_attention(
        ctx._ptr or _closed(ctx), q_params, k_params, slots._ptr or _closed(slots), layer, qkv._ptr or _closed(qkv),
        qkv_offset, row_stride, n_rows, rows._ptr or _closed(rows), rows_offset,
        ffi.NULL if freq_factors is None else (freq_factors._ptr or _closed(freq_factors)), freq_factors_offset,
        scale, window, out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def attention(ctx, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows, rows_offset, scale, out,
              out_offset):
    st = _lib.strata_attention(ctx._ptr or _closed(ctx), slots._ptr or _closed(slots), layer,
                               q._ptr or _closed(q), q_offset, q_row_stride, n_rows, n_heads,
                               rows._ptr or _closed(rows), rows_offset, scale, out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def attention_handoff(ctx, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows, rows_offset, scale, window,
                      handoff_dtype, out, out_offset):
    """attention_window whose out rows are also prepared as the x of the next matmul_ex that sets
    handoff_use with no prologue and weights of handoff_dtype (the o projection; strata.h). Same bits."""
    st = _lib.strata_attention_handoff(ctx._ptr or _closed(ctx), slots._ptr or _closed(slots), layer,
                                       q._ptr or _closed(q), q_offset, q_row_stride, n_rows, n_heads,
                                       rows._ptr or _closed(rows), rows_offset, scale, window, int(handoff_dtype),
                                       out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def attention_dense(ctx, q, q_offset, k, k_offset, v, v_offset, row_stride, n_tokens, n_heads, head_dim, segments,
                    segments_offset, n_segments, scale, out, out_offset):
    st = _lib.strata_attention_dense(ctx._ptr or _closed(ctx), q._ptr or _closed(q), q_offset, k._ptr or _closed(k),
                                     k_offset, v._ptr or _closed(v), v_offset, row_stride, n_tokens, n_heads,
                                     head_dim, segments._ptr or _closed(segments), segments_offset, n_segments,
                                     scale, out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def attention_window(ctx, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows, rows_offset, scale,
                     window, out, out_offset):
    """attention over each row's last `window` cells (0: all of them, as attention)."""
    st = _lib.strata_attention_window(ctx._ptr or _closed(ctx), slots._ptr or _closed(slots), layer,
                                      q._ptr or _closed(q), q_offset, q_row_stride, n_rows, n_heads,
                                      rows._ptr or _closed(rows), rows_offset, scale, window,
                                      out._ptr or _closed(out), out_offset)
    if st:
        _raise(st)


def gelu_tanh_mul(ctx, gate, gate_offset, gate_row_stride, up, up_offset, up_row_stride, out, out_offset, n_rows,
                  n_cols):
    st = _lib.strata_gelu_tanh_mul(ctx._ptr or _closed(ctx), gate._ptr or _closed(gate), gate_offset,
                                   gate_row_stride, up._ptr or _closed(up), up_offset, up_row_stride,
                                   out._ptr or _closed(out), out_offset, n_rows, n_cols)
    if st:
        _raise(st)


def scale(ctx, x, x_offset, out, out_offset, n, factor):
    st = _lib.strata_scale(ctx._ptr or _closed(ctx), x._ptr or _closed(x), x_offset, out._ptr or _closed(out),
                           out_offset, n, factor)
    if st:
        _raise(st)


def silu_mul(ctx, gate, gate_offset, gate_row_stride, up, up_offset, up_row_stride, out, out_offset, n_rows, n_cols):
    st = _lib.strata_silu_mul(ctx._ptr or _closed(ctx), gate._ptr or _closed(gate), gate_offset, gate_row_stride,
                              up._ptr or _closed(up), up_offset, up_row_stride, out._ptr or _closed(out), out_offset,
                              n_rows, n_cols)
    if st:
        _raise(st)


def gelu(ctx, x, x_offset, out, out_offset, n):
    st = _lib.strata_gelu(ctx._ptr or _closed(ctx), x._ptr or _closed(x), x_offset, out._ptr or _closed(out),
                          out_offset, n)
    if st:
        _raise(st)


def add(ctx, a, a_offset, b, b_offset, out, out_offset, n):
    st = _lib.strata_add(ctx._ptr or _closed(ctx), a._ptr or _closed(a), a_offset, b._ptr or _closed(b), b_offset,
                         out._ptr or _closed(out), out_offset, n)
    if st:
        _raise(st)


def gather_rows(ctx, src, src_offset, n_src_rows, row_bytes, idx, idx_offset, n_rows, dst, dst_offset):
    st = _lib.strata_gather_rows(ctx._ptr or _closed(ctx), src._ptr or _closed(src), src_offset, n_src_rows,
                                 row_bytes, idx._ptr or _closed(idx), idx_offset, n_rows, dst._ptr or _closed(dst),
                                 dst_offset)
    if st:
        _raise(st)


def positions_decode(ctx, slots, rows, rows_offset, n_rows):
    st = _lib.strata_positions_decode(ctx._ptr or _closed(ctx), slots._ptr or _closed(slots),
                                      rows._ptr or _closed(rows), rows_offset, n_rows)
    if st:
        _raise(st)


def argmax(ctx, logits, logits_offset, n_rows, n_vocab, out_ids, out_offset):
    st = _lib.strata_argmax(ctx._ptr or _closed(ctx), logits._ptr or _closed(logits), logits_offset, n_rows, n_vocab,
                            out_ids._ptr or _closed(out_ids), out_offset)
    if st:
        _raise(st)


def sample(ctx, logits, logits_offset, n_rows, n_vocab, params, params_offset, out_ids, out_offset):
    st = _lib.strata_sample(ctx._ptr or _closed(ctx), logits._ptr or _closed(logits), logits_offset, n_rows, n_vocab,
                            params._ptr or _closed(params), params_offset, out_ids._ptr or _closed(out_ids),
                            out_offset)
    if st:
        _raise(st)


def logits_adjust(ctx, logits, logits_offset, n_rows, n_vocab, row_slots, row_slots_offset, table, table_offset,
                  n_slots):
    st = _lib.strata_logits_adjust(ctx._ptr or _closed(ctx), logits._ptr or _closed(logits), logits_offset, n_rows,
                                   n_vocab, row_slots._ptr or _closed(row_slots), row_slots_offset,
                                   table._ptr or _closed(table), table_offset, n_slots)
    if st:
        _raise(st)


def step_advance(ctx, io, ids_offset, rows_offset, params_offset, out_ids_offset, n_rows):
    st = _lib.strata_step_advance(ctx._ptr or _closed(ctx), io._ptr or _closed(io), ids_offset, rows_offset,
                                  params_offset, out_ids_offset, n_rows)
    if st:
        _raise(st)
