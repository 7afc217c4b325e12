"""Finds SmolLM2's GGUF and copies its tokenizer metadata into a synthesized file.

Synthesized checkpoints carry the real SmolLM2 tokenizer (as the llama.cpp
anchors did), so prompts tokenize as they would for real models. When a
shape's vocabulary differs from the tokenizer's, the token list is cut (with
the merges that need a dropped token) or padded with unused `[PADn]` tokens,
as llama.cpp's converter pads.

Reading the source GGUF's 98k token and merge strings with gguf's reader takes
seconds, so the fields are cached: per process, and as JSON beside the model
cache (keyed by the source's size and mtime), which makes later runs instant.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gguf import GGUFReader, GGUFValueType, GGUFWriter, TokenType

from strata import env
from strata.model_store import ModelStoreError, cache_dir, resolve_model
from strata.synth.shapes import SynthError

DEFAULT_MODEL = "smollm2-135m"
_SPECIAL_ID_KEYS = ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id")


@dataclass(frozen=True)
class MetaField:
    key: str
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


def find_tokenizer_gguf(explicit: str | Path | None = None) -> Path:
    """The GGUF to copy the tokenizer from: `explicit`, else STRATA_SYNTH_TOKENIZER, else SmolLM2-135M from
    the model store (a machine without the default model, such as a lent GPU, can point the variable at
    any GGUF with SmolLM2's tokenizer, even a tokenizer-only one)."""
    source = "--tokenizer-from"
    if explicit is None and env.get("STRATA_SYNTH_TOKENIZER"):
        explicit, source = env.get("STRATA_SYNTH_TOKENIZER"), "STRATA_SYNTH_TOKENIZER"
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise SynthError(f"{source} {path}: no such file")
        return path
    try:
        return resolve_model(DEFAULT_MODEL)
    except ModelStoreError as exc:
        raise SynthError(f"{exc}; or pass --tokenizer-from PATH (a GGUF with SmolLM2's tokenizer) "
                         "or set STRATA_SYNTH_TOKENIZER") from None


@functools.lru_cache(maxsize=4)
def read_tokenizer_fields(path: Path) -> tuple[MetaField, ...]:
    """Every `tokenizer.*` key of a GGUF, with its value and GGUF types (cached)."""
    cache = _cache_path(path)
    try:
        return _from_json(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or an unreadable one: read the GGUF
    fields = _read_gguf_fields(path)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.partial")
        partial.write_text(_to_json(fields), encoding="utf-8")
        os.replace(partial, cache)
    except OSError:
        pass  # a read-only cache only costs the next run a few seconds
    return fields


def _cache_path(source: Path) -> Path:
    stat = source.stat()
    return cache_dir() / ".synth-tokenizers" / f"{source.stem}-{stat.st_size}-{stat.st_mtime_ns}.json"


def _to_json(fields: tuple[MetaField, ...]) -> str:
    rows = [[f.key, int(f.vtype), None if f.sub_type is None else int(f.sub_type), f.value] for f in fields]
    return json.dumps(rows, ensure_ascii=False)


def _from_json(text: str) -> tuple[MetaField, ...]:
    rows = json.loads(text)
    return tuple(MetaField(key, value, GGUFValueType(vtype), None if sub is None else GGUFValueType(sub))
                 for key, vtype, sub, value in rows)


def _read_gguf_fields(path: Path) -> tuple[MetaField, ...]:
    reader = GGUFReader(path)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = GGUFValueType(field.types[0])
            sub_type = GGUFValueType(field.types[-1]) if vtype == GGUFValueType.ARRAY else None
            fields.append(MetaField(key, field.contents(), vtype, sub_type))
    if not any(f.key == "tokenizer.ggml.tokens" for f in fields):
        raise SynthError(f"{path} has no tokenizer.ggml.tokens; give a GGUF with a tokenizer")
    return tuple(fields)


def resize_vocab(fields: tuple[MetaField, ...], vocab_size: int) -> list[MetaField]:
    """The fields with the token list cut or padded to exactly `vocab_size` tokens."""
    by_key = {f.key: f for f in fields}
    tokens = list(by_key["tokenizer.ggml.tokens"].value)
    types = list(by_key["tokenizer.ggml.token_type"].value) if "tokenizer.ggml.token_type" in by_key else None
    if vocab_size < len(tokens):
        tokens, types = tokens[:vocab_size], types[:vocab_size] if types else None
    else:
        pad = vocab_size - len(tokens)
        tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]
        types = types + [int(TokenType.UNUSED)] * pad if types else None
    _check_special_ids(by_key, vocab_size)
    resized = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    if "tokenizer.ggml.merges" in by_key:
        resized["tokenizer.ggml.merges"] = _merges_within(by_key["tokenizer.ggml.merges"].value, set(tokens))
    return [replace(f, value=resized[f.key]) if resized.get(f.key) is not None else f for f in fields]


def _check_special_ids(by_key: dict[str, MetaField], vocab_size: int) -> None:
    for name in _SPECIAL_ID_KEYS:
        field = by_key.get(f"tokenizer.ggml.{name}")
        if field is not None and int(field.value) >= vocab_size:
            raise SynthError(f"--vocab {vocab_size} drops the tokenizer's {name} {field.value}; "
                             f"use --vocab > {field.value}")


def _merges_within(merges: list[str], vocab: set[str]) -> list[str]:
    """The merges whose two parts and result are all still in the vocabulary."""
    kept = []
    for merge in merges:
        left, _, right = merge.partition(" ")
        if left in vocab and right in vocab and left + right in vocab:
            kept.append(merge)
    return kept


def add_tokenizer_keys(writer: GGUFWriter, fields: list[MetaField]) -> None:
    for field in fields:
        if field.vtype == GGUFValueType.ARRAY and len(field.value) == 0:
            continue  # GGUF can't hold an empty array (a tiny vocabulary may keep no merges)
        writer.add_key_value(field.key, field.value, field.vtype, sub_type=field.sub_type)
