// cpu_matmul_dot.h — the CPU matmul's inner loops: dot products of up to 4
// activation rows with one weight row, dequantizing the weights block by
// block in registers.
//
// Batch invariance: a kernel instantiated for R rows decodes each weight block
// once and then runs, for every row, exactly the instruction sequence the
// R = 1 kernel runs (the row loop is unrolled around identical per-row code),
// so a row's result never depends on how many rows share the call. Per row:
//   s     = x[0:8]*q[0:8] + x[8:16]*q[8:16] + ... (one mul, then FMAs, in order)
//   total = fma(block scale, s, total)            (one 8-lane accumulator)
//   macc  = fma(block min, sum(x over block), macc)  (Q4_1, Q4_K)
//   y     = hsum(total) + macc                    (fixed lane order)
// Activations stay float32: no activation quantization.
#pragma once

#include <cstdint>

#include "cpu_simd.h"

namespace strata {
namespace cpu {

// The rows one call works on: row pointers and, for types with a min term,
// each row's sums over its 32-value blocks (block_sums layout).
struct DotRows {
    const float* x[4];
    const float* sx[4];
};

// Sums of x over each 32-value block (fixed order), for the min terms. Each
// block's sum is stored as {0, sum, 0, 0} (kSumStride floats), so Q4_1 can
// fold it in with one 4-lane FMA against the block's {d, m} pair.
constexpr int kSumStride = 4;

inline void block_sums(const float* x, int64_t n_blocks, float* sx) {
    for (int64_t b = 0; b < n_blocks; b++, x += 32, sx += kSumStride) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8));
        v = _mm256_add_ps(v, _mm256_loadu_ps(x + 16));
        v = _mm256_add_ps(v, _mm256_loadu_ps(x + 24));
        _mm_storeu_ps(sx, _mm_setr_ps(0.0f, hsum(v), 0.0f, 0.0f));
    }
}

// s = x[0:8]*q0 + x[8:16]*q1 + x[16:24]*q2 + x[24:32]*q3, evaluated in that order.
inline __m256 dot32(const float* x, __m256 q0, __m256 q1, __m256 q2, __m256 q3) {
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), q0);
    s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), q1, s);
    s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), q2, s);
    return _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), q3, s);
}

// The same with x read only for its first n (0..32) values (zeros after).
inline __m256 dot32_first(const float* x, int n, __m256 q0, __m256 q1, __m256 q2, __m256 q3) {
    __m256 s = _mm256_mul_ps(load_first(x, n), q0);
    s = _mm256_fmadd_ps(load_first(x + 8, n - 8), q1, s);
    s = _mm256_fmadd_ps(load_first(x + 16, n - 16), q2, s);
    return _mm256_fmadd_ps(load_first(x + 24, n - 24), q3, s);
}

inline __m256i load8_u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i load8_i8(const void* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 f32_of(__m256i v) { return _mm256_cvtepi32_ps(v); }
inline __m256 bcast_f16(const uint8_t* p) { return _mm256_set1_ps(f16_to_f32(load_u16(p))); }

template <int R>
inline void store_results(const __m256* total, const float* macc, float* out) {
    for (int r = 0; r < R; r++) out[r] = hsum(total[r]) + macc[r];
}

// Kernels take C weight rows (w, w + w_stride, ...) and R activation rows and
// write out[c * R + r]. C > 1 (two output columns at once, used for single-row
// calls) shares the activation loads; every (row, column) pair still runs the
// same operations as with R = C = 1.

// Q8_0: 34-byte blocks {f16 d, int8 q[32]}, value d*q.
template <int R, int C = 1>
void dot_q8_0(const DotRows& in, const uint8_t* w, int64_t w_stride, int64_t k, float* out) {
    __m256 total[C][R];
    float macc[C][R];
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) total[c][r] = _mm256_setzero_ps(), macc[c][r] = 0.0f;
    for (int64_t b = 0; b < k / 32; b++, w += 34) {
        __m256 d[C], q[C][4];
        for (int c = 0; c < C; c++) {
            const uint8_t* wc = w + c * w_stride;
            d[c] = bcast_f16(wc);
            for (int i = 0; i < 4; i++) q[c][i] = f32_of(load8_i8(wc + 2 + 8 * i));
        }
        for (int r = 0; r < R; r++) {
            const float* x = in.x[r] + 32 * b;
            const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
            const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
            for (int c = 0; c < C; c++) {
                __m256 s = _mm256_mul_ps(x0, q[c][0]);
                s = _mm256_fmadd_ps(x1, q[c][1], s);
                s = _mm256_fmadd_ps(x2, q[c][2], s);
                s = _mm256_fmadd_ps(x3, q[c][3], s);
                total[c][r] = _mm256_fmadd_ps(d[c], s, total[c][r]);
            }
        }
    }
    for (int c = 0; c < C; c++) store_results<R>(total[c], macc[c], out + c * R);
}

