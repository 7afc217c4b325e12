"""The import graph of strata/ and server/: no loops, and no module imports a layer above its own.

Read from the source with `ast` (nothing is imported), lazy imports inside
functions included, imports under `if TYPE_CHECKING:` left out (annotations
only). The layers are those of docs/design.md, top first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Module name prefix -> layer (0 is the top). The longest matching prefix wins.
LAYERS = {
    "strata.cli": 0,
    "server": 1,
    "strata.synth": 1,
    "strata.loadgen": 1,
    "strata.top": 1,
    "strata.llm": 2,
    "strata.inputs": 3,
    "strata.engine": 4,
    "strata.models": 5,
    "strata.vision": 6,
    "strata.grammar": 6,
    "strata.toolcall": 6,
    "strata.chat_template": 6,
    "strata.chat_template_defaults": 6,
    "strata.tokenizer": 6,
    "strata.tokenizer_spm": 6,
    "strata.pretokenize": 6,
    "strata.model_store": 6,
    "strata.config": 7,
    "strata.progress": 7,
    "strata.hub": 7,
    "strata.env": 8,
    "strata._ffi": 8,
}
# The SDK stands apart: it imports nothing of strata but itself.
STANDALONE = ("strata.client",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    files = [*ROOT.joinpath("strata").rglob("*.py"), *ROOT.joinpath("server").rglob("*.py")]
    return {module_name(p): p for p in files}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(path: Path, name: str) -> set[str]:
    """Absolute names of every module (or module attribute) `path` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (an attribute import counts as its module)."""
    modules = source_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_names(path, name):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    return graph


def layer_of(name: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}            # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for name, targets in sorted(graph.items()):
        if name.startswith(STANDALONE):
            problems += [f"{name} -> {t} (the SDK imports only itself)" for t in sorted(targets)
                         if not t.startswith(STANDALONE)]
            continue
        here = layer_of(name)
        for target in sorted(targets):
            there = layer_of(target)
            if here is not None and there is not None and there < here:
                problems.append(f"{name} (layer {here}) -> {target} (layer {there})")
    return problems


def test_every_module_has_a_layer():
    graph = import_graph()
    unplaced = [n for n in graph if n not in ("strata", "server") and layer_of(n) is None
                and not n.startswith(STANDALONE)]
    assert not unplaced, f"add these modules to LAYERS (and to docs/design.md's layers): {unplaced}"


def test_no_import_loops():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_no_upward_imports():
    problems = upward_imports(import_graph())
    assert not problems, "\n".join(problems)


def test_the_engine_gets_image_checks_from_the_model_not_from_vision():
    """The vision encoder hands its record check to the engine (LoadedModel.submission_check)."""
    graph = import_graph()
    reached = sorted(t for name, targets in graph.items() if name.startswith("strata.engine.")
                     for t in targets if t.startswith("strata.vision"))
    assert not reached, reached


def test_the_sdk_and_the_package_face_load_no_native_code():
    import subprocess
    import sys

    code = ("import sys, strata, strata.client\n"
            "heavy = [m for m in ('cffi', 'numpy', 'PIL', 'strata._ffi', 'strata.engine') if m in sys.modules]\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- the checker itself


def test_checker_finds_a_loop_and_an_upward_import():
    graph = {"strata.models.loader": {"strata.models.hf_loader"}, "strata.models.hf_loader": {"strata.models.loader"},
             "strata.engine.engine": {"strata.vision.records"}, "strata.vision.records": {"strata.engine.request"}}
    assert find_cycle(graph) == ["strata.models.hf_loader", "strata.models.loader", "strata.models.hf_loader"]
    assert upward_imports(graph) == ["strata.vision.records (layer 6) -> strata.engine.request (layer 4)"]
    assert upward_imports({"strata.client.clients": {"strata._ffi"}}) == [
        "strata.client.clients -> strata._ffi (the SDK imports only itself)"]


@pytest.mark.parametrize("source, expected", [
    ("from . import _ffi as F", {"strata", "strata._ffi"}),
    ("from ..vision.errors import VisionError", {"strata.vision.errors", "strata.vision.errors.VisionError"}),
    ("if TYPE_CHECKING:\n    from .llm import LLM\n", set()),
    ("def f():\n    from server.serve import serve\n", {"server.serve", "server.serve.serve"}),
])
def test_imports_are_read_with_their_package(tmp_path, source, expected):
    path = tmp_path / "mod.py"
    path.write_text(source)
    name = "strata.models.mod" if source.startswith("from ..") else "strata.mod"
    assert imported_names(path, name) == expected
