"""The CUDA kernels on the host emulator, in CI.

libstrata/cuda_emu compiles the real kernel sources as host C++ (one OS thread per CUDA thread; cp.async,
mma.sync, ldmatrix and cluster barriers modelled in cuda_emu/), so a change to a kernel that the CPU-only
CI machine cannot run is still checked, bit for bit, against each test's reference of the canonical
arithmetic and against the other kernels of its family (docs/cuda_backend.md, "Verification without a
GPU"). Each binary's short mode, about 16 minutes in all on two cores:
- test_int smoke: a few configurations of every integer dot kernel (the one-row dot kernel, its 8-row
  tiles, the int8 mma kernel, the fused kernel), every type, partial slices and several staged parts,
  odd weight-row alignment, bias and accumulate; then a few hand-off cases;
- test_int handoff: the one-row dot kernel that rounds the next matmul's int8 blocks in its epilogue
  (emit_tile): its blocks against the pre-pass kernel on the finished y, bit for bit, for every integer
  type, the three prologues, tiles that straddle chunks and SILU_MUL's two halves, and every arrival
  counter back at 0; its negative control (a counter left at 1) must be caught; the local emissions
  (CTAs of whole blocks; for SILU_MUL's input, 64-output CTAs that hold the gate and up outputs of their
  32 elements: y equal to the plain kernel's, blocks to the pre-pass's; negative control: the pre-pass
  of the swapped halves must differ);
- test_int rope: strata_matmul_rope_kv_store's one-row kernel (rope and the F16 KV store in the dot
  kernel's epilogue) against the plain kernel followed by rope_kv_store_kernel, bit for bit (the qkv row,
  every pool element): the integer types, CTA widths 2-32, partial rotation, freq_factors, a row without a
  table cell, an unmapped page, a padding row; its negative control (another cell) must change bits;
- test_int chain: the one-row chain kernel (strata_matmul_chain_begin / _end: a layer's o, gate_up and down
  in one grid with grid barriers between them, every CTA running at once) against the three one-row kernels
  run one by one: x, gate_up's y and every emitted block, bit for bit; Q4_0 / Q8_0 / Q4_1 / Q4_K, calls of
  different CTA sizes run at the largest, grids smaller than the calls' tiles, two calls, three, and four (the
  next layer's qkv reading down's emission, STRATA_MATMUL_CHAIN=2), gate_up's and down's emissions local or as
  pre-pass phases of the chain (the 8B's route); the barrier's words left ready for the next crossing;
- test_int_tiles smoke: the many-row integer tile kernel (prompts, 64+ rows) against the reference and the
  int8 mma / dp4a kernels, Q4_0 / Q8_0 / Q4_1 / Q4_K / Q6_K, the K split (two warp groups on alternate
  slices) included, with its negative control (group 1's totals added in another association must change
  bits), every run with the idle warps of a partial row tile skipping their work (STRATA_INT_TILES_SKIP_DEAD)
  and its negative control (idling warps that hold live rows must change bits); and twice more with one of the two mbarrier
  waits of its slice hand-off deleted from the source, runs that must fail (the negative controls);
- test_int_wgmma smoke: the integer matmul on the warpgroup MMA (cuda_int_wgmma.cu, its wgmma modelled by
  cuda_emu/wgmma_emu.h) through test_int_tiles' checks: Q4_0 / Q8_0 / Q4_1 / Q4_K, both D-bank configurations, the
  reference's bits and the int8 mma kernel's; and with either wgmma wait or its slice barrier deleted from the
  source, runs that must fail (the negative controls);
- test_int_rows smoke: the few-row integer kernel (2-32 rows);
- test_int_gemv smoke: the gemv integer kernel (1-8 rows);
- test_int early smoke and test_int_rows early smoke: the dot kernels (one row, 8-row tiles, the fused form, the
  hand-off emissions) and the few-row kernel with their first tile's weights requested before the wait
  (STRATA_INT_EARLY_STAGES), each with its negative control (tiles that take weights as requested early
  when they were not must change bits);
- test_mma quick: the f16 tensor-core matmul (decode and wide tiles) against its reference, with the
  negative controls that a permuted order or a too-early cp.async wait are caught;
- test_sample --quick: the seeded sampler (cluster and single-CTA routes) draw for draw against the
  reference of the header's semantics, its barrier-form and invariance negative controls;
- test_kernels decode: the decode attention kernel (cuda_attention_decode.cu) against the legacy kernel's
  bits and float64, every split (1, 2, 3, 8) in both block orders, rows of one chunk (folded in the block)
  and of several (folded by the last working block), F16 and int8 pools, windows, padding rows; and
  strata_attention_handoff's emission (the o projection's int8 blocks the kernel rounds from its own
  output) against the pre-pass's blocks of that output, with a negative control; and the L2 hints made
  before the wait (STRATA_ATTENTION_EARLY_KV): the same bits, hints made, every one inside the pool, with a
  negative control;
- test_kernels fused: strata_rope_kv_store_attention's one kernel (rope, the KV store and decode attention)
  against rope_kv_store + attention, bit for bit (out, the rotated q and k, every pool element), its 36
  plans (splits, block orders, head spreading), with a negative control (the new cell taken before rounding);
- test_attention_prompt (its default set, under a minute): warp_allreduce (cuda_common.cuh, the batched warp
  max and sum of both attention kernels' softmax) against warp_max / warp_sum one value at a time for 1-32
  values, with a control (sums in another butterfly order must differ); then the prompt kernel
  (cuda_attention_prompt.cu) against the legacy kernel's bits and float64 (chunks from cell 0 and
  mid-context, GQA 1-16, head_dim 64 / 128, F16 and int8, windows, a mixed launch), with a control (workers
  walked in another order).
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

CASES = [  # (binary, its short mode's arguments, the summary line its passing run ends with)
    ("test_int", ["smoke"], r"^test_int smoke: \d+ checks, 0 failures$"),
    ("test_int", ["handoff"], r"^test_int handoff: \d+ checks, 0 failures$"),
    ("test_int", ["rope"], r"^test_int rope: \d+ checks, 0 failures$"),
    ("test_int", ["chain"], r"^test_int chain: \d+ checks, 0 failures$"),
    ("test_int_tiles", ["smoke"], r"^test_int_tiles: \d+ checks, 0 failures$"),
    ("test_int_wgmma", ["smoke"], r"^test_int_wgmma: \d+ checks, 0 failures$"),
    ("test_int_rows", ["smoke"], r"^test_int_rows: \d+ checks, 0 failures$"),
    ("test_int", ["early", "smoke"], r"^test_int early: \d+ checks, 0 failures$"),
    ("test_int_rows", ["early", "smoke"], r"^test_int_rows early: \d+ checks, 0 failures$"),
    ("test_int_gemv", ["smoke"], r"^test_int_gemv: \d+ checks, 0 failures$"),
    ("test_mma", ["quick"], r"^mma matmul: \d+ problems x 5 kernel configurations, 0 failures$"),
    ("test_sample", ["--quick"], r"^top-k rows .*; top-p rows "),
    ("test_kernels", ["decode"], r"^ok: 0 failures$"),
    ("test_kernels", ["fused"], r"^ok: 0 failures$"),
    ("test_attention_prompt", ["quick"], r"^ok: 0 failures$"),
]


def host_sources(out: Path) -> Path:
    """Host-compilable copies of the CUDA sources (cuda_emu/mk.py) in out; returns out."""
    subprocess.run([sys.executable, str(EMU / "mk.py"), str(ROOT / "libstrata" / "src" / "cuda"), str(out)],
                   check=True, capture_output=True, text=True)
    return out


def build_binary(src: Path, name: str, exe: Path) -> Path:
    """Compiles cuda_emu/<name>.cpp against the host sources in src into exe."""
    flags = ["-std=c++20", "-O2", "-ffp-contract=off", "-pthread", f"-I{EMU}", f"-I{src}",
             f"-I{ROOT / 'libstrata' / 'include'}", f"-I{ROOT / 'libstrata' / 'src'}"]
    run = subprocess.run(["g++", *flags, str(EMU / f"{name}.cpp"), "-o", str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return exe


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """Builds an emulator binary by name (once per module) from host copies of the CUDA sources."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the host emulator")
    tmp = tmp_path_factory.mktemp("emu")
    src = host_sources(tmp / "src")
    built = {}

    def build(name: str) -> Path:
        if name not in built:
            built[name] = build_binary(src, name, tmp / name)
        return built[name]

    return build


