// cuda_attention_route.cuh — which rows of a prompt-sized attention launch the prompt kernel
// (cuda_attention_prompt.cu) serves, decided on the device from the rows alone.
//
// The prompt kernel gives each block R consecutive rows of the launch and stages every K/V tile
// once for all of them, which needs every valid row of the block to read the same slot (a prompt
// chunk). A block whose valid rows read several slots (the decode rows at the front of a mixed
// launch, or the seam between two prompt chunks) leaves its rows to the decode kernel
// (cuda_attention_decode.cu), launched right after it over the whole launch: each of that
// kernel's blocks asks the same question for its row's block and skips rows the prompt kernel
// served. Both kernels give the canonical bits, so the split never changes a result.
#pragma once

#include "core/env_switch.h"
#include "cuda_common.cuh"

namespace strata {
namespace cuda {

// STRATA_ATTENTION (strata/env.py; read at each call, tests switch it within a process): unset or
// empty the default routes; legacy, wide or noprompt the A/B routes of cuda_attention_decode.cu and
// cuda_attention_prompt.cu; any other value is an error naming these (before 2026-12-06 a typo meant
// the default routes, silently).
enum class AttentionEnv { kDefault, kLegacy, kWide, kNoPrompt };
inline AttentionEnv attention_env() {
    static const char* const kValues[3] = {"legacy", "wide", "noprompt"};
    return AttentionEnv(env_choice("STRATA_ATTENTION", kValues, "legacy, wide or noprompt (or unset: the default kernels)") + 1);
}

__device__ __forceinline__ bool attn_row_valid(const SlotsView& s, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx;
}

// True when the valid rows [r0, r0 + nr) of the launch (rows clipped to n_rows) all read one slot
// (or none is valid): the prompt kernel's block for them serves them.
__device__ __forceinline__ bool prompt_block_single_slot(const AttentionArgs& a, int64_t r0, int nr) {
    const SlotsView& s = a.slots;
    int32_t slot0 = -1;
    for (int i = 0; i < nr && r0 + i < a.n_rows; ++i) {
        const int32_t sl = a.rows[2 * (r0 + i)], ix = a.rows[2 * (r0 + i) + 1];
        if (!attn_row_valid(s, sl, ix)) continue;
        if (slot0 < 0) slot0 = sl;
        else if (sl != slot0) return false;
    }
    return true;
}

}  // namespace cuda
}  // namespace strata
