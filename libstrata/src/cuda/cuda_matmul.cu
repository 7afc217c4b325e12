// cuda_matmul.cu — y = x·Wᵀ (+ bias) (+ y), batch-invariant: the entry of
// every CUDA matmul. F16, BF16 and the quantized types go to the tensor-core
// kernels (cuda_mma_matmul.cu); F32 weights, and the quantized types the
// tensor cores do not take yet (Q5_0, Q5_1, Q5_K, IQ4_NL, IQ4_XS, Q2_K, Q3_K, IQ3_S), stay here, on CUDA cores, weights
// decoded in registers, F32 fused multiply-adds, no activation rounding.
//
// Fused prologues (strata_matmul_ex) on this path: x' = x·g (RMSNORM, the
// 1/rms factor — from each row's sum of squares in a fixed lane order —
// multiplies the dot product, as on the tensor-core path) or silu(gate)·up
// (SILU_MUL, accurate expf), computed as x is read; rows at any stride.
//
// Shape: a warp computes one output column o for a tile of up to kRows rows,
// reading W row o once per tile; kWarps warps of a block take consecutive
// outputs; grid.y walks row tiles. Lane l decodes the units l, l+32, l+64, ...
// of W row o (a unit is 8 or 16 weights, see cuda_quant.cuh) and keeps one F32
// accumulator per row of the tile; then each accumulator is summed over the
// warp by the fixed xor butterfly; then bias, then the old y.
//
// Batch invariance: which lane handles which weights, the order of the fused
// multiply-adds inside a lane and the butterfly depend only on k and the
// dtype. A row's accumulator sees exactly the same operations whether its tile
// holds 1 or 8 rows and whatever the other rows contain; vector or scalar
// loads (chosen by pointer alignment) fetch the same values. There is no
// split-K and no atomic.
#include "cuda_kernels.cuh"
#include "cuda_handoff.cuh"
#include "cuda_quant.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kRows = 8;   // rows per tile (one accumulator each per lane)
constexpr int kWarps = 4;  // output columns per block
constexpr int kThreads = 32 * kWarps;

struct MatmulParams {
    const float* x;
    int64_t n_rows, k;
    int64_t x_stride = 0;  // elements between rows (0: k)
    int prologue = 0;      // enum strata_matmul_prologue
    const float* norm = nullptr;
    float eps = 0.0f;
    const uint8_t* w;
    int64_t w_row_bytes, n_out, n_units;
    const float* bias;
    float* y;
    int64_t y_stride;  // elements between y rows (>= n_out)
    bool accumulate;
    bool x_vec;  // x rows are 16-byte aligned (float4 loads)
    bool w_vec;  // W rows of plain dtypes are 16-byte aligned
};

// The prologue of x value xv at index e of row xr (up half at xr + k).
template <int kPro>
__device__ __forceinline__ float prologue_value(float xv, const float* xr, int64_t e, int64_t k, const float* norm) {
    if (kPro == STRATA_PROLOGUE_RMSNORM) return __fmul_rn(xv, __ldg(norm + e));
    if (kPro == STRATA_PROLOGUE_SILU_MUL)
        return __fmul_rn(__fdiv_rn(xv, __fadd_rn(1.0f, expf(-xv))), __ldg(xr + k + e));
    return xv;
}

// acc[r] += w8[j] * x[r][e + j] for j = 0..nvalid-1 in that order, rows r < nr.
template <bool kPartial, int kPro = 0>
__device__ __forceinline__ void fma_group(float (&acc)[kRows], int nr, const float* w8, const float* xt, int64_t k,
                                          int64_t e, int nvalid, bool x_vec, int64_t stride = 0,
                                          const float* norm = nullptr) {
    if (stride == 0) stride = k;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (r < nr) {
            const float* xr = xt + r * stride + e;
            float xv[8];
            if (!kPartial && x_vec) {
                const float4 a = __ldg(reinterpret_cast<const float4*>(xr));
                const float4 b = __ldg(reinterpret_cast<const float4*>(xr + 4));
                xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
                xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) xv[j] = (!kPartial || j < nvalid) ? __ldg(xr + j) : 0.0f;
            }
            if (kPro != 0) {
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (!kPartial || j < nvalid) xv[j] = prologue_value<kPro>(xv[j], xr - e, e + j, k, norm);
            }
#pragma unroll
            for (int j = 0; j < 8; ++j)
                if (!kPartial || j < nvalid) acc[r] = fmaf(w8[j], xv[j], acc[r]);
        }
    }
}