@pytest.mark.parametrize("name,args,summary", CASES, ids=[f"{n}-{a[0].lstrip('-')}" for n, a, _ in CASES])
def test_kernels_on_the_emulator(emulator, name, args, summary):
    run = subprocess.run([str(emulator(name)), *args], capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert re.search(summary, run.stdout, re.M), out[-4000:]
    if name == "test_int":
        assert "FAIL" not in run.stdout


# The tile kernel's two mbarrier waits (cuda_int_mma_tiles.cu, "The slices' hand-off" in docs/cuda_backend.md).
TILE_WAITS = {
    "full": "mbar_wait(full + cslot, (unsigned)cwrap & 1u);",  # the slice has landed before a warp reads it
    "empty": "if (pwrap > 0) mbar_wait(empty + pslot, (unsigned)(pwrap - 1) & 1u);",  # its slot is read out
}


@pytest.mark.parametrize("wait", sorted(TILE_WAITS))
def test_tile_handoff_negative_control(tmp_path, wait):
    """With either wait deleted the smoke run must fail: the emulator lands a thread's copies only at its
    arrival and runs every CUDA thread as an OS thread, so a warp that reads a slot before the copies land,
    or a thread that stages over a slot another warp still reads, gives wrong bits."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the host emulator")
    src = host_sources(tmp_path / "src")
    kernel = src / "cuda_int_mma_tiles.cu"
    text = kernel.read_text()
    assert text.count(TILE_WAITS[wait]) == 1, "the wait's statement moved: update TILE_WAITS"
    kernel.write_text(text.replace(TILE_WAITS[wait], ""))
    exe = build_binary(src, "test_int_tiles", tmp_path / "test_int_tiles")
    run = subprocess.run([str(exe), "smoke"], capture_output=True, text=True, timeout=1200)
    m = re.search(r"^test_int_tiles: (\d+) checks, (\d+) failures$", run.stdout, re.M)
    assert m, (run.stdout + run.stderr)[-4000:]
    assert run.returncode != 0 and int(m.group(2)) > 0, f"the {wait} wait's deletion went unnoticed: {m.group(0)}"


# The wgmma kernel's ordering points (cuda_int_wgmma.cu): the wait that retires block j − 1's product before
# its fold while block j's is in flight, the one before each fold of the one-bank form, and the slice barrier
# (every warpgroup done with the slot the next stage overwrites; the slice's copies landed for all).
WGMMA_ORDER = {
    "wait1": "wgmma_wait<1>();",
    "wait0": "                    wgmma_wait<0>();\n                    fold(j, 0);",
    "barrier": "__syncthreads();      // slice s is in; every warpgroup is done with slice s \u2212 1's slot",
}


@pytest.mark.parametrize("point", sorted(WGMMA_ORDER))
def test_wgmma_order_negative_control(tmp_path, point):
    """With a wait deleted the fold reads a bank's old D (the emulator writes D only at the wait); with the
    barrier deleted a stage overwrites B under an unfinished wgmma, which the emulator aborts on: the run must
    fail either way (the binary's `first` case goes through every wait and the barrier)."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the host emulator")
    src = host_sources(tmp_path / "src")
    kernel = src / "cuda_int_wgmma.cu"
    text = kernel.read_text()
    old = WGMMA_ORDER[point]
    assert text.count(old) == 1, "the statement moved: update WGMMA_ORDER"
    kernel.write_text(text.replace(old, old.split("\n")[-1] if "\n" in old else ""))
    exe = build_binary(src, "test_int_wgmma", tmp_path / "test_int_wgmma")
    run = subprocess.run([str(exe), "first"], capture_output=True, text=True, timeout=1200)
    m = re.search(r"^test_int_wgmma: (\d+) checks, (\d+) failures$", run.stdout, re.M)
    assert run.returncode != 0, f"deleting the {point} went unnoticed: {m.group(0) if m else run.stdout[-2000:]}"
    assert m is None or int(m.group(2)) > 0

