"""Hugging Face names (strata/hub.py) without a hub: parsing, and which repository file a name picks."""

from __future__ import annotations

import pytest

from strata.hub import HubError, HubModel, choose_file, parse

FILES = ["README.md", "m-Q4_K.gguf", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf",
         "big-Q6_K-00001-of-00002.gguf", "big-Q6_K-00002-of-00002.gguf"]


@pytest.mark.parametrize("name, want", [
    ("org/name", HubModel("org/name")),
    ("org/name:Q4_K_M", HubModel("org/name", tag="Q4_K_M")),
    ("bartowski/Llama-3.2-1B-Instruct-GGUF:q8_0", HubModel("bartowski/Llama-3.2-1B-Instruct-GGUF", tag="q8_0")),
    ("org/name@sub/dir/m.gguf", HubModel("org/name", filename="sub/dir/m.gguf")),
    ("smollm2-135m", None), ("model.gguf", None), ("dir/model.gguf", None), ("./org/name", None),
    ("/abs/path", None), ("a/b/c", None), ("org/name:", None),
])
def test_parse(name, want):
    assert parse(name) == want


def test_parse_with_a_file_and_names_round_trip():
    assert parse("org/name", "x.gguf") == HubModel("org/name", filename="x.gguf")
    with pytest.raises(HubError, match="org/name"):
        parse("org/name:Q4_0", "x.gguf")
    for name in ("org/name", "org/name:Q8_0", "org/name@x.gguf"):
        assert parse(name).name == name


@pytest.mark.parametrize("tag, want", [
    ("Q4_K", "m-Q4_K.gguf"), ("Q4_K_M", "m-Q4_K_M.gguf"), ("q4_k_s", "m-Q4_K_S.gguf"), ("Q8_0", "m-Q8_0.gguf"),
    (None, "m-Q4_K_M.gguf"),                      # llama-server's default tag among several
])
def test_choose_by_tag(tag, want):
    assert choose_file(HubModel("o/m", tag=tag), FILES) == want


def test_choose_the_only_gguf_or_the_checkpoint_directory():
    assert choose_file(HubModel("o/m"), ["README.md", "only-F16.gguf", "mmproj-F16.gguf"]) == "only-F16.gguf"
    assert choose_file(HubModel("o/m"), ["config.json", "model.safetensors", "tokenizer.json"]) is None
    assert choose_file(HubModel("o/m", filename="m-Q8_0.gguf"), FILES) == "m-Q8_0.gguf"


@pytest.mark.parametrize("ref, files, message", [
    (HubModel("o/m", tag="Q2_K"), FILES, "no GGUF file tagged Q2_K; .* its GGUF files: .*m-Q8_0.gguf"),
    (HubModel("o/m", tag="Q6_K"), FILES, "split into parts"),
    (HubModel("o/m", filename="nope.gguf"), FILES, "has no file 'nope.gguf'"),
    (HubModel("o/m"), ["a-Q8_0.gguf", "b-Q8_0.gguf"], "no GGUF file tagged Q4_K_M"),
    (HubModel("o/m", tag="Q8_0"), ["a-Q8_0.gguf", "b-Q8_0.gguf"], "several GGUF files tagged Q8_0"),
    (HubModel("o/m"), ["README.md"], "no GGUF file and no config.json"),
])
def test_choose_refusals_say_what_exists(ref, files, message):
    with pytest.raises(HubError, match=message):
        choose_file(ref, files)
