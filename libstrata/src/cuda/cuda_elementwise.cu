// cuda_elementwise.cu — activations, scaling and residual adds: silu_mul,
// gelu_tanh_mul, gelu, scale, add.
//
// Each output element is a fixed expression of the same input elements, so
// nothing depends on the launch shape. Accurate library functions (expf,
// erff), never the fast intrinsics, and explicit __f*_rn so the compiler
// cannot fuse differently elsewhere:
//   silu_mul: out = (g / (1 + exp(−g))) · u
//   gelu_tanh_mul: out = ((0.5 · g) · (1 + tanh(√(2/π) · (g + 0.044715 · g³)))) · u
//   gelu:     out = (0.5 · x) · (1 + erf(x · (1/√2)))
//   scale:    out = x · factor
//   add:      out = a + b
// A thread takes 4 consecutive elements, with 16-byte loads and stores when
// every operand allows (the same values either way); silu_mul runs a 2-D grid
// (columns × rows) so no thread divides by the row length. In-place use
// (out == x, out == a or b) is safe: each element is read and written by one
// thread.
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;
constexpr unsigned kMaxRowsPerLaunch = 65535;  // grid.y; more rows loop

unsigned grid_for(int64_t n4) {
    const int64_t blocks = (n4 + kThreads - 1) / kThreads;
    return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float silu_mul1(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}
__device__ __forceinline__ float gelu_tanh_mul1(float g, float u) {
    const float cube = __fmul_rn(__fmul_rn(g, g), g);
    const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(g, __fmul_rn(0.044715f, cube)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner))), u);
}
template <bool GELU>
__device__ __forceinline__ float gated1(float g, float u) { return GELU ? gelu_tanh_mul1(g, u) : silu_mul1(g, u); }
__device__ __forceinline__ float gelu1(float x) {
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752440f))));
}

// Elements [4q, 4q + 4) of one row of n values: VEC = one 16-byte access.
template <bool VEC>
__device__ __forceinline__ float4 ld4(const float* p, int64_t q, int64_t n) {
    if (VEC) return *reinterpret_cast<const float4*>(p + 4 * q);
    const int64_t e = 4 * q;
    return make_float4(p[e], e + 1 < n ? p[e + 1] : 0.0f, e + 2 < n ? p[e + 2] : 0.0f, e + 3 < n ? p[e + 3] : 0.0f);
}
template <bool VEC>
__device__ __forceinline__ void st4(float* p, int64_t q, int64_t n, float4 v) {
    if (VEC) {
        *reinterpret_cast<float4*>(p + 4 * q) = v;
        return;
    }
    const int64_t e = 4 * q;
    p[e] = v.x;
    if (e + 1 < n) p[e + 1] = v.y;
    if (e + 2 < n) p[e + 2] = v.z;
    if (e + 3 < n) p[e + 3] = v.w;
}

template <bool VEC, bool GELU>
__global__ void __launch_bounds__(kThreads) silu_mul_kernel(const SiluMulArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t n4 = (a.n_cols + 3) / 4;
    for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) {
        const float* g = a.gate + r * a.gate_row_stride;
        const float* u = a.up + r * a.up_row_stride;
        float* o = a.out + r * a.n_cols;
        for (int64_t q = (int64_t)blockIdx.x * kThreads + threadIdx.x; q < n4; q += (int64_t)gridDim.x * kThreads) {
            const float4 gv = ld4<VEC>(g, q, a.n_cols), uv = ld4<VEC>(u, q, a.n_cols);
            st4<VEC>(o, q, a.n_cols, make_float4(gated1<GELU>(gv.x, uv.x), gated1<GELU>(gv.y, uv.y),
                                                 gated1<GELU>(gv.z, uv.z), gated1<GELU>(gv.w, uv.w)));
        }
    }
}