// Q4_0: 18-byte blocks {f16 d, 16 bytes}; x[j] = d*(lo(q[j]) - 8), x[j+16] = d*(hi(q[j]) - 8).
template <int R>
void dot_q4_0(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    const __m256i low4 = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t b = 0; b < k / 32; b++, w += 18) {
        const __m256 d = bcast_f16(w);
        const __m256i va = load8_u8(w + 2), vb = load8_u8(w + 10);
        const __m256 q0 = f32_of(_mm256_sub_epi32(_mm256_and_si256(va, low4), eight));
        const __m256 q1 = f32_of(_mm256_sub_epi32(_mm256_and_si256(vb, low4), eight));
        const __m256 q2 = f32_of(_mm256_sub_epi32(_mm256_srli_epi32(va, 4), eight));
        const __m256 q3 = f32_of(_mm256_sub_epi32(_mm256_srli_epi32(vb, 4), eight));
        for (int r = 0; r < R; r++)
            total[r] = _mm256_fmadd_ps(d, dot32(in.x[r] + 32 * b, q0, q1, q2, q3), total[r]);
    }
    store_results<R>(total, macc, out);
}

// Q4_1: 20-byte blocks {f16 d, f16 m, 16 bytes}; value d*q + m, computed as
// d*sum(x*q) + m*sum(x). {d, m} are converted together; lane 1 of a 4-lane
// FMA against the block's {0, sum(x), 0, 0} accumulates the min term.
template <int R, int C = 1>
void dot_q4_1(const DotRows& in, const uint8_t* w, int64_t w_stride, int64_t k, float* out) {
    const __m256i low4 = _mm256_set1_epi32(15);
    __m256 total[C][R];
    __m128 macc[C][R];
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) total[c][r] = _mm256_setzero_ps(), macc[c][r] = _mm_setzero_ps();
    for (int64_t b = 0; b < k / 32; b++, w += 20) {
        __m128 dm[C];
        __m256 d[C], q[C][4];
        for (int c = 0; c < C; c++) {
            const uint8_t* wc = w + c * w_stride;
            int32_t dm_bits;
            std::memcpy(&dm_bits, wc, 4);
            dm[c] = _mm_cvtph_ps(_mm_cvtsi32_si128(dm_bits));  // {d, m, 0, 0}
            d[c] = _mm256_broadcastss_ps(dm[c]);
            const __m256i va = load8_u8(wc + 4), vb = load8_u8(wc + 12);
            q[c][0] = f32_of(_mm256_and_si256(va, low4));
            q[c][1] = f32_of(_mm256_and_si256(vb, low4));
            q[c][2] = f32_of(_mm256_srli_epi32(va, 4));
            q[c][3] = f32_of(_mm256_srli_epi32(vb, 4));
        }
        for (int r = 0; r < R; r++) {
            const float* x = in.x[r] + 32 * b;
            const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
            const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
            const __m128 sx = _mm_loadu_ps(in.sx[r] + kSumStride * b);
            for (int c = 0; c < C; c++) {
                __m256 s = _mm256_mul_ps(x0, q[c][0]);
                s = _mm256_fmadd_ps(x1, q[c][1], s);
                s = _mm256_fmadd_ps(x2, q[c][2], s);
                s = _mm256_fmadd_ps(x3, q[c][3], s);
                total[c][r] = _mm256_fmadd_ps(d[c], s, total[c][r]);
                macc[c][r] = _mm_fmadd_ps(dm[c], sx, macc[c][r]);
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++)
            out[c * R + r] = hsum(total[c][r]) + _mm_cvtss_f32(_mm_movehdup_ps(macc[c][r]));
}

// Q4_K: 144-byte super-blocks of 256 {f16 d, f16 dmin, 12 bytes of 6-bit
// scales/mins, 128 bytes}; sub-block j value (d*sc_j)*q - (dmin*m_j).
template <int R>
void dot_q4_k(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    const __m256i low4 = _mm256_set1_epi32(15);
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t sb = 0; sb < k / 256; sb++, w += 144) {
        const float d = f16_to_f32(load_u16(w)), dmin = f16_to_f32(load_u16(w + 2));
        const uint8_t* s = w + 4;
        const uint8_t* qs = w + 16;
        for (int j = 0; j < 8; j++) {
            const int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
            const int mn = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
            const __m256 dsc = _mm256_set1_ps(d * float(sc));
            const float dm = dmin * float(mn);
            const uint8_t* q = qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            const __m256i v0 = load8_u8(q), v1 = load8_u8(q + 8), v2 = load8_u8(q + 16), v3 = load8_u8(q + 24);
            const __m256 q0 = f32_of(_mm256_and_si256(_mm256_srli_epi32(v0, shift), low4));
            const __m256 q1 = f32_of(_mm256_and_si256(_mm256_srli_epi32(v1, shift), low4));
            const __m256 q2 = f32_of(_mm256_and_si256(_mm256_srli_epi32(v2, shift), low4));
            const __m256 q3 = f32_of(_mm256_and_si256(_mm256_srli_epi32(v3, shift), low4));
            const int64_t sub = sb * 8 + j;
            for (int r = 0; r < R; r++) {
                total[r] = _mm256_fmadd_ps(dsc, dot32(in.x[r] + 32 * sub, q0, q1, q2, q3), total[r]);
                macc[r] = __builtin_fmaf(dm, in.sx[r][kSumStride * sub + 1], macc[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) out[r] = hsum(total[r]) - macc[r];
}

// Q6_K: 210-byte super-blocks of 256 {128 ql, 64 qh, int8 scales[16], f16 d};
// value (d*scale_g)*(q - 32) for 16-value group g.
template <int R>
void dot_q6_k(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
    alignas(32) int8_t q[256];
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    for (int64_t sb = 0; sb < k / 256; sb++, w += 210) {
        for (int n = 0; n < 2; n++) {
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * n));
            const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * n + 32));
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * n));
            const __m256i g0 = _mm256_or_si256(_mm256_and_si256(a, m0f), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
            const __m256i g1 = _mm256_or_si256(_mm256_and_si256(b, m0f), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
            const __m256i g2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m0f), _mm256_and_si256(h, m30));
            const __m256i g3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m0f),
                                               _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
            __m256i* dst = reinterpret_cast<__m256i*>(q + 128 * n);
            _mm256_store_si256(dst + 0, _mm256_sub_epi8(g0, c32));
            _mm256_store_si256(dst + 1, _mm256_sub_epi8(g1, c32));
            _mm256_store_si256(dst + 2, _mm256_sub_epi8(g2, c32));
            _mm256_store_si256(dst + 3, _mm256_sub_epi8(g3, c32));
        }
        const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
        const float d = f16_to_f32(load_u16(w + 208));
        for (int g = 0; g < 16; g++) {
            const __m256 dsc = _mm256_set1_ps(d * float(scales[g]));
            const __m256 q0 = f32_of(load8_i8(q + 16 * g)), q1 = f32_of(load8_i8(q + 16 * g + 8));
            for (int r = 0; r < R; r++) {
                const float* x = in.x[r] + 256 * sb + 16 * g;
                __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x), q0);
                s = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), q1, s);
                total[r] = _mm256_fmadd_ps(dsc, s, total[r]);
            }
        }
    }
    store_results<R>(total, macc, out);
}

