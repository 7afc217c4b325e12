"""Models named by a Hugging Face repository, fetched through huggingface_hub into its standard cache.

Names, as llama-server accepts them: `org/name` (the repository's one GGUF,
or its Q4_K_M one, or — without GGUF files — the checkpoint directory, as for
Qwen2.5-VL), `org/name:Q4_K_M` (the GGUF whose file name carries that tag), or
a repository with an exact file (`--hf-repo org/name --hf-file model.gguf`,
written `org/name@model.gguf` in messages and `strata models`).

huggingface_hub is imported only here and only when a hub name is used; it
honours HF_HUB_OFFLINE, HF_TOKEN, HF_ENDPOINT and the standard cache
(HF_HUB_CACHE / HF_HOME). `cached()` never touches the network (what
resolve_model uses); `fetch()` downloads what is missing, with tqdm progress
bars on stderr when stderr is a terminal.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


class HubError(RuntimeError):
    """A hub name that can't be resolved or fetched; the text says what to do. (strata.model_store turns it
    into its HubError: this module sits below it and imports nothing of Strata.)"""

DEFAULT_TAG = "Q4_K_M"          # what llama-server picks for `org/name` without a tag
HUB_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)"
                      r"(?::(?P<tag>[\w.-]+)|@(?P<file>[^\s:@]+\.gguf))?$")
CHECKPOINT_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]   # a Hugging Face checkpoint
SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class HubModel:
    repo: str                         # org/name
    filename: str | None = None       # exact file in the repository
    tag: str | None = None            # quantization tag matched against GGUF file names
    revision: str | None = None       # branch, tag or commit (default: main)

    @property
    def name(self) -> str:
        if self.filename:
            return f"{self.repo}@{self.filename}"
        return f"{self.repo}:{self.tag}" if self.tag else self.repo


def parse(name: str, filename: str | None = None) -> HubModel | None:
    """The hub model a name means, or None when it isn't a hub name (a path, an alias)."""
    if filename is not None:
        if not HUB_NAME.match(name) or ":" in name or "@" in name:
            raise HubError(f"--hf-repo wants a repository as org/name, got {name!r}")
        return HubModel(name, filename=filename)
    match = HUB_NAME.match(name)
    if match is None or (match["file"] is None and name.lower().endswith(".gguf")) or name.startswith((".", "~")):
        return None
    return HubModel(match["repo"], filename=match["file"], tag=match["tag"])


def choose_file(ref: HubModel, files: list[str]) -> str | None:
    """The repository file the name means; None for a checkpoint directory (no GGUF, a config.json)."""
    if ref.filename:
        if ref.filename not in files:
            raise HubError(f"{ref.repo} has no file {ref.filename!r}; its GGUF files: {_listing(files)}")
        return ref.filename
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in PurePosixPath(f).name.lower()]
    if not ggufs:
        if "config.json" in files and not ref.tag:
            return None
        raise HubError(f"{ref.repo} has no GGUF file{' tagged ' + ref.tag if ref.tag else ''} and no "
                              f"config.json; files: {', '.join(sorted(files)[:20]) or 'none'}")
    tag = ref.tag or (DEFAULT_TAG if len(ggufs) > 1 else None)
    picked = [f for f in ggufs if _has_tag(f, tag)] if tag else ggufs
    whole = [f for f in picked if not SPLIT_GGUF.search(f)]
    if len(whole) == 1:
        return whole[0]
    if picked and not whole:
        raise HubError(f"{ref.repo}: {picked[0]} is split into parts, which Strata does not load; "
                              "merge it with llama.cpp's gguf-split --merge, or pick another file")
    how = "name a tag as org/name:TAG or a file with --hf-file"
    if not picked:
        raise HubError(f"{ref.repo} has no GGUF file tagged {tag}; {how}; its GGUF files: {_listing(ggufs)}")
    raise HubError(f"{ref.repo} has several GGUF files tagged {tag}: {_listing(whole)}; {how}")


def _has_tag(filename: str, tag: str) -> bool:
    # Q4_K must not match Q4_K_M: the tag ends where no letter, digit or underscore follows.
    pattern = rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9_])"
    return re.search(pattern, PurePosixPath(filename).name, re.IGNORECASE) is not None


def _listing(files: list[str]) -> str:
    return ", ".join(sorted(files)) or "none"


# -- the cache, without the network ------------------------------------------------------------------


def cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _repo_dir(repo: str) -> Path:
    return cache_root() / ("models--" + repo.replace("/", "--"))


