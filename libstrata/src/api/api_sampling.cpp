// api_sampling.cpp — C entry points of token selection: argmax and sampling.
#include "call.h"
#include "export.h"

using namespace strata;

STRATA_EXPORT int32_t strata_argmax(strata_context* ctx, strata_buffer* logits, uint64_t logits_offset,
                                    int64_t n_rows, int64_t n_vocab, strata_buffer* out_ids, uint64_t out_offset) {
    return guarded("strata_argmax", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        require_positive("n_vocab", n_vocab);
        u128 logit_bytes = mul_sat(u128(n_rows) * n_vocab, 4);
        ArgmaxArgs a;
        a.logits = reinterpret_cast<const float*>(operand(call, logits, "logits", logits_offset, logit_bytes, 4, "F32"));
        a.out_ids = reinterpret_cast<int32_t*>(operand(call, out_ids, "out_ids", out_offset, u128(n_rows) * 4, 4, "I32"));
        require_disjoint(out_ids, out_offset, u128(n_rows) * 4, "out_ids", logits, logits_offset, logit_bytes, "logits");
        if (n_vocab > INT32_MAX) invalid("n_vocab=" + str(n_vocab) + " does not fit the int32 token ids");
        a.n_rows = n_rows;
        a.n_vocab = n_vocab;
        ctx->backend->argmax(a);
    });
}

STRATA_EXPORT int32_t strata_sample(strata_context* ctx, strata_buffer* logits, uint64_t logits_offset,
                                    int64_t n_rows, int64_t n_vocab, strata_buffer* params, uint64_t params_offset,
                                    strata_buffer* out_ids, uint64_t out_offset) {
    return guarded("strata_sample", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        require_positive("n_vocab", n_vocab);
        if (n_vocab > INT32_MAX) invalid("n_vocab=" + str(n_vocab) + " does not fit the int32 token ids");
        u128 logit_bytes = mul_sat(u128(n_rows) * n_vocab, 4);
        u128 param_bytes = u128(n_rows) * sizeof(strata_sampling_params);
        SampleArgs a;
        a.logits = reinterpret_cast<const float*>(operand(call, logits, "logits", logits_offset, logit_bytes, 4, "F32"));
        a.params = reinterpret_cast<const strata_sampling_params*>(
            operand(call, params, "params", params_offset, param_bytes, 8, "strata_sampling_params"));
        a.out_ids = reinterpret_cast<int32_t*>(operand(call, out_ids, "out_ids", out_offset, u128(n_rows) * 4, 4, "I32"));
        require_disjoint(out_ids, out_offset, u128(n_rows) * 4, "out_ids", logits, logits_offset, logit_bytes, "logits");
        require_disjoint(out_ids, out_offset, u128(n_rows) * 4, "out_ids", params, params_offset, param_bytes, "params");
        a.n_rows = n_rows;
        a.n_vocab = n_vocab;
        ctx->backend->sample(a);
    });
}
