"""A copy of the tiny Qwen2.5-VL checkpoint that carries one multi-token-prediction layer, laid out as
DeepSeek-V3 checkpoints carry it: `model.layers.<num_hidden_layers>.*` (a decoder block plus eh_proj,
enorm, hnorm and shared_head.norm) and `num_nextn_predict_layers: 1` in the text config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file


def with_mtp_layer(source: Path, target: Path, seed: int = 0) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in ("model.safetensors", "config.json"):
            shutil.copy(path, target / path.name)
    config = json.loads((source / "config.json").read_text())
    text = config.setdefault("text_config", {})
    n = int(text.get("num_hidden_layers", config.get("num_hidden_layers")))
    hidden = int(text.get("hidden_size", config.get("hidden_size")))
    text["num_nextn_predict_layers"] = 1
    (target / "config.json").write_text(json.dumps(config, indent=2))
    tensors = load_file(str(source / "model.safetensors"))
    rng = np.random.default_rng(seed)
    prefix = next(p for p in ("model.language_model.layers.", "model.layers.") if any(k.startswith(p) for k in tensors))
    for name, value in list(tensors.items()):           # the block: the last layer's shapes, fresh values
        if name.startswith(f"{prefix}{n - 1}."):
            fresh = rng.standard_normal(value.shape).astype(value.dtype) * 0.05
            if name.endswith("layernorm.weight"):
                fresh = fresh + 1
            tensors[f"{prefix}{n}." + name[len(f"{prefix}{n - 1}."):]] = fresh
    extra = {"eh_proj.weight": rng.standard_normal((hidden, 2 * hidden)) * 0.05,
             "enorm.weight": 1 + 0.1 * rng.standard_normal(hidden), "hnorm.weight": 1 + 0.1 * rng.standard_normal(hidden),
             "shared_head.norm.weight": 1 + 0.1 * rng.standard_normal(hidden)}
    for key, value in extra.items():
        tensors[f"{prefix}{n}.{key}"] = value.astype(np.float32)
    save_file(tensors, str(target / "model.safetensors"))
    return target
