// cpu_simd.h — AVX2/FMA/F16C building blocks shared by the CPU kernels.
//
// Everything here has a fixed evaluation order: horizontal sums and maxima
// always combine lanes the same way, and exp256 is one deterministic
// polynomial, so a kernel that uses them computes each output from its own
// inputs alone. Files that include this are compiled with -march=x86-64-v3
// and -ffp-contract=off (no silent FMA contraction).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace strata {
namespace cpu {

// Lane sum in a fixed order: (l0+l4, l1+l5, l2+l6, l3+l7), then (a0+a2, a1+a3), then b0+b1.
inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Mask selecting the first n (0..8) lanes.
inline __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load_first(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
inline void store_first(float* p, __m256 v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }

inline float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f32_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// 8 F16 values (unaligned) to F32.
inline __m256 load_f16x8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 BF16 values (unaligned) to F32.
inline __m256 load_bf16x8(const uint16_t* p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// e^x per lane: Cody-Waite reduction and a degree-6 polynomial (about 1 ulp
// for normal results). x < -87.336 gives 0 (no denormals), x > 88.722 gives
// +inf, NaN stays NaN.
inline __m256 exp256(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3365447f), hi = _mm256_set1_ps(88.7228391f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    // 2^n split in two halves so that each stays a normal float for n in [-126, 128].
    __m256i n = _mm256_cvtps_epi32(fx);
    __m256i n1 = _mm256_srai_epi32(n, 1);
    __m256i n2 = _mm256_sub_epi32(n, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// The same function for one value (lane 0 of exp256), so scalar and vector
// paths agree bit for bit.
inline float exp1(float x) { return _mm256_cvtss_f32(exp256(_mm256_set1_ps(x))); }

}  // namespace cpu
}  // namespace strata
