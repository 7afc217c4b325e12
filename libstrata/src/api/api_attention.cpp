// api_attention.cpp — C entry points of the position-aware kernels: RoPE,
// KV stores (alone and fused with RoPE), causal and dense attention, and
// decode position updates.
//
// Row metadata ("rows": {slot, index} int32 pairs) is read by the kernels on
// the device; rows out of range are padding there, so no check here needs
// to read device memory.
#include <cmath>
#include <string>

#include "api_args.h"
#include "call.h"
#include "export.h"

using namespace strata;

namespace {

const int32_t* rows_operand(Call& call, strata_buffer* rows, uint64_t rows_offset, int64_t n_rows) {
    return reinterpret_cast<const int32_t*>(operand(call, rows, "rows", rows_offset, u128(n_rows) * 8, 4, "I32"));
}

void require_layer(const strata_slots* s, int32_t layer) {
    if (s->view.n_layers == 0) invalid("the slot set has no layers (n_layers=0), so it holds no KV cache");
    require_range("layer", layer, 0, s->view.n_layers - 1);
}

void check_rope_params(const strata_rope_params& p) {
    require_range("params.mode", p.mode, STRATA_ROPE_ADJACENT, STRATA_ROPE_VISION);
    require_range("params.n_heads", p.n_heads, 1, 1 << 16);
    require_range("params.head_dim", p.head_dim, 2, 1024);
    require_range("params.rot_dim", p.rot_dim, 2, p.head_dim);
    if (p.rot_dim % 2 != 0) invalid("params.rot_dim=" + str(p.rot_dim) + " must be even");
    if (!(p.theta_base > 0.0f) || !std::isfinite(p.theta_base)) invalid("params.theta_base must be finite and > 0");
    if (!(p.freq_scale > 0.0f) || !std::isfinite(p.freq_scale)) invalid("params.freq_scale must be finite and > 0");
    if (p.mode == STRATA_ROPE_MROPE || p.mode == STRATA_ROPE_VISION) {
        int64_t sum = 0;
        for (int c = 0; c < 4; c++) {
            require_range("params.sections[c]", p.sections[c], 0, p.rot_dim / 2);
            sum += p.sections[c];
        }
        if (sum != p.rot_dim / 2)
            invalid("params.sections sum to " + str(sum) + " but must sum to rot_dim / 2 = " + str(p.rot_dim / 2));
    }
}

}  // namespace

STRATA_EXPORT int32_t strata_rope(strata_context* ctx, const strata_rope_params* params, strata_buffer* x,
                                  uint64_t x_offset, int64_t x_row_stride, int64_t n_rows, strata_slots* slots,
                                  strata_buffer* rows, uint64_t rows_offset, strata_buffer* freq_factors,
                                  uint64_t freq_factors_offset) {
    return guarded("strata_rope", [&](Call& call) {
        use_context(call, ctx);
        if (params == nullptr) invalid("params is NULL");
        RopeArgs a;
        a.p = *params;
        check_rope_params(a.p);
        require_positive("n_rows", n_rows);
        int64_t width = int64_t(a.p.n_heads) * a.p.head_dim;
        u128 x_bytes = strided_bytes("x", n_rows, width, x_row_stride, 4);
        a.x = reinterpret_cast<float*>(operand(call, x, "x", x_offset, x_bytes, 4, "F32"));
        a.slots = use_slots(call, slots, "slots")->view;
        a.rows = rows_operand(call, rows, rows_offset, n_rows);
        require_disjoint(x, x_offset, x_bytes, "x", rows, rows_offset, u128(n_rows) * 8, "rows");
        a.freq_factors = nullptr;
        if (freq_factors != nullptr) {
            u128 ff_bytes = u128(a.p.rot_dim / 2) * 4;
            a.freq_factors = reinterpret_cast<const float*>(
                operand(call, freq_factors, "freq_factors", freq_factors_offset, ff_bytes, 4, "F32"));
            require_disjoint(x, x_offset, x_bytes, "x", freq_factors, freq_factors_offset, ff_bytes, "freq_factors");
        }
        a.x_row_stride = x_row_stride;
        a.n_rows = n_rows;
        ctx->backend->rope(a);
    });
}

