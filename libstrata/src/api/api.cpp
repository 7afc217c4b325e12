// api.cpp — C entry points for the library itself, contexts and buffers.
//
// Every entry point runs inside guarded() (call.h): handles are resolved
// through the registry, arguments checked, and only then is the backend
// called with plain device pointers.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "call.h"
#include "core/dtype.h"
#include "export.h"
#include "core/rng.h"

using namespace strata;

namespace {

// Parses "cpu", "cuda" or "cuda:N" into (backend, index).
void parse_device(const char* device, int32_t* kind, int32_t* index) {
    std::string d(device);
    if (d == "cpu") {
        *kind = STRATA_BACKEND_CPU;
        *index = 0;
        return;
    }
    if (d == "cuda") {
        *kind = STRATA_BACKEND_CUDA;
        *index = 0;
        return;
    }
    if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() <= 9) {
        bool digits = true;
        for (size_t i = 5; i < d.size(); i++) digits = digits && std::isdigit(static_cast<unsigned char>(d[i]));
        if (digits) {
            *kind = STRATA_BACKEND_CUDA;
            *index = std::atoi(d.c_str() + 5);
            return;
        }
    }
    invalid("device \"" + d + "\" is not understood; use \"cpu\", \"cuda\" or \"cuda:N\"");
}

// The CPU kernels are compiled for x86-64-v3; refuse politely on older CPUs.
void require_cpu_isa() {
    __builtin_cpu_init();
    std::string missing;
    if (!__builtin_cpu_supports("avx2")) missing += " AVX2";
    if (!__builtin_cpu_supports("fma")) missing += " FMA";
    if (!__builtin_cpu_supports("f16c")) missing += " F16C";
    if (!missing.empty())
        fail(STRATA_ERR_UNSUPPORTED, "this CPU lacks" + missing +
                                         "; libstrata's CPU backend needs x86-64-v3 (AVX2, FMA, F16C)");
}

}  // namespace

STRATA_EXPORT int32_t strata_abi_version(void) { return STRATA_ABI_VERSION; }

STRATA_EXPORT const char* strata_last_error(void) { return last_error_message(); }

STRATA_EXPORT const char* strata_status_name(int32_t status) {
    switch (status) {
        case STRATA_OK: return "STRATA_OK";
        case STRATA_ERR_INVALID_ARGUMENT: return "STRATA_ERR_INVALID_ARGUMENT";
        case STRATA_ERR_OUT_OF_MEMORY: return "STRATA_ERR_OUT_OF_MEMORY";
        case STRATA_ERR_UNSUPPORTED: return "STRATA_ERR_UNSUPPORTED";
        case STRATA_ERR_DEVICE: return "STRATA_ERR_DEVICE";
        case STRATA_ERR_STATE: return "STRATA_ERR_STATE";
        case STRATA_ERR_INTERNAL: return "STRATA_ERR_INTERNAL";
        default: return "unknown";
    }
}

STRATA_EXPORT const char* strata_build_info(void) {
    try {
        static const std::string info = std::string("libstrata abi ") + std::to_string(STRATA_ABI_VERSION) +
                                        "; g++ " + __VERSION__ +
                                        "; cpu kernels x86-64-v3 (AVX2, FMA, F16C); " + cuda_build_info();
        return info.c_str();
    } catch (...) {
        return "libstrata (build description unavailable: out of memory)";
    }
}

STRATA_EXPORT int32_t strata_dtype_block(int32_t dtype, int64_t* out_block_values, int64_t* out_block_bytes) {
    return guarded("strata_dtype_block", [&](Call&) {
        const DtypeInfo* info = dtype_info(dtype);
        if (info == nullptr) invalid("dtype " + str(dtype) + " is not one of enum strata_dtype");
        if (out_block_values == nullptr || out_block_bytes == nullptr) invalid("an output pointer is NULL");
        *out_block_values = info->block_values;
        *out_block_bytes = info->block_bytes;
    });
}

STRATA_EXPORT float strata_random_uniform(uint64_t seed, int64_t position) { return random_uniform(seed, position); }

STRATA_EXPORT int32_t strata_cuda_device_count(int32_t* out_count) {
    return guarded("strata_cuda_device_count", [&](Call&) {
        if (out_count == nullptr) invalid("out_count is NULL");
        *out_count = cuda_device_count();
    });
}

// ---------------------------------------------------------------- context

STRATA_EXPORT int32_t strata_context_create(const char* device, int32_t num_threads, strata_context** out_ctx) {
    return guarded("strata_context_create", [&](Call&) {
        if (out_ctx == nullptr) invalid("out_ctx is NULL");
        if (device == nullptr) invalid("device is NULL; use \"cpu\", \"cuda\" or \"cuda:N\"");
        require_range("num_threads", num_threads, 0, 1024);
        int32_t kind = 0, index = 0;
        parse_device(device, &kind, &index);
        auto ctx = std::make_unique<strata_context>();
        ctx->backend_kind = kind;
        ctx->device_index = index;
        if (kind == STRATA_BACKEND_CPU) {
            require_cpu_isa();
            ctx->backend = make_cpu_backend(num_threads);
        } else {
            ctx->backend = make_cuda_backend(index);
        }
        publish_handle(ctx, HandleKind::Context, nullptr, out_ctx);
    });
}

