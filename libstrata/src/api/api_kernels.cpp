// api_kernels.cpp — C entry points of the dense kernels: embedding, RMSNorm,
// matmul, the activations, add and row gathers.
//
// Each entry point checks shapes, dtypes, offsets, byte ranges and overlaps,
// then hands the backend plain pointers (backend.h argument structs).
#include <cstdint>
#include <string>

#include "api_args.h"
#include "call.h"
#include "core/dtype.h"
#include "export.h"

using namespace strata;

// api_args.h.
const DtypeInfo& strata::weight_dtype(const char* name, int32_t dtype) {
    const DtypeInfo* info = dtype_info(dtype);
    if (info == nullptr || dtype == STRATA_I32)
        invalid(std::string(name) + "=" + str(dtype) + (info ? " (I32)" : "") +
                " is not a weight type; allowed: F32 (0), F16 (1), BF16 (30), Q8_0 (8), Q4_0 (2), Q4_1 (3), "
                "Q5_0 (6), Q5_1 (7), Q2_K (10), Q3_K (11), Q4_K (12), Q5_K (13), Q6_K (14), IQ4_NL (20), "
                "IQ3_S (21), IQ4_XS (23)");
    return *info;
}

namespace {

// strata_matmul_prefetch's pending hint, taken by the next matmul call (and so dropped if that call
// fails): its range checked as an operand of that call, which a recording graph then holds.
struct PrefetchHint {
    const void* ptr = nullptr;
    uint64_t bytes = 0;
};

PrefetchHint take_prefetch(Call& call, strata_context* ctx) {
    strata_buffer* buf = ctx->matmul_prefetch;
    ctx->matmul_prefetch = nullptr;
    if (buf == nullptr) return {};
    const uint64_t n = ctx->matmul_prefetch_bytes;
    return {operand(call, buf, "prefetch hint", ctx->matmul_prefetch_offset, u128(n), 1, "bytes"), n};
}

constexpr uint64_t kF32 = 4;


// Values along the blocked dimension must fill whole blocks.
void require_blocks(const char* name, int64_t n, const DtypeInfo& info) {
    if (n % info.block_values != 0)
        invalid(std::string(name) + "=" + str(n) + " is not a multiple of " + str(info.block_values) + ", the " +
                info.name + " block size");
}

uint64_t dtype_align(int32_t dtype) { return dtype == STRATA_F32 ? 4 : 2; }

}  // namespace

STRATA_EXPORT int32_t strata_embed(strata_context* ctx, strata_buffer* table, uint64_t table_offset, int32_t dtype,
                                   int64_t n_vocab, int64_t dim, strata_buffer* ids, uint64_t ids_offset,
                                   int64_t n_rows, strata_buffer* out, uint64_t out_offset) {
    return guarded("strata_embed", [&](Call& call) {
        use_context(call, ctx);
        const DtypeInfo& info = weight_dtype("dtype", dtype);
        require_positive("n_vocab", n_vocab);
        require_positive("dim", dim);
        require_positive("n_rows", n_rows);
        require_blocks("dim", dim, info);
        u128 table_bytes = mul_sat(n_vocab, u128(dim / info.block_values) * info.block_bytes);
        EmbedArgs a;
        a.table = operand(call, table, "table", table_offset, table_bytes, dtype_align(dtype), info.name);
        a.ids = reinterpret_cast<const int32_t*>(operand(call, ids, "ids", ids_offset, u128(n_rows) * 4, 4, "I32"));
        u128 out_bytes = mul_sat(u128(n_rows) * dim, kF32);
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, out_bytes, 4, "F32"));
        require_disjoint(out, out_offset, out_bytes, "out", table, table_offset, table_bytes, "table");
        require_disjoint(out, out_offset, out_bytes, "out", ids, ids_offset, u128(n_rows) * 4, "ids");
        a.dtype = dtype;
        a.n_vocab = n_vocab;
        a.dim = dim;
        a.n_rows = n_rows;
        ctx->backend->embed(a);
    });
}

