"""bench/gpu_sample_alone.cu still builds against today's sampler source.

The stand-alone sampler benchmark (docs/gpu.md) includes cuda_sample_cluster.cu itself, so a change to the
sampler's internals (its launch function, the SAMPLE_PHASE hook) could break it unseen until a device call,
where a failed build costs device time. nvcc compiles it here, with and without the phase timeline; no GPU is
needed to compile.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("phases", [False, True], ids=["timing", "phases"])
def test_the_standalone_sampler_bench_compiles(tmp_path, phases):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    cmd = [nvcc, "-O1", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90",
           f"-I{ROOT / 'libstrata' / 'src' / 'cuda'}", f"-I{ROOT / 'libstrata' / 'include'}",
           f"-I{ROOT / 'libstrata' / 'src'}", str(ROOT / "bench" / "gpu_sample_alone.cu"),
           "-o", str(tmp_path / "sample_alone")]
    if phases:
        cmd.insert(1, "-DSAMPLE_PHASES")
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert (tmp_path / "sample_alone").stat().st_size > 0
