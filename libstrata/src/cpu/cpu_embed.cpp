// cpu_embed.cpp — embedding gather: dequantize table rows by token id.
//
// The dequantization follows the GGUF reference formulas operation for
// operation (e.g. Q4_1: (d*q) + m; Q4_K: (d*sc)*q - (dmin*m)), so a row
// equals gguf.quants.dequantize bit for bit.
#include <algorithm>
#include <cstring>

#include "cpu_kernels.h"
#include "cpu_quant_blocks.h"
#include "cpu_quant_low.h"
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
        case STRATA_Q5_0:
        case STRATA_Q5_1: {
            // {f16 d, [f16 m,] u32 qh, 16 bytes qs}: q = nibble | (bit j of qh) << 4; Q5_0 d*(q-16), Q5_1 (d*q)+m.
            const bool one = dtype == STRATA_Q5_1;
            const int64_t bytes = one ? 24 : 22;
            for (int64_t b = 0; b < dim / 32; b++, w += bytes, out += 32) {
                const float d = f16_to_f32(load_u16(w)), m = one ? f16_to_f32(load_u16(w + 2)) : 0.0f;
                uint32_t qh;
                std::memcpy(&qh, w + (one ? 4 : 2), 4);
                const uint8_t* qs = w + (one ? 8 : 6);
                for (int j = 0; j < 32; j++) {
                    const int q = ((j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | int((qh >> j) & 1u) << 4);
                    out[j] = one ? d * float(q) + m : d * float(q - 16);
                }
            }
            return;
        }
        case STRATA_Q5_K:
        case STRATA_IQ4_NL:
        case STRATA_IQ4_XS: {
            // gguf's formulas: Q5_K d1·q − m1, the IQ4 types (block or sub-block scale)·table value.
            alignas(32) int8_t q[256];
            float d[8], m[8];
            const int64_t values = dtype == STRATA_IQ4_NL ? 32 : 256, bytes = dtype_info(dtype)->block_bytes;
            for (int64_t b = 0; b < dim / values; b++, w += bytes, out += values) {
                if (dtype == STRATA_Q5_K) decode_q5_k(w, q, d, m);
                else if (dtype == STRATA_IQ4_NL) decode_iq4_nl(w, q, d);
                else decode_iq4_xs(w, q, d);
                for (int j = 0; j < values; j++)
                    out[j] = dtype == STRATA_Q5_K ? d[j / 32] * float(q[j]) - m[j / 32] : d[j / 32] * float(q[j]);
            }
            return;
        }
        case STRATA_Q2_K:
        case STRATA_Q3_K:
        case STRATA_IQ3_S: {
            // gguf's formulas: Q2_K d1·q − m1, Q3_K d1·q (16-value sub-blocks), IQ3_S db·(±grid) (32-value).
            alignas(32) int8_t q[256];
            float d[16], m[16] = {};
            const int sub = dtype == STRATA_IQ3_S ? 32 : 16;
            for (int64_t b = 0; b < dim / 256; b++, w += dtype_info(dtype)->block_bytes, out += 256) {
                if (dtype == STRATA_Q2_K) decode_q2_k(w, q, d, m);
                else if (dtype == STRATA_Q3_K) decode_q3_k(w, q, d);
                else decode_iq3_s(w, q, d);
                for (int j = 0; j < 256; j++) out[j] = d[j / sub] * float(q[j]) - m[j / sub];
            }
            return;
        }
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
