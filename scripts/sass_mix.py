#!/usr/bin/env python3
"""The instruction mix of libstrata's CUDA kernels, read from their SASS without a GPU.

Compiles one kernel file as the Makefile does (its flags; sm_90, or sm_90a for the wgmma file), disassembles
the cubin with nvdisasm and prints, per kernel: its static instruction count, its tensor-core instructions
(HMMA / IMMA / HGMMA / IGMMA), and for the loop that holds the most of them (a backward branch's range: the
K loop) its instructions per tensor-core instruction and their opcode mix — static counts, what one trip of
the loop issues per mma when no branch inside it is taken (a loop with two alternative paths, say a whole
slice and a partial one, counts both: read the listing, `--listing`, before trusting a figure). A device's ncu counts are the truth for speed; this
is for reading a change's effect on the code before there is a device (docs/cuda_backend.md quotes it).

    python3 scripts/sass_mix.py libstrata/src/cuda/cuda_int_wgmma.cu --kernel "ILi2ELi2E"
    python3 scripts/sass_mix.py libstrata/src/cuda/cuda_int_mma_tiles.cu --kernel "ILi2ELi4ELi1ELi4ELi8ELi0ELb1" --top 20

nvdisasm is not part of nvcc's minimal install; `pip install nvidia-cuda-nvdisasm` puts it in site-packages
(nvidia/cu13/bin/), where this script looks after PATH.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MMA = re.compile(r"^(HMMA|IMMA|HGMMA|IGMMA)\b")
SECTION = re.compile(r"^\.text\.(\S+):\s*$")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)(.*)$")
LABEL = re.compile(r"^(\.L_x_\d+):\s*$")
BRANCH_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


@dataclass
class Kernel:
    name: str
    opcodes: list[str] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)            # label -> index of the next instruction
    branches: list[tuple[int, str]] = field(default_factory=list)   # (index of a branch, its target label)

    def mma_positions(self) -> list[int]:
        return [i for i, op in enumerate(self.opcodes) if MMA.match(op)]


def parse_sass(text: str) -> list[Kernel]:
    """nvdisasm's listing -> kernels with their opcodes in order (predicates dropped, modifiers kept)."""
    kernels: list[Kernel] = []
    for line in text.splitlines():
        section = SECTION.match(line)
        if section:
            kernels.append(Kernel(section.group(1)))
            continue
        if not kernels:
            continue
        k = kernels[-1]
        label = LABEL.match(line)
        if label:
            k.labels[label.group(1)] = len(k.opcodes)
            continue
        op = INSTRUCTION.match(line)
        if op:
            target = BRANCH_TARGET.search(op.group(2)) if op.group(1).startswith("BRA") else None
            if target:
                k.branches.append((len(k.opcodes), target.group(1)))
            k.opcodes.append(op.group(1))
    return kernels


def hottest_loop(kernel: Kernel) -> tuple[int, int] | None:
    """The loop (a backward branch's [target, branch] range) holding the most tensor-core instructions; of
    equal ones the shortest (the innermost). None when no loop holds one."""
    best = None
    for at, label in kernel.branches:
        start = kernel.labels.get(label)
        if start is None or start > at:
            continue
        mmas = sum(1 for op in kernel.opcodes[start:at + 1] if MMA.match(op))
        if mmas and (best is None or (mmas, -(at - start)) > (best[0], -(best[2] - best[1]))):
            best = (mmas, start, at)
    return (best[1], best[2]) if best else None


def loop_mix(kernel: Kernel, loop: tuple[int, int]) -> tuple[int, int, collections.Counter]:
    """The loop's instruction count, its tensor-core instructions, and its opcodes (by base name) per one."""
    ops = kernel.opcodes[loop[0]:loop[1] + 1]
    mmas = sum(1 for op in ops if MMA.match(op))
    mix = collections.Counter(op.split(".")[0] for op in ops)
    return len(ops), mmas, collections.Counter({op: n / mmas for op, n in mix.items()})


def find_nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    for bin_dir in Path(sysconfig.get_paths()["purelib"]).glob("nvidia/cu*/bin"):
        if (bin_dir / "nvdisasm").is_file():
            return str(bin_dir / "nvdisasm")
    sys.exit("sass_mix.py: nvdisasm not found on PATH or in site-packages; `pip install nvidia-cuda-nvdisasm`")


def make_variable(name: str) -> str:
    out = subprocess.run(["make", "-s", "-p", "-n", "lib"], cwd=ROOT, capture_output=True, text=True).stdout
    match = re.search(rf"^{name} :?= (.*)$", out, re.M)
    return match.group(1).strip() if match else ""


def compile_cubin(source: Path, arch: str, extra: list[str], out: Path) -> None:
    flags = [f for f in make_variable("NVCCFLAGS").split() if f not in ("-Xcompiler", "-fPIC", "-fvisibility=hidden")]
    cmd = ["nvcc", f"-gencode=arch=compute_{arch[3:]},code={arch}", *flags, *extra, "-cubin", "-o", str(out), str(source)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"sass_mix.py: nvcc failed ({' '.join(cmd)}):\n{result.stderr[-3000:]}")


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if not tool:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a .cu file under libstrata/src/cuda, or a cubin / nvdisasm listing")
    ap.add_argument("--arch", default=None, help="sm_90 (default) or sm_90a (default for cuda_int_wgmma.cu)")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name matches this regex")
    ap.add_argument("--top", type=int, default=12, help="opcodes listed per kernel (default 12)")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="a -D define for nvcc (repeatable)")
    ap.add_argument("--listing", default=None, help="also write nvdisasm's listing here")
    args = ap.parse_args(argv)
    source = Path(args.source)
    if not source.is_file():
        ap.error(f"{source}: no such file")
    if source.suffix == ".cu":
        arch = args.arch or ("sm_90a" if source.name == "cuda_int_wgmma.cu" else "sm_90")
        if not re.fullmatch(r"sm_\d+a?", arch):
            ap.error(f"--arch {arch!r}: expected sm_NN or sm_NNa")
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            compile_cubin(source.resolve(), arch, [f"-D{d}" for d in args.defines], cubin)
            text = subprocess.run([find_nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    elif source.suffix == ".cubin":
        text = subprocess.run([find_nvdisasm(), "-c", str(source)], capture_output=True, text=True, check=True).stdout
    else:
        text = source.read_text(errors="replace")
    if args.listing:
        Path(args.listing).write_text(text)
    try:
        pattern = re.compile(args.kernel)
    except re.error as exc:
        ap.error(f"--kernel {args.kernel!r}: {exc}")
    kernels = [k for k in parse_sass(text) if pattern.search(k.name)]
    if not kernels:
        print("no kernel matched", file=sys.stderr)
        return 1
    for kernel, pretty in zip(kernels, demangle([k.name for k in kernels])):
        pos = kernel.mma_positions()
        print(f"== {pretty}")
        print(f"   {len(kernel.opcodes)} instructions, {len(pos)} tensor-core"
              + (f" ({', '.join(sorted({kernel.opcodes[i] for i in pos}))})" if pos else ""))
        loop = hottest_loop(kernel)
        if loop:
            n, mmas, mix = loop_mix(kernel, loop)
            print(f"   its loop with the most: {n} instructions, {mmas} tensor-core, {n / mmas:.1f} per one; per one:")
            for op, k in mix.most_common(args.top):
                print(f"     {k:6.2f}  {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
