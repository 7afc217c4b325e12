"""bench/gpu_boundary_alone.cu builds, and refuses bad arguments before it touches a GPU.

The boundary micro-benchmark (docs/gpu.md) is compiled on the GPU machine inside a device call, where a failed
build costs device time; nvcc compiles it here (no GPU is needed to compile) and the binary's argument check,
which runs before any CUDA call, is exercised.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_boundary_bench_compiles_and_checks_its_arguments(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    exe = tmp_path / "boundary"
    run = subprocess.run([nvcc, "-O1", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90",
                          str(ROOT / "bench" / "gpu_boundary_alone.cu"), "-o", str(exe)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    bad = subprocess.run([str(exe), "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "usage:" in bad.stderr
