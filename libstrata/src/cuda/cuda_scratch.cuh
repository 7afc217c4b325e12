// cuda_scratch.cuh — a context's device scratch memory for kernels that need
// an intermediate buffer between two launches (the integer matmul's int8
// activation blocks, cuda_int_matmul.cu) or within one (the sampler's weight
// rows, cuda_sample.cu).
//
// One Scratch per CudaBackend (so per stream: launches on it are ordered, and
// one buffer serves every call). It only grows; a smaller buffer it replaces
// stays allocated until the context is destroyed, because a CUDA graph
// recorded earlier may still address it. cudaMalloc runs in relaxed capture
// mode, so growing while a graph is being recorded neither fails nor breaks
// the recording (nothing is enqueued on the stream).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

#ifndef STRATA_CUDA_EMU
class Scratch {
public:
    Scratch() = default;
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
        for (void* p : bufs_) (void)cudaFree(p);
        (void)cudaGetLastError();
    }

    // At least `bytes` bytes, 256-byte aligned, valid until the context ends.
    void* get(size_t bytes) {
        if (bytes <= cap_ && !bufs_.empty()) return bufs_.back();
        size_t want = cap_ * 2 > bytes ? cap_ * 2 : bytes;
        want = (want + 0xFFFFF) & ~(size_t)0xFFFFF;  // whole MiB
        void* p = nullptr;
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        cudaError_t err = cudaMalloc(&p, want);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            fail(STRATA_ERR_OUT_OF_MEMORY, "cuda matmul: no device memory for " + std::to_string(want) +
                                               " bytes of activation scratch");
        }
        check(err, "cudaMalloc (matmul scratch)");
        bufs_.push_back(p);
        cap_ = want;
        return p;
    }

private:
    std::vector<void*> bufs_;
    size_t cap_ = 0;
};
#endif

}  // namespace cuda
}  // namespace strata
