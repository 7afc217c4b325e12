// cpu_matmul.cpp — y = x·Wᵀ on the CPU, weights dequantized on the fly.
//
// Chunks are contiguous ranges of output columns (weight rows), so each
// streams its own part of W once. Within a range, columns are tiled so that a
// tile of W stays in cache while groups of up to 4 activation rows pass over
// it (single rows take two columns per pass); the inner loops
// (cpu_matmul_dot.h) give each (row, column) the same arithmetic whatever the
// grouping, so results are batch-invariant.
#include <algorithm>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_matmul_dot.h"
#include "cpu_matmul_dot_blocks.h"
#include "cpu_matmul_dot_q3.h"
#include "cpu_matmul_dot_q5.h"
#include "core/dtype.h"
#include "core/errors.h"

namespace strata {
namespace cpu {
namespace {

// (rows, weight row, weight row stride, k, out[column * R + row])
using DotFn = void (*)(const DotRows&, const uint8_t*, int64_t, int64_t, float*);

struct DotKernel {
    DotFn fn[4];    // for 1..4 rows, one column
    DotFn pair;     // one row, two columns (nullptr: use fn[0] twice)
    bool needs_sx;  // uses per-row 32-block sums
};

#define STRATA_DOT_KERNEL(f, pair, sx) DotKernel{{&f<1>, &f<2>, &f<3>, &f<4>}, pair, sx}

template <int R> void dot_f32(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_plain<LoadF32, R>(in, w, s, k, out); }
template <int R> void dot_f16(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_plain<LoadF16, R>(in, w, s, k, out); }
template <int R> void dot_bf16(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_plain<LoadBF16, R>(in, w, s, k, out); }
template <int R> void dot_q8_0_1(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_q8_0<R, 1>(in, w, s, k, out); }
template <int R> void dot_q5_k(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks<BlocksQ5K, R>(in, w, s, k, out); }
template <int R> void dot_iq4_nl(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks<BlocksIq4Nl, R>(in, w, s, k, out); }
template <int R> void dot_iq4_xs(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks<BlocksIq4Xs, R>(in, w, s, k, out); }
template <int R> void dot_q2_k(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks16<BlocksQ2K, R>(in, w, s, k, out); }
template <int R> void dot_q3_k(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks16<BlocksQ3K, R>(in, w, s, k, out); }
template <int R> void dot_iq3_s(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_blocks<BlocksIq3S, R>(in, w, s, k, out); }
template <int R> void dot_q4_1_1(const DotRows& in, const uint8_t* w, int64_t s, int64_t k, float* out) { dot_q4_1<R, 1>(in, w, s, k, out); }

DotKernel kernel_for(int32_t dtype) {
    switch (dtype) {
        case STRATA_F32: return STRATA_DOT_KERNEL(dot_f32, nullptr, false);
        case STRATA_F16: return STRATA_DOT_KERNEL(dot_f16, nullptr, false);
        case STRATA_BF16: return STRATA_DOT_KERNEL(dot_bf16, nullptr, false);
        case STRATA_Q8_0: return STRATA_DOT_KERNEL(dot_q8_0_1, (&dot_q8_0<1, 2>), false);
        case STRATA_Q4_0: return STRATA_DOT_KERNEL(dot_q4_0, nullptr, false);
        case STRATA_Q4_1: return STRATA_DOT_KERNEL(dot_q4_1_1, (&dot_q4_1<1, 2>), true);
        case STRATA_Q5_0: return STRATA_DOT_KERNEL(dot_q5_0, nullptr, false);
        case STRATA_Q5_1: return STRATA_DOT_KERNEL(dot_q5_1, nullptr, true);
        case STRATA_Q4_K: return STRATA_DOT_KERNEL(dot_q4_k, nullptr, true);
        case STRATA_Q5_K: return STRATA_DOT_KERNEL(dot_q5_k, nullptr, true);
        case STRATA_IQ4_NL: return STRATA_DOT_KERNEL(dot_iq4_nl, nullptr, false);
        case STRATA_IQ4_XS: return STRATA_DOT_KERNEL(dot_iq4_xs, nullptr, false);
        case STRATA_Q6_K: return STRATA_DOT_KERNEL(dot_q6_k, nullptr, false);
        case STRATA_Q2_K: return STRATA_DOT_KERNEL(dot_q2_k, nullptr, false);
        case STRATA_Q3_K: return STRATA_DOT_KERNEL(dot_q3_k, nullptr, false);
        case STRATA_IQ3_S: return STRATA_DOT_KERNEL(dot_iq3_s, nullptr, false);
        default: fail(STRATA_ERR_INTERNAL, "cpu matmul: unhandled dtype " + std::to_string(dtype));
    }
}

constexpr int kRowGroup = 4;
// Single rows stream W from memory: prefetch the weight rows this many bytes
// ahead (measured on a 2-core EPYC: ~20% faster decode than hardware
// prefetching alone; 2-4 KiB all did about as well).
constexpr int64_t kPrefetchBytes = 3072;

// Prefetches `count` (<= 0: none) weight rows starting at row `first`.
inline void prefetch_rows(const uint8_t* w, int64_t row_bytes, int64_t first, int64_t count) {
    const uint8_t* p = w + first * row_bytes;
    for (int64_t off = 0; off < count * row_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

constexpr int64_t kTileBytes = 48 * 1024;  // weight bytes per column tile

// The finished value of y[r, o]: y = (accumulate ? y : 0) + (dot + bias).
inline void finish(const MatmulArgs& a, int64_t r, int64_t o, float dot) {
    float v = dot;
    if (a.bias != nullptr) v = v + a.bias[o];
    float* y = a.y + r * (a.y_row_stride > 0 ? a.y_row_stride : a.n_out) + o;  // a part of a wider row
    *y = a.accumulate ? *y + v : v;
}

// Columns [o_begin, o_end) of every row.
void matmul_columns(const MatmulArgs& a, const DotKernel& kern, int64_t o_begin, int64_t o_end) {
    const int64_t row_bytes = dtype_row_bytes(a.w_dtype, a.k);
    const int64_t n_blocks32 = a.k / 32;
    thread_local std::vector<float> sx;
    if (kern.needs_sx) {
        sx.resize(size_t(a.n_rows * n_blocks32 * kSumStride));
        for (int64_t r = 0; r < a.n_rows; r++)
            block_sums(a.x + r * a.k, n_blocks32, sx.data() + r * n_blocks32 * kSumStride);
    }
    const int64_t tile = std::max<int64_t>(8, kTileBytes / row_bytes);
    const int64_t ahead = (kPrefetchBytes / row_bytes + 1) & ~int64_t(1);  // even: pairs stay aligned
    const uint8_t* w = static_cast<const uint8_t*>(a.w);
    for (int64_t t0 = o_begin; t0 < o_end; t0 += tile) {
        const int64_t t1 = std::min(o_end, t0 + tile);
        for (int64_t r0 = 0; r0 < a.n_rows; r0 += kRowGroup) {
            const int n = int(std::min<int64_t>(kRowGroup, a.n_rows - r0));
            DotRows rows{};
            for (int i = 0; i < n; i++) {
                rows.x[i] = a.x + (r0 + i) * a.k;
                rows.sx[i] = kern.needs_sx ? sx.data() + (r0 + i) * n_blocks32 * kSumStride : nullptr;
            }
            const DotFn fn = kern.fn[n - 1];
            float out[2 * kRowGroup];
            int64_t o = t0;
            if (n == 1 && kern.pair != nullptr) {
                for (; o + 2 <= t1; o += 2) {
                    prefetch_rows(w, row_bytes, o + ahead, std::min<int64_t>(2, a.n_out - o - ahead));
                    kern.pair(rows, w + o * row_bytes, row_bytes, a.k, out);
                    finish(a, r0, o, out[0]);
                    finish(a, r0, o + 1, out[1]);
                }
            }
            for (; o < t1; o++) {
                if (n == 1) prefetch_rows(w, row_bytes, o + ahead, std::min<int64_t>(1, a.n_out - o - ahead));
                fn(rows, w + o * row_bytes, row_bytes, a.k, out);
                for (int i = 0; i < n; i++) finish(a, r0 + i, o, out[i]);
            }
        }
    }
}

}  // namespace

void matmul(ThreadPool& pool, const MatmulArgs& a) {
    const DotKernel kern = kernel_for(a.w_dtype);
    const int64_t n_chunks = std::min(chunks_for(pool, a.n_rows * a.n_out * a.k), a.n_out);
    pool.run(n_chunks, [&](int t, int parts) {
        int64_t o_begin, o_end;
        split_range(a.n_out, t, parts, &o_begin, &o_end);
        matmul_columns(a, kern, o_begin, o_end);
    });
}

}  // namespace cpu
}  // namespace strata
