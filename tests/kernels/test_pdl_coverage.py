"""Source coverage of programmatic dependent launch (libstrata/src/cuda/cuda_pdl.cuh): every
`__global__` kernel of the CUDA backend calls `pdl_wait();` then `pdl_launch_dependents();` before
anything else, no `<<<...>>>` launch is left (every launch goes through launch_k), and every
hand-built cudaLaunchKernelEx configuration adds the PDL attribute. A kernel launched
programmatically that touched memory before its wait could read what the previous kernel has not
written yet, so this is checked on the CPU, in CI, without a GPU.

The one exception: calls to `early_*` functions may precede the wait (they stage weights, which no
kernel writes, into the CTA's own shared memory, return a value formed from the launch's
parameters into a local, or ask L2 for lines: a hint, nothing read into registers). Those functions, and every function of the same
file they call, must not touch activation-like members (`.xq`, `.meta`, `.ssq`, `.x`, `.y`, ...).
The checker itself is tried on snippets that break each rule (negative controls)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CUDA_DIR = Path(__file__).resolve().parents[2] / "libstrata" / "src" / "cuda"
HEADER = "cuda_pdl.cuh"


def strip_comments_and_strings(src: str) -> str:
    """The source with comments and string/char literals blanked (newlines kept, so offsets map to lines)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + " " * (min(j, n - 1) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def kernel_bodies(src: str):
    """(name, body) for every __global__ function definition (declarations are skipped)."""
    code = strip_comments_and_strings(src)
    found = []
    for m in re.finditer(r"\b__global__\b", code):
        depth, j = 0, m.end()
        while j < len(code):  # the body's '{' or a declaration's ';', outside parentheses
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
            elif depth == 0 and code[j] in "{;":
                break
            j += 1
        if j >= len(code) or code[j] == ";":
            continue
        head = code[m.end():j]
        name = re.findall(r"(\w+)\s*\(", head)
        name = [w for w in name if w != "__launch_bounds__"]
        brace, k = 0, j
        while k < len(code):
            brace += {"{": 1, "}": -1}.get(code[k], 0)
            if brace == 0:
                break
            k += 1
        found.append((name[0] if name else "?", code[j + 1:k]))
    return found


def device_functions(code: str) -> dict[str, str]:
    """name -> body of every __device__ function definition in comment-free code."""
    found = {}
    for m in re.finditer(r"\b__device__\b", code):
        depth, j = 0, m.end()
        while j < len(code):
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
            elif depth == 0 and code[j] in "{;":
                break
            j += 1
        if j >= len(code) or code[j] == ";":
            continue
        names = re.findall(r"(\w+)\s*\(", code[m.end():j])
        brace, k = 0, j
        while k < len(code):
            brace += {"{": 1, "}": -1}.get(code[k], 0)
            if brace == 0:
                break
            k += 1
        if names:
            found[names[0]] = code[j + 1:k]
    return found


# Members an early_* function must not touch: activations, outputs, scratch written by kernels.
ACTIVATION_MEMBER = re.compile(r"(?<!Idx)(?<!Dim)\.(xq|meta|ssq|x|y|bias|norm|out|logits|act\w*)\b")


# A statement allowed before the wait: a call of an early_* function, or a local initialized from one
# (its result lives in the thread's registers).
EARLY_CALL = r"(?:(?:const\s+)?[\w:]+\s+\w+\s*=\s*)?early_\w+\s*(<[^;]*>)?\s*\(.*\)"


def early_problems(code: str, calls: list[str]) -> list[str]:
    """Activation-like member accesses reachable from the early_* calls (functions of this file)."""
    funcs = device_functions(code)
    out, seen = [], set()
    todo = [re.search(r"\b(early_\w+)", c).group(1) for c in calls]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        body = funcs[name]
        for m in ACTIVATION_MEMBER.finditer(body):
            out.append(f"{name} (called before pdl_wait) touches {m.group(0)!r}")
        todo += re.findall(r"(\w+)\s*(?:<[^;{}()]*>)?\s*\(", body)
    return out


def statements(body: str, count: int) -> list[str]:
    """The first `count` top-level statements of a body, whitespace collapsed."""
    parts = []
    for piece in body.split(";"):
        piece = " ".join(piece.split())
        if piece:
            parts.append(piece)
        if len(parts) == count:
            break
    return parts


def problems(name: str, src: str) -> list[str]:
    """Every breach of the PDL rules in one source file."""
    out = []
    code = strip_comments_and_strings(src)
    for kernel, body in kernel_bodies(src):
        first = statements(body, 12)
        early = []
        while first and re.fullmatch(EARLY_CALL, first[0]):
            early.append(first.pop(0))
        if not first or first[0] != "pdl_wait()":
            out.append(f"{name}: kernel {kernel} does not start with pdl_wait(); (first statement: {first[:1]})")
        elif len(first) < 2 or first[1] != "pdl_launch_dependents()":
            out.append(f"{name}: kernel {kernel}: pdl_launch_dependents(); must follow pdl_wait();")
        out += [f"{name}: kernel {kernel}: {p}" for p in early_problems(code, early)]
    for m in re.finditer(r"<<<", code):
        line = code.count("\n", 0, m.start()) + 1
        out.append(f"{name}:{line}: a <<<...>>> launch; use launch_k (cuda_pdl.cuh)")
    if name != HEADER:
        for m in re.finditer(r"\bcudaLaunchKernelEx\s*\(", code):
            start = code.rfind("cudaLaunchConfig_t", 0, m.start())
            if start < 0 or "pdl_add_attr(" not in code[start:m.start()]:
                line = code.count("\n", 0, m.start()) + 1
                out.append(f"{name}:{line}: cudaLaunchKernelEx without pdl_add_attr on its configuration")
    return out


def cuda_sources():
    files = sorted(p for p in CUDA_DIR.iterdir() if p.suffix in (".cu", ".cuh"))
    assert len(files) > 10, f"CUDA sources not found under {CUDA_DIR}"
    return files


def test_every_kernel_waits_first_and_every_launch_is_programmatic():
    found, kernels = [], 0
    for path in cuda_sources():
        src = path.read_text()
        kernels += len(kernel_bodies(src))
        found += problems(path.name, src)
    assert kernels >= 20, f"only {kernels} kernels found: the parser lost track"
    assert not found, "\n".join(found)


def test_every_file_with_a_kernel_includes_the_header():
    missing = [p.name for p in cuda_sources()
               if kernel_bodies(p.read_text()) and '#include "cuda_pdl.cuh"' not in p.read_text()]
    assert not missing, f"kernels without cuda_pdl.cuh: {missing}"


def test_header_helpers_are_the_hopper_instructions():
    code = strip_comments_and_strings((CUDA_DIR / HEADER).read_text())
    src = (CUDA_DIR / HEADER).read_text()
    assert "griddepcontrol.wait;" in src and "griddepcontrol.launch_dependents;" in src
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in code
    assert "__CUDA_ARCH__ >= 900" in code  # compiled to nothing below sm_90 (and in the host emulator)


GOOD = """
__device__ __forceinline__ void stage_w(const P& p, uint8_t* s) { s[threadIdx.x] = p.w[blockIdx.x]; }
template <int K>
__device__ __forceinline__ void early_weights(const P& p) { stage_w(p, smem()); }
template <int K>
__global__ void early_kernel(const P p) {
    early_weights<K>(p);
    pdl_wait();
    pdl_launch_dependents();
    p.y[0] = p.x[0];
}
__device__ __forceinline__ B early_bases(const P& p) { return B{p.theta}; }
__global__ void early_value_kernel(const P p) {
    const B b = early_bases(p);
    pdl_wait();
    pdl_launch_dependents();
    p.y[0] = b.v;
}
template <int K>
__global__ void __launch_bounds__(128, (Layout<K, 2>::kMin)) good_kernel(const Args a) {
    pdl_wait();   // a comment { with a brace
    pdl_launch_dependents();
    if (a.n) { a.out[0] = 1; }
}
__global__ void declared_only(int x);
void launch(cudaStream_t s) {
    // kernel<<<1, 32, 0, s>>>(a);  a launch in a comment is not a launch
    launch_k(good_kernel<1>, 1, 128, 0, s, Args{});
    const char* msg = "<<<";
    cudaLaunchConfig_t cfg = {};
    cfg.numAttrs = pdl_add_attr(attr, 1);
    check(cudaLaunchKernelEx(&cfg, fn, P), "x");
}
"""


@pytest.mark.parametrize("snippet, expected", [
    ("__global__ void k(float* y) {\n    y[0] = 1.0f;\n    pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "does not start with pdl_wait"),
    ("__global__ void k(float* y) {\n    y[0] = 1.0f;\n}\n", "does not start with pdl_wait"),
    ("__global__ void k(float* y) {\n    if (y) pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "does not start with pdl_wait"),
    ("__global__ void k(float* y) {\n    pdl_wait();\n    y[0] = 1.0f;\n}\n", "must follow pdl_wait"),
    ("void f(cudaStream_t s) {\n    k<<<1, 32, 0, s>>>(p);\n}\n", "<<<...>>> launch"),
    ("__global__ void k(const P p) {\n    stage_w(p, smem());\n    pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "does not start with pdl_wait"),
    ("__device__ void early_acts(const P& p) { read_x(p); }\n"
     "__device__ void read_x(const P& p) { smem()[0] = p.xq[threadIdx.x]; }\n"
     "__global__ void k(const P p) {\n    early_acts(p);\n    pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "touches '.xq'"),
    ("__global__ void k(const P p) {\n    const float v = read_x(p);\n    pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "does not start with pdl_wait"),
    ("__device__ float early_v(const P& p) { return p.x[0]; }\n"
     "__global__ void k(const P p) {\n    const float v = early_v(p);\n    pdl_wait();\n    pdl_launch_dependents();\n}\n",
     "touches '.x'"),
    ("void f() {\n    cudaLaunchConfig_t cfg = {};\n    cfg.numAttrs = 1;\n    cudaLaunchKernelEx(&cfg, fn, P);\n}\n",
     "without pdl_add_attr"),
])
def test_checker_catches_each_breach(snippet, expected):
    """Negative controls: a snippet breaking one rule is reported; the good snippet is not."""
    found = problems("snippet.cu", GOOD + snippet)
    assert len(found) == 1 and expected in found[0], found
    assert problems("snippet.cu", GOOD) == []
    assert [name for name, _ in kernel_bodies(GOOD)] == ["early_kernel", "early_value_kernel", "good_kernel"]
