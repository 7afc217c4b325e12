"""EngineConfig: the one checked configuration of an engine (slots, context, chunk, queue, device).

Unset fields take per-backend defaults once the device and model are known
(`resolve`). Every value is checked here, so the CLI, the server and the
Python API refuse the same bad settings with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import env

DRAFT_SOURCES = ("suffix", "model", "mtp")
PAGE_CELLS = 64      # cells per KV page (STRATA_PAGE_CELLS of libstrata/include/strata.h)
DRAFT_MAX_DEFAULTS = {"cpu": 4, "cuda": 8}     # a verification row costs more on the CPU than on a GPU

DEFAULTS = {
    # backend: (slots, ctx cap, chunk)
    "cpu": (4, 4096, 128),
    "cuda": (32, 8192, 512),
}


class ConfigError(ValueError):
    """A setting is out of range; the message names the flag and the allowed range."""


@dataclass(frozen=True)
class EngineConfig:
    model: str = "smollm2-135m"
    device: str | None = None        # "cpu", "cuda", "cuda:N"; None = the GPU when present
    batch: int | None = None         # slots
    ctx: int | None = None           # tokens per slot
    chunk: int | None = None         # prefill tokens per step
    max_queue: int = 256
    num_threads: int = 0             # CPU backend threads; 0 = one per core
    graphs: bool = True              # replay decode steps as captured graphs
    draft: str | None = None         # speculative decoding: "suffix", "model", "mtp"; None = off
    draft_max: int | None = None     # most tokens drafted per slot and step
    draft_model: str | None = None   # the draft GGUF of --draft model (same tokenizer)
    draft_vocab: int | None = None   # --draft mtp: the head drafts only the first N token ids
    devices: tuple[str, ...] | None = None      # --devices: the model split by layers over these (first = device)
    layer_split: tuple[int, ...] | None = None  # first layer of each stage after the first; None = balanced
    batch_groups: int = 1            # --batch-groups: slots in N groups pipelined over the split's stages
    kv_pages: int | None = None      # KV pool pages of PAGE_CELLS tokens; None = batch x ceil(ctx / PAGE_CELLS)
    kv_dtype: str = "f16"            # KV pool cells: "f16" or "int8" (per-row scales, docs/kv_pool.md)
    prefix_cache: bool = True        # reuse the K/V pages of cached prompt prefixes (exact: docs/kv_pool.md)
    host_cache: float = 0.0          # GiB of host memory evicted cached pages spill to; 0 = no host tier

    def resolve(self, backend: str, model_ctx: int) -> "EngineConfig":
        """Fills unset fields with the defaults of `backend` ("cpu" or "cuda") and checks all."""
        slots, ctx_cap, chunk = DEFAULTS[backend]
        cfg = replace(
            self,
            batch=self.batch if self.batch is not None else slots,
            ctx=self.ctx if self.ctx is not None else min(model_ctx, ctx_cap),
            chunk=self.chunk if self.chunk is not None else chunk,
            draft="model" if self.draft is None and self.draft_model else self.draft,
            draft_max=self.draft_max if self.draft_max is not None else DRAFT_MAX_DEFAULTS[backend],
            graphs=self.graphs and self.batch_groups == 1,   # grouped steps run eagerly (docs/layer-split.md)
        )
        if cfg.kv_pages is None and cfg.batch is not None and cfg.ctx is not None:
            cfg = replace(cfg, kv_pages=cfg.batch * -(-cfg.ctx // PAGE_CELLS))
        cfg.check(model_ctx)
        return cfg

    def check(self, model_ctx: int | None = None) -> None:
        _range("--batch", self.batch, 1, 1024)
        _range("--ctx", self.ctx, 16, model_ctx or (1 << 20))
        _range("--chunk", self.chunk, 1, 65536)
        _range("--max-queue", self.max_queue, 0, 1 << 20)
        _range("--threads", self.num_threads, 0, 1024)
        _range("--draft-max", self.draft_max, 1, 32)
        _range("--draft-vocab", self.draft_vocab, 1, 1 << 24)
        _range("--kv-pages", self.kv_pages, 1, (1 << 31) - 2)
        if self.kv_dtype not in ("f16", "int8"):
            raise ConfigError(f"--kv-dtype must be f16 or int8, got {self.kv_dtype!r}")
        if self.kv_dtype == "int8" and self.devices:
            raise ConfigError("--kv-dtype int8 does not work with a layer split (--devices) yet; use --kv-dtype f16")
        if isinstance(self.host_cache, bool) or not isinstance(self.host_cache, (int, float)) \
                or not 0 <= self.host_cache <= 65536:
            raise ConfigError(f"--host-cache must be a number of GiB from 0 to 65536, got {self.host_cache!r}")
        if self.draft_vocab is not None and self.draft != "mtp":
            raise ConfigError("--draft-vocab restricts the MTP head; it needs --draft mtp")
        if self.draft is not None and self.draft not in DRAFT_SOURCES:
            raise ConfigError(f"--draft must be one of {', '.join(DRAFT_SOURCES)}, got {self.draft!r}")
        if self.draft == "model" and not self.draft_model:
            raise ConfigError("--draft model needs --draft-model: a GGUF with the same tokenizer")
        if self.draft_model and self.draft not in (None, "model"):
            raise ConfigError(f"--draft-model is only used with --draft model, not --draft {self.draft}")
        _check_split(self)


def _check_split(cfg: "EngineConfig") -> None:
    """--devices and --layer-split (the layer range of each stage is checked against the model at load)."""
    if cfg.layer_split is not None and not cfg.devices:
        raise ConfigError("--layer-split needs --devices: one device per stage, e.g. --devices cuda:0,cuda:1")
    if isinstance(cfg.batch_groups, bool) or not isinstance(cfg.batch_groups, int) or cfg.batch_groups < 1:
        raise ConfigError(f"--batch-groups must be a whole number >= 1, got {cfg.batch_groups!r}")
    if cfg.batch_groups > 1 and not cfg.devices:
        raise ConfigError("--batch-groups needs --devices: groups are pipelined over a layer split's stages")
    if cfg.batch is not None and cfg.batch_groups > cfg.batch:
        raise ConfigError(f"--batch-groups {cfg.batch_groups} is more than the {cfg.batch} slots (--batch): "
                          "each group needs a slot")
    if not cfg.devices:
        return
    devices = tuple(cfg.devices)
    if not 2 <= len(devices) <= 16:
        raise ConfigError(f"--devices takes 2 to 16 devices separated by commas, got {len(devices)}")
    if len({backend_of(d) for d in devices}) != 1:
        raise ConfigError(f"--devices must all be on one backend (all cpu or all cuda:N), got {','.join(devices)}")
    if cfg.device is not None and cfg.device != devices[0]:
        raise ConfigError(f"--device {cfg.device} disagrees with --devices {','.join(devices)}: give one of them")
    if cfg.draft == "mtp":        # the MTP head reads the last layer's hidden rows, which stay on the last stage
        raise ConfigError("--draft mtp does not run on a layer split (--devices) yet; --draft suffix and "
                          "--draft model do")
    if cfg.layer_split is not None:
        split = tuple(cfg.layer_split)
        if len(split) != len(devices) - 1 or any(isinstance(b, bool) or not isinstance(b, int) for b in split) \
                or any(b <= a for a, b in zip((0, *split), split)):
            raise ConfigError(f"--layer-split needs {len(devices) - 1} rising layer numbers (the first layer of "
                              f"each device after the first), got {','.join(map(str, split))}")


def default_device() -> str:
    """STRATA_DEVICE, else the first GPU when libstrata sees one, else the CPU."""
    chosen = env.get("STRATA_DEVICE")
    if chosen:
        return chosen
    from . import _ffi

    return "cuda:0" if _ffi.cuda_device_count() > 0 else "cpu"


def backend_of(device: str) -> str:
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        return "cuda"
    raise ConfigError(f"--device must be cpu, cuda or cuda:N, got {device!r}")


def _range(flag: str, value, low: int, high: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{flag} must be an integer from {low} to {high}, got {value!r}")