// Plain types (F32, F16, BF16): 32-value chunks, total += s; a last partial
// chunk reads x masked and the weights through a zero-padded copy.
struct LoadF32 {
    static constexpr int kBytes = 4;
    static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct LoadF16 {
    static constexpr int kBytes = 2;
    static __m256 load(const uint8_t* p) { return load_f16x8(reinterpret_cast<const uint16_t*>(p)); }
};
struct LoadBF16 {
    static constexpr int kBytes = 2;
    static __m256 load(const uint8_t* p) { return load_bf16x8(reinterpret_cast<const uint16_t*>(p)); }
};

template <class L, int R>
void dot_plain(const DotRows& in, const uint8_t* w, int64_t, int64_t k, float* out) {
    __m256 total[R];
    float macc[R];
    for (int r = 0; r < R; r++) total[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
    const int64_t n_full = k / 32;
    for (int64_t b = 0; b < n_full; b++, w += 32 * L::kBytes) {
        const __m256 q0 = L::load(w), q1 = L::load(w + 8 * L::kBytes);
        const __m256 q2 = L::load(w + 16 * L::kBytes), q3 = L::load(w + 24 * L::kBytes);
        for (int r = 0; r < R; r++) total[r] = _mm256_add_ps(total[r], dot32(in.x[r] + 32 * b, q0, q1, q2, q3));
    }
    const int tail = int(k - 32 * n_full);
    if (tail > 0) {
        alignas(32) uint8_t pad[32 * 4] = {};
        std::memcpy(pad, w, size_t(tail) * L::kBytes);
        const __m256 q0 = L::load(pad), q1 = L::load(pad + 8 * L::kBytes);
        const __m256 q2 = L::load(pad + 16 * L::kBytes), q3 = L::load(pad + 24 * L::kBytes);
        for (int r = 0; r < R; r++)
            total[r] = _mm256_add_ps(total[r], dot32_first(in.x[r] + 32 * n_full, tail, q0, q1, q2, q3));
    }
    store_results<R>(total, macc, out);
}

}  // namespace cpu
}  // namespace strata
