// cpu_elementwise.cpp — row-wise and element-wise CPU kernels: RMSNorm,
// SiLU-gated product, exact GELU, add and row gathers.
//
// Row kernels reduce within one row in a fixed 8-lane order; element-wise
// kernels compute every element with the same instruction sequence (a partial
// last vector is loaded and stored masked), so no value depends on the number
// of rows or on how they are split between threads.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_kernels.h"
#include "cpu_simd.h"

namespace strata {
namespace cpu {
namespace {

void rmsnorm_row(const float* x, const float* weight, float* out, int64_t dim, float eps) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (i < dim) {
        const __m256 v = load_first(x + i, int(dim - i));
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    const float mean = hsum(acc) / float(dim);
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
    for (i = 0; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv), _mm256_loadu_ps(weight + i)));
    if (i < dim) {
        const int n = int(dim - i);
        store_first(out + i, _mm256_mul_ps(_mm256_mul_ps(load_first(x + i, n), inv), load_first(weight + i, n)), n);
    }
}

// silu(g) * u = (g / (1 + e^-g)) * u
inline __m256 silu_mul8(__m256 g, __m256 u) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void silu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        const int m = int(n - i);
        store_first(out + i, silu_mul8(load_first(gate + i, m), load_first(up + i, m)), m);
    }
}

// gelu_tanh(g) * u with PyTorch's tanh approximation, operation for operation:
// inner = sqrt(2/pi) * (g + 0.044715 * g^3); (0.5 * g * (1 + tanh(inner))) * u.
void gelu_tanh_mul_row(const float* gate, const float* up, float* out, int64_t n) {
    const float beta = 0.7978845608028654f, kappa = 0.044715f;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        const float inner = beta * (g + kappa * (g * g * g));
        out[i] = (0.5f * g * (1.0f + std::tanh(inner))) * up[i];
    }
}

// Splits n elements into chunks for element-wise kernels (multiples of 8).
template <class F>
void for_chunks(ThreadPool& pool, int64_t n, int64_t cost_per_element, F&& f) {
    pool.run(chunks_for(pool, n * cost_per_element), [&](int t, int parts) {
        int64_t begin, end;
        split_range((n + 7) / 8, t, parts, &begin, &end);
        f(begin * 8, std::min(n, end * 8));
    });
}

}  // namespace

void rmsnorm(ThreadPool& pool, const RmsNormArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.dim * 2), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) rmsnorm_row(a.x + r * a.dim, a.weight, a.out + r * a.dim, a.dim, a.eps);
    });
}

void silu_mul(ThreadPool& pool, const SiluMulArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.n_cols * 16), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) {
            const float* gate = a.gate + r * a.gate_row_stride;
            const float* up = a.up + r * a.up_row_stride;
            float* out = a.out + r * a.n_cols;
            if (a.gelu_tanh) gelu_tanh_mul_row(gate, up, out, a.n_cols);
            else silu_mul_row(gate, up, out, a.n_cols);
        }
    });
}

void scale(ThreadPool& pool, const UnaryArgs& a) {
    for_chunks(pool, a.n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; i++) a.out[i] = a.x[i] * a.factor;
    });
}

void gelu(ThreadPool& pool, const UnaryArgs& a) {
    for_chunks(pool, a.n, 32, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; i++) {
            const float x = a.x[i];
            a.out[i] = (x * 0.5f) * (1.0f + std::erf(x * 0.707106781186547524f));
        }
    });
}

void add(ThreadPool& pool, const BinaryArgs& a) {
    for_chunks(pool, a.n, 1, [&](int64_t begin, int64_t end) {
        int64_t i = begin;
        for (; i + 8 <= end; i += 8)
            _mm256_storeu_ps(a.out + i, _mm256_add_ps(_mm256_loadu_ps(a.a + i), _mm256_loadu_ps(a.b + i)));
        for (; i < end; i++) a.out[i] = a.a[i] + a.b[i];
    });
}

void gather_rows(ThreadPool& pool, const GatherRowsArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.row_bytes / 4), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        const uint8_t* src = static_cast<const uint8_t*>(a.src);
        uint8_t* dst = static_cast<uint8_t*>(a.dst);
        for (int64_t r = begin; r < end; r++) {
            const int32_t i = a.idx[r];
            if (i >= 0 && i < a.n_src_rows) std::memcpy(dst + r * a.row_bytes, src + i * a.row_bytes, size_t(a.row_bytes));
            else std::memset(dst + r * a.row_bytes, 0, size_t(a.row_bytes));
        }
    });
}

}  // namespace cpu
}  // namespace strata
