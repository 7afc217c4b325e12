// api_logits.cpp — C entry point of the per-row logit adjustments
// (strata_logits_adjust: grammar masks, logit bias, penalties).
#include "call.h"
#include "export.h"

using namespace strata;

STRATA_EXPORT int32_t strata_logits_adjust(strata_context* ctx, strata_buffer* logits, uint64_t logits_offset,
                                           int64_t n_rows, int64_t n_vocab, strata_buffer* row_slots,
                                           uint64_t row_slots_offset, strata_buffer* table, uint64_t table_offset,
                                           int64_t n_slots) {
    return guarded("strata_logits_adjust", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        require_positive("n_vocab", n_vocab);
        require_positive("n_slots", n_slots);
        if (n_rows > 65535) invalid("n_rows=" + str(n_rows) + " exceeds 65535 sampled rows per call");
        u128 logit_bytes = mul_sat(u128(n_rows) * n_vocab, 4);
        u128 table_bytes = mul_sat(mul_sat(u128(n_slots) * 2, n_vocab), 4);
        LogitsAdjustArgs a;
        a.logits = reinterpret_cast<float*>(operand(call, logits, "logits", logits_offset, logit_bytes, 4, "F32"));
        a.row_slots = reinterpret_cast<const int32_t*>(
            operand(call, row_slots, "row_slots", row_slots_offset, u128(n_rows) * 4, 4, "I32"));
        a.table = reinterpret_cast<const float*>(operand(call, table, "table", table_offset, table_bytes, 4, "F32"));
        require_disjoint(logits, logits_offset, logit_bytes, "logits", table, table_offset, table_bytes, "table");
        require_disjoint(logits, logits_offset, logit_bytes, "logits", row_slots, row_slots_offset,
                         u128(n_rows) * 4, "row_slots");
        a.n_rows = n_rows;
        a.n_vocab = n_vocab;
        a.n_slots = n_slots;
        ctx->backend->logits_adjust(a);
    });
}
