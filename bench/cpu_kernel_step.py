"""bench/cpu_kernel_step.py — batch-1 decode-step speed of a SmolLM2-135M-shaped model on the CPU.

Random weights with the default model's shapes and types (30 layers, hidden
576, 9 query / 3 KV heads of 64, FFN 1536, Q4_1 layer matrices, a tied Q8_0
49152x576 embedding/output matrix: ~98 MB). One decode step is the full
kernel sequence (embed, per layer rmsnorm, q/k/v matmuls, rope, kv_store,
attention, o matmul + residual, rmsnorm, gate/up matmuls, silu_mul, down
matmul + residual; final norm, logits, argmax), recorded once as a graph and
launched per token the way the engine does; eager execution is timed too.
Weights live in one buffer (default; big enough for transparent huge pages)
or one buffer per tensor. Prints a table. Usage:

    python bench/cpu_kernel_step.py [--threads N] [--tokens T] [--context C] [--layout packed|per-tensor]
"""

import argparse
import time

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

from strata import _ffi as S

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 576, 30, 9, 3, 64, 1536, 49152
QKV = (HEADS + 2 * KV_HEADS) * HEAD_DIM  # 960: q | k | v in one row


class Model:
    def __init__(self, ctx, n_ctx, rng, packed):
        self.ctx = ctx
        shapes = [("embed", VOCAB, HIDDEN, QT.Q8_0)] + [
            (f"{i}.{name}", n_out, k, QT.Q4_1) for i in range(LAYERS) for name, n_out, k in (
                ("q", HEADS * HEAD_DIM, HIDDEN), ("k", KV_HEADS * HEAD_DIM, HIDDEN),
                ("v", KV_HEADS * HEAD_DIM, HIDDEN), ("o", HIDDEN, HEADS * HEAD_DIM), ("gate", FFN, HIDDEN),
                ("up", FFN, HIDDEN), ("down", HIDDEN, FFN))]
        blobs = {name: quantize(rng.standard_normal((n_out, k), dtype=np.float32) * 0.05, t)
                 for name, n_out, k, t in shapes}
        self.n_bytes = sum(b.nbytes for b in blobs.values())
        self.buffers = []
        self.w = {}  # name -> (buffer, offset)
        if packed:  # one buffer (large enough for transparent huge pages), 64-byte aligned tensors
            offsets, total = {}, 0
            for name, blob in blobs.items():
                offsets[name] = total
                total += (blob.nbytes + 63) // 64 * 64
            big = S.Buffer(ctx, total)
            self.buffers.append(big)
            for name, blob in blobs.items():
                big.upload(blob, offsets[name])
                self.w[name] = (big, offsets[name])
        else:
            for name, blob in blobs.items():
                self.buffers.append(S.Buffer.from_array(ctx, blob))
                self.w[name] = (self.buffers[-1], 0)
        self.norm = S.Buffer.from_array(ctx, np.ones(HIDDEN, np.float32))
        self.slots = S.Slots(ctx, 1, LAYERS, n_ctx, KV_HEADS, HEAD_DIM)
        self.slots.write_positions(0, 0, np.repeat(np.arange(n_ctx, dtype=np.int32)[:, None], 4, axis=1))
        self.ids, self.rows, self.out_ids = S.Buffer(ctx, 4), S.Buffer(ctx, 8), S.Buffer(ctx, 4)
        self.h, self.x = S.Buffer(ctx, HIDDEN * 4), S.Buffer(ctx, HIDDEN * 4)
        self.qkv, self.att = S.Buffer(ctx, QKV * 4), S.Buffer(ctx, HIDDEN * 4)
        self.ffn, self.logits = S.Buffer(ctx, 2 * FFN * 4), S.Buffer(ctx, VOCAB * 4)
        self.rope = S.rope_params(S.RopeMode.ADJACENT, HEADS + KV_HEADS, HEAD_DIM, HEAD_DIM, 100000.0)

    def step(self):
        c, Q4_1, w = self.ctx, S.DType.Q4_1, self.w
        S.embed(c, *w["embed"], S.DType.Q8_0, VOCAB, HIDDEN, self.ids, 0, 1, self.h, 0)
        for li in range(LAYERS):
            S.rmsnorm(c, self.h, 0, self.norm, 0, self.x, 0, 1, HIDDEN, 1e-5)
            S.matmul(c, self.x, 0, 1, HIDDEN, *w[f"{li}.q"], Q4_1, HEADS * HEAD_DIM, None, 0, self.qkv, 0)
            S.matmul(c, self.x, 0, 1, HIDDEN, *w[f"{li}.k"], Q4_1, KV_HEADS * HEAD_DIM, None, 0, self.qkv, 4 * 576)
            S.matmul(c, self.x, 0, 1, HIDDEN, *w[f"{li}.v"], Q4_1, KV_HEADS * HEAD_DIM, None, 0, self.qkv, 4 * 768)
            S.rope(c, self.rope, self.qkv, 0, QKV, 1, self.slots, self.rows, 0)
            S.kv_store(c, self.slots, li, self.qkv, 4 * 576, QKV, self.qkv, 4 * 768, QKV, self.rows, 0, 1)
            S.attention(c, self.slots, li, self.qkv, 0, QKV, 1, HEADS, self.rows, 0, 0.125, self.att, 0)
            S.matmul(c, self.att, 0, 1, HIDDEN, *w[f"{li}.o"], Q4_1, HIDDEN, None, 0, self.h, 0, True)
            S.rmsnorm(c, self.h, 0, self.norm, 0, self.x, 0, 1, HIDDEN, 1e-5)
            S.matmul(c, self.x, 0, 1, HIDDEN, *w[f"{li}.gate"], Q4_1, FFN, None, 0, self.ffn, 0)
            S.matmul(c, self.x, 0, 1, HIDDEN, *w[f"{li}.up"], Q4_1, FFN, None, 0, self.ffn, 4 * FFN)
            S.silu_mul(c, self.ffn, 0, FFN, self.ffn, 4 * FFN, FFN, self.ffn, 0, 1, FFN)
            S.matmul(c, self.ffn, 0, 1, FFN, *w[f"{li}.down"], Q4_1, HIDDEN, None, 0, self.h, 0, True)
        S.rmsnorm(c, self.h, 0, self.norm, 0, self.x, 0, 1, HIDDEN, 1e-5)
        S.matmul(c, self.x, 0, 1, HIDDEN, *w["embed"], S.DType.Q8_0, VOCAB, None, 0, self.logits, 0)
        S.argmax(c, self.logits, 0, 1, VOCAB, self.out_ids, 0)

    def set_token(self, token, index):
        self.ids.upload(np.array([token], np.int32))
        self.rows.upload(np.array([0, index], np.int32))