// Plain dtypes: unit u is elements 8u..8u+7 (the last unit of a row may be short).
template <int kDtype, int kPro = 0>
__device__ __forceinline__ void plain_step(const uint8_t* wrow, int64_t u, const MatmulParams& p, const float* xt,
                                           int nr, float (&acc)[kRows]) {
    const int64_t e = 8 * u;
    const int nvalid = (int)min((int64_t)8, p.k - e);
    float w[8];
    if (kDtype == STRATA_F32) {
        const float* wp = reinterpret_cast<const float*>(wrow) + e;
        if (nvalid == 8 && p.w_vec) {
            const float4 a = __ldg(reinterpret_cast<const float4*>(wp));
            const float4 b = __ldg(reinterpret_cast<const float4*>(wp + 4));
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) w[j] = j < nvalid ? __ldg(wp + j) : 0.0f;
        }
    } else {
        const uint8_t* wp = wrow + 2 * e;
        uint16_t h[8];
        if (nvalid == 8 && p.w_vec) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(wp));
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) h[j] = (uint16_t)(words[j >> 1] >> (16 * (j & 1)));
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) h[j] = j < nvalid ? ld_u16(wp + 2 * j) : (uint16_t)0;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) w[j] = kDtype == STRATA_F16 ? f16_to_f32(h[j]) : bf16_to_f32(h[j]);
    }
    if (nvalid == 8)
        fma_group<false, kPro>(acc, nr, w, xt, p.k, e, 8, p.x_vec, p.x_stride, p.norm);
    else
        fma_group<true, kPro>(acc, nr, w, xt, p.k, e, nvalid, p.x_vec, p.x_stride, p.norm);
}

template <int kDtype, int kPro = 0>
__device__ __forceinline__ void quant_step(const uint8_t* wrow, int64_t u, const MatmulParams& p, const float* xt,
                                           int nr, float (&acc)[kRows]) {
    using Unit = QuantUnit<kDtype>;
    float w[8 * Unit::kGroups];
    int64_t e[Unit::kGroups];
    Unit::load(wrow, u, w, e);
#pragma unroll
    for (int g = 0; g < Unit::kGroups; ++g)
        fma_group<false, kPro>(acc, nr, w + 8 * g, xt, p.k, e[g], 8, p.x_vec, p.x_stride, p.norm);
}

// Sum of squares of row xr (k values) in a fixed order: lane l takes
// l, l + 32, ... sequentially, then the xor butterfly.
__device__ __forceinline__ float row_inv_rms(const float* xr, int64_t k, float eps, int lane) {
    float s = 0.0f;
    for (int64_t i = lane; i < k; i += 32) s = fmaf(__ldg(xr + i), __ldg(xr + i), s);
    s = warp_sum(s);
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)k), eps));
}

template <int kDtype, int kPro = 0>
__global__ void __launch_bounds__(kThreads, 6) matmul_kernel(const MatmulParams p) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    constexpr bool kPlain = kDtype == STRATA_F32 || kDtype == STRATA_F16 || kDtype == STRATA_BF16;
    const int lane = threadIdx.x & 31;
    const int64_t o = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (o >= p.n_out) return;  // whole warp; no block-wide barrier below
    const uint8_t* wrow = p.w + o * p.w_row_bytes;
    const int64_t n_tiles = (p.n_rows + kRows - 1) / kRows;

    const int64_t stride = p.x_stride > 0 ? p.x_stride : p.k;
    for (int64_t t = blockIdx.y; t < n_tiles; t += gridDim.y) {
        const int64_t row0 = t * kRows;
        const int nr = (int)min((int64_t)kRows, p.n_rows - row0);
        const float* xt = p.x + row0 * stride;
        float acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

#pragma unroll 2
        for (int64_t u = lane; u < p.n_units; u += 32) {
            if constexpr (kPlain)
                plain_step<kDtype, kPro>(wrow, u, p, xt, nr, acc);
            else
                quant_step<kDtype, kPro>(wrow, u, p, xt, nr, acc);
        }

#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            if (r < nr) {  // nr is the same on every lane
                float v = warp_sum(acc[r]);
                if (kPro == STRATA_PROLOGUE_RMSNORM) v = __fmul_rn(v, row_inv_rms(xt + r * stride, p.k, p.eps, lane));
                if (lane == r) {
                    if (p.bias) v = __fadd_rn(v, __ldg(p.bias + o));
                    float* yp = p.y + (row0 + r) * p.y_stride + o;
                    if (p.accumulate) v = __fadd_rn(*yp, v);
                    *yp = v;
                }
            }
        }
    }
}

