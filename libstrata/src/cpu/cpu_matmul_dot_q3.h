// cpu_matmul_dot_q3.h — the CPU matmul's inner loops for the low-bit types
// Q2_K, Q3_K and IQ3_S (decoders in cpu_quant_low.h), in the scheme of
// cpu_matmul_dot.h: the block is decoded once into exact integer quants, then
// every row runs the same instruction sequence as alone (batch-invariant).
//
// Q2_K and Q3_K have 16-value sub-blocks; per sub-block i of a row:
//   s     = x[0:8]*q[0:8] + x[8:16]*q[8:16]   (one mul, then one FMA)
//   total = fma(d_i, s, total)                  (8 lanes)
//   mins  = fma(m_i, x[0:8] + x[8:16], mins)    (Q2_K's min term, 8 lanes)
//   y     = hsum(total) − hsum(mins)
// IQ3_S has 32-value sub-blocks and no min: cpu_matmul_dot_blocks.h's loop.
#pragma once

#include "cpu_matmul_dot.h"
#include "cpu_matmul_dot_blocks.h"
#include "cpu_quant_low.h"

namespace strata {
namespace cpu {

struct BlocksQ2K {
    static constexpr int kBytes = 84;
    static constexpr bool kMin = true;
    static void decode(const uint8_t* w, int8_t* q, float* d, float* m) { decode_q2_k(w, q, d, m); }
};
struct BlocksQ3K {
    static constexpr int kBytes = 110;
    static constexpr bool kMin = false;
    static void decode(const uint8_t* w, int8_t* q, float* d, float*) { decode_q3_k(w, q, d); }
};
struct BlocksIq3S {
    static constexpr int kValues = 256, kBytes = 110, kSubs = 8;
    static constexpr bool kMin = false;
    static void decode(const uint8_t* w, int8_t* q, float* d, float*) { decode_iq3_s(w, q, d); }
};

// 256-value super-blocks of 16 sub-blocks of 16 values.
template <class B, int R>
void dot_blocks16(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    alignas(32) int8_t q[256];
    float d[16], m[16];
    __m256 total[R], mins[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), mins[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / 256; b++, w += B::kBytes) {
        B::decode(w, q, d, m);
        for (int i = 0; i < 16; i++) {
            const __m256 q0 = f32_of(load8_i8(q + 16 * i)), q1 = f32_of(load8_i8(q + 16 * i + 8));
            const __m256 di = _mm256_set1_ps(d[i]);
            for (int r = 0; r < R; r++) {
                const float* x = in.x[r] + 256 * b + 16 * i;
                const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
                total[r] = _mm256_fmadd_ps(di, _mm256_fmadd_ps(x1, q1, _mm256_mul_ps(x0, q0)), total[r]);
                if constexpr (B::kMin) mins[r] = _mm256_fmadd_ps(_mm256_set1_ps(m[i]), _mm256_add_ps(x0, x1), mins[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) out[r] = B::kMin ? hsum(total[r]) - hsum(mins[r]) : hsum(total[r]);
}

}  // namespace cpu
}  // namespace strata
