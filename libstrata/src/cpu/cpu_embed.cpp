// cpu_embed.cpp — embedding gather: dequantize table rows by token id.
//
// The dequantization follows the GGUF reference formulas operation for
// operation (e.g. Q4_1: (d*q) + m; Q4_K: (d*sc)*q - (dmin*m)), so a row
// equals gguf.quants.dequantize bit for bit.
#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "cpu_simd.h"
#include "core/dtype.h"
#include "core/errors.h"

namespace strata {
namespace cpu {
namespace {

void dequant_q4_k(const uint8_t* w, float* out) {
    const float d = f16_to_f32(load_u16(w)), dmin = f16_to_f32(load_u16(w + 2));
    const uint8_t* s = w + 4;
    const uint8_t* qs = w + 16;
    for (int j = 0; j < 8; j++) {
        const int sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        const int mn = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
        const float dsc = d * float(sc), dm = dmin * float(mn);
        const uint8_t* q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) out[32 * j + l] = dsc * float((q[l] >> (4 * (j & 1))) & 15) - dm;
    }
}

void dequant_q6_k(const uint8_t* w, float* out) {
    const int8_t* scales = reinterpret_cast<const int8_t*>(w + 192);
    const float d = f16_to_f32(load_u16(w + 208));
    for (int n = 0; n < 2; n++) {
        const uint8_t* ql = w + 64 * n;
        const uint8_t* qh = w + 128 + 32 * n;
        for (int l = 0; l < 32; l++) {
            const int q[4] = {(ql[l] & 15) | ((qh[l] & 3) << 4), (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4),
                              (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)};
            for (int g = 0; g < 4; g++) {
                const int v = 128 * n + 32 * g + l;
                out[v] = (d * float(scales[v / 16])) * float(q[g] - 32);
            }
        }
    }
}

// One row of `dim` values.
void dequant_row(int32_t dtype, const uint8_t* w, int64_t dim, float* out) {
    switch (dtype) {
        case STRATA_F32: std::memcpy(out, w, size_t(dim) * 4); return;
        case STRATA_F16:
            for (int64_t i = 0; i < dim; i++) out[i] = f16_to_f32(load_u16(w + 2 * i));
            return;
        case STRATA_BF16:
            for (int64_t i = 0; i < dim; i++) out[i] = bf16_to_f32(load_u16(w + 2 * i));
            return;
        case STRATA_Q8_0:
            for (int64_t b = 0; b < dim / 32; b++, w += 34, out += 32) {
                const float d = f16_to_f32(load_u16(w));
                for (int j = 0; j < 32; j++) out[j] = float(int8_t(w[2 + j])) * d;
            }
            return;
        case STRATA_Q4_0:
            for (int64_t b = 0; b < dim / 32; b++, w += 18, out += 32) {
                const float d = f16_to_f32(load_u16(w));
                for (int j = 0; j < 16; j++) {
                    out[j] = d * float((w[2 + j] & 15) - 8);
                    out[j + 16] = d * float((w[2 + j] >> 4) - 8);
                }
            }
            return;
        case STRATA_Q4_1:
            for (int64_t b = 0; b < dim / 32; b++, w += 20, out += 32) {
                const float d = f16_to_f32(load_u16(w)), m = f16_to_f32(load_u16(w + 2));
                for (int j = 0; j < 16; j++) {
                    out[j] = d * float(w[4 + j] & 15) + m;
                    out[j + 16] = d * float(w[4 + j] >> 4) + m;
                }
            }
            return;
        case STRATA_Q4_K:
            for (int64_t b = 0; b < dim / 256; b++) dequant_q4_k(w + 144 * b, out + 256 * b);
            return;
        case STRATA_Q6_K:
            for (int64_t b = 0; b < dim / 256; b++) dequant_q6_k(w + 210 * b, out + 256 * b);
            return;
        default: fail(STRATA_ERR_INTERNAL, "cpu embed: unhandled dtype " + std::to_string(dtype));
    }
}

}  // namespace

void embed(ThreadPool& pool, const EmbedArgs& a) {
    if (dtype_info(a.dtype) == nullptr || a.dtype == STRATA_I32)
        fail(STRATA_ERR_INTERNAL, "cpu embed: unhandled dtype " + std::to_string(a.dtype));
    const int64_t row_bytes = dtype_row_bytes(a.dtype, a.dim);
    pool.run(std::min(chunks_for(pool, a.n_rows * a.dim * 4), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) {
            const int32_t id = a.ids[r];
            float* out = a.out + r * a.dim;
            if (id < 0 || id >= a.n_vocab) std::memset(out, 0, size_t(a.dim) * 4);
            else dequant_row(a.dtype, static_cast<const uint8_t*>(a.table) + id * row_bytes, a.dim, out);
        }
    });
}

}  // namespace cpu
}  // namespace strata