STRATA_EXPORT int32_t strata_kv_store(strata_context* ctx, strata_slots* slots, int32_t layer, strata_buffer* k,
                                      uint64_t k_offset, int64_t k_row_stride, strata_buffer* v, uint64_t v_offset,
                                      int64_t v_row_stride, strata_buffer* rows, uint64_t rows_offset,
                                      int64_t n_rows) {
    return guarded("strata_kv_store", [&](Call& call) {
        use_context(call, ctx);
        KvStoreArgs a;
        a.slots = use_slots(call, slots, "slots")->view;
        require_layer(slots, layer);
        require_positive("n_rows", n_rows);
        int64_t width = int64_t(a.slots.n_kv_heads) * a.slots.head_dim;
        a.k = reinterpret_cast<const float*>(
            operand(call, k, "k", k_offset, strided_bytes("k", n_rows, width, k_row_stride, 4), 4, "F32"));
        a.v = reinterpret_cast<const float*>(
            operand(call, v, "v", v_offset, strided_bytes("v", n_rows, width, v_row_stride, 4), 4, "F32"));
        a.rows = rows_operand(call, rows, rows_offset, n_rows);
        a.layer = layer;
        a.k_row_stride = k_row_stride;
        a.v_row_stride = v_row_stride;
        a.n_rows = n_rows;
        ctx->backend->kv_store(a);
    });
}

namespace strata {

// The checked arguments of strata_rope_kv_store (also the first half of the fused entry points; api_args.h).
RopeKvStoreArgs rope_kv_store_args(Call& call, const strata_rope_params* q_params, const strata_rope_params* k_params,
                                   strata_slots* slots, int32_t layer, strata_buffer* qkv, uint64_t qkv_offset,
                                   int64_t row_stride, int64_t n_rows, strata_buffer* rows, uint64_t rows_offset,
                                   strata_buffer* freq_factors, uint64_t freq_factors_offset) {
    if (q_params == nullptr || k_params == nullptr) invalid("q_params and k_params must not be NULL");
    RopeKvStoreArgs a;
    a.q_params = *q_params;
    a.k_params = *k_params;
    check_rope_params(a.q_params);
    check_rope_params(a.k_params);
    a.slots = use_slots(call, slots, "slots")->view;
    require_layer(slots, layer);
    const int32_t hd = a.slots.head_dim;
    if (a.q_params.head_dim != hd || a.k_params.head_dim != hd)
        invalid("q_params.head_dim=" + str(a.q_params.head_dim) + " and k_params.head_dim=" +
                str(a.k_params.head_dim) + " must equal the slot set's head_dim=" + str(hd));
    if (a.k_params.n_heads != a.slots.n_kv_heads)
        invalid("k_params.n_heads=" + str(a.k_params.n_heads) + " must equal the slot set's n_kv_heads=" +
                str(a.slots.n_kv_heads));
    require_positive("n_rows", n_rows);
    const int64_t width = (int64_t(a.q_params.n_heads) + 2 * int64_t(a.slots.n_kv_heads)) * hd;
    const u128 qkv_bytes = strided_bytes("qkv", n_rows, width, row_stride, 4);
    a.qkv = reinterpret_cast<float*>(operand(call, qkv, "qkv", qkv_offset, qkv_bytes, 4, "F32"));
    a.rows = rows_operand(call, rows, rows_offset, n_rows);
    require_disjoint(qkv, qkv_offset, qkv_bytes, "qkv", rows, rows_offset, u128(n_rows) * 8, "rows");
    a.freq_factors = nullptr;
    if (freq_factors != nullptr) {
        const int32_t rot = a.q_params.rot_dim > a.k_params.rot_dim ? a.q_params.rot_dim : a.k_params.rot_dim;
        const u128 ff_bytes = u128(rot / 2) * 4;
        a.freq_factors = reinterpret_cast<const float*>(
            operand(call, freq_factors, "freq_factors", freq_factors_offset, ff_bytes, 4, "F32"));
        require_disjoint(qkv, qkv_offset, qkv_bytes, "qkv", freq_factors, freq_factors_offset, ff_bytes,
                         "freq_factors");
    }
    a.layer = layer;
    a.row_stride = row_stride;
    a.n_rows = n_rows;
    return a;
}

}  // namespace strata

