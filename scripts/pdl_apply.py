"""Brings CUDA sources under the programmatic-dependent-launch rule (libstrata/src/cuda/cuda_pdl.cuh).

    python3 scripts/pdl_apply.py [FILE.cu ...]     (default: every libstrata/src/cuda/*.cu)

For a kernel written or merged without it: every `k<<<grid, block, smem, stream>>>(args);` becomes
`launch_k(k, grid, block, smem, stream, args);`, every `__global__` body that does not already
begin with `pdl_wait();` (or with `early_*` calls then `pdl_wait();`) gets `pdl_wait();` and
`pdl_launch_dependents();` as its first statements, and the file includes cuda_pdl.cuh. Running it
twice changes nothing. tests/kernels/test_pdl_coverage.py checks the result; read the diff (a kernel
may deserve early_* weight staging before its wait, which this script never adds).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAIT = "\n    pdl_wait();  // first: see cuda_pdl.cuh\n    pdl_launch_dependents();"
LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)<<<")


def matching(s: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for k in range(i, len(s)):
        depth += (s[k] == open_) - (s[k] == close)
        if depth == 0:
            return k
    raise ValueError(f"unbalanced {open_}{close} from offset {i}")


def convert_launches(s: str) -> str:
    out, i = [], 0
    while (m := LAUNCH.search(s, i)) is not None:
        j = s.index(">>>", m.end())
        if s[j + 3] != "(":
            raise ValueError(f"launch of {m.group(1)} is not followed by its arguments")
        k = matching(s, j + 3, "(", ")")
        args = s[j + 4:k].rstrip().lstrip(" ")  # a line break before the arguments stays
        sep = "" if not args else ("," if args.startswith("\n") else ", ")
        out += [s[i:m.start()], f"launch_k({m.group(1)}, {s[m.end():j]}{sep}{args})"]
        i = k + 1
    return "".join(out + [s[i:]])


def add_waits(s: str) -> str:
    out, i = [], 0
    for m in re.finditer(r"\b__global__\b", s):
        if m.start() < i:
            continue
        j, depth = m.end(), 0
        while s[j] not in "{;" or depth:  # the body's brace (or a declaration's semicolon)
            depth += (s[j] == "(") - (s[j] == ")")
            j += 1
        if s[j] == ";":
            continue
        rest = s[j + 1:j + 400]
        head = re.sub(r"//[^\n]*", "", rest)
        head = re.sub(r"\s*early_\w+\s*(<[^;]*>)?\s*\([^;]*\);", "", head)
        out.append(s[i:j + 1])
        if not head.lstrip().startswith("pdl_wait();"):
            out.append(WAIT)
        i = j + 1
    return "".join(out + [s[i:]])


def apply(path: Path) -> bool:
    s = path.read_text()
    new = add_waits(convert_launches(s))
    if new != s and '#include "cuda_pdl.cuh"' not in new:
        includes = list(re.finditer(r'#include "[^"]+"\n', new))
        at = includes[-1].end() if includes else 0
        new = new[:at] + '#include "cuda_pdl.cuh"\n' + new[at:]
    if new == s:
        return False
    path.write_text(new)
    return True


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv] or sorted((ROOT / "libstrata" / "src" / "cuda").glob("*.cu"))
    for path in files:
        if apply(path):
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
