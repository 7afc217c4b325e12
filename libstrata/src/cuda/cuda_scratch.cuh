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
        zero_pending_ = true;
        return p;
    }

    // get(bytes), whose first `zero_bytes` bytes are zero when the work enqueued next on `stream`
    // runs, for callers that leave them zero after each call (the decode attention's arrival
    // counters, cuda_attention_decode.cu; always the same zero_bytes). A new buffer is zeroed by
    // an enqueued memset on every call until one of them runs outside graph capture: a graph
    // recorded in between carries its own memset node, so graphs and plain calls may then run in
    // any order.
    void* get_zeroed(size_t bytes, size_t zero_bytes, cudaStream_t stream) {
        void* p = get(bytes);
        if (zero_pending_) {
            check(cudaMemsetAsync(p, 0, zero_bytes, stream), "cudaMemsetAsync (scratch counters)");
            cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
            check(cudaStreamIsCapturing(stream, &st), "cudaStreamIsCapturing");
            if (st == cudaStreamCaptureStatusNone) zero_pending_ = false;
        }
        return p;
    }

private:
    std::vector<void*> bufs_;
    size_t cap_ = 0;
    bool zero_pending_ = false;  // get_zeroed: the newest buffer's zero region may not be zero yet
};
#endif

}  // namespace cuda
}  // namespace strata
