// cpu_matmul_dot_q5.h — the CPU matmul's inner loops for Q5_0 and Q5_1
// weights, in the scheme of cpu_matmul_dot.h: each 32-value block decoded
// once into four 8-lane vectors of exact integer quants, then for every row
//   s     = x[0:8]*q[0:8] + ... (one mul, then FMAs, in order)
//   total = fma(d, s, total)
//   macc  = fma(m, sum(x over block), macc)   (Q5_1 only)
// so a row's result does not depend on how many rows share the call.
//
// Layouts (gguf-py quants.py): Q5_0 = {f16 d, u32 qh, 16 bytes qs} (22 bytes),
// value j = d * ((nibble j | bit j of qh << 4) - 16), nibble j the low nibble
// of qs[j] for j < 16 and the high nibble of qs[j - 16] otherwise. Q5_1 =
// {f16 d, f16 m, u32 qh, 16 bytes qs} (24 bytes), value d * q + m (q in 0..31).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_matmul_dot.h"

namespace strata {
namespace cpu {

// The four 8-value groups of one Q5 block as float vectors: quants of values
// 0-7, 8-15, 16-23, 24-31 (before the -16 offset of Q5_0).
inline void q5_quants(const uint8_t* qh_bytes, const uint8_t* qs, __m256 (&q)[4], int offset) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    const __m256i low4 = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1), off = _mm256_set1_epi32(offset);
    const __m256i shifts = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i bits = _mm256_set1_epi32(int32_t(qh));
    const __m256i va = load8_u8(qs), vb = load8_u8(qs + 8);
    const __m256i nib[4] = {_mm256_and_si256(va, low4), _mm256_and_si256(vb, low4), _mm256_srli_epi32(va, 4),
                            _mm256_srli_epi32(vb, 4)};
    for (int g = 0; g < 4; g++) {
        const __m256i sh = _mm256_add_epi32(shifts, _mm256_set1_epi32(8 * g));
        const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(bits, sh), one), 4);
        q[g] = f32_of(_mm256_sub_epi32(_mm256_or_si256(nib[g], hi), off));
    }
}

template <int R>
void dot_q5_0(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t b = 0; b < k / 32; b++, w += 22) {
        const __m256 d = bcast_f16(w);
        __m256 q[4];
        q5_quants(w + 2, w + 6, q, 16);
        for (int r = 0; r < R; r++)
            total[r] = _mm256_fmadd_ps(d, dot32(in.x[r] + 32 * b, q[0], q[1], q[2], q[3]), total[r]);
    }
    store_results<R>(total, macc, out);
}

// Q5_1: the min term as in Q4_1 — lane 1 of a 4-lane FMA of {d, m} against
// the block's {0, sum(x), 0, 0}.
template <int R>
void dot_q5_1(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    __m256 total[R];
    __m128 macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = _mm_setzero_ps();
    for (int64_t b = 0; b < k / 32; b++, w += 24) {
        int32_t dm_bits;
        std::memcpy(&dm_bits, w, 4);
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dm_bits));  // {d, m, 0, 0}
        const __m256 d = _mm256_broadcastss_ps(dm);
        __m256 q[4];
        q5_quants(w + 4, w + 8, q, 0);
        for (int r = 0; r < R; r++) {
            total[r] = _mm256_fmadd_ps(d, dot32(in.x[r] + 32 * b, q[0], q[1], q[2], q[3]), total[r]);
            macc[r] = _mm_fmadd_ps(dm, _mm_loadu_ps(in.sx[r] + kSumStride * b), macc[r]);
        }
    }
    for (int r = 0; r < R; r++) out[r] = hsum(total[r]) + _mm_cvtss_f32(_mm_movehdup_ps(macc[r]));
}

}  // namespace cpu
}  // namespace strata
