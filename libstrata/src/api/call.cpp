// call.cpp — failure reporting and the handle/operand checks of call.h.
#include "call.h"

#include <cmath>
#include <cstring>

namespace strata {
namespace {

thread_local std::string t_last_error;

// Largest shape value accepted anywhere (keeps every byte count far from
// overflow and gives a clear message instead of an allocation failure).
constexpr int64_t kMaxExtent = int64_t(1) << 40;

}  // namespace

const char* last_error_message() noexcept { return t_last_error.c_str(); }

int32_t report_failure(Call& call, int32_t status, const char* message) noexcept {
    try {
        t_last_error = std::string(call.fn) + ": " + message;
        if (call.ctx != nullptr && call.ctx->recording && !call.ctx->recording_failed) {
            call.ctx->recording_failed = true;
            call.ctx->recording_error = t_last_error;
        }
    } catch (...) {
        t_last_error.clear();  // out of memory while reporting: keep the status
    }
    return status;
}

u128 mul_sat(u128 a, u128 b) {
    const u128 max = ~u128(0);
    if (a != 0 && b > max / a) return max;
    return a * b;
}

void refuse_in_chain(const Call& call) {
    if (call.ctx == nullptr || !call.ctx->chain_open) return;
    if (std::strcmp(call.fn, "strata_matmul_ex") == 0 || std::strcmp(call.fn, "strata_matmul_chain_end") == 0) return;
    fail(STRATA_ERR_STATE, "a matmul chain is open on this context (strata_matmul_chain_begin): only "
                           "strata_matmul_ex and strata_matmul_chain_end are allowed until strata_matmul_chain_end");
}

strata_context* use_context(Call& call, strata_context* ctx) {
    if (!registry_contains(ctx, HandleKind::Context))
        invalid(ctx == nullptr ? "ctx is NULL" : "ctx is not a live context (destroyed or never created)");
    call.ctx = ctx;
    refuse_in_chain(call);
    return ctx;
}

strata_buffer* use_buffer(Call& call, strata_buffer* buf, const char* name) {
    return use_owned(call, buf, HandleKind::Buffer, name, "buffer");
}

strata_slots* use_slots(Call& call, strata_slots* slots, const char* name, bool record) {
    use_owned(call, slots, HandleKind::Slots, name, "slot set");
    if (record && call.ctx->recording) call.ctx->recorded_slots.insert(slots);
    return slots;
}

void check_new_memory(Call& call, uint64_t n_bytes, const char* what) {
    if (n_bytes == 0) invalid("n_bytes must be > 0");
    require_eager(call, what);
}

void require_eager(Call& call, const char* what) {
    if (call.ctx != nullptr && call.ctx->recording)
        fail(STRATA_ERR_STATE, std::string(what) + " is not allowed while a graph is being recorded "
                               "(call strata_graph_end first)");
}

uint8_t* operand(Call& call, strata_buffer* buf, const char* name, uint64_t offset, u128 n_bytes,
                 uint64_t align, const char* elem) {
    use_buffer(call, buf, name);
    if (offset % align != 0)
        invalid(std::string(name) + ": offset " + str_u(offset) + " is not a multiple of " + str_u(align) +
                ", the " + elem + " alignment");
    if (offset > buf->size || n_bytes > u128(buf->size - offset)) {
        std::string need = n_bytes > u128(UINT64_MAX) ? std::string("more than 2^64") : str_u(uint64_t(n_bytes));
        invalid(std::string(name) + " needs " + need + " bytes at offset " + str_u(offset) +
                " but its buffer holds " + str_u(buf->size) + " bytes");
    }
    if (call.ctx->recording) call.ctx->recorded_buffers.insert(buf);
    return buf->ptr + offset;
}

u128 strided_bytes(const char* name, int64_t n_rows, int64_t width, int64_t stride, int64_t elem_bytes) {
    if (stride < width)
        invalid(std::string(name) + ": row stride " + str(stride) + " is smaller than the row width " + str(width));
    return mul_sat(u128(n_rows - 1) * u128(stride) + u128(width), u128(elem_bytes));
}

void require_disjoint(strata_buffer* a, uint64_t a_offset, u128 a_bytes, const char* a_name,
                      strata_buffer* b, uint64_t b_offset, u128 b_bytes, const char* b_name) {
    if (a != b) return;
    if (u128(a_offset) + a_bytes <= u128(b_offset) || u128(b_offset) + b_bytes <= u128(a_offset)) return;
    invalid(std::string(a_name) + " and " + b_name + " overlap in the same buffer; they must be disjoint");
}

void require_range(const char* name, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi)
        invalid(std::string(name) + "=" + str(value) + " is out of range; allowed " + str(lo) + ".." + str(hi));
}

void require_positive(const char* name, int64_t value) {
    if (value <= 0) invalid(std::string(name) + "=" + str(value) + " must be > 0");
    if (value > kMaxExtent) invalid(std::string(name) + "=" + str(value) + " is larger than 2^40");
}

void require_finite(const char* name, float value) {
    if (!std::isfinite(value)) invalid(std::string(name) + " must be finite");
}

}  // namespace strata
