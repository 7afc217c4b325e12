// cuda_step.cu — step_advance: continue a decode batch on the device.
//
// For every non-padding row: the token just sampled becomes the next input,
// the cache index and the sampling position move on by one. A decode step
// launched after this reads exactly what the host would have uploaded, so the
// host can enqueue step N+1 before it has read step N's tokens.
#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

__global__ void step_advance_kernel(const StepAdvanceArgs a) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= a.n_rows || a.rows[2 * r] < 0) return;
    a.ids[r] = a.out_ids[r];
    a.rows[2 * r + 1] += 1;
    a.params[r].position += 1;
}

}  // namespace

void launch_step_advance(const StepAdvanceArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0) return;
    const int threads = 128;
    const int blocks = (int)((a.n_rows + threads - 1) / threads);
    launch_k(step_advance_kernel, blocks, threads, 0, stream, a);
    check_launch("step_advance");
}

}  // namespace cuda
}  // namespace strata