template <bool VEC>
__global__ void __launch_bounds__(kThreads) gelu_kernel(const UnaryArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t n4 = (a.n + 3) / 4;
    for (int64_t q = (int64_t)blockIdx.x * kThreads + threadIdx.x; q < n4; q += (int64_t)gridDim.x * kThreads) {
        const float4 x = ld4<VEC>(a.x, q, a.n);
        st4<VEC>(a.out, q, a.n, make_float4(gelu1(x.x), gelu1(x.y), gelu1(x.z), gelu1(x.w)));
    }
}

template <bool VEC>
__global__ void __launch_bounds__(kThreads) scale_kernel(const UnaryArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t n4 = (a.n + 3) / 4;
    const float f = a.factor;
    for (int64_t q = (int64_t)blockIdx.x * kThreads + threadIdx.x; q < n4; q += (int64_t)gridDim.x * kThreads) {
        const float4 x = ld4<VEC>(a.x, q, a.n);
        st4<VEC>(a.out, q, a.n, make_float4(__fmul_rn(x.x, f), __fmul_rn(x.y, f), __fmul_rn(x.z, f), __fmul_rn(x.w, f)));
    }
}

template <bool VEC>
__global__ void __launch_bounds__(kThreads) add_kernel(const BinaryArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t n4 = (a.n + 3) / 4;
    for (int64_t q = (int64_t)blockIdx.x * kThreads + threadIdx.x; q < n4; q += (int64_t)gridDim.x * kThreads) {
        const float4 x = ld4<VEC>(a.a, q, a.n), y = ld4<VEC>(a.b, q, a.n);
        st4<VEC>(a.out, q, a.n,
                 make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y), __fadd_rn(x.z, y.z), __fadd_rn(x.w, y.w)));
    }
}

}  // namespace

void launch_silu_mul(const SiluMulArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_cols <= 0) return;
    const bool vec = a.n_cols % 4 == 0 && a.gate_row_stride % 4 == 0 && a.up_row_stride % 4 == 0 &&
                     aligned16(a.gate) && aligned16(a.up) && aligned16(a.out);
    const dim3 grid(grid_for((a.n_cols + 3) / 4),
                    (unsigned)(a.n_rows < (int64_t)kMaxRowsPerLaunch ? a.n_rows : kMaxRowsPerLaunch));
    if (a.gelu_tanh) {
        if (vec) launch_k(silu_mul_kernel<true, true>, grid, kThreads, 0, stream, a);
        else launch_k(silu_mul_kernel<false, true>, grid, kThreads, 0, stream, a);
        check_launch("gelu_tanh_mul");
        return;
    }
    if (vec) launch_k(silu_mul_kernel<true, false>, grid, kThreads, 0, stream, a);
    else launch_k(silu_mul_kernel<false, false>, grid, kThreads, 0, stream, a);
    check_launch("silu_mul");
}

void launch_gelu(const UnaryArgs& a, cudaStream_t stream) {
    if (a.n <= 0) return;
    const bool vec = a.n % 4 == 0 && aligned16(a.x) && aligned16(a.out);
    if (vec) launch_k(gelu_kernel<true>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    else launch_k(gelu_kernel<false>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    check_launch("gelu");
}

void launch_scale(const UnaryArgs& a, cudaStream_t stream) {
    if (a.n <= 0) return;
    const bool vec = a.n % 4 == 0 && aligned16(a.x) && aligned16(a.out);
    if (vec) launch_k(scale_kernel<true>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    else launch_k(scale_kernel<false>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    check_launch("scale");
}

void launch_add(const BinaryArgs& a, cudaStream_t stream) {
    if (a.n <= 0) return;
    const bool vec = a.n % 4 == 0 && aligned16(a.a) && aligned16(a.b) && aligned16(a.out);
    if (vec) launch_k(add_kernel<true>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    else launch_k(add_kernel<false>, grid_for((a.n + 3) / 4), kThreads, 0, stream, a);
    check_launch("add");
}

}  // namespace cuda
}  // namespace strata
