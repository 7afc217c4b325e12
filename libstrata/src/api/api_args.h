// api_args.h — checked-argument builders that entry points of more than one
// api_*.cpp file share (each validates its operands and returns the
// backend's argument struct, or throws the invalid-argument error).
#pragma once

#include "call.h"
#include "core/backend.h"
#include "core/dtype.h"

namespace strata {

// The dtype's info if it is a stored-weight type (anything but I32); `name` names the argument in the error.
const DtypeInfo& weight_dtype(const char* name, int32_t dtype);

// strata_rope_kv_store's arguments (api_attention.cpp): q_params / k_params against the slot set,
// the qkv rows (n_rows at row_stride elements), rows and freq_factors.
RopeKvStoreArgs rope_kv_store_args(Call& call, const strata_rope_params* q_params, const strata_rope_params* k_params,
                                   strata_slots* slots, int32_t layer, strata_buffer* qkv, uint64_t qkv_offset,
                                   int64_t row_stride, int64_t n_rows, strata_buffer* rows, uint64_t rows_offset,
                                   strata_buffer* freq_factors, uint64_t freq_factors_offset);

}  // namespace strata
