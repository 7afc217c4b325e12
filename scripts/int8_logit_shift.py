"""How far int8 activation rounding (the CUDA integer matmul, cuda_int_matmul.cu) moves a llama
GGUF's logits: a float32 NumPy forward pass of the model, once with float32 matmul inputs (as the
CPU backend) and once with every matmul input rounded per 32-value block to int8 (step max/127),
on random token ids; prints the largest |logit difference| at the last position per trial.
Then the flips: the rounded pass again with every matmul input perturbed by a relative 1e-5
before its rounding (what differing float orders do to CUDA's and a model's inputs), against the
rounded pass — how far one-step flips at rounding boundaries alone move the logits
(tests/test_backend_agreement.py's allowance).

    python scripts/int8_logit_shift.py ~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf

Small models only (it dequantizes every tensor to float32 in memory).
"""
import sys, numpy as np
from gguf import GGUFReader
from gguf import quants
path = sys.argv[1]
r = GGUFReader(path)
W = {}
for t in r.tensors:
    a = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    W[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim == 1 and len(t.shape) > 1 else a
f = {k: r.fields[k] for k in r.fields}
def val(k):
    fld = f[k]; return fld.parts[fld.data[0]][0]
L = int(val('llama.block_count')); H = int(val('llama.attention.head_count')); KV = int(val('llama.attention.head_count_kv'))
eps = float(val('llama.attention.layer_norm_rms_epsilon')); theta = float(val('llama.rope.freq_base'))
D = W['token_embd.weight'].shape[1]; hd = D // H
def q8(x):
    n, k = x.shape; b = x.reshape(n, k // 32, 32)
    d = np.abs(b).max(-1, keepdims=True) / 127.0
    q = np.where(d > 0, np.clip(np.rint(b / np.where(d > 0, d, 1)), -127, 127), 0)
    return (q * d).reshape(n, k).astype(np.float32)
PERTURB = [0.0]
prng = np.random.default_rng(7)
def mm(x, w, quant):
    if quant and PERTURB[0]:
        x = (x * (1 + PERTURB[0] * prng.standard_normal(x.shape))).astype(np.float32)
    return (q8(x) if quant else x) @ w.T
def rms(x, g): return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps).astype(np.float32) * g
def rope(x, pos):  # adjacent pairs, as llama GGUFs store q/k (both runs use the same rotation)
    inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    x = x.reshape(x.shape[0], -1, hd // 2, 2)
    x0, x1 = x[..., 0], x[..., 1]
    return np.stack([x0 * c[:, None] - x1 * s[:, None], x0 * s[:, None] + x1 * c[:, None]], -1).reshape(x.shape[0], -1)
def forward(ids, quant):
    x = W['token_embd.weight'][ids].astype(np.float32); T = len(ids); pos = np.arange(T, dtype=np.float64)
    for i in range(L):
        p = f'blk.{i}.'
        h = rms(x, W[p + 'attn_norm.weight'])
        q = rope(mm(h, W[p + 'attn_q.weight'], quant), pos); k = rope(mm(h, W[p + 'attn_k.weight'], quant), pos)
        v = mm(h, W[p + 'attn_v.weight'], quant)
        q = q.reshape(T, H, hd); k = k.reshape(T, KV, hd); v = v.reshape(T, KV, hd)
        out = np.zeros((T, H, hd), np.float32)
        for hh in range(H):
            kk = k[:, hh // (H // KV)]; vv = v[:, hh // (H // KV)]
            s = q[:, hh] @ kk.T / np.sqrt(hd); s[np.triu_indices(T, 1)] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True); out[:, hh] = s @ vv
        x = x + mm(out.reshape(T, D), W[p + 'attn_output.weight'], quant)
        h = rms(x, W[p + 'ffn_norm.weight'])
        g = mm(h, W[p + 'ffn_gate.weight'], quant); u = mm(h, W[p + 'ffn_up.weight'], quant)
        x = x + mm(g / (1 + np.exp(-g)) * u, W[p + 'ffn_down.weight'], quant)
    h = rms(x, W['output_norm.weight'])
    return mm(h[-1:], W.get('output.weight', W['token_embd.weight']), quant)[0]
rng = np.random.default_rng(0)
worst = []
for trial in range(3):
    ids = rng.integers(100, 20000, 24)
    a = forward(ids, False); b = forward(ids, True)
    top = np.sort(a)[-2:]
    worst.append(float(np.abs(a - b).max()))
    print(f"trial {trial}: max|dlogit| {worst[-1]:.4f}  logit std {a.std():.2f}  argmax same {a.argmax() == b.argmax()}  top gap {top[1]-top[0]:.3f}", flush=True)
    PERTURB[0] = 1e-5
    c = forward(ids, True)
    PERTURB[0] = 0.0
    print(f"trial {trial}: flips alone (inputs x (1 + 1e-5 N(0,1)) before rounding) max|dlogit| {float(np.abs(b - c).max()):.4f}", flush=True)
