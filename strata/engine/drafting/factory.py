"""make_speculator: the draft source `--draft` names (or one a test passes), wrapped in a Speculator.

`--draft suffix` needs nothing; `--draft model` loads `--draft-model` on the
same device and checks its vocabulary; `--draft mtp` needs a model that
carries multi-token-prediction layers and refuses one that does not.
"""

from __future__ import annotations

from ... import _ffi
from ...config import ConfigError
from .speculator import Speculator

DEFAULT_DRAFT_MAX = 4


def make_speculator(ctx, model, config, drafter=None, counts=None) -> Speculator | None:
    if drafter is None:
        drafter = make_drafter(ctx, model, config)
    if drafter is None:
        return None
    on_gpu = ctx.info().backend == _ffi.Backend.CUDA
    return Speculator(drafter, config.draft_max or DEFAULT_DRAFT_MAX, config.ctx, model.spec.vocab, counts,
                      adaptive=not on_gpu)


def make_drafter(ctx, model, config):
    if config.draft is None:
        return None
    if config.draft == "suffix":
        from .suffix import SuffixDrafter

        return SuffixDrafter()
    if config.draft == "model":
        from .draft_model import ModelDrafter

        return ModelDrafter.load(ctx, model, config)
    if config.draft == "mtp":
        from .mtp import MtpDrafter

        return MtpDrafter.for_model(ctx, model, config)
    raise ConfigError(f"--draft must be suffix, model or mtp, got {config.draft!r}")