STRATA_EXPORT int32_t strata_rope_kv_store(strata_context* ctx, const strata_rope_params* q_params,
                                           const strata_rope_params* k_params, strata_slots* slots, int32_t layer,
                                           strata_buffer* qkv, uint64_t qkv_offset, int64_t row_stride,
                                           int64_t n_rows, strata_buffer* rows, uint64_t rows_offset,
                                           strata_buffer* freq_factors, uint64_t freq_factors_offset) {
    return guarded("strata_rope_kv_store", [&](Call& call) {
        use_context(call, ctx);
        ctx->backend->rope_kv_store(rope_kv_store_args(call, q_params, k_params, slots, layer, qkv, qkv_offset,
                                                       row_stride, n_rows, rows, rows_offset, freq_factors,
                                                       freq_factors_offset));
    });
}

namespace {

// The checked arguments of strata_attention(_window) (also the second half of the fused entry point).
AttentionArgs attention_args(Call& call, strata_slots* slots, int32_t layer, strata_buffer* q, uint64_t q_offset,
                             int64_t q_row_stride, int64_t n_rows, int32_t n_heads, strata_buffer* rows,
                             uint64_t rows_offset, float scale, int32_t window, strata_buffer* out,
                             uint64_t out_offset) {
    require_range("window", window, 0, INT32_MAX);
    AttentionArgs a;
    a.window = window;
    a.slots = use_slots(call, slots, "slots")->view;
    require_layer(slots, layer);
    require_positive("n_rows", n_rows);
    require_range("n_heads", n_heads, 1, 1 << 16);
    if (n_heads % a.slots.n_kv_heads != 0)
        invalid("n_heads=" + str(n_heads) + " is not a multiple of the slot set's n_kv_heads=" +
                str(a.slots.n_kv_heads));
    require_finite("scale", scale);
    int64_t width = int64_t(n_heads) * a.slots.head_dim;
    u128 q_bytes = strided_bytes("q", n_rows, width, q_row_stride, 4);
    u128 out_bytes = mul_sat(u128(n_rows) * width, 4);
    a.q = reinterpret_cast<const float*>(operand(call, q, "q", q_offset, q_bytes, 4, "F32"));
    a.rows = rows_operand(call, rows, rows_offset, n_rows);
    a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, out_bytes, 4, "F32"));
    require_disjoint(out, out_offset, out_bytes, "out", q, q_offset, q_bytes, "q");
    require_disjoint(out, out_offset, out_bytes, "out", rows, rows_offset, u128(n_rows) * 8, "rows");
    a.layer = layer;
    a.q_row_stride = q_row_stride;
    a.n_rows = n_rows;
    a.n_heads = n_heads;
    a.scale = scale;
    return a;
}

// strata_attention and strata_attention_window: window 0 is plain causal attention.
int32_t attention_entry(const char* entry, strata_context* ctx, strata_slots* slots, int32_t layer,
                        strata_buffer* q, uint64_t q_offset, int64_t q_row_stride, int64_t n_rows, int32_t n_heads,
                        strata_buffer* rows, uint64_t rows_offset, float scale, int32_t window, strata_buffer* out,
                        uint64_t out_offset) {
    return guarded(entry, [&](Call& call) {
        use_context(call, ctx);
        ctx->backend->attention(attention_args(call, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows,
                                               rows_offset, scale, window, out, out_offset));
    });
}

}  // namespace

