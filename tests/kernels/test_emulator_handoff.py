"""The activation hand-off's emission (cuda_int_matmul.cu, emit_tile) on the host emulator, in CI.

libstrata/cuda_emu compiles the CUDA kernels as host C++ (one OS thread per CUDA thread), so the
one-row dot kernel that rounds the next matmul's int8 blocks in its epilogue runs here without a GPU:
`test_int handoff` checks its blocks against the pre-pass kernel on the finished y, bit for bit, for
every integer type, the three prologues, tiles that straddle chunks and SILU_MUL's two halves, and
that every arrival counter is back at 0; its negative control (a counter left at 1) must be caught.
The same cases run on the H200 through tests/kernels/test_matmul_handoff.py.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "libstrata" / "cuda_emu"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the host emulator")
def test_handoff_emission_on_the_emulator(tmp_path):
    src = tmp_path / "src"
    subprocess.run([sys.executable, str(EMU / "mk.py"), str(ROOT / "libstrata" / "src" / "cuda"), str(src)],
                   check=True, capture_output=True, text=True)
    exe = tmp_path / "test_int"
    flags = ["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", f"-I{EMU}", f"-I{src}",
             f"-I{ROOT / 'libstrata' / 'include'}", f"-I{ROOT / 'libstrata' / 'src'}"]
    build = subprocess.run(["g++", *flags, str(EMU / "test_int.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe), "handoff"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and "0 failures" in run.stdout, run.stdout[-4000:]
    assert "FAIL" not in run.stdout
