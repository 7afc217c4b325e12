"""Time per call of each small kernel and of attention, inside CUDA graphs.

For each model shape (SmolLM2-135M, Llama-3.2-1B and Llama-3.1-8B decode
shapes), each row count (1, 16, 64, 512) and, for attention, each context
(128, 1024, 8192 cells), one graph records 100 calls of one kernel; the graph
is launched a few times and the time per call is the wall time over
launches x 100. Graph launch amortizes the launch cost, as in a captured
decode step, so these are the figures a step's kernel sum is made of.

Rows up to 64 are decode rows (one slot each, at index context - 1); 512 rows
are one slot's prompt chunk (indices context - 512 .. context - 1), skipped
where the context is shorter; prompt-sized row counts also run at the
--prompt-contexts (512: a prompt's first chunk, 2048: a chunk at 1536). GB/s counts the bytes a kernel must move
(attention: the K/V cells its rows read, once per KV head and slot run).

    python bench/gpu_kernels.py                          # everything, cuda:0
    python bench/gpu_kernels.py --only attention,rope_kv_store --shapes 8B
    STRATA_ATTENTION=noprompt python bench/gpu_kernels.py --only attention --rows 512   # the old prompt path
    python bench/gpu_kernels.py --only fused_attention --shapes 8B,135M --rows 1,16,64

fused_attention (decode rows only) times rope_kv_store followed by attention on [q | k | v] rows
("rkv+attn", two launches per call) and strata_rope_kv_store_attention on the same rows
("rkv_attn fused", one launch), each in its own graph.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from strata import _ffi as S  # noqa: E402

SHAPES = {  # hidden, heads, kv heads, head_dim, ffn, vocab
    "135M": dict(hidden=576, heads=9, kv=3, hd=64, ffn=1536, vocab=49152),
    "1B": dict(hidden=2048, heads=32, kv=8, hd=64, ffn=8192, vocab=128256),
    "8B": dict(hidden=4096, heads=32, kv=8, hd=128, ffn=14336, vocab=128256),
}
ROWS = [1, 16, 64, 512]
CONTEXTS = [128, 1024, 8192]
PROMPT_CONTEXTS = [512, 2048]  # extra contexts for prompt-sized row counts (more than 64 rows)
KERNELS = ["attention", "fused_attention", "rope_kv_store", "rope", "kv_store", "rmsnorm", "silu_mul", "add", "embed", "gather_rows",
           "positions_decode", "argmax", "sample_greedy", "sample_topp", "attention_dense"]


def time_per_call(ctx, enqueue, calls: int, launches: int) -> float:
    """Seconds per call of enqueue(), from a graph of `calls` calls launched `launches` times."""
    enqueue()
    ctx.synchronize()
    ctx.graph_begin()
    try:
        for _ in range(calls):
            enqueue()
    finally:
        graph = ctx.graph_end()
    try:
        graph.launch()
        ctx.synchronize()
        t0 = time.perf_counter()
        for _ in range(launches):
            graph.launch()
        ctx.synchronize()
        return (time.perf_counter() - t0) / (launches * calls)
    finally:
        graph.close()


class Bench:
    def __init__(self, ctx, args):
        self.ctx, self.args = ctx, args
        self.rng = np.random.default_rng(0)
        self.lines = []

    def buf(self, array):
        return S.Buffer.from_array(self.ctx, np.ascontiguousarray(array))

    def record(self, kernel, shape, rows, context, seconds, nbytes):
        us = seconds * 1e6
        gbs = nbytes / seconds / 1e9 if nbytes else float("nan")
        line = f"{kernel:<17} {shape:>5} {rows:>5} {context if context else '-':>7} {us:>10.2f} {gbs:>9.0f}"
        print(line, flush=True)
        self.lines.append(line)

    def run(self, kernel, fn, *a):
        try:
            return fn(*a)
        except S.StrataError as exc:
            print(f"{kernel:<17} failed: {exc}", flush=True)

    def timeit(self, enqueue):
        return time_per_call(self.ctx, enqueue, self.args.calls, self.args.launches)

    # ------------------------------------------------------------ attention

    def attention(self, name, sh, n_rows, context):
        ctx, hd, nkv, nh = self.ctx, sh["hd"], sh["kv"], sh["heads"]
        prefill = n_rows > 64
        if prefill and context < n_rows:
            return
        n_slots = 1 if prefill else n_rows
        kv_w = nkv * hd
        with S.Slots(ctx, n_slots, 1, context, nkv, hd) as slots:
            fill = self.buf(self.rng.standard_normal((context, kv_w), dtype=np.float32))
            for s in range(n_slots):
                rows = self.buf(np.array([(s, i) for i in range(context)], np.int32))
                S.kv_store(ctx, slots, 0, fill, 0, kv_w, fill, 0, kv_w, rows, 0, context)
                rows.close()
            if prefill:
                pairs = [(0, context - n_rows + i) for i in range(n_rows)]
                cells = sum(i + 1 for _, i in pairs[-1:])  # one slot: its cells are read once per KV head
            else:
                pairs = [(s, context - 1) for s in range(n_rows)]
                cells = n_rows * context
            rows = self.buf(np.array(pairs, np.int32))
            q = self.buf(self.rng.standard_normal((n_rows, nh * hd), dtype=np.float32))
            out = S.Buffer(ctx, n_rows * nh * hd * 4)
            t = self.timeit(lambda: S.attention(ctx, slots, 0, q, 0, nh * hd, n_rows, nh, rows, 0,
                                                1 / np.sqrt(hd), out, 0))
            self.record("attention", name, n_rows, context, t, cells * kv_w * 2 * 2)
            for b in (fill, rows, q, out):
                b.close()

    def fused_attention(self, name, sh, n_rows, context):
        """rope_kv_store + attention as two launches, then as the fused call, on decode rows."""
        ctx, hd, nkv, nh = self.ctx, sh["hd"], sh["kv"], sh["heads"]
        if n_rows > 64:
            return  # the fused call is for decode rows of distinct slots
        kv_w, stride = nkv * hd, (nh + 2 * nkv) * hd
        with S.Slots(ctx, n_rows, 1, context, nkv, hd) as slots:
            fill = self.buf(self.rng.standard_normal((context, kv_w), dtype=np.float32))
            for s in range(n_rows):
                rows = self.buf(np.array([(s, i) for i in range(context)], np.int32))
                S.kv_store(ctx, slots, 0, fill, 0, kv_w, fill, 0, kv_w, rows, 0, context)
                rows.close()
            pairs = [(s, context - 1) for s in range(n_rows)]
            rows = self.buf(np.array(pairs, np.int32))
            qkv = self.buf(self.rng.standard_normal((n_rows, stride), dtype=np.float32))
            out = S.Buffer(ctx, n_rows * nh * hd * 4)
            pq = S.rope_params(S.RopeMode.HALF, nh, hd, hd, 10000.0)
            pk = S.rope_params(S.RopeMode.HALF, nkv, hd, hd, 10000.0)
            scale = 1 / np.sqrt(hd)
            nbytes = n_rows * context * kv_w * 2 * 2

            def separate():
                S.rope_kv_store(ctx, pq, pk, slots, 0, qkv, 0, stride, n_rows, rows, 0)
                S.attention(ctx, slots, 0, qkv, 0, stride, n_rows, nh, rows, 0, scale, out, 0)

            t = self.timeit(separate)
            self.record("rkv+attn", name, n_rows, context, t, nbytes)
            t = self.timeit(lambda: S.rope_kv_store_attention(ctx, pq, pk, slots, 0, qkv, 0, stride, n_rows, rows,
                                                              0, None, 0, scale, 0, out, 0))
            self.record("rkv_attn fused", name, n_rows, context, t, nbytes)
            for b in (fill, rows, qkv, out):
                b.close()

    def attention_dense(self, name, sh, n_rows, context):
        # Vision encoder shape (Qwen2.5-VL: 16 heads x 80), windows of 64 tokens, n_rows * 8 tokens.
        ctx, nh, hd = self.ctx, 16, 80
        n_tok = n_rows * 8
        stride = 3 * nh * hd
        qkv = self.buf(self.rng.standard_normal((n_tok, stride), dtype=np.float32))
        segs = self.buf(np.arange(0, n_tok + 1, 64, dtype=np.int32) if n_tok % 64 == 0
                        else np.array([0, n_tok], np.int32))
        n_seg = max(1, n_tok // 64) if n_tok % 64 == 0 else 1
        out = S.Buffer(ctx, n_tok * nh * hd * 4)
        t = self.timeit(lambda: S.attention_dense(ctx, qkv, 0, qkv, nh * hd * 4, qkv, 2 * nh * hd * 4, stride, n_tok,
                                                  nh, hd, segs, 0, n_seg, 0.11, out, 0))
        self.record("attention_dense", "vit", n_tok, 64, t, n_tok * stride * 4)
        for b in (qkv, segs, out):
            b.close()

    # ------------------------------------------------------------ per-row kernels

    def row_kernels(self, name, sh, n_rows, only):
        ctx, rng = self.ctx, self.rng
        hd, nkv, nh, hidden, ffn, vocab = sh["hd"], sh["kv"], sh["heads"], sh["hidden"], sh["ffn"], sh["vocab"]
        q_w, kv_w = nh * hd, nkv * hd
        stride = q_w + 2 * kv_w
        n_ctx = max(1024, n_rows)
        with S.Slots(ctx, max(n_rows, 1), 1, n_ctx, nkv, hd) as slots:
            rows = self.buf(np.array([(r, 100 + r % 500) for r in range(n_rows)], np.int32))
            qkv = self.buf(rng.standard_normal((n_rows, stride), dtype=np.float32))
            pq = S.rope_params(S.RopeMode.ADJACENT, nh, hd)
            pk = S.rope_params(S.RopeMode.ADJACENT, nkv, hd)
            x = self.buf(rng.standard_normal((n_rows, max(hidden, ffn)), dtype=np.float32))
            y = self.buf(rng.standard_normal((n_rows, 2 * ffn), dtype=np.float32))
            w = self.buf(rng.standard_normal(hidden, dtype=np.float32))
            out = S.Buffer(ctx, n_rows * 2 * ffn * 4)
            if "rope_kv_store" in only:
                t = self.timeit(lambda: S.rope_kv_store(ctx, pq, pk, slots, 0, qkv, 0, stride, n_rows, rows, 0))
                self.record("rope_kv_store", name, n_rows, 0, t, n_rows * (stride * 4 * 2 + 2 * kv_w * 2))
            if "rope" in only:
                t = self.timeit(lambda: S.rope(ctx, pq, qkv, 0, stride, n_rows, slots, rows, 0))
                self.record("rope (q)", name, n_rows, 0, t, n_rows * q_w * 8)
            if "kv_store" in only:
                t = self.timeit(lambda: S.kv_store(ctx, slots, 0, qkv, q_w * 4, stride, qkv, (q_w + kv_w) * 4,
                                                   stride, rows, 0, n_rows))
                self.record("kv_store", name, n_rows, 0, t, n_rows * kv_w * 2 * 6)
            if "positions_decode" in only:
                t = self.timeit(lambda: S.positions_decode(ctx, slots, rows, 0, n_rows))
                self.record("positions_decode", name, n_rows, 0, t, 0)
            if "rmsnorm" in only:
                t = self.timeit(lambda: S.rmsnorm(ctx, x, 0, w, 0, out, 0, n_rows, hidden, 1e-5))
                self.record("rmsnorm", name, n_rows, 0, t, n_rows * hidden * 8)
            if "silu_mul" in only:
                t = self.timeit(lambda: S.silu_mul(ctx, y, 0, 2 * ffn, y, ffn * 4, 2 * ffn, out, 0, n_rows, ffn))
                self.record("silu_mul", name, n_rows, 0, t, n_rows * ffn * 12)
            if "add" in only:
                t = self.timeit(lambda: S.add(ctx, x, 0, y, 0, out, 0, n_rows * hidden))
                self.record("add", name, n_rows, 0, t, n_rows * hidden * 12)
            for b in (rows, qkv, x, y, w, out):
                b.close()

    def vocab_kernels(self, name, sh, n_rows, only):
        ctx, rng, hidden, vocab = self.ctx, self.rng, sh["hidden"], sh["vocab"]
        logits = self.buf(rng.standard_normal((n_rows, vocab), dtype=np.float32) * 3)
        order = self.buf(np.arange(n_rows, dtype=np.int32)[::-1])
        out_ids = S.Buffer(ctx, 4 * n_rows)
        table = self.buf(rng.standard_normal((min(vocab, 4096), hidden)).astype(np.float16))
        emb_ids = self.buf(rng.integers(0, min(vocab, 4096), n_rows).astype(np.int32))
        emb = S.Buffer(ctx, n_rows * hidden * 4)
        gathered = S.Buffer(ctx, n_rows * vocab * 4)
        params = np.zeros(n_rows, S.SAMPLING_PARAMS_DTYPE)
        greedy = self.buf(params)
        params["temperature"], params["top_p"], params["top_k"], params["seed"] = 0.8, 0.95, 40, 7
        topp = self.buf(params)
        if "embed" in only:
            t = self.timeit(lambda: S.embed(ctx, table, 0, S.DType.F16, min(vocab, 4096), hidden, emb_ids, 0, n_rows,
                                            emb, 0))
            self.record("embed (F16)", name, n_rows, 0, t, n_rows * hidden * 6)
        if "gather_rows" in only:
            t = self.timeit(lambda: S.gather_rows(ctx, logits, 0, n_rows, vocab * 4, order, 0, n_rows, gathered, 0))
            self.record("gather_rows", name, n_rows, 0, t, n_rows * vocab * 8)
        if "argmax" in only:
            t = self.timeit(lambda: S.argmax(ctx, logits, 0, n_rows, vocab, out_ids, 0))
            self.record("argmax", name, n_rows, 0, t, n_rows * vocab * 4)
        if "sample_greedy" in only:
            t = self.timeit(lambda: S.sample(ctx, logits, 0, n_rows, vocab, greedy, 0, out_ids, 0))
            self.record("sample T=0", name, n_rows, 0, t, n_rows * vocab * 4)
        if "sample_topp" in only:
            t = self.timeit(lambda: S.sample(ctx, logits, 0, n_rows, vocab, topp, 0, out_ids, 0))
            self.record("sample top-p/k", name, n_rows, 0, t, n_rows * vocab * 4)
        for b in (logits, order, out_ids, table, emb_ids, emb, gathered, greedy, topp):
            b.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--contexts", default=",".join(map(str, CONTEXTS)))
    ap.add_argument("--prompt-contexts", default=",".join(map(str, PROMPT_CONTEXTS)),
                    help="extra attention contexts for row counts above 64 (prompt chunks); '' for none")
    ap.add_argument("--only", default=",".join(KERNELS), help="comma-separated subset of: " + ", ".join(KERNELS))
    ap.add_argument("--calls", type=int, default=100, help="calls recorded per graph")
    ap.add_argument("--launches", type=int, default=5, help="graph launches timed")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    unknown = only - set(KERNELS)
    if unknown:
        ap.error(f"unknown kernels: {', '.join(sorted(unknown))}")
    ctx = S.Context(args.device)
    info = ctx.info()
    print(f"{info.name} ({args.device}), libstrata {S.build_info()}; {args.calls} calls per graph, "
          f"{args.launches} launches")
    print(f"{'kernel':<17} {'shape':>5} {'rows':>5} {'context':>7} {'us/call':>10} {'GB/s':>9}")
    bench = Bench(ctx, args)
    rows_list = [int(r) for r in args.rows.split(",")]
    for name in args.shapes.split(","):
        sh = SHAPES[name]
        for n_rows in rows_list:
            if "attention" in only:
                contexts = [int(c) for c in args.contexts.split(",") if c]
                if n_rows > 64:
                    contexts = sorted(set(contexts) | {int(c) for c in args.prompt_contexts.split(",") if c})
                for context in contexts:
                    bench.run("attention", bench.attention, name, sh, n_rows, context)
            if "fused_attention" in only:
                for context in (int(c) for c in args.contexts.split(",")):
                    bench.run("fused_attention", bench.fused_attention, name, sh, n_rows, context)
            bench.run("row kernels", bench.row_kernels, name, sh, n_rows, only)
            bench.run("vocab kernels", bench.vocab_kernels, name, sh, n_rows, only)
    if "attention_dense" in only:
        for n_rows in rows_list:
            bench.run("attention_dense", bench.attention_dense, "vit", None, n_rows, 0)
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
