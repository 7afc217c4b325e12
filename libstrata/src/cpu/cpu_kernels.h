// cpu_kernels.h — the CPU backend's kernels, one function per op.
//
// Each takes the backend's thread pool and the already-validated argument
// struct from backend.h, and computes synchronously (the CPU "stream" is the
// calling thread). Work is split over output rows, columns or heads, never
// over a reduction, and every output's arithmetic is independent of the split
// and of the other rows (see docs/kernels.md).
#pragma once

#include "core/backend.h"
#include "thread_pool.h"

namespace strata {
namespace cpu {

void embed(ThreadPool& pool, const EmbedArgs& a);
void rmsnorm(ThreadPool& pool, const RmsNormArgs& a);
void matmul(ThreadPool& pool, const MatmulArgs& a);
void matmul_ex(ThreadPool& pool, const MatmulArgs& a);  // prologue / strided rows, then matmul
void rope(ThreadPool& pool, const RopeArgs& a);
void kv_store(ThreadPool& pool, const KvStoreArgs& a);
void attention(ThreadPool& pool, const AttentionArgs& a);
void attention_dense(ThreadPool& pool, const DenseAttentionArgs& a);
void silu_mul(ThreadPool& pool, const SiluMulArgs& a);
void gelu(ThreadPool& pool, const UnaryArgs& a);
void scale(ThreadPool& pool, const UnaryArgs& a);
void add(ThreadPool& pool, const BinaryArgs& a);
void gather_rows(ThreadPool& pool, const GatherRowsArgs& a);
void positions_decode(const PositionsDecodeArgs& a);
void argmax(ThreadPool& pool, const ArgmaxArgs& a);
void sample(ThreadPool& pool, const SampleArgs& a);
void logits_adjust(ThreadPool& pool, const LogitsAdjustArgs& a);  // cpu_logits.cpp

// Splits [0, n) into `parts` contiguous ranges; returns range `t` (a chunk).
inline void split_range(int64_t n, int t, int parts, int64_t* begin, int64_t* end) {
    *begin = n * t / parts;
    *end = n * (t + 1) / parts;
}

// Chunks worth splitting `work` units (roughly one multiply-add each) into:
// none below ~16K units, then up to 4 per thread so that a slow thread's
// share is picked up by the others.
inline int64_t chunks_for(const ThreadPool& pool, int64_t work) {
    if (pool.size() == 1 || work < (int64_t(1) << 14)) return 1;
    const int64_t most = 4 * int64_t(pool.size());
    return (work >> 14) < most ? (work >> 14) : most;
}

}  // namespace cpu
}  // namespace strata