STRATA_EXPORT int32_t strata_rmsnorm(strata_context* ctx, strata_buffer* x, uint64_t x_offset, strata_buffer* weight,
                                     uint64_t weight_offset, strata_buffer* out, uint64_t out_offset, int64_t n_rows,
                                     int64_t dim, float eps) {
    return guarded("strata_rmsnorm", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        require_positive("dim", dim);
        if (!(eps >= 0.0f) || eps > 1.0f) invalid("eps must be in [0, 1]");
        u128 bytes = mul_sat(u128(n_rows) * dim, kF32);
        RmsNormArgs a;
        a.x = reinterpret_cast<const float*>(operand(call, x, "x", x_offset, bytes, 4, "F32"));
        a.weight = reinterpret_cast<const float*>(operand(call, weight, "weight", weight_offset, u128(dim) * 4, 4, "F32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, bytes, 4, "F32"));
        if (!same_place(out, out_offset, x, x_offset))
            require_disjoint(out, out_offset, bytes, "out", x, x_offset, bytes, "x (unless out equals x)");
        require_disjoint(out, out_offset, bytes, "out", weight, weight_offset, u128(dim) * 4, "weight");
        a.n_rows = n_rows;
        a.dim = dim;
        a.eps = eps;
        ctx->backend->rmsnorm(a);
    });
}

STRATA_EXPORT int32_t strata_matmul(strata_context* ctx, strata_buffer* x, uint64_t x_offset, int64_t n_rows,
                                    int64_t k, strata_buffer* w, uint64_t w_offset, int32_t w_dtype, int64_t n_out,
                                    strata_buffer* bias, uint64_t bias_offset, strata_buffer* y, uint64_t y_offset,
                                    int32_t accumulate) {
    return guarded("strata_matmul", [&](Call& call) {
        use_context(call, ctx);
        const PrefetchHint hint = take_prefetch(call, ctx);  // the call consumes it even if it fails
        const DtypeInfo& info = weight_dtype("w_dtype", w_dtype);
        require_positive("n_rows", n_rows);
        require_positive("k", k);
        require_positive("n_out", n_out);
        require_blocks("k", k, info);
        MatmulArgs a;
        u128 x_bytes = mul_sat(u128(n_rows) * k, kF32);
        u128 y_bytes = mul_sat(u128(n_rows) * n_out, kF32);
        a.x = reinterpret_cast<const float*>(operand(call, x, "x", x_offset, x_bytes, 4, "F32"));
        a.w = operand(call, w, "w", w_offset, mul_sat(n_out, u128(k / info.block_values) * info.block_bytes),
                      dtype_align(w_dtype), info.name);
        a.bias = bias == nullptr ? nullptr
                                 : reinterpret_cast<const float*>(
                                       operand(call, bias, "bias", bias_offset, u128(n_out) * 4, 4, "F32"));
        a.y = reinterpret_cast<float*>(operand(call, y, "y", y_offset, y_bytes, 4, "F32"));
        require_disjoint(y, y_offset, y_bytes, "y", x, x_offset, x_bytes, "x");
        if (bias != nullptr) require_disjoint(y, y_offset, y_bytes, "y", bias, bias_offset, u128(n_out) * 4, "bias");
        a.n_rows = n_rows;
        a.k = k;
        a.w_dtype = w_dtype;
        a.n_out = n_out;
        a.accumulate = accumulate != 0;
        a.prefetch = hint.ptr;
        a.prefetch_bytes = hint.bytes;
        ctx->backend->matmul(a);
    });
}

namespace {

// strata_matmul_ex's checks and call, shared with strata_matmul_rope_kv_store, which checks its rope
// arguments first (`rope` != null: the backend's matmul_rope_kv_store instead of matmul).
void matmul_ex_call(Call& call, strata_context* ctx, const strata_matmul_params* params, strata_buffer* x,
                    uint64_t x_offset, int64_t n_rows, int64_t k, strata_buffer* w, uint64_t w_offset,
                    int32_t w_dtype, int64_t n_out, strata_buffer* y, uint64_t y_offset,
                    const RopeKvStoreArgs* rope) {
    const PrefetchHint hint = take_prefetch(call, ctx);  // the call consumes it even if it fails
    const strata_context::Handoff latest = ctx->handoff;
    ctx->handoff = {};  // a failed call leaves no hand-off behind (set again at the end once it succeeds)
    if (params == nullptr) invalid("params is NULL");
    const strata_matmul_params& pr = *params;
    if (pr.prologue < STRATA_PROLOGUE_NONE || pr.prologue > STRATA_PROLOGUE_SILU_MUL)
        invalid("prologue=" + str(pr.prologue) + " is not one of NONE (0), RMSNORM (1), SILU_MUL (2)");
    const DtypeInfo& info = weight_dtype("w_dtype", w_dtype);
    require_positive("n_rows", n_rows);
    require_positive("k", k);
    require_positive("n_out", n_out);
    require_blocks("k", k, info);
    const bool silu = pr.prologue == STRATA_PROLOGUE_SILU_MUL, rms = pr.prologue == STRATA_PROLOGUE_RMSNORM;
    if (k > (INT64_MAX / 2)) invalid("k=" + str(k) + " is too large");
    const int64_t width = silu ? 2 * k : k;
    const int64_t stride = pr.x_row_stride == 0 ? width : pr.x_row_stride;
    if (pr.x_row_stride < 0) invalid("x_row_stride=" + str(pr.x_row_stride) + " must be >= 0");
    if (pr.y_row_stride != 0 && pr.y_row_stride < n_out)
        invalid("y_row_stride=" + str(pr.y_row_stride) + " must be 0 (dense) or at least n_out=" + str(n_out));
    const int64_t y_stride = pr.y_row_stride == 0 ? n_out : pr.y_row_stride;
    if (rms && (!(pr.eps >= 0.0f) || pr.eps > 1.0f)) invalid("eps must be in [0, 1]");
    if (rms && pr.norm_weight == nullptr) invalid("norm_weight is NULL (RMSNORM needs it)");
    if (!rms && pr.norm_weight != nullptr) invalid("norm_weight is given but prologue is not RMSNORM");
    MatmulArgs a;
    const u128 x_bytes = strided_bytes("x", n_rows, width, stride, 4);
    const u128 y_bytes = strided_bytes("y", n_rows, n_out, y_stride, 4);  // through the last row's n_out values
    a.x = reinterpret_cast<const float*>(operand(call, x, "x", x_offset, x_bytes, 4, "F32"));
    a.w = operand(call, w, "w", w_offset, mul_sat(n_out, u128(k / info.block_values) * info.block_bytes),
                  dtype_align(w_dtype), info.name);
    a.bias = pr.bias == nullptr ? nullptr
                                : reinterpret_cast<const float*>(operand(call, pr.bias, "bias", pr.bias_offset,
                                                                         u128(n_out) * 4, 4, "F32"));
    a.norm_weight = rms ? reinterpret_cast<const float*>(operand(call, pr.norm_weight, "norm_weight",
                                                                 pr.norm_weight_offset, u128(k) * 4, 4, "F32"))
                        : nullptr;
    a.y = reinterpret_cast<float*>(operand(call, y, "y", y_offset, y_bytes, 4, "F32"));
    require_disjoint(y, y_offset, y_bytes, "y", x, x_offset, x_bytes, "x");
    if (pr.bias != nullptr)
        require_disjoint(y, y_offset, y_bytes, "y", pr.bias, pr.bias_offset, u128(n_out) * 4, "bias");
    if (rms) require_disjoint(y, y_offset, y_bytes, "y", pr.norm_weight, pr.norm_weight_offset, u128(k) * 4,
                              "norm_weight");
    a.n_rows = n_rows;
    a.k = k;
    a.w_dtype = w_dtype;
    a.n_out = n_out;
    a.accumulate = pr.accumulate != 0;
    a.prologue = pr.prologue;
    a.eps = rms ? pr.eps : 0.0f;
    a.x_row_stride = stride;
    a.prefetch = hint.ptr;
    a.prefetch_bytes = hint.bytes;
    a.y_row_stride = y_stride;
    if (pr.handoff_use) {  // x must be exactly what the latest emitting call prepared
        const char* why = !latest.set                        ? "no earlier call on this context set handoff_emit"
                          : latest.y != a.x                   ? "x is not that call's y"
                          : latest.n_rows != n_rows           ? "n_rows differs from that call's"
                          : latest.k != k                     ? "k differs from the k that call prepared"
                          : latest.prologue != pr.prologue    ? "prologue differs from that call's handoff_prologue"
                          : latest.norm != a.norm_weight      ? "norm_weight differs from that call's handoff_norm_weight"
                          : stride != width                   ? "x rows are not dense"
                                                              : nullptr;
        if (why) invalid(std::string("handoff_use: ") + why);
        a.use_handoff = true;
    }
    strata_context::Handoff emitted;
    if (pr.handoff_emit) {
        const int32_t hp = pr.handoff_prologue;
        if (hp < STRATA_PROLOGUE_NONE || hp > STRATA_PROLOGUE_SILU_MUL)
            invalid("handoff_prologue=" + str(hp) + " is not one of NONE (0), RMSNORM (1), SILU_MUL (2)");
        weight_dtype("handoff_dtype", pr.handoff_dtype);
        if (y_stride != n_out) invalid("handoff_emit needs dense y rows (y_row_stride 0 or n_out)");
        const bool hsilu = hp == STRATA_PROLOGUE_SILU_MUL, hrms = hp == STRATA_PROLOGUE_RMSNORM;
        if (hsilu && n_out % 2 != 0) invalid("handoff_emit with SILU_MUL needs an even n_out, got " + str(n_out));
        const int64_t hk = hsilu ? n_out / 2 : n_out;
        if (hk % 32 != 0) invalid("handoff_emit: the next call's k=" + str(hk) + " is not a multiple of 32");
        if (hrms && pr.handoff_norm_weight == nullptr) invalid("handoff_norm_weight is NULL (RMSNORM needs it)");
        if (!hrms && pr.handoff_norm_weight != nullptr)
            invalid("handoff_norm_weight is given but handoff_prologue is not RMSNORM");
        const float* hn = hrms ? reinterpret_cast<const float*>(operand(call, pr.handoff_norm_weight,
                                                                        "handoff_norm_weight",
                                                                        pr.handoff_norm_weight_offset,
                                                                        u128(hk) * 4, 4, "F32"))
                               : nullptr;
        if (hrms) require_disjoint(y, y_offset, y_bytes, "y", pr.handoff_norm_weight,
                                   pr.handoff_norm_weight_offset, u128(hk) * 4, "handoff_norm_weight");
        a.emit_prologue = hp;
        a.emit_norm = hn;
        a.emit_dtype = pr.handoff_dtype;
        a.emit_k = hk;
        emitted = {true, a.y, n_rows, hk, hp, hn};
    }
    if (rope != nullptr) ctx->backend->matmul_rope_kv_store(a, *rope);
    else ctx->backend->matmul(a);
    ctx->handoff = pr.handoff_emit ? emitted : latest;
}

}  // namespace

STRATA_EXPORT int32_t strata_matmul_ex(strata_context* ctx, const strata_matmul_params* params, strata_buffer* x,
                                       uint64_t x_offset, int64_t n_rows, int64_t k, strata_buffer* w,
                                       uint64_t w_offset, int32_t w_dtype, int64_t n_out, strata_buffer* y,
                                       uint64_t y_offset) {
    return guarded("strata_matmul_ex", [&](Call& call) {
        use_context(call, ctx);
        matmul_ex_call(call, ctx, params, x, x_offset, n_rows, k, w, w_offset, w_dtype, n_out, y, y_offset, nullptr);
    });
}

STRATA_EXPORT int32_t strata_matmul_rope_kv_store(
    strata_context* ctx, const strata_matmul_params* params, strata_buffer* x, uint64_t x_offset, int64_t n_rows,
    int64_t k, strata_buffer* w, uint64_t w_offset, int32_t w_dtype, int64_t n_out, strata_buffer* y,
    uint64_t y_offset, const strata_rope_params* q_params, const strata_rope_params* k_params, strata_slots* slots,
    int32_t layer, strata_buffer* rows, uint64_t rows_offset, strata_buffer* freq_factors,
    uint64_t freq_factors_offset) {
    return guarded("strata_matmul_rope_kv_store", [&](Call& call) {
        use_context(call, ctx);
        if (params == nullptr) invalid("params is NULL");
        if (params->handoff_emit) invalid("handoff_emit cannot be combined with the rope and KV store (y is rotated)");
        if (params->y_row_stride < 0) invalid("y_row_stride=" + str(params->y_row_stride) + " must be >= 0");
        require_positive("n_out", n_out);
        const int64_t y_stride = params->y_row_stride == 0 ? n_out : params->y_row_stride;
        if (q_params == nullptr || k_params == nullptr) invalid("q_params and k_params must not be NULL");
        const SlotsView& sv = use_slots(call, slots, "slots")->view;
        const int64_t width = (int64_t(q_params->n_heads) + 2 * int64_t(sv.n_kv_heads)) * sv.head_dim;
        if (n_out != width)
            invalid("n_out=" + str(n_out) + " must be the qkv row's width (q_params.n_heads + 2 * n_kv_heads) * "
                    "head_dim = " + str(width));
        // The rope arguments over y's rows: the same checks as strata_rope_kv_store (qkv = y).
        const RopeKvStoreArgs r = rope_kv_store_args(call, q_params, k_params, slots, layer, y, y_offset, y_stride,
                                                     n_rows, rows, rows_offset, freq_factors, freq_factors_offset);
        matmul_ex_call(call, ctx, params, x, x_offset, n_rows, k, w, w_offset, w_dtype, n_out, y, y_offset, &r);
    });
}

STRATA_EXPORT int32_t strata_matmul_chain_begin(strata_context* ctx) {
    return guarded("strata_matmul_chain_begin", [&](Call& call) {
        use_context(call, ctx);  // refuses a second begin: the chain allows only matmul_ex and the end
        ctx->backend->matmul_chain_begin();
        ctx->chain_open = true;
    });
}

STRATA_EXPORT int32_t strata_matmul_chain_end(strata_context* ctx) {
    return guarded("strata_matmul_chain_end", [&](Call& call) {
        use_context(call, ctx);
        if (!ctx->chain_open) fail(STRATA_ERR_STATE, "no matmul chain is open on this context (strata_matmul_chain_begin)");
        ctx->chain_open = false;  // closed even if the held calls fail to launch: the context stays usable
        ctx->backend->matmul_chain_end();
    });
}

STRATA_EXPORT int32_t strata_matmul_prefetch(strata_context* ctx, strata_buffer* w, uint64_t offset,
                                             uint64_t n_bytes) {
    return guarded("strata_matmul_prefetch", [&](Call& call) {
        use_context(call, ctx);
        ctx->matmul_prefetch = nullptr;
        if (n_bytes == 0) return;
        operand(call, w, "w", offset, u128(n_bytes), 1, "bytes");
        ctx->matmul_prefetch = w;
        ctx->matmul_prefetch_offset = offset;
        ctx->matmul_prefetch_bytes = n_bytes;
    });
}

namespace {

// strata_silu_mul and strata_gelu_tanh_mul: the same operands and checks, another activation.
int32_t gated_activation(const char* entry, int32_t gelu_tanh, strata_context* ctx, strata_buffer* gate,
                         uint64_t gate_offset, int64_t gate_row_stride, strata_buffer* up, uint64_t up_offset,
                         int64_t up_row_stride, strata_buffer* out, uint64_t out_offset, int64_t n_rows,
                         int64_t n_cols) {
    return guarded(entry, [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        require_positive("n_cols", n_cols);
        u128 gate_bytes = strided_bytes("gate", n_rows, n_cols, gate_row_stride, 4);
        u128 up_bytes = strided_bytes("up", n_rows, n_cols, up_row_stride, 4);
        u128 out_bytes = mul_sat(u128(n_rows) * n_cols, kF32);
        SiluMulArgs a;
        a.gate = reinterpret_cast<const float*>(operand(call, gate, "gate", gate_offset, gate_bytes, 4, "F32"));
        a.up = reinterpret_cast<const float*>(operand(call, up, "up", up_offset, up_bytes, 4, "F32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, out_bytes, 4, "F32"));
        if (!(same_place(out, out_offset, gate, gate_offset) && gate_row_stride == n_cols))
            require_disjoint(out, out_offset, out_bytes, "out", gate, gate_offset, gate_bytes, "gate");
        if (!(same_place(out, out_offset, up, up_offset) && up_row_stride == n_cols))
            require_disjoint(out, out_offset, out_bytes, "out", up, up_offset, up_bytes, "up");
        a.gate_row_stride = gate_row_stride;
        a.up_row_stride = up_row_stride;
        a.n_rows = n_rows;
        a.n_cols = n_cols;
        a.gelu_tanh = gelu_tanh;
        ctx->backend->silu_mul(a);
    });
}

}  // namespace

STRATA_EXPORT int32_t strata_silu_mul(strata_context* ctx, strata_buffer* gate, uint64_t gate_offset,
                                      int64_t gate_row_stride, strata_buffer* up, uint64_t up_offset,
                                      int64_t up_row_stride, strata_buffer* out, uint64_t out_offset, int64_t n_rows,
                                      int64_t n_cols) {
    return gated_activation("strata_silu_mul", 0, ctx, gate, gate_offset, gate_row_stride, up, up_offset,
                            up_row_stride, out, out_offset, n_rows, n_cols);
}

STRATA_EXPORT int32_t strata_gelu_tanh_mul(strata_context* ctx, strata_buffer* gate, uint64_t gate_offset,
                                           int64_t gate_row_stride, strata_buffer* up, uint64_t up_offset,
                                           int64_t up_row_stride, strata_buffer* out, uint64_t out_offset,
                                           int64_t n_rows, int64_t n_cols) {
    return gated_activation("strata_gelu_tanh_mul", 1, ctx, gate, gate_offset, gate_row_stride, up, up_offset,
                            up_row_stride, out, out_offset, n_rows, n_cols);
}

STRATA_EXPORT int32_t strata_scale(strata_context* ctx, strata_buffer* x, uint64_t x_offset, strata_buffer* out,
                                   uint64_t out_offset, int64_t n, float factor) {
    return guarded("strata_scale", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n", n);
        require_finite("factor", factor);
        u128 bytes = u128(n) * 4;
        UnaryArgs a;
        a.x = reinterpret_cast<const float*>(operand(call, x, "x", x_offset, bytes, 4, "F32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, bytes, 4, "F32"));
        if (!same_place(out, out_offset, x, x_offset))
            require_disjoint(out, out_offset, bytes, "out", x, x_offset, bytes, "x (unless out equals x)");
        a.n = n;
        a.factor = factor;
        ctx->backend->scale(a);
    });
}

STRATA_EXPORT int32_t strata_gelu(strata_context* ctx, strata_buffer* x, uint64_t x_offset, strata_buffer* out,
                                  uint64_t out_offset, int64_t n) {
    return guarded("strata_gelu", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n", n);
        u128 bytes = u128(n) * 4;
        UnaryArgs a;
        a.x = reinterpret_cast<const float*>(operand(call, x, "x", x_offset, bytes, 4, "F32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, bytes, 4, "F32"));
        if (!same_place(out, out_offset, x, x_offset))
            require_disjoint(out, out_offset, bytes, "out", x, x_offset, bytes, "x (unless out equals x)");
        a.n = n;
        ctx->backend->gelu(a);
    });
}

STRATA_EXPORT int32_t strata_add(strata_context* ctx, strata_buffer* a_buf, uint64_t a_offset, strata_buffer* b_buf,
                                 uint64_t b_offset, strata_buffer* out, uint64_t out_offset, int64_t n) {
    return guarded("strata_add", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n", n);
        u128 bytes = u128(n) * 4;
        BinaryArgs a;
        a.a = reinterpret_cast<const float*>(operand(call, a_buf, "a", a_offset, bytes, 4, "F32"));
        a.b = reinterpret_cast<const float*>(operand(call, b_buf, "b", b_offset, bytes, 4, "F32"));
        a.out = reinterpret_cast<float*>(operand(call, out, "out", out_offset, bytes, 4, "F32"));
        if (!same_place(out, out_offset, a_buf, a_offset))
            require_disjoint(out, out_offset, bytes, "out", a_buf, a_offset, bytes, "a (unless out equals a)");
        if (!same_place(out, out_offset, b_buf, b_offset))
            require_disjoint(out, out_offset, bytes, "out", b_buf, b_offset, bytes, "b (unless out equals b)");
        a.n = n;
        ctx->backend->add(a);
    });
}

STRATA_EXPORT int32_t strata_gather_rows(strata_context* ctx, strata_buffer* src, uint64_t src_offset,
                                         int64_t n_src_rows, int64_t row_bytes, strata_buffer* idx,
                                         uint64_t idx_offset, int64_t n_rows, strata_buffer* dst,
                                         uint64_t dst_offset) {
    return guarded("strata_gather_rows", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_src_rows", n_src_rows);
        require_positive("row_bytes", row_bytes);
        require_positive("n_rows", n_rows);
        if (row_bytes % 4 != 0) invalid("row_bytes=" + str(row_bytes) + " is not a multiple of 4");
        u128 src_bytes = mul_sat(n_src_rows, row_bytes);
        u128 dst_bytes = mul_sat(n_rows, row_bytes);
        GatherRowsArgs a;
        a.src = operand(call, src, "src", src_offset, src_bytes, 4, "4-byte row");
        a.idx = reinterpret_cast<const int32_t*>(operand(call, idx, "idx", idx_offset, u128(n_rows) * 4, 4, "I32"));
        a.dst = operand(call, dst, "dst", dst_offset, dst_bytes, 4, "4-byte row");
        require_disjoint(dst, dst_offset, dst_bytes, "dst", src, src_offset, src_bytes, "src");
        require_disjoint(dst, dst_offset, dst_bytes, "dst", idx, idx_offset, u128(n_rows) * 4, "idx");
        a.n_src_rows = n_src_rows;
        a.row_bytes = row_bytes;
        a.n_rows = n_rows;
        ctx->backend->gather_rows(a);
    });
}
