// cpu_matmul_int.h — the CPU matmul's integer path (the types of
// core/int8_path.h): the same arithmetic as CUDA's cuda_int_matmul.cu, so the
// two backends differ only where their prologues round differently.
//
// Per matmul, each activation row is rounded once to int8 blocks of 32 values
// (quantize_int8_row): a = max|x| over the block (NaN counts as +inf),
// dx = a/127 (one float32 division), xq = clamp(rint(x/dx), ±127) with ties to
// even (0 for the whole block when dx is 0 or not finite), sx = Σxq (exact).
// A block's product with the weights' integer quants is an exact integer I
// (int16 multiply-adds, any order). The float steps, per (row, output):
//   acc   = fmaf(d·dx, I, acc)              every block (Q4_0: I = Σ(q−8)·xq)
//   total = acc of slice 0, then total + acc of each further slice of 8 blocks
// — the order CUDA's int_block_fold and slice fold use, so for the same
// float32 x both backends give the same bits. Every row runs the same
// instructions whatever the number of rows sharing the call (R) or the
// output columns taken together (C): batch-invariant.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu_matmul_dot.h"
#include "cpu_simd.h"
#include "strata.h"

namespace strata {
namespace cpu {

// One 32-value activation block rounded to int8 (see above).
struct Int8Block {
    float d;      // dx, the step
    int32_t s;    // sx = Σ q
    int8_t q[32];
};

constexpr int kIntSliceBlocks = 8;  // blocks per slice: CUDA's kIntSliceBlocks

inline void quantize_int8_row(const float* x, int64_t k, Int8Block* out) {
    const __m256 sign = _mm256_set1_ps(-0.0f), fmax = _mm256_set1_ps(3.402823466e38f);
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t b = 0; b < k / 32; b++, x += 32) {
        __m256 v[4], a = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            const __m256 m = _mm256_andnot_ps(sign, v[i]);
            a = _mm256_max_ps(a, _mm256_blendv_ps(inf, m, _mm256_cmp_ps(m, fmax, _CMP_LE_OQ)));  // NaN, inf: +inf
        }
        const float d = hmax(a) / 127.0f;
        Int8Block& o = out[b];
        o.d = d;
        alignas(32) int32_t q[32] = {};
        if (d > 0.0f && d <= 3.402823466e38f) {
            const __m256 vd = _mm256_set1_ps(d);
            for (int i = 0; i < 4; i++) {
                __m256 t = _mm256_round_ps(_mm256_div_ps(v[i], vd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);
                _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * i), _mm256_cvttps_epi32(t));
            }
        }
        int32_t s = 0;
        for (int i = 0; i < 32; i++) o.q[i] = int8_t(q[i]), s += q[i];
        o.s = s;
    }
}

// Exact Σ over 8 int32 lanes.
inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// A weight block as 32 int16 values (lo: values 0..15, hi: 16..31) and its scale.
struct IntWeights {
    __m256i lo, hi;
    float d, m;
};

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Q8_0: {f16 d, int8 q[32]}.
struct IntQ8_0 {
    static constexpr int kBytes = 34;
    static constexpr bool kMin = false;
    static IntWeights load(const uint8_t* w) {
        return {_mm256_cvtepi8_epi16(load16(w + 2)), _mm256_cvtepi8_epi16(load16(w + 18)), f16_to_f32(load_u16(w)), 0.0f};
    }
};

// Q4_0: {f16 d, 16 bytes}; value j = lo(byte j) − 8, value 16 + j = hi(byte j) − 8.
struct IntQ4_0 {
    static constexpr int kBytes = 18;
    static constexpr bool kMin = false;
    static IntWeights load(const uint8_t* w) {
        const __m128i b = load16(w + 2), low4 = _mm_set1_epi8(15);
        const __m256i eight = _mm256_set1_epi16(8);
        return {_mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(b, low4)), eight),
                _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(b, 4), low4)), eight),
                f16_to_f32(load_u16(w)), 0.0f};
    }
};

// Q4_1: {f16 d, f16 m, 16 bytes}; value d·q + m, q the nibble (0..15):
// acc = fmaf(d·dx, Σq·xq, acc), then acc = fmaf(m, dx·sx, acc) (CUDA's order).
struct IntQ4_1 {
    static constexpr int kBytes = 20;
    static constexpr bool kMin = true;
    static IntWeights load(const uint8_t* w) {
        const __m128i b = load16(w + 4), low4 = _mm_set1_epi8(15);
        return {_mm256_cvtepu8_epi16(_mm_and_si128(b, low4)),
                _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(b, 4), low4)),
                f16_to_f32(load_u16(w)), f16_to_f32(load_u16(w + 2))};
    }
};

// R activation rows (in.xq) times C weight rows (w, w + w_stride, ...);
// out[c * R + r]. k is a multiple of 32.
template <class F, int R, int C = 1>
void dot_int(const DotRows& in, const uint8_t* w, int64_t w_stride, int64_t k, float* out) {
    const int64_t nb = k / 32;
    float total[C][R] = {};
    for (int64_t s0 = 0; s0 < nb; s0 += kIntSliceBlocks) {
        const int64_t s1 = std::min<int64_t>(nb, s0 + kIntSliceBlocks);
        float acc[C][R] = {};
        for (int64_t b = s0; b < s1; b++) {
            IntWeights wb[C];
            for (int c = 0; c < C; c++) wb[c] = F::load(w + c * w_stride + b * F::kBytes);
            for (int r = 0; r < R; r++) {
                const Int8Block& xb = in.xq[r][b];
                const __m256i xlo = _mm256_cvtepi8_epi16(load16(reinterpret_cast<const uint8_t*>(xb.q)));
                const __m256i xhi = _mm256_cvtepi8_epi16(load16(reinterpret_cast<const uint8_t*>(xb.q) + 16));
                for (int c = 0; c < C; c++) {
                    const int32_t dot = hsum_i32(_mm256_add_epi32(_mm256_madd_epi16(wb[c].lo, xlo),
                                                                  _mm256_madd_epi16(wb[c].hi, xhi)));
                    float a = __builtin_fmaf(wb[c].d * xb.d, float(dot), acc[c][r]);
                    if constexpr (F::kMin) a = __builtin_fmaf(wb[c].m, xb.d * float(xb.s), a);
                    acc[c][r] = a;
                }
            }
        }
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++) total[c][r] = s0 == 0 ? acc[c][r] : total[c][r] + acc[c][r];
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * R + r] = total[c][r];
}

}  // namespace cpu
}  // namespace strata