def _cached_snapshot(ref: HubModel) -> Path | None:
    """The cached snapshot directory of the reference's revision (huggingface_hub's cache layout)."""
    repo_dir = _repo_dir(ref.repo)
    revision = ref.revision or "main"
    ref_file = repo_dir / "refs" / revision
    commit = ref_file.read_text().strip() if ref_file.is_file() else revision
    snapshot = repo_dir / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def _snapshot_files(snapshot: Path) -> list[str]:
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def cached(ref: HubModel) -> Path:
    """The cached file (or checkpoint directory) of a hub name; never downloads."""
    snapshot = _cached_snapshot(ref)
    if snapshot is None:
        raise HubError(f"{ref.name} is not in the Hugging Face cache ({cache_root()}); "
                              f"fetch it with `strata models fetch {ref.name}`")
    try:
        chosen = choose_file(ref, _snapshot_files(snapshot))
    except HubError as exc:
        raise HubError(f"{ref.name} is not in the Hugging Face cache (what is cached: {exc}); fetch it "
                              f"with `strata models fetch {ref.name}`") from None
    return snapshot if chosen is None else snapshot / chosen


# -- fetching ----------------------------------------------------------------------------------------


def fetch(ref: HubModel) -> Path:
    """Downloads what the name needs (or finds it in the cache offline) and returns its local path."""
    hf = _import_hub()
    _progress_bars_only_on_a_terminal(hf)
    if hf.constants.HF_HUB_OFFLINE:
        try:
            return cached(ref)
        except HubError as exc:
            raise HubError(f"{exc} (HF_HUB_OFFLINE is set: nothing can be downloaded)") from None
    try:
        files = hf.HfApi().list_repo_files(ref.repo, revision=ref.revision)
        chosen = choose_file(ref, files)
        if chosen is None:
            return Path(hf.snapshot_download(ref.repo, revision=ref.revision, allow_patterns=CHECKPOINT_FILES))
        return Path(hf.hf_hub_download(ref.repo, chosen, revision=ref.revision))
    except HubError:
        raise
    except Exception as exc:  # the hub's errors: not found, gated, offline, network
        raise HubError(_hub_error(ref, exc)) from None


def _hub_error(ref: HubModel, exc: Exception) -> str:
    kind = type(exc).__name__
    if kind in ("RepositoryNotFoundError", "GatedRepoError"):
        return (f"{ref.repo} is not on the hub or needs access ({kind}); check the name, and set HF_TOKEN for "
                "private or gated repositories")
    if kind in ("RevisionNotFoundError", "EntryNotFoundError", "RemoteEntryNotFoundError"):
        return f"{ref.name}: {kind}: {str(exc).splitlines()[0]}"
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    return (f"could not fetch {ref.name} from the hub ({kind}: {first_line}); set HF_HUB_OFFLINE=1 to use the "
            "cache only")


def _import_hub():
    try:
        import huggingface_hub
        import huggingface_hub.constants  # noqa: F401
        import huggingface_hub.utils  # noqa: F401
    except ImportError:
        raise HubError("Hugging Face names need the huggingface_hub package: pip install huggingface_hub") \
            from None
    return huggingface_hub


def _progress_bars_only_on_a_terminal(hf) -> None:
    if sys.stderr.isatty() and not os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"):
        hf.utils.enable_progress_bars()
    else:
        hf.utils.disable_progress_bars()


# -- listing and removing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedModel:
    name: str          # how to name it again (org/name@file.gguf, or org/name for a checkpoint)
    path: Path
    size: int          # bytes on disk


def list_cached() -> list[CachedModel]:
    """Every GGUF file and checkpoint directory in the hub cache (all revisions)."""
    root = cache_root()
    out = []
    for repo_dir in sorted(root.glob("models--*")) if root.is_dir() else []:
        repo = repo_dir.name[len("models--"):].replace("--", "/")
        for snapshot in sorted((repo_dir / "snapshots").glob("*")):
            files = _snapshot_files(snapshot)
            for name in files:
                if name.lower().endswith(".gguf"):
                    path = snapshot / name
                    out.append(CachedModel(f"{repo}@{name}", path, path.stat().st_size))
            if "config.json" in files and not any(f.lower().endswith(".gguf") for f in files):
                size = sum((snapshot / f).stat().st_size for f in files)
                out.append(CachedModel(repo, snapshot, size))
    return out


def remove(ref: HubModel) -> list[Path]:
    """Deletes the cached file the name means (its snapshot link and blob), or the whole repository for
    `org/name` of a checkpoint. Returns what was removed."""
    import shutil

    path = cached(ref)
    if path.is_dir():
        repo_dir = _repo_dir(ref.repo)
        shutil.rmtree(repo_dir)
        return [repo_dir]
    removed = []
    blob = path.resolve()
    path.unlink()
    removed.append(path)
    if blob != path and blob.exists() and not _still_linked(blob):
        blob.unlink()
        removed.append(blob)
    return removed


def _still_linked(blob: Path) -> bool:
    snapshots = blob.parent.parent / "snapshots"
    return any(p.is_symlink() and p.resolve() == blob for p in snapshots.rglob("*"))

