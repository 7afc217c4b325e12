// api_async.cpp — C entry points that let a decode loop keep the device busy:
// host buffers the device copies into asynchronously, markers that say when
// enqueued work has finished, and the step-advance kernel that continues a
// decode batch on the device without host writes.
#include <memory>
#include <string>

#include "call.h"
#include "export.h"

using namespace strata;

namespace {

strata_host_buffer* use_host_buffer(Call& call, strata_host_buffer* hb, const char* name) {
    return use_owned(call, hb, HandleKind::HostBuffer, name, "host buffer");
}

}  // namespace

STRATA_EXPORT int32_t strata_host_buffer_create(strata_context* ctx, uint64_t n_bytes, strata_host_buffer** out_hb,
                                                void** out_data) {
    return guarded("strata_host_buffer_create", [&](Call& call) {
        use_context(call, ctx);
        if (out_hb == nullptr || out_data == nullptr) invalid("out_hb and out_data must not be NULL");
        strata_host_buffer* hb = create_memory(call, n_bytes, "creating a host buffer", HandleKind::HostBuffer,
                                               &ctx->n_host_buffers, out_hb,
                                               [&](uint64_t n) { return ctx->backend->host_alloc(n); });
        *out_data = hb->ptr;
    });
}

STRATA_EXPORT int32_t strata_host_buffer_destroy(strata_host_buffer* hb) {
    return guarded("strata_host_buffer_destroy", [&](Call& call) {
        use_host_buffer(call, hb, "hb");
        require_eager(call, "destroying a host buffer");
        hb->ctx->backend->host_release(hb->ptr);
        hb->ctx->n_host_buffers--;
        hb->ptr = nullptr;
        retire_handle(hb);
    });
}

STRATA_EXPORT int32_t strata_buffer_copy_to_host(strata_host_buffer* dst, uint64_t dst_offset, strata_buffer* src,
                                                 uint64_t src_offset, uint64_t n_bytes) {
    return guarded("strata_buffer_copy_to_host", [&](Call& call) {
        use_host_buffer(call, dst, "dst");
        require_eager(call, "strata_buffer_copy_to_host");
        if (n_bytes == 0) invalid("n_bytes must be > 0");
        if (dst_offset > dst->size || n_bytes > dst->size - dst_offset)
            invalid("dst range [" + std::to_string(dst_offset) + ", +" + std::to_string(n_bytes) +
                    ") is outside the host buffer of " + std::to_string(dst->size) + " bytes");
        const uint8_t* from = operand(call, src, "src", src_offset, n_bytes, 1, "bytes");
        call.ctx->backend->copy_to_host(dst->ptr + dst_offset, from, n_bytes);
    });
}

STRATA_EXPORT int32_t strata_context_marker(strata_context* ctx, uint64_t* out_marker) {
    return guarded("strata_context_marker", [&](Call& call) {
        use_context(call, ctx);
        if (out_marker == nullptr) invalid("out_marker is NULL");
        require_eager(call, "strata_context_marker");
        *out_marker = ctx->backend->marker();
    });
}

STRATA_EXPORT int32_t strata_context_wait(strata_context* ctx, uint64_t marker) {
    return guarded("strata_context_wait", [&](Call& call) {
        use_context(call, ctx);
        require_eager(call, "strata_context_wait");
        ctx->backend->wait_marker(marker);
    });
}

STRATA_EXPORT int32_t strata_step_advance(strata_context* ctx, strata_buffer* io, uint64_t ids_offset,
                                          uint64_t rows_offset, uint64_t params_offset, uint64_t out_ids_offset,
                                          int64_t n_rows) {
    return guarded("strata_step_advance", [&](Call& call) {
        use_context(call, ctx);
        require_positive("n_rows", n_rows);
        const u128 n = u128(n_rows);
        StepAdvanceArgs a;
        a.ids = reinterpret_cast<int32_t*>(operand(call, io, "ids", ids_offset, n * 4, 4, "I32"));
        a.rows = reinterpret_cast<int32_t*>(operand(call, io, "rows", rows_offset, n * 8, 4, "I32"));
        a.params = reinterpret_cast<strata_sampling_params*>(
            operand(call, io, "params", params_offset, n * sizeof(strata_sampling_params), 8, "sampling params"));
        a.out_ids = reinterpret_cast<const int32_t*>(operand(call, io, "out_ids", out_ids_offset, n * 4, 4, "I32"));
        require_disjoint(io, ids_offset, n * 4, "ids", io, out_ids_offset, n * 4, "out_ids");
        require_disjoint(io, rows_offset, n * 8, "rows", io, params_offset, n * sizeof(strata_sampling_params),
                         "params");
        a.n_rows = n_rows;
        ctx->backend->step_advance(a);
    });
}