STRATA_EXPORT int32_t strata_context_destroy(strata_context* ctx) {
    return guarded("strata_context_destroy", [&](Call& call) {
        use_context(call, ctx);
        if (ctx->n_buffers + ctx->n_slot_sets + ctx->n_graphs + ctx->n_host_buffers > 0)
            fail(STRATA_ERR_STATE, "the context still owns " + str(ctx->n_buffers) + " buffer(s), " +
                                       str(ctx->n_host_buffers) + " host buffer(s), " + str(ctx->n_slot_sets) +
                                       " slot set(s) and " + str(ctx->n_graphs) +
                                       " graph(s); destroy them first");
        if (ctx->recording) ctx->backend->capture_abort();
        ctx->recording = false;
        call.ctx = nullptr;  // nothing to mark from here on
        try {
            ctx->backend->synchronize();
        } catch (...) {
            // A device error is moot: the context goes away regardless.
        }
        ctx->backend.reset();
        retire_handle(ctx);
    });
}

STRATA_EXPORT int32_t strata_context_info(strata_context* ctx, strata_device_info* out_info) {
    return guarded("strata_context_info", [&](Call& call) {
        use_context(call, ctx);
        if (out_info == nullptr) invalid("out_info is NULL");
        strata_device_info info;
        std::memset(&info, 0, sizeof info);
        ctx->backend->info(&info);
        info.name[sizeof info.name - 1] = '\0';
        *out_info = info;
    });
}

STRATA_EXPORT int32_t strata_context_synchronize(strata_context* ctx) {
    return guarded("strata_context_synchronize", [&](Call& call) {
        use_context(call, ctx);
        require_eager(call, "synchronize");
        ctx->backend->synchronize();
    });
}

// ---------------------------------------------------------------- buffers

STRATA_EXPORT int32_t strata_buffer_create(strata_context* ctx, uint64_t n_bytes, strata_buffer** out_buf) {
    return guarded("strata_buffer_create", [&](Call& call) {
        use_context(call, ctx);
        if (out_buf == nullptr) invalid("out_buf is NULL");
        create_memory(call, n_bytes, "creating a buffer", HandleKind::Buffer, &ctx->n_buffers, out_buf,
                      [&](uint64_t n) { return ctx->backend->alloc(n); });
    });
}

STRATA_EXPORT int32_t strata_buffer_destroy(strata_buffer* buf) {
    return guarded("strata_buffer_destroy", [&](Call& call) {
        use_buffer(call, buf, "buf");
        require_eager(call, "destroying a buffer");
        if (buf->graph_refs > 0)
            fail(STRATA_ERR_STATE, "the buffer is used by " + str(buf->graph_refs) +
                                       " live graph(s); destroy those graphs first");
        if (buf->ctx->matmul_prefetch == buf) buf->ctx->matmul_prefetch = nullptr;  // never prefetch freed memory
        buf->ctx->backend->release(buf->ptr);
        buf->ctx->n_buffers--;
        buf->ptr = nullptr;
        retire_handle(buf);
    });
}

STRATA_EXPORT int32_t strata_buffer_size(strata_buffer* buf, uint64_t* out_bytes) {
    return guarded("strata_buffer_size", [&](Call& call) {
        use_buffer(call, buf, "buf");
        if (out_bytes == nullptr) invalid("out_bytes is NULL");
        *out_bytes = buf->size;
    });
}

STRATA_EXPORT int32_t strata_buffer_upload(strata_buffer* buf, uint64_t offset, const void* src, uint64_t n_bytes) {
    return guarded("strata_buffer_upload", [&](Call& call) {
        use_buffer(call, buf, "buf");
        require_eager(call, "an upload");
        if (src == nullptr && n_bytes > 0) invalid("src is NULL");
        uint8_t* dst = operand(call, buf, "the destination range", offset, n_bytes, 1, "byte");
        if (n_bytes > 0) buf->ctx->backend->upload(dst, src, n_bytes);
    });
}

STRATA_EXPORT int32_t strata_buffer_download(strata_buffer* buf, uint64_t offset, void* dst, uint64_t n_bytes) {
    return guarded("strata_buffer_download", [&](Call& call) {
        use_buffer(call, buf, "buf");
        require_eager(call, "a download");
        if (dst == nullptr && n_bytes > 0) invalid("dst is NULL");
        uint8_t* src = operand(call, buf, "the source range", offset, n_bytes, 1, "byte");
        if (n_bytes > 0) buf->ctx->backend->download(dst, src, n_bytes);
    });
}

STRATA_EXPORT int32_t strata_buffer_fill(strata_buffer* buf, uint64_t offset, uint64_t n_bytes, uint8_t value) {
    return guarded("strata_buffer_fill", [&](Call& call) {
        uint8_t* dst = operand(call, buf, "the filled range", offset, n_bytes, 1, "byte");
        if (n_bytes > 0) buf->ctx->backend->fill(dst, value, n_bytes);
    });
}

STRATA_EXPORT int32_t strata_buffer_copy(strata_buffer* dst, uint64_t dst_offset, strata_buffer* src,
                                         uint64_t src_offset, uint64_t n_bytes) {
    return guarded("strata_buffer_copy", [&](Call& call) {
        uint8_t* d = operand(call, dst, "dst", dst_offset, n_bytes, 1, "byte");
        const uint8_t* s = operand(call, src, "src", src_offset, n_bytes, 1, "byte");
        require_disjoint(dst, dst_offset, n_bytes, "dst", src, src_offset, n_bytes, "src");
        if (n_bytes > 0) dst->ctx->backend->copy(d, s, n_bytes);
    });
}
