"""The tensors of a Hugging Face checkpoint directory, memory-mapped from its safetensors files.

`model.safetensors`, or the shards `model.safetensors.index.json` names. The
format is an 8-byte little-endian header length, a JSON header (name ->
dtype, shape, [begin, end) byte offsets after the header), then the data. The
`safetensors` package is used to check each file's header (its own parser);
the bytes are read here through np.memmap, because numpy has no bfloat16 and
the loader wants raw bytes of every type without a copy.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .._ffi import DType
from .model import ModelFormatError, TensorInfo

# safetensors dtype name -> libstrata dtype id (GGUF ggml_type ids)
DTYPES = {"F32": DType.F32, "F16": DType.F16, "BF16": DType.BF16}
ITEM_BYTES = {"F32": 4, "F16": 2, "BF16": 2}
MAX_HEADER_BYTES = 100 << 20


def checkpoint_files(directory: Path) -> list[Path]:
    """The safetensors files of a checkpoint, single-file or sharded."""
    single = directory / "model.safetensors"
    if single.is_file():
        return [single]
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        raise ModelFormatError(f"{directory} has neither model.safetensors nor model.safetensors.index.json")
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ModelFormatError(f"cannot read the shard index {index}: {exc}") from None
    files = []
    for name in dict.fromkeys(weight_map.values()):
        path = (directory / name).resolve()
        if path.parent != directory.resolve() or not path.is_file():
            raise ModelFormatError(f"{index} names shard {name!r}, which is not a file in {directory}")
        files.append(path)
    return files


def read_tensors(directory: Path) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    for path in checkpoint_files(directory):
        for name, info in read_file(path).items():
            if name in tensors:
                raise ModelFormatError(f"tensor {name} appears in more than one shard of {directory}")
            tensors[name] = info
    return tensors


def read_file(path: Path) -> dict[str, TensorInfo]:
    """name -> TensorInfo with `data` a uint8 view into the memory-mapped file."""
    _check_with_library(path)
    header, data_start = _header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = entry["dtype"], tuple(int(n) for n in entry["shape"]), entry["data_offsets"]
        if dtype not in DTYPES:
            raise ModelFormatError(f"tensor {name} in {path.name} has dtype {dtype}; "
                                   f"supported: {', '.join(DTYPES)}")
        expected = int(np.prod(shape, dtype=np.int64)) * ITEM_BYTES[dtype]
        if end - begin != expected or data_start + end > raw.size:
            raise ModelFormatError(f"tensor {name} in {path.name}: its byte range does not fit its shape or the file")
        out[name] = TensorInfo(name, DTYPES[dtype], shape, raw[data_start + begin: data_start + end])
    return out


def _check_with_library(path: Path) -> None:
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as f:
            f.keys()
    except ImportError:
        return
    except Exception as exc:   # safetensors raises its own error types for malformed files
        raise ModelFormatError(f"{path} is not a readable safetensors file: {exc}") from None


def _header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ModelFormatError(f"{path} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise ModelFormatError(f"{path} declares a {length}-byte header; not a safetensors file")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelFormatError(f"{path} has a malformed safetensors header: {exc}") from None
    return header, 8 + length
