"""The Qwen2.5-VL vision encoder composed from libstrata kernels (docs/vision.md, "The encoder"), on either backend.

One image at a time, so an image's rows never depend on which other images
are encoded with it:

  patch rows [n, 1176] --matmul--> [n, D] --gather_rows (window order)-->
  depth x { RMSNorm, fused qkv (+bias), 2D RoPE (mode VISION, (row, col) from
            a tables-only slot set), attention_dense over windows or over the
            whole image (fullatt blocks), proj (+bias) added to the residual;
            RMSNorm, SwiGLU with biases added to the residual }
  --> merger: RMSNorm, 4 patches concatenated, Linear + GELU + Linear
  --gather_rows (raster order)--> float32 [n / 4, LLM hidden] on the host.

It shares the engine's context, so callers run `encode` where engine steps
run (Engine.run_on_device), never beside one.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import _ffi as F
from ..vision.errors import PreprocessError
from ..vision.submission import check_submission, record_limits
from .hf_config import VisionSpec
from .vision_windows import WindowLayout, window_layout
from .weights import WeightArena

PREFIX = "v."
MERGER_WEIGHTS = ("merger.ln_q.weight", "merger.mlp.0.weight", "merger.mlp.0.bias", "merger.mlp.2.weight",
                  "merger.mlp.2.bias")
BLOCK_WEIGHTS = ("norm1.weight", "norm2.weight", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                 "attn.proj.bias", "mlp.gate_proj.weight", "mlp.gate_proj.bias", "mlp.up_proj.weight",
                 "mlp.up_proj.bias", "mlp.down_proj.weight", "mlp.down_proj.bias")


def weight_names(spec: VisionSpec) -> list[str]:
    """The arena names the encoder reads (HF names under `visual.`, prefixed `v.`)."""
    names = ["patch_embed.proj.weight", *MERGER_WEIGHTS]
    names += [f"blocks.{i}.{n}" for i in range(spec.depth) for n in BLOCK_WEIGHTS]
    return [PREFIX + n for n in names]


class _Scratch:
    """One device buffer split into float32 regions for an image of n patches (grown on demand).
    Regions never live at the same time share space: the embedded patches (x0) with the attention
    output (att), the qkv rows with the merger's hidden rows (m1)."""

    def __init__(self, ctx: F.Context, spec: VisionSpec, n: int):
        d, m = spec.hidden, n // (spec.merge_size ** 2)
        regions = {"pix": n * spec.patch_dim, "x0": n * d, "x": n * d, "h": n * d, "qkv": n * 3 * d,
                   "gate": n * spec.ffn, "up": n * spec.ffn, "act": n * spec.ffn,
                   "y": m * spec.out_hidden, "z": m * spec.out_hidden,
                   "order": n, "restore": m, "rows": 2 * n, "win": n + 1, "full": n + 1}
        self.off, total = {}, 0
        for name, count in regions.items():
            self.off[name] = total
            total += -(-count * 4 // 256) * 256
        self.off["att"], self.off["m1"] = self.off["x0"], self.off["qkv"]
        self.n = n
        self.buffer = F.Buffer(ctx, total)

    def close(self):
        self.buffer.close()


class VisionEncoder:
    def __init__(self, ctx: F.Context, spec: VisionSpec, weights: WeightArena, preprocess, max_patches: int):
        self.ctx, self.spec, self.weights, self.preprocess = ctx, spec, weights, preprocess
        self.max_patches = max_patches
        hd = spec.head_dim
        self.table = F.Slots(ctx, 1, 0, max_patches, 1, 2)   # tables only: (row, col) per patch
        self.rope = F.rope_params(F.RopeMode.VISION, spec.n_heads, hd, hd, spec.rope_theta, 1.0, (hd // 4, hd // 4))
        self.scale = 1.0 / math.sqrt(hd)
        self._scratch: _Scratch | None = None
        w = lambda name: weights[PREFIX + name]   # noqa: E731
        self.patch = w("patch_embed.proj.weight")
        self.merger = [w(n) for n in MERGER_WEIGHTS]
        self.blocks = [{n: w(f"blocks.{i}.{n}") for n in BLOCK_WEIGHTS} for i in range(spec.depth)]

    # ------------------------------------------------------------ the public call

    def encode(self, pixels: np.ndarray, grid_thw: tuple[int, int, int]) -> np.ndarray:
        """Patch rows float32 [t*h*w, patch_dim] of one image -> float32 [t*h*w/4, out_hidden]."""
        layout = self._layout(pixels, grid_thw)
        s = self._scratch_for(layout.n_patches)
        self._upload(s, pixels, layout)
        self._embed(s, layout)
        for index, block in enumerate(self.blocks):
            full = index in self.spec.fullatt_blocks
            self._block(s, layout, block, full)
        return self._merge(s, layout)

    def submission_check(self, text_spec, n_ctx: int):
        """The check Engine.submit runs on every request to this model: a callable
        (prompt_ids, positions, rope_delta, vision) that raises VisionRecordError unless they form a sound record."""
        return functools.partial(check_submission, limits=record_limits(self, text_spec, n_ctx))

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None
        self.table.close()

    # ------------------------------------------------------------ steps

    def _layout(self, pixels: np.ndarray, grid_thw) -> WindowLayout:
        s = self.spec
        t, h, w = (int(v) for v in grid_thw)
        n = t * h * w
        if h % s.merge_size or w % s.merge_size or n <= 0:
            raise PreprocessError(f"image grid {tuple(grid_thw)} must have h and w multiples of {s.merge_size}")
        if n > self.max_patches:
            raise PreprocessError(f"image grid {tuple(grid_thw)} has {n} patches; this model accepts at most "
                                  f"{self.max_patches}", "image_too_large")
        if pixels.dtype != np.float32 or pixels.shape != (n, s.patch_dim):
            raise PreprocessError(f"patch rows are {pixels.dtype} {list(pixels.shape)}; grid {tuple(grid_thw)} "
                                  f"needs float32 [{n}, {s.patch_dim}]")
        return window_layout((t, h, w), s.merge_size, s.window_merged)

    def _scratch_for(self, n: int) -> _Scratch:
        if self._scratch is None or self._scratch.n < n:
            if self._scratch is not None:
                self._scratch.close()
            self._scratch = _Scratch(self.ctx, self.spec, n)
        return self._scratch

    def _upload(self, s: _Scratch, pixels: np.ndarray, layout: WindowLayout) -> None:
        n, B, o = layout.n_patches, s.buffer, s.off
        B.upload(np.ascontiguousarray(pixels), o["pix"])
        B.upload(layout.patch_order, o["order"])
        B.upload(layout.merged_restore, o["restore"])
        rows = np.zeros((n, 2), dtype=np.int32)          # {slot 0, index i}
        rows[:, 1] = np.arange(n)
        B.upload(rows, o["rows"])
        B.upload(layout.window_segments, o["win"])
        B.upload(layout.full_segments, o["full"])
        self.table.reset(0)
        self.table.write_positions(0, 0, layout.positions)

    def _embed(self, s: _Scratch, layout: WindowLayout) -> None:
        n, d, B, o = layout.n_patches, self.spec.hidden, s.buffer, s.off
        self._matmul(s, "pix", n, self.patch, "x0")
        F.gather_rows(self.ctx, B, o["x0"], n, d * 4, B, o["order"], n, B, o["x"])

    def _block(self, s: _Scratch, layout: WindowLayout, w: dict, full: bool) -> None:
        ctx, spec, B, o = self.ctx, self.spec, s.buffer, s.off
        n, d = layout.n_patches, spec.hidden
        self._norm(s, "x", n, w["norm1.weight"], "h")
        self._matmul(s, "h", n, w["attn.qkv.weight"], "qkv", w["attn.qkv.bias"])
        for part in (0, 1):                     # q, then k: rows of [q | k | v]
            F.rope(ctx, self.rope, B, o["qkv"] + part * d * 4, 3 * d, n, self.table, B, o["rows"])
        segments, n_segments = (("full", len(layout.full_segments) - 1) if full
                                else ("win", len(layout.window_segments) - 1))
        F.attention_dense(ctx, B, o["qkv"], B, o["qkv"] + d * 4, B, o["qkv"] + 2 * d * 4, 3 * d, n,
                          spec.n_heads, spec.head_dim, B, o[segments], n_segments, self.scale, B, o["att"])
        self._matmul(s, "att", n, w["attn.proj.weight"], "x", w["attn.proj.bias"], accumulate=True)
        self._norm(s, "x", n, w["norm2.weight"], "h")
        self._matmul(s, "h", n, w["mlp.gate_proj.weight"], "gate", w["mlp.gate_proj.bias"])
        self._matmul(s, "h", n, w["mlp.up_proj.weight"], "up", w["mlp.up_proj.bias"])
        F.silu_mul(ctx, B, o["gate"], spec.ffn, B, o["up"], spec.ffn, B, o["act"], n, spec.ffn)
        self._matmul(s, "act", n, w["mlp.down_proj.weight"], "x", w["mlp.down_proj.bias"], accumulate=True)

    def _merge(self, s: _Scratch, layout: WindowLayout) -> np.ndarray:
        spec, B, o = self.spec, s.buffer, s.off
        n, m = layout.n_patches, len(layout.merged_restore)
        ln_q, w0, b0, w2, b2 = self.merger
        self._norm(s, "x", n, ln_q, "h")           # [n, D] read as [m, 4D]
        self._matmul(s, "h", m, w0, "m1", b0)
        F.gelu(self.ctx, B, o["m1"], B, o["m1"], m * w0.rows)
        self._matmul(s, "m1", m, w2, "y", b2)
        F.gather_rows(self.ctx, B, o["y"], m, spec.out_hidden * 4, B, o["restore"], m, B, o["z"])
        return B.to_numpy(np.float32, (m, spec.out_hidden), o["z"])    # [n / 4, out_hidden]

    # ------------------------------------------------------------ helpers

    def _norm(self, s: _Scratch, src: str, n: int, weight, dst: str) -> None:
        F.rmsnorm(self.ctx, s.buffer, s.off[src], weight.buffer, weight.offset, s.buffer, s.off[dst], n,
                  weight.cols, self.spec.rms_eps)

    def _matmul(self, s: _Scratch, x: str, n_rows: int, w, y: str, bias=None, accumulate: bool = False) -> None:
        F.matmul(self.ctx, s.buffer, s.off[x], n_rows, w.cols, w.buffer, w.offset, w.dtype, w.rows,
                 None if bias is None else bias.buffer, 0 if bias is None else bias.offset, s.buffer, s.off[y],
                 accumulate)