def run(model, n_tokens, start, launch):
    token, times = 1, []
    for i in range(n_tokens):
        t0 = time.perf_counter()
        model.set_token(token, start + i)
        launch()
        token = int(model.out_ids.to_numpy(np.int32, (1,))[0])
        times.append(time.perf_counter() - t0)
    return np.array(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--context", type=int, default=64, help="cache cells already filled before timing")
    ap.add_argument("--layout", choices=("packed", "per-tensor"), default="packed",
                    help="all weights in one buffer (huge pages) or one buffer per tensor")
    args = ap.parse_args()
    ctx = S.Context("cpu", args.threads)
    model = Model(ctx, args.context + args.tokens + 1, np.random.default_rng(0), args.layout == "packed")
    print(f"{ctx.info().name}; weights {model.n_bytes / 1e6:.1f} MB, {args.layout}; context {args.context}")
    run(model, args.context, 0, model.step)  # fill the cache eagerly
    ctx.graph_begin()
    model.step()
    graph = ctx.graph_end()
    print(f"{'mode':>6} {'tokens':>6} {'median ms':>10} {'best ms':>8} {'tok/s (median)':>15} {'GB/s':>6}")
    for name, launch in (("graph", graph.launch), ("eager", model.step)):
        t = run(model, args.tokens, args.context, launch)
        med = float(np.median(t))
        print(f"{name:>6} {args.tokens:6d} {med * 1e3:10.2f} {t.min() * 1e3:8.2f} {1 / med:15.1f} "
              f"{model.n_bytes / med / 1e9:6.1f}")
    graph.close()


if __name__ == "__main__":
    main()
