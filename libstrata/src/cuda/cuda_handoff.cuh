// cuda_handoff.cuh — the activation hand-off between two integer matmuls
// (strata_matmul_params.handoff_*; docs/cuda_backend.md, "activation hand-off").
//
// Every integer matmul rounds its activations to int8 blocks first (the
// pre-pass of cuda_int_matmul.cu: xq, meta, RMSNORM's ssq per chunk). In a
// decoder layer each matmul's y is the next one's x (o -> gate_up -> down ->
// the next layer's qkv), so the producing call can write the next call's
// blocks itself: the one-row dot kernel rounds each chunk of 256 values in the
// epilogue of whichever CTA finishes that chunk last; every other kernel is
// followed by the pre-pass, into the hand-off buffer. Either way the blocks
// are the pre-pass's bits (the same per-element functions, the same ssq
// reduction shape), and the consumer reads them instead of running its own
// pre-pass: one launch fewer per matmul at one row, no bit changed.
//
// Two buffers alternate: an emitting call reads its own x from one (when it
// uses a hand-off too) while it writes the other. Counters of the dot
// kernel's last-arrival protocol live in their own zeroed buffer; the CTA that
// completes a chunk resets its counter, so they are zero between kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/env_switch.h"
#include "cuda_common.cuh"

namespace strata {
namespace cuda {

// One prepared x: the pre-pass's layout for n_rows x k (xq [row][k], meta [row][nbp], ssq [row][nchunks]).
// ssq_blocks: ssq holds RMSNORM's sums of squares per block ([row][nb], a local emission) rather
// than per chunk ([row][nchunks]); the region has room for either.
struct HandoffView {
    int8_t* xq = nullptr;
    uint2* meta = nullptr;
    float* ssq = nullptr;
    bool ssq_blocks = false;
};

// How an emission is made (STRATA_HANDOFF, read by handoff_mode() in cuda_int_matmul.cu).
enum class HandoffMode { kLocal, kCounted, kPrepass };
// STRATA_HANDOFF_LOCAL_PARTS' default: the most 8-slice parts of a local emission's matmul. 2 = o at 8B
// and 1B (k 4,096 / 2,048), every producer at 135M; the 32-output shape costs down at 8B / 1B more than
// the launch it saves (bench/RESULTS.md, 2026-12-03 afternoon).
constexpr int kHandoffLocalParts = 2;

// strata_attention_handoff: the decode attention kernel rounds o's input itself only up to this k (the
// attention width); wider rows take the pre-pass launch after it (the launch count of o's own pre-pass).
// Why a limit: without a kernel in between, o's CTAs become resident as soon as every attention block
// is, and their early weights (cuda_pdl.cuh) stream while attention's latency-bound loads run. On the
// H200 (bench/RESULTS.md, 2026-12-03 night) that cost the 8B (k 4,096) 2.5 % at first, so the limit
// was 2,048. Once the narrow attention blocks halved that kernel the trade turned: on an H100
// (bench/RESULTS.md, 2026-12-07 fifth session) 4,096 took the 8B's tg128 from 435-436 to 441-442 tok/s.
// Wider rows (8,192 and up) were never measured, so they keep the launch.
constexpr int64_t kHandoffAttentionMaxK = 4096;

// STRATA_HANDOFF_ATTENTION_MAX_K (strata/env.py; read at each call): that limit, for A/B.
inline int64_t handoff_attention_max_k() {
    return env_whole("STRATA_HANDOFF_ATTENTION_MAX_K", kHandoffAttentionMaxK, 0, (int64_t)1 << 30,
                     "a whole number of values (0: attention never rounds o's input itself)");
}

// Chunks (of 256 values: 8 blocks, the pre-pass's CTA) one emitting dot kernel may count.
constexpr int kHandoffMaxChunks = 4096;

}  // namespace cuda
}  // namespace strata

#ifndef STRATA_CUDA_EMU
#include "cuda_scratch.cuh"

namespace strata {
namespace cuda {

// The pre-pass layout's byte offsets for n_rows x k.
struct PrepassLayout {
    size_t meta_off, ssq_off, bytes;
    PrepassLayout(int64_t n_rows, int64_t k) {
        const int64_t nb = k / 32, nbp = (nb + 1) / 2 * 2, nchunks = (nb + 7) / 8;
        const size_t xq_bytes = (size_t)n_rows * (size_t)k;
        meta_off = (xq_bytes + 255) / 256 * 256;
        const size_t meta_bytes = (size_t)n_rows * (size_t)nbp * sizeof(uint2);
        ssq_off = meta_off + (meta_bytes + 255) / 256 * 256;
        bytes = ssq_off + (size_t)n_rows * (size_t)std::max(nb, nchunks) * sizeof(float);
    }
    HandoffView at(void* base) const {
        uint8_t* s = static_cast<uint8_t*>(base);
        return HandoffView{reinterpret_cast<int8_t*>(s), reinterpret_cast<uint2*>(s + meta_off),
                           reinterpret_cast<float*>(s + ssq_off)};
    }
};

// A context's hand-off state (one per CudaBackend, so per stream).
class Handoff {
public:
    // The buffer for the next emission (the one the latest emission did not use).
    HandoffView next(int64_t n_rows, int64_t k) {
        const PrepassLayout lay(n_rows, k);
        return lay.at(bufs_[side_ ^ 1].get(lay.bytes));
    }
    // The dot kernel's arrival counters (kHandoffMaxChunks ints), zero when the next work on `stream` runs.
    int* counters(cudaStream_t stream) {
        const size_t bytes = kHandoffMaxChunks * sizeof(int);
        return static_cast<int*>(counters_.get_zeroed(bytes, bytes, stream));
    }
    // After an emitting call: `v` now holds the prepared x when `valid` (else consumers pre-pass themselves).
    void publish(const HandoffView& v, bool valid) {
        side_ ^= 1;
        latest_ = v;
        valid_ = valid;
    }
    // The latest emission, or null when it prepared nothing.
    const HandoffView* latest() const { return valid_ ? &latest_ : nullptr; }

private:
    Scratch bufs_[2];
    Scratch counters_;
    int side_ = 0;
    HandoffView latest_;
    bool valid_ = false;
};

}  // namespace cuda
}  // namespace strata
#endif
