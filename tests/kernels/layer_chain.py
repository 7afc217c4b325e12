"""A decoder layer's hand-off chain for the kernel tests (tests/kernels/test_matmul_handoff.py,
test_matmul_chain.py): o, gate_up and down of one layer and the next layer's qkv on one context, each call
preparing the next one's activations (handoff_emit) and reading what the previous one prepared
(handoff_use), or the same calls without the hand-off."""

import numpy as np

from kernel_refs import make_weights
from strata import _ffi as S

P = S.MatmulPrologue
EPS = 1e-5
Q, H, F, QKV = 256, 512, 512, 768  # attention width, hidden, ffn, [q | k | v] width: multiples of 256


class Chain:
    """One layer's matmuls (o, gate_up, down) and the next layer's qkv on one context, their weights of
    `dtype` and their activations in device buffers."""

    def __init__(self, ctx, rng, dtype, n_rows):
        self.ctx, self.n, self.dtype = ctx, n_rows, dtype
        self.w = {name: S.Buffer.from_array(ctx, make_weights(rng, dtype, rows, cols)[0])
                  for name, rows, cols in (("o", H, Q), ("gu", 2 * F, H), ("down", H, F), ("qkv", QKV, H))}
        self.ffn_norm = S.Buffer.from_array(ctx, (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        self.attn_norm = S.Buffer.from_array(ctx, (1 + 0.1 * rng.standard_normal(H)).astype(np.float32))
        self.att0 = rng.standard_normal((n_rows, Q), dtype=np.float32)
        self.x0 = rng.standard_normal((n_rows, H), dtype=np.float32)
        self.att = S.Buffer.from_array(ctx, self.att0)
        self.x = S.Buffer.from_array(ctx, self.x0)
        self.gu = S.Buffer.from_array(ctx, np.zeros((n_rows, 2 * F), np.float32))
        self.qkv = S.Buffer.from_array(ctx, np.zeros((n_rows, QKV), np.float32))

    def params(self, handoff: bool):
        """matmul_params of the four calls, with or without the hand-off."""
        d = int(self.dtype)
        if not handoff:
            return (S.matmul_params(accumulate=True),
                    S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=self.ffn_norm),
                    S.matmul_params(P.SILU_MUL, accumulate=True),
                    S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=self.attn_norm))
        return (S.matmul_params(accumulate=True, handoff_emit=True, handoff_prologue=P.RMSNORM, handoff_dtype=d,
                                handoff_norm_weight=self.ffn_norm),
                S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=self.ffn_norm, handoff_use=True, handoff_emit=True,
                                handoff_prologue=P.SILU_MUL, handoff_dtype=d),
                S.matmul_params(P.SILU_MUL, accumulate=True, handoff_use=True, handoff_emit=True,
                                handoff_prologue=P.RMSNORM, handoff_dtype=d, handoff_norm_weight=self.attn_norm),
                S.matmul_params(P.RMSNORM, eps=EPS, norm_weight=self.attn_norm, handoff_use=True))

    def layer_calls(self, qkv: bool = False):
        """o, gate_up and down with the hand-off (and the next layer's qkv with `qkv`), enqueued and nothing
        read back (a matmul chain allows nothing else between them)."""
        ctx, n, d = self.ctx, self.n, self.dtype
        po, pgu, pd, pq = self.params(True)
        S.matmul_ex(ctx, po, self.att, 0, n, Q, self.w["o"], 0, d, H, self.x, 0)
        S.matmul_ex(ctx, pgu, self.x, 0, n, H, self.w["gu"], 0, d, 2 * F, self.gu, 0)
        S.matmul_ex(ctx, pd, self.gu, 0, n, F, self.w["down"], 0, d, H, self.x, 0)
        if qkv:
            S.matmul_ex(ctx, pq, self.x, 0, n, H, self.w["qkv"], 0, d, QKV, self.qkv, 0)

    def reset(self):
        self.att.upload(self.att0)
        self.x.upload(self.x0)

    def run(self, handoff: bool, tamper=None):
        """The chain from the same inputs: (x after o, gate_up's y, x after down, qkv). `tamper(chain)` runs
        between o and gate_up."""
        ctx, n, d = self.ctx, self.n, self.dtype
        self.reset()
        po, pgu, pd, pq = self.params(handoff)
        S.matmul_ex(ctx, po, self.att, 0, n, Q, self.w["o"], 0, d, H, self.x, 0)
        x1 = self.x.to_numpy(np.float32, (n, H))
        if tamper is not None:
            tamper(self)
        S.matmul_ex(ctx, pgu, self.x, 0, n, H, self.w["gu"], 0, d, 2 * F, self.gu, 0)
        S.matmul_ex(ctx, pd, self.gu, 0, n, F, self.w["down"], 0, d, H, self.x, 0)
        x2 = self.x.to_numpy(np.float32, (n, H))
        S.matmul_ex(ctx, pq, self.x, 0, n, H, self.w["qkv"], 0, d, QKV, self.qkv, 0)
        return (x1, self.gu.to_numpy(np.float32, (n, 2 * F)), x2, self.qkv.to_numpy(np.float32, (n, QKV)))

    def close(self):
        for b in (*self.w.values(), self.ffn_norm, self.attn_norm, self.att, self.x, self.gu, self.qkv):
            b.close()
