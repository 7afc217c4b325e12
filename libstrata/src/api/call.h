// call.h — the boundary every C entry point goes through, and argument checks.
//
// guarded() runs an entry point's body, turns any exception into a status and
// the thread-local strata_last_error() message ("strata_matmul: ..."), and
// marks a context's graph recording as failed when a call on it fails while
// recording. The check helpers resolve handles through the registry and check
// offsets, alignment and byte ranges, so backends only see valid pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/errors.h"
#include "handles.h"

namespace strata {

using u128 = unsigned __int128;

// One entry-point invocation: its name and, once known, its context.
struct Call {
    const char* fn;
    strata_context* ctx = nullptr;
};

// The calling thread's last failure message ("" if none yet).
const char* last_error_message() noexcept;

// Records the failure (message, recording state) and returns `status`.
int32_t report_failure(Call& call, int32_t status, const char* message) noexcept;

template <class Body>
int32_t guarded(const char* fn, Body&& body) noexcept {
    Call call{fn};
    try {
        body(call);
        return STRATA_OK;
    } catch (const Error& e) {
        return report_failure(call, e.status(), e.what());
    } catch (const std::bad_alloc&) {
        return report_failure(call, STRATA_ERR_OUT_OF_MEMORY, "out of host memory");
    } catch (const std::exception& e) {
        return report_failure(call, STRATA_ERR_INTERNAL, e.what());
    } catch (...) {
        return report_failure(call, STRATA_ERR_INTERNAL, "unknown exception");
    }
}

// Saturating product of byte counts (never wraps; a huge result just fails the
// bounds check).
u128 mul_sat(u128 a, u128 b);

// Fails with STRATA_ERR_STATE when call.ctx has a matmul chain open (strata_matmul_chain_begin) and
// call.fn is neither strata_matmul_ex nor strata_matmul_chain_end: the calls a chain holds run at its end,
// so nothing else may come between them. Run wherever call.ctx is first fixed.
void refuse_in_chain(const Call& call);

// Resolves handles; the first one fixes call.ctx, later ones must match it.
// use_slots also marks the slot set as referenced by a graph being recorded
// unless `record` is false (slot management calls, which are not recorded).
strata_context* use_context(Call& call, strata_context* ctx);
strata_buffer* use_buffer(Call& call, strata_buffer* buf, const char* name);
strata_slots* use_slots(Call& call, strata_slots* slots, const char* name, bool record = true);

// The object behind handle argument `name` of a kind a context owns (`noun`
// for messages): refuses NULL, dead and foreign handles, fixes call.ctx.
template <class T>
T* use_owned(Call& call, T* object, HandleKind kind, const char* name, const char* noun) {
    if (!registry_contains(object, kind))
        invalid(std::string(name) + (object == nullptr ? std::string(" is NULL")
                                                       : " is not a live " + std::string(noun) +
                                                             " (destroyed or never created)"));
    if (call.ctx == nullptr) {
        call.ctx = object->ctx;
        refuse_in_chain(call);
    } else if (object->ctx != call.ctx) {
        invalid(std::string(name) + " belongs to a different context");
    }
    return object;
}

// Fails with STRATA_ERR_STATE while call.ctx is recording a graph.
void require_eager(Call& call, const char* what);

// The checks of creating memory (a device or host buffer) on call.ctx: a
// size above zero and no graph being recorded (`what` names it for messages).
void check_new_memory(Call& call, uint64_t n_bytes, const char* what);

// Hands a fully built object to the caller: registered as a live handle of
// `kind`, counted in its context's `owned` count (so the context outlives
// it; NULL for a context itself), then released into *out.
template <class T>
void publish_handle(std::unique_ptr<T>& object, HandleKind kind, int64_t* owned, T** out) {
    register_handle(object.get(), kind);
    if (owned != nullptr) ++*owned;
    *out = object.release();
}

// Creates a device or host buffer (T) of n_bytes on call.ctx from `alloc`
// (the backend's alloc or host_alloc) and publishes it into *out.
template <class T, class Alloc>
T* create_memory(Call& call, uint64_t n_bytes, const char* what, HandleKind kind, int64_t* owned, T** out,
                 Alloc&& alloc) {
    check_new_memory(call, n_bytes, what);
    auto object = std::make_unique<T>();
    object->ptr = static_cast<uint8_t*>(alloc(n_bytes));
    object->ctx = call.ctx;
    object->size = n_bytes;
    T* created = object.get();
    publish_handle(object, kind, owned, out);
    return created;
}

// A checked operand: `name` in buffer `buf` at `offset`, `n_bytes` long,
// `offset` a multiple of `align` (`elem` names the element type for the
// message). Returns the device address. While recording, the buffer is
// remembered as referenced by the graph.
uint8_t* operand(Call& call, strata_buffer* buf, const char* name, uint64_t offset, u128 n_bytes,
                 uint64_t align, const char* elem);

// Byte extent of n_rows rows of `width` elements of `elem_bytes` at a row
// stride of `stride` elements (stride >= width is checked here).
u128 strided_bytes(const char* name, int64_t n_rows, int64_t width, int64_t stride, int64_t elem_bytes);

// Fails unless the two byte ranges are in different buffers or disjoint.
void require_disjoint(strata_buffer* a, uint64_t a_offset, u128 a_bytes, const char* a_name,
                      strata_buffer* b, uint64_t b_offset, u128 b_bytes, const char* b_name);

// Whether two operands are exactly the same range (an allowed in-place op).
inline bool same_place(strata_buffer* a, uint64_t a_offset, strata_buffer* b, uint64_t b_offset) {
    return a == b && a_offset == b_offset;
}

// Fails unless lo <= value <= hi, naming the argument and the allowed range.
void require_range(const char* name, int64_t value, int64_t lo, int64_t hi);
void require_positive(const char* name, int64_t value);
void require_finite(const char* name, float value);

// std::to_string for messages, shorter to write.
inline std::string str(int64_t v) { return std::to_string(v); }
inline std::string str_u(uint64_t v) { return std::to_string(v); }

}  // namespace strata