STRATA_EXPORT int32_t strata_attention(strata_context* ctx, strata_slots* slots, int32_t layer, strata_buffer* q,
                                       uint64_t q_offset, int64_t q_row_stride, int64_t n_rows, int32_t n_heads,
                                       strata_buffer* rows, uint64_t rows_offset, float scale, strata_buffer* out,
                                       uint64_t out_offset) {
    return attention_entry("strata_attention", ctx, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows,
                           rows_offset, scale, 0, out, out_offset);
}

STRATA_EXPORT int32_t strata_attention_window(strata_context* ctx, strata_slots* slots, int32_t layer,
                                              strata_buffer* q, uint64_t q_offset, int64_t q_row_stride,
                                              int64_t n_rows, int32_t n_heads, strata_buffer* rows,
                                              uint64_t rows_offset, float scale, int32_t window, strata_buffer* out,
                                              uint64_t out_offset) {
    return attention_entry("strata_attention_window", ctx, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads,
                           rows, rows_offset, scale, window, out, out_offset);
}

STRATA_EXPORT int32_t strata_attention_handoff(strata_context* ctx, strata_slots* slots, int32_t layer,
                                               strata_buffer* q, uint64_t q_offset, int64_t q_row_stride,
                                               int64_t n_rows, int32_t n_heads, strata_buffer* rows,
                                               uint64_t rows_offset, float scale, int32_t window,
                                               int32_t handoff_dtype, strata_buffer* out, uint64_t out_offset) {
    return guarded("strata_attention_handoff", [&](Call& call) {
        use_context(call, ctx);
        ctx->handoff = {};  // a failed call leaves no hand-off behind (set once the call succeeds)
        weight_dtype("handoff_dtype", handoff_dtype);
        AttentionArgs a = attention_args(call, slots, layer, q, q_offset, q_row_stride, n_rows, n_heads, rows,
                                         rows_offset, scale, window, out, out_offset);
        // out is the next call's x: dense rows of k = n_heads * head_dim values, whole blocks of 32 (every
        // head_dim a slot set takes is even, but not always a multiple of 32).
        const int64_t k = int64_t(n_heads) * a.slots.head_dim;
        if (k % 32 != 0)
            invalid("strata_attention_handoff: the next call's k = n_heads * head_dim = " + str(k) +
                    " is not a multiple of 32");
        a.emit_dtype = handoff_dtype;
        ctx->backend->attention(a);
        ctx->handoff = {true, a.out, n_rows, k, STRATA_PROLOGUE_NONE, nullptr};
    });
}

STRATA_EXPORT int32_t strata_rope_kv_store_attention(
    strata_context* ctx, const strata_rope_params* q_params, const strata_rope_params* k_params, strata_slots* slots,
    int32_t layer, strata_buffer* qkv, uint64_t qkv_offset, int64_t row_stride, int64_t n_rows, strata_buffer* rows,
    uint64_t rows_offset, strata_buffer* freq_factors, uint64_t freq_factors_offset, float scale, int32_t window,
    strata_buffer* out, uint64_t out_offset) {
    return guarded("strata_rope_kv_store_attention", [&](Call& call) {
        use_context(call, ctx);
        const RopeKvStoreArgs r = rope_kv_store_args(call, q_params, k_params, slots, layer, qkv, qkv_offset,
                                                     row_stride, n_rows, rows, rows_offset, freq_factors,
                                                     freq_factors_offset);
        // The queries are the q part of each qkv row: out must not overlap any of qkv (k and v are
        // read after q is written), which the whole-row check below covers.
        const AttentionArgs a = attention_args(call, slots, layer, qkv, qkv_offset, row_stride, n_rows,
                                               q_params->n_heads, rows, rows_offset, scale, window, out, out_offset);
        const u128 qkv_bytes = strided_bytes(
            "qkv", n_rows, (int64_t(q_params->n_heads) + 2 * int64_t(r.slots.n_kv_heads)) * r.slots.head_dim,
            row_stride, 4);
        const u128 out_bytes = mul_sat(u128(n_rows) * (int64_t(q_params->n_heads) * r.slots.head_dim), 4);
        require_disjoint(out, out_offset, out_bytes, "out", qkv, qkv_offset, qkv_bytes, "qkv");
        if (freq_factors != nullptr) {
            const int32_t rot = q_params->rot_dim > k_params->rot_dim ? q_params->rot_dim : k_params->rot_dim;
            require_disjoint(out, out_offset, out_bytes, "out", freq_factors, freq_factors_offset,
                             u128(rot / 2) * 4, "freq_factors");
        }
        ctx->backend->rope_kv_store_attention(r, a);
    });
}

