// cpu_logits.cpp — strata_logits_adjust on the CPU: grammar masks, logit
// bias and penalties applied to each sampled row from its slot's table.
//
// Arithmetic (strata.h): l = logits[r][v]; if p != 1, l = l > 0 ? l / p : l * p;
// then l + a. Each operation is one F32 rounding (the build forbids FMA
// contraction), so the CUDA kernel computes the same bits. Rows are split over
// the pool; a row's result depends only on its own logits and table rows.
#include "cpu_kernels.h"

namespace strata {
namespace cpu {

void logits_adjust(ThreadPool& pool, const LogitsAdjustArgs& a) {
    pool.run(std::min(chunks_for(pool, a.n_rows * a.n_vocab), a.n_rows), [&](int t, int parts) {
        int64_t begin, end;
        split_range(a.n_rows, t, parts, &begin, &end);
        for (int64_t r = begin; r < end; r++) {
            const int32_t s = a.row_slots[r];
            if (s < 0 || s >= a.n_slots) continue;     // no adjustment for this row
            float* l = a.logits + r * a.n_vocab;
            const float* add = a.table + (size_t)s * 2 * a.n_vocab;
            const float* rep = add + a.n_vocab;
            for (int64_t v = 0; v < a.n_vocab; v++) {
                float x = l[v];
                const float p = rep[v];
                if (p != 1.0f) x = x > 0.0f ? x / p : x * p;
                l[v] = x + add[v];
            }
        }
    });
}

}  // namespace cpu
}  // namespace strata