template <int kDtype>
void launch(const MatmulParams& p, cudaStream_t stream) {
    const int64_t n_tiles = (p.n_rows + kRows - 1) / kRows;
    const dim3 grid(ceil_div_u(p.n_out, kWarps), (unsigned)(n_tiles < 65535 ? n_tiles : 65535));
    // Every dtype that reaches this path (F32, and the types the tensor cores do not take) fuses the prologues.
    if (p.prologue == STRATA_PROLOGUE_RMSNORM)
        launch_k(matmul_kernel<kDtype, STRATA_PROLOGUE_RMSNORM>, grid, kThreads, 0, stream, p);
    else if (p.prologue == STRATA_PROLOGUE_SILU_MUL)
        launch_k(matmul_kernel<kDtype, STRATA_PROLOGUE_SILU_MUL>, grid, kThreads, 0, stream, p);
    else
        launch_k(matmul_kernel<kDtype>, grid, kThreads, 0, stream, p);
    check_launch("matmul");
}

int64_t units_per_row(int dtype, int64_t k) {
    switch (dtype) {
    case STRATA_F32:
    case STRATA_F16:
    case STRATA_BF16: return (k + 7) / 8;
    case STRATA_Q8_0: return k / 32 * QuantUnit<STRATA_Q8_0>::kUnitsPerBlock;
    case STRATA_Q4_0: return k / 32 * QuantUnit<STRATA_Q4_0>::kUnitsPerBlock;
    case STRATA_Q4_1: return k / 32 * QuantUnit<STRATA_Q4_1>::kUnitsPerBlock;
    case STRATA_Q5_0: return k / 32 * QuantUnit<STRATA_Q5_0>::kUnitsPerBlock;
    case STRATA_Q5_1: return k / 32 * QuantUnit<STRATA_Q5_1>::kUnitsPerBlock;
    case STRATA_Q4_K: return k / 256 * QuantUnit<STRATA_Q4_K>::kUnitsPerBlock;
    case STRATA_Q5_K: return k / 256 * QuantUnit<STRATA_Q5_K>::kUnitsPerBlock;
    case STRATA_IQ4_NL: return k / 32 * QuantUnit<STRATA_IQ4_NL>::kUnitsPerBlock;
    case STRATA_IQ4_XS: return k / 256 * QuantUnit<STRATA_IQ4_XS>::kUnitsPerBlock;
    case STRATA_Q6_K: return k / 256 * QuantUnit<STRATA_Q6_K>::kUnitsPerBlock;
    case STRATA_Q2_K: return k / 256 * QuantUnit<STRATA_Q2_K>::kUnitsPerBlock;
    case STRATA_Q3_K: return k / 256 * QuantUnit<STRATA_Q3_K>::kUnitsPerBlock;
    case STRATA_IQ3_S: return k / 256 * QuantUnit<STRATA_IQ3_S>::kUnitsPerBlock;
    default: return -1;
    }
}

}  // namespace

namespace {
void launch_plain(const MatmulArgs& a, cudaStream_t stream);
}  // namespace

