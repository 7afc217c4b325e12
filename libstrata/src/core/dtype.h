// dtype.h — block geometry of the element and block types (GGUF's ggml_type ids).
//
// Header-only and free of SIMD so both the C ABI layer and every backend can
// use it: one table answers "how many values and bytes per block" and "what is
// this dtype called" for validation messages.
#pragma once

#include <cstdint>

#include "strata.h"

namespace strata {

struct DtypeInfo {
    const char* name;
    int64_t block_values;  // values per block (1 for plain types)
    int64_t block_bytes;   // bytes per block
};

// Returns nullptr for an id that is not one of enum strata_dtype.
inline const DtypeInfo* dtype_info(int32_t dtype) noexcept {
    static const DtypeInfo f32{"F32", 1, 4}, f16{"F16", 1, 2}, bf16{"BF16", 1, 2}, i32{"I32", 1, 4};
    static const DtypeInfo q4_0{"Q4_0", 32, 18}, q4_1{"Q4_1", 32, 20}, q8_0{"Q8_0", 32, 34};
    static const DtypeInfo q4_k{"Q4_K", 256, 144}, q6_k{"Q6_K", 256, 210};
    static const DtypeInfo q5_0{"Q5_0", 32, 22}, q5_1{"Q5_1", 32, 24}, q5_k{"Q5_K", 256, 176};
    static const DtypeInfo iq4_nl{"IQ4_NL", 32, 18}, iq4_xs{"IQ4_XS", 256, 136};
    static const DtypeInfo q2_k{"Q2_K", 256, 84}, q3_k{"Q3_K", 256, 110}, iq3_s{"IQ3_S", 256, 110};
    switch (dtype) {
        case STRATA_F32: return &f32;
        case STRATA_F16: return &f16;
        case STRATA_BF16: return &bf16;
        case STRATA_I32: return &i32;
        case STRATA_Q4_0: return &q4_0;
        case STRATA_Q4_1: return &q4_1;
        case STRATA_Q8_0: return &q8_0;
        case STRATA_Q5_0: return &q5_0;
        case STRATA_Q5_1: return &q5_1;
        case STRATA_Q4_K: return &q4_k;
        case STRATA_Q5_K: return &q5_k;
        case STRATA_IQ4_NL: return &iq4_nl;
        case STRATA_IQ4_XS: return &iq4_xs;
        case STRATA_Q6_K: return &q6_k;
        case STRATA_Q2_K: return &q2_k;
        case STRATA_Q3_K: return &q3_k;
        case STRATA_IQ3_S: return &iq3_s;
        default: return nullptr;
    }
}

// Bytes of one row of `n_values` values (n_values a multiple of the block).
inline int64_t dtype_row_bytes(int32_t dtype, int64_t n_values) noexcept {
    const DtypeInfo* info = dtype_info(dtype);
    return n_values / info->block_values * info->block_bytes;
}

}  // namespace strata
