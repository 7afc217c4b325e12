"""The other CUDA kernel families on the host emulator, in CI (the integer dot kernel: test_emulator_int.py).

libstrata/cuda_emu compiles the real kernel sources as host C++ (one OS thread per CUDA thread; cp.async,
mma.sync, ldmatrix and cluster barriers modelled in cuda_emu/), so a change to a kernel that the CPU-only
CI machine cannot run is still checked, bit for bit, against each test's reference of the canonical
arithmetic and against the other kernels of its family (docs/cuda_backend.md, "Verification without a
GPU"). Each binary's short mode, a few minutes in all on two cores:
- test_int_tiles smoke: the many-row integer tile kernel (prompts, 64+ rows) against the reference and the
  int8 mma / dp4a kernels, Q4_0 / Q8_0 / Q4_1 / Q4_K / Q6_K;
- test_int_rows smoke: the few-row integer kernel (2-32 rows);
- test_int_gemv smoke: the gemv integer kernel (1-8 rows);
- test_mma quick: the f16 tensor-core matmul (decode and wide tiles) against its reference, with the
  negative controls that a permuted order or a too-early cp.async wait are caught;
- test_sample --quick: the seeded sampler (cluster and single-CTA routes) draw for draw against the
  reference of the header's semantics, its barrier-form and invariance negative controls.
The GPU runs the same kernels through the gpu-marked tests of tests/kernels/.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "libstrata" / "cuda_emu"

CASES = {  # binary: (its short mode's arguments, the summary line its passing run ends with)
    "test_int_tiles": (["smoke"], r"^test_int_tiles: \d+ checks, 0 failures$"),
    "test_int_rows": (["smoke"], r"^test_int_rows: \d+ checks, 0 failures$"),
    "test_int_gemv": (["smoke"], r"^test_int_gemv: \d+ checks, 0 failures$"),
    "test_mma": (["quick"], r"^mma matmul: \d+ problems x 5 kernel configurations, 0 failures$"),
    "test_sample": (["--quick"], r"^top-k rows .*; top-p rows "),
}


@pytest.fixture(scope="module")
def emu_src(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the host emulator")
    src = tmp_path_factory.mktemp("emu") / "src"
    subprocess.run([sys.executable, str(EMU / "mk.py"), str(ROOT / "libstrata" / "src" / "cuda"), str(src)],
                   check=True, capture_output=True, text=True)
    return src


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_family_on_the_emulator(emu_src, name, tmp_path):
    args, summary = CASES[name]
    exe = tmp_path / name
    flags = ["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", f"-I{EMU}", f"-I{emu_src}",
             f"-I{ROOT / 'libstrata' / 'include'}", f"-I{ROOT / 'libstrata' / 'src'}"]
    build = subprocess.run(["g++", *flags, str(EMU / f"{name}.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert re.search(summary, run.stdout, re.M), out[-4000:]
