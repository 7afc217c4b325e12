// cpu_matmul_dot_blocks.h — the CPU matmul's inner loop for the types whose
// blocks are decoded whole before the dot products (Q5_K, IQ4_NL, IQ4_XS;
// decoders in cpu_quant_blocks.h), in the scheme of cpu_matmul_dot.h: per
// 32-value sub-block j of a row,
//   s     = x[0:8]*q[0:8] + ... (one mul, then FMAs, in order; q exact integers)
//   total = fma(d_j, s, total)
//   macc  = fma(m_j, sum(x over sub-block), macc)   (Q5_K's min term)
//   y     = hsum(total) − macc
// The block is decoded once for up to 4 rows, each row running the same
// instruction sequence as alone, so results are batch-invariant.
#pragma once

#include "cpu_matmul_dot.h"
#include "cpu_quant_blocks.h"

namespace strata {
namespace cpu {

struct BlocksQ5K {
    static constexpr int kValues = 256, kBytes = 176, kSubs = 8;
    static constexpr bool kMin = true;
    static void decode(const uint8_t* w, int8_t* q, float* d, float* m) { decode_q5_k(w, q, d, m); }
};
struct BlocksIq4Nl {
    static constexpr int kValues = 32, kBytes = 18, kSubs = 1;
    static constexpr bool kMin = false;
    static void decode(const uint8_t* w, int8_t* q, float* d, float*) { decode_iq4_nl(w, q, d); }
};
struct BlocksIq4Xs {
    static constexpr int kValues = 256, kBytes = 136, kSubs = 8;
    static constexpr bool kMin = false;
    static void decode(const uint8_t* w, int8_t* q, float* d, float*) { decode_iq4_xs(w, q, d); }
};

template <class B, int R>
void dot_blocks(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    alignas(32) int8_t q[B::kValues];
    float d[B::kSubs], m[B::kSubs];
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t b = 0; b < k / B::kValues; b++, w += B::kBytes) {
        B::decode(w, q, d, m);
        for (int j = 0; j < B::kSubs; j++) {
            const int8_t* qj = q + 32 * j;
            const __m256 q0 = f32_of(load8_i8(qj)), q1 = f32_of(load8_i8(qj + 8));
            const __m256 q2 = f32_of(load8_i8(qj + 16)), q3 = f32_of(load8_i8(qj + 24));
            const __m256 dj = _mm256_set1_ps(d[j]);
            const int64_t sub = b * B::kSubs + j;
            for (int r = 0; r < R; r++) {
                total[r] = _mm256_fmadd_ps(dj, dot32(in.x[r] + 32 * sub, q0, q1, q2, q3), total[r]);
                if constexpr (B::kMin) macc[r] = __builtin_fmaf(m[j], in.sx[r][kSumStride * sub + 1], macc[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) out[r] = hsum(total[r]) - macc[r];
}

}  // namespace cpu
}  // namespace strata
