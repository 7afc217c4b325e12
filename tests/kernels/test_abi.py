"""The C ABI itself: the cdef region of strata.h parses, every declared function
exists in the library (and nothing else named strata_* is exported), enums and
struct layouts agree with the Python side, and library-wide calls behave."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cffi
import numpy as np
import pytest

from strata import _ffi as S

HEADER = Path(__file__).resolve().parents[2] / "libstrata" / "include" / "strata.h"


def declared_functions():
    return sorted(set(re.findall(r"\b(strata_\w+)\s*\(", S.header_cdef(HEADER.read_text()))))


def test_cdef_region_parses_alone():
    ffi = cffi.FFI()
    ffi.cdef(S.header_cdef(HEADER.read_text()))
    assert ffi.sizeof("strata_device_info") >= 128
    assert len(declared_functions()) >= 40


def test_every_declared_function_exists():
    lib = S.load()
    missing = [name for name in declared_functions() if not hasattr(lib, name)]
    assert not missing, f"declared in strata.h but not in the library: {missing}"


def test_only_strata_symbols_exported():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not available")
    out = subprocess.run([nm, "-D", "--defined-only", str(S.library_path())], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] == ["T"]}
    assert exported == set(declared_functions())


def test_abi_version_and_names():
    assert S.abi_version() == int(re.search(r"STRATA_ABI_VERSION = (\d+)", HEADER.read_text()).group(1))
    for status, name in S.STATUS_NAMES.items():
        assert S.status_name(status) == name
    assert S.status_name(99) == "unknown"
    info = S.build_info()
    assert "x86-64-v3" in info and "cuda" in info


def test_enums_and_layouts_match_header():
    lib = S.load()
    for dtype in S.DType:
        assert getattr(lib, f"STRATA_{dtype.name}") == dtype.value
    for mode, name in [(S.RopeMode.ADJACENT, "ADJACENT"), (S.RopeMode.HALF, "HALF"), (S.RopeMode.MROPE, "MROPE"),
                       (S.RopeMode.VISION, "VISION")]:
        assert getattr(lib, f"STRATA_ROPE_{name}") == mode
    assert S.ffi.sizeof("strata_sampling_params") == S.SAMPLING_PARAMS_DTYPE.itemsize == 32
    for field in S.SAMPLING_PARAMS_DTYPE.names:
        assert S.ffi.offsetof("strata_sampling_params", field) == S.SAMPLING_PARAMS_DTYPE.fields[field][1]


def test_dtype_block():
    expect = {S.DType.F32: (1, 4), S.DType.F16: (1, 2), S.DType.BF16: (1, 2), S.DType.I32: (1, 4),
              S.DType.Q8_0: (32, 34), S.DType.Q4_0: (32, 18), S.DType.Q4_1: (32, 20), S.DType.Q4_K: (256, 144),
              S.DType.Q6_K: (256, 210)}
    for dtype, pair in expect.items():
        assert S.dtype_block(dtype) == pair
    with pytest.raises(S.StrataError) as e:
        S.dtype_block(9)
    assert e.value.status == S.Status.ERR_INVALID_ARGUMENT and "dtype 9" in e.value.message


def test_cpu_context_info():
    with S.Context("cpu", 3) as ctx:
        info = ctx.info()
        assert info.backend == S.Backend.CPU and info.num_threads == 3 and info.total_bytes >= info.free_bytes > 0
        assert info.name
    with S.Context("cpu") as ctx:
        assert ctx.info().num_threads == len(os.sched_getaffinity(0))


def test_missing_library_says_make_lib(tmp_path):
    code = "from strata import _ffi as S\ntry:\n    S.load()\nexcept S.StrataError as e:\n    print(e)\n"
    env = dict(os.environ, STRATA_LIB=str(tmp_path / "nope.so"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout
    assert "make lib" in out


def test_cuda_without_device():
    if S.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(S.StrataError) as e:
        S.Context("cuda:0")
    assert e.value.status == S.load().STRATA_ERR_UNSUPPORTED
    assert "CUDA" in e.value.message or "cuda" in e.value.message


def test_sampling_params_dtype_roundtrip():
    p = np.zeros(2, S.SAMPLING_PARAMS_DTYPE)
    p[1] = (0.5, 0.9, 0.1, 40, 2 ** 63 + 5, -7)
    raw = S.ffi.from_buffer("strata_sampling_params[]", p)
    assert raw[1].top_k == 40 and raw[1].seed == 2 ** 63 + 5 and raw[1].position == -7
    assert abs(raw[1].min_p - 0.1) < 1e-7
