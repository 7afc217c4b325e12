"""EngineConfig: the one checked configuration of an engine (slots, context, chunk, queue, device).

Unset fields take per-backend defaults once the device and model are known
(`resolve`). Every value is checked here, so the CLI, the server and the
Python API refuse the same bad settings with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import env

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

    def resolve(self, backend: str, model_ctx: int) -> "EngineConfig":
        """Fills unset fields with the defaults of `backend` ("cpu" or "cuda") and checks all."""
        slots, ctx_cap, chunk = DEFAULTS[backend]
        cfg = replace(
            self,
            batch=self.batch if self.batch is not None else slots,
            ctx=self.ctx if self.ctx is not None else min(model_ctx, ctx_cap),
            chunk=self.chunk if self.chunk is not None else chunk,
        )
        cfg.check(model_ctx)
        return cfg

    def check(self, model_ctx: int | None = None) -> None:
        _range("--batch", self.batch, 1, 1024)
        _range("--ctx", self.ctx, 16, model_ctx or (1 << 20))
        _range("--chunk", self.chunk, 1, 65536)
        _range("--max-queue", self.max_queue, 0, 1 << 20)
        _range("--threads", self.num_threads, 0, 1024)


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
