// cuda_logits.cu — strata_logits_adjust on the GPU: grammar masks, logit
// bias and penalties applied to each sampled row from its slot's table.
//
// One block row per sampled row, threads striding over the vocabulary. The
// arithmetic is the CPU's (cpu_logits.cpp), written with explicit _rn
// intrinsics so nvcc can never fuse the multiply and the add into an FMA:
// both backends round each operation once and agree bit for bit. The kernel
// reads the slot index and the table at fixed addresses, so a captured decode
// graph picks up whatever the host wrote there before the launch.
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void logits_adjust_kernel(const LogitsAdjustArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t r = blockIdx.y;
    const int32_t s = a.row_slots[r];
    if (s < 0 || s >= a.n_slots) return;
    float* l = a.logits + r * a.n_vocab;
    const float* add = a.table + (size_t)s * 2 * a.n_vocab;
    const float* rep = add + a.n_vocab;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < a.n_vocab; v += stride) {
        float x = l[v];
        const float p = rep[v];
        if (p != 1.0f) x = x > 0.0f ? __fdiv_rn(x, p) : __fmul_rn(x, p);
        l[v] = __fadd_rn(x, add[v]);
    }
}

}  // namespace

void launch_logits_adjust(const LogitsAdjustArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.n_vocab <= 0) return;
    int64_t blocks_x = (a.n_vocab + kThreads - 1) / kThreads;
    if (blocks_x > 64) blocks_x = 64;            // enough to fill the SMs with a few rows; threads stride the rest
    const dim3 grid((unsigned)blocks_x, (unsigned)a.n_rows);
    launch_k(logits_adjust_kernel, grid, kThreads, 0, stream, a);
    check_launch("logits_adjust");
}

}  // namespace cuda
}  // namespace strata
