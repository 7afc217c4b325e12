"""The integer matmul kernels (cuda_int_matmul.cu) on the host emulator, in CI.

libstrata/cuda_emu compiles the CUDA kernels as host C++ (one OS thread per CUDA thread), so they run
here without a GPU, checked bit for bit against test_int.cpp's reference of the canonical arithmetic:
- `test_int smoke`: a few configurations of every kernel (the one-row dot kernel, its 8-row tiles,
  the int8 mma kernel, the fused kernel), every type, partial slices and several staged parts,
  odd weight-row alignment, bias and accumulate; then the hand-off cases below, fewer of them;
- `test_int handoff`: the one-row dot kernel that rounds the next matmul's int8 blocks in its
  epilogue (emit_tile): its blocks against the pre-pass kernel on the finished y, bit for bit, for
  every integer type, the three prologues, tiles that straddle chunks and SILU_MUL's two halves, and
  every arrival counter back at 0; its negative control (a counter left at 1) must be caught.
The same kernels run on the H200 through tests/kernels/test_matmul*.py.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "libstrata" / "cuda_emu"


@pytest.fixture(scope="module")
def test_int(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the host emulator")
    tmp = tmp_path_factory.mktemp("emu")
    src = tmp / "src"
    subprocess.run([sys.executable, str(EMU / "mk.py"), str(ROOT / "libstrata" / "src" / "cuda"), str(src)],
                   check=True, capture_output=True, text=True)
    exe = tmp / "test_int"
    flags = ["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", f"-I{EMU}", f"-I{src}",
             f"-I{ROOT / 'libstrata' / 'include'}", f"-I{ROOT / 'libstrata' / 'src'}"]
    build = subprocess.run(["g++", *flags, str(EMU / "test_int.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    return exe


@pytest.mark.parametrize("mode", ["smoke", "handoff"])
def test_integer_kernels_on_the_emulator(test_int, mode):
    run = subprocess.run([str(test_int), mode], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert re.search(rf"^test_int {mode}: \d+ checks, 0 failures$", run.stdout, re.M), run.stdout[-4000:]
    assert "FAIL" not in run.stdout