STRATA_EXPORT int32_t strata_attention_dense(strata_context* ctx, strata_buffer* q, uint64_t q_offset,
                                             strata_buffer* k, uint64_t k_offset, strata_buffer* v, uint64_t v_offset,
                                             int64_t row_stride, int64_t n_tokens, int32_t n_heads, int32_t head_dim,
                                             strata_buffer* segments, uint64_t segments_offset, int64_t n_segments,
                                             float scale, strata_buffer* out, uint64_t out_offset) {
    return guarded("strata_attention_dense", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_tokens", n_tokens);
        require_range("n_heads", n_heads, 1, 1 << 16);
        require_range("head_dim", head_dim, 1, 512);
        require_positive("n_segments", n_segments);
        require_finite("scale", scale);
        int64_t width = int64_t(n_heads) * head_dim;
        u128 in_bytes = strided_bytes("q, k and v", n_tokens, width, row_stride, 4);
        u128 out_bytes = mul_sat(u128(n_tokens) * width, 4);
        u128 seg_bytes = u128(n_segments + 1) * 4;
        DenseAttentionArgs a;
        a.q = reinterpret_cast<const float*>(operand(call, q, "q", q_offset, in_bytes, 4, "F32"));
        a.k = reinterpret_cast<const float*>(operand(call, k, "k", k_offset, in_bytes, 4, "F32"));
        a.v = reinterpret_cast<const float*>(operand(call, v, "v", v_offset, in_bytes, 4, "F32"));
        a.segments = reinterpret_cast<const int32_t*>(
            operand(call, segments, "segments", segments_offset, seg_bytes, 4, "I32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, out_bytes, 4, "F32"));
        require_disjoint(out, out_offset, out_bytes, "out", q, q_offset, in_bytes, "q");
        require_disjoint(out, out_offset, out_bytes, "out", k, k_offset, in_bytes, "k");
        require_disjoint(out, out_offset, out_bytes, "out", v, v_offset, in_bytes, "v");
        require_disjoint(out, out_offset, out_bytes, "out", segments, segments_offset, seg_bytes, "segments");
        a.row_stride = row_stride;
        a.n_tokens = n_tokens;
        a.n_heads = n_heads;
        a.head_dim = head_dim;
        a.n_segments = n_segments;
        a.scale = scale;
        ctx->backend->attention_dense(a);
    });
}

STRATA_EXPORT int32_t strata_positions_decode(strata_context* ctx, strata_slots* slots, strata_buffer* rows,
                                              uint64_t rows_offset, int64_t n_rows) {
    return guarded("strata_positions_decode", [&](Call& call) {
        use_context(call, ctx);
        PositionsDecodeArgs a;
        a.slots = use_slots(call, slots, "slots")->view;
        require_positive("n_rows", n_rows);
        a.rows = rows_operand(call, rows, rows_offset, n_rows);
        a.n_rows = n_rows;
        ctx->backend->positions_decode(a);
    });
}
