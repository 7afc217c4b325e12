// int8_path.h — which weight types both backends compute with int8
// activation blocks and integer-exact block products (docs/kernels.md,
// "integer path"). One list, read by the CPU (cpu_matmul_int.h) and CUDA
// (cuda_int_matmul.cu) dispatch, so the two backends always round the same
// activations the same way.
#pragma once

#include <cstdint>

#include "strata.h"

namespace strata {

inline bool int8_path_dtype(int32_t w_dtype) { return w_dtype == STRATA_Q4_0 || w_dtype == STRATA_Q8_0; }

}  // namespace strata
