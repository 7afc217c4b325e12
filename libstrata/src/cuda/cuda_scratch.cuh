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
    // counters, cuda_attention_decode.cu, and the hand-off's, cuda_handoff.cuh; always the same
    // zero_bytes). A new buffer is zeroed once: by a memset enqueued on `stream` outside graph
    // capture, and while `stream` is being recorded by a memset on a private stream that the host
    // waits for (nothing can be using a buffer that did not exist), so no recorded graph carries a
    // memset node between its kernels.
    void* get_zeroed(size_t bytes, size_t zero_bytes, cudaStream_t stream) {
        void* p = get(bytes);
        if (zero_pending_) {
            cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
            check(cudaStreamIsCapturing(stream, &st), "cudaStreamIsCapturing");
            if (st == cudaStreamCaptureStatusNone) {
                check(cudaMemsetAsync(p, 0, zero_bytes, stream), "cudaMemsetAsync (scratch counters)");
            } else {
                cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // host-side work, not the recording's
                (void)cudaThreadExchangeStreamCaptureMode(&mode);
                cudaStream_t side = nullptr;
                cudaError_t err = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
                if (err == cudaSuccess) err = cudaMemsetAsync(p, 0, zero_bytes, side);
                if (err == cudaSuccess) err = cudaStreamSynchronize(side);
                if (side != nullptr) (void)cudaStreamDestroy(side);
                (void)cudaThreadExchangeStreamCaptureMode(&mode);
                check(err, "cudaMemsetAsync (scratch counters, outside the recording)");
            }
            zero_pending_ = false;
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
