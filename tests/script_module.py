"""Loads a repository script that is not in a package (bench/*.py, scripts/*.py) as a module, for tests of its
functions. The module is registered in sys.modules under its file name first, so the dataclasses it defines
can find their module while they are built, and a script that imports it by that name (bench/gpu_decode.py
imports llama_peer) gets this same module."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None):
    """The module of ROOT/relative, e.g. load_script("bench/llama_peer.py")."""
    path = ROOT / relative
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