bool launch_matmul(const MatmulArgs& a, cudaStream_t stream, Scratch& scratch, Handoff& handoff,
                   const RopeKvStoreArgs* rope, DotChain* chain) {
    if (a.n_rows <= 0 || a.n_out <= 0) return false;
    // The activation hand-off (cuda_handoff.cuh): prepared only for a next call on the integer path;
    // read by this call only on it (elsewhere x is read as always).
    const bool emit = a.emit_prologue >= 0 && int_matmul_supports(a.emit_dtype);
    HandoffView ev;
    if (emit) ev = handoff.next(a.n_rows, a.emit_k);
    bool emitted = false, rope_done = false;
    if (int_matmul_supports(a.w_dtype)) {  // integer-exact block products (cuda_int_matmul.cu)
        emitted = launch_int_matmul(a, stream, scratch, a.use_handoff ? handoff.latest() : nullptr,
                                    emit ? &ev : nullptr, emit ? handoff.counters(stream) : nullptr, rope,
                                    &rope_done, chain);  // a held call always emitted (or was asked for nothing)
    } else if (mma_matmul_supports(a.w_dtype)) {
        if (chain != nullptr) dot_chain_flush(*chain, stream);  // what is held runs first
        launch_mma_matmul(a, stream);
    } else {
        if (chain != nullptr) dot_chain_flush(*chain, stream);
        launch_plain(a, stream);
    }
    if (emit && !emitted) launch_handoff_prepass(a, ev, stream, chain);  // in the chain after `a` where it holds `a`
    if (a.emit_prologue >= 0) handoff.publish(ev, emit);
    return rope_done;
}

namespace {

// F32 weights and the quantized types neither tensor-core path takes (matmul_kernel above).
void launch_plain(const MatmulArgs& a, cudaStream_t stream) {
    MatmulParams p;
    p.x = a.x;
    p.x_stride = a.x_row_stride > 0 ? a.x_row_stride : (a.prologue == STRATA_PROLOGUE_SILU_MUL ? 2 * a.k : a.k);
    p.prologue = a.prologue;
    p.norm = a.norm_weight;
    p.eps = a.eps;
    p.n_rows = a.n_rows;
    p.k = a.k;
    p.w = static_cast<const uint8_t*>(a.w);
    p.w_row_bytes = row_bytes(a.w_dtype, a.k);
    p.n_out = a.n_out;
    p.n_units = units_per_row(a.w_dtype, a.k);
    p.bias = a.bias;
    p.y = a.y;
    p.y_stride = a.y_row_stride > 0 ? a.y_row_stride : a.n_out;
    p.accumulate = a.accumulate;
    p.x_vec = (reinterpret_cast<uintptr_t>(a.x) % 16 == 0) && (a.k % 4 == 0) && (p.x_stride % 4 == 0);
    p.w_vec = (reinterpret_cast<uintptr_t>(a.w) % 16 == 0) && (p.w_row_bytes % 16 == 0);
    if (p.n_units < 0) fail(STRATA_ERR_INTERNAL, "cuda matmul: unsupported weight dtype " + std::to_string(a.w_dtype));
    switch (a.w_dtype) {
    case STRATA_F32: launch<STRATA_F32>(p, stream); break;
    case STRATA_F16: launch<STRATA_F16>(p, stream); break;
    case STRATA_BF16: launch<STRATA_BF16>(p, stream); break;
    case STRATA_Q8_0: launch<STRATA_Q8_0>(p, stream); break;
    case STRATA_Q4_0: launch<STRATA_Q4_0>(p, stream); break;
    case STRATA_Q4_1: launch<STRATA_Q4_1>(p, stream); break;
    case STRATA_Q5_0: launch<STRATA_Q5_0>(p, stream); break;
    case STRATA_Q5_1: launch<STRATA_Q5_1>(p, stream); break;
    case STRATA_Q4_K: launch<STRATA_Q4_K>(p, stream); break;
    case STRATA_Q5_K: launch<STRATA_Q5_K>(p, stream); break;
    case STRATA_IQ4_NL: launch<STRATA_IQ4_NL>(p, stream); break;
    case STRATA_IQ4_XS: launch<STRATA_IQ4_XS>(p, stream); break;
    case STRATA_Q6_K: launch<STRATA_Q6_K>(p, stream); break;
    case STRATA_Q2_K: launch<STRATA_Q2_K>(p, stream); break;
    case STRATA_Q3_K: launch<STRATA_Q3_K>(p, stream); break;
    case STRATA_IQ3_S: launch<STRATA_IQ3_S>(p, stream); break;
    default: break;
    }
}

}  // namespace

}  // namespace cuda
}  // namespace strata
