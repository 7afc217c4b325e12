"""Diagnostic (GPU machine): the tiny Qwen2.5-VL decoder's kernel calls on cuda:0 against the CPU backend.

Same random inputs on both backends; prints the max |difference| per call. A large one names the kernel
whose CUDA path is wrong at these shapes (hidden 64, 4 heads, 2 KV heads, head_dim 16, F32 weights).
"""
import numpy as np

from strata import _ffi as S

H, NH, NKV, HD, FF, R = 64, 4, 2, 16, 128, 5
QKV = (NH + 2 * NKV) * HD
rng = np.random.default_rng(0)
x = rng.standard_normal((R, H)).astype(np.float32)
g = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
w = (0.1 * rng.standard_normal((QKV, H))).astype(np.float32)
b = rng.standard_normal(QKV).astype(np.float32)
gu = rng.standard_normal((R, 2 * FF)).astype(np.float32)
wd = (0.1 * rng.standard_normal((H, FF))).astype(np.float32)
pos = np.repeat(np.arange(40, dtype=np.int32)[:, None], 4, axis=1)
rows = np.array([[0, i] for i in range(R)], np.int32)


def run(device):
    ctx = S.Context(device)
    B = lambda a: S.Buffer.from_array(ctx, a)
    out = {}
    bx, bg, bw, bb, bgu, bwd, brows = B(x), B(g), B(w), B(b), B(gu), B(wd), B(rows)
    y = S.Buffer(ctx, R * QKV * 4)
    for name, dt, wbuf in (("f32", S.DType.F32, bw),):
        for pro, label in ((S.MatmulPrologue.NONE, "none"), (S.MatmulPrologue.RMSNORM, "rmsnorm")):
            for bias in (None, bb):
                p = S.matmul_params(pro, eps=1e-6, norm_weight=bg if pro else None, bias=bias)
                S.matmul_ex(ctx, p, bx, 0, R, H, wbuf, 0, dt, QKV, y, 0)
                out[f"matmul_ex {name} {label} bias={bias is not None}"] = y.to_numpy(np.float32, (R, QKV))
    yd = S.Buffer(ctx, R * H * 4)
    p = S.matmul_params(S.MatmulPrologue.SILU_MUL)
    S.matmul_ex(ctx, p, bgu, 0, R, FF, bwd, 0, S.DType.F32, H, yd, 0)
    out["matmul_ex f32 silu_mul"] = yd.to_numpy(np.float32, (R, H))
    slots = S.Slots(ctx, 2, 1, 40, NKV, HD)
    slots.write_positions(0, 0, pos)
    qkv = B((rng.standard_normal((R, QKV))).astype(np.float32) if False else np.arange(R * QKV, dtype=np.float32).reshape(R, QKV) % 7 - 3)
    for mode, sections in ((S.RopeMode.HALF, (0, 0, 0, 0)), (S.RopeMode.MROPE, (2, 3, 3, 0))):
        qp = S.rope_params(mode, NH, HD, HD, 1e6, 1.0, sections)
        kp = S.rope_params(mode, NKV, HD, HD, 1e6, 1.0, sections)
        qkv.upload(np.arange(R * QKV, dtype=np.float32).reshape(R, QKV) % 7 - 3)
        S.rope_kv_store(ctx, qp, kp, slots, 0, qkv, 0, QKV, R, brows, 0)
        out[f"rope_kv_store {mode.name}"] = qkv.to_numpy(np.float32, (R, QKV))
        att = S.Buffer(ctx, R * NH * HD * 4)
        S.attention(ctx, slots, 0, qkv, 0, QKV, R, NH, brows, 0, 0.25, att, 0)
        out[f"attention {mode.name}"] = att.to_numpy(np.float32, (R, NH * HD))
    return out


cpu, gpu = run("cpu"), run("cuda:0")
for k in cpu:
    d = float(np.abs(cpu[k] - gpu[k]).max())
    print(f"{k:40s} max|cpu-cuda| {d:.3e}  (scale {float(np.abs(cpu[k]).max()):.2e})")
