// backend.h — the internal interface every libstrata backend implements.
//
// The entry points in api/ own the C ABI: they check handles, shapes, dtypes,
// offsets and bounds, then call a Backend with raw, already-validated device
// pointers. A backend only computes. It reports failure by throwing
// strata::Error (errors.h); api/call.h turns that into a status and
// strata_last_error().
//
// Recording: between capture_begin() and capture_end() every enqueueing
// method (kernels, fill, copy) is recorded instead of run — CUDA by stream
// capture, the CPU backend by storing closures. The entry points forbid the
// synchronous methods (upload, download, synchronize) while recording.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata.h"

namespace strata {

// Device-side layout of a slot set, shared by all backends. All pointers are
// device pointers owned by the Slots object of api/handles.h.
//
// KV memory is a pool of pages of kPageCells cells each, shared by the slots
// of the set; a slot reaches its cells through its page table (entry j holds
// the page of cells [j * kPageCells, (j + 1) * kPageCells), or -1 when
// unmapped). The pool has one page more than n_pages: the null page, which
// unmapped entries resolve to and no kernel ever writes (kv_store skips
// unmapped cells), so a stray read is in bounds and never sees another
// slot's cells. kPageCells is a multiple of every backend's key block (32),
// so a block of keys never straddles two pages. docs/kv_pool.md.
constexpr int32_t kPageCells = 64;

struct SlotsView {
    int32_t n_slots = 0;
    int32_t n_layers = 0;
    int32_t n_ctx = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t n_pages = 0;         // pages of the pool (the null page, index n_pages, comes on top)
    int32_t slot_pages = 0;      // page-table entries per slot: ceil(n_ctx / kPageCells)
    uint16_t* kv = nullptr;      // F16 bits [page][layer][2 (K, V)][kv_head][kPageCells][head_dim]
    // int8 pools (STRATA_KV_INT8, kv == nullptr): the same layout in int8, and one float32 scale per
    // (page, layer, K|V, kv_head, cell) row at kv_index / head_dim. docs/kv_pool.md.
    int32_t kv_dtype = STRATA_KV_F16;
    int8_t* kv8 = nullptr;
    float* kv_scale = nullptr;
    int32_t* pages = nullptr;    // [slot][slot_pages] page of each run of kPageCells cells, -1 = unmapped
    int32_t* table = nullptr;    // [slot][ctx][4] positions
    int32_t* delta = nullptr;    // [slot] rope delta
    int32_t* table_of = nullptr; // [slot] -> whose table region the slot uses (identity unless debug-shared)

    // Elements of one (layer, K|V) plane of a page, and of a whole page.
    size_t plane_elems() const { return (size_t)n_kv_heads * kPageCells * head_dim; }
    size_t page_elems() const { return (size_t)n_layers * 2 * plane_elems(); }
    // Bytes of one page as strata_slots_page_bytes reports them (int8: values, then float32 scales).
    size_t page_bytes() const {
        return kv_dtype == STRATA_KV_INT8 ? page_elems() + page_elems() / head_dim * 4 : page_elems() * 2;
    }
    // The page holding `cell` of `slot` (the null page when unmapped). Host pointers only (CPU backend,
    // emulator); the CUDA kernels do the same lookup on device memory.
    int32_t page_of(int32_t slot, int32_t cell) const {
        const int32_t p = pages[(size_t)slot * slot_pages + cell / kPageCells];
        return p >= 0 && p < n_pages ? p : n_pages;
    }
    // Offset (elements) of cache row `cell` of kv head `head` in (slot, layer, which: 0 = K, 1 = V).
    // Rows of one page are contiguous: cell + 1 is head_dim further while it stays in the page.
    size_t kv_index(int32_t slot, int32_t layer, int which, int32_t head, int32_t cell) const {
        return (size_t)page_of(slot, cell) * page_elems() + ((size_t)layer * 2 + which) * plane_elems() +
               ((size_t)head * kPageCells + cell % kPageCells) * head_dim;
    }
    // Whether a {slot, index} row refers to a real cell (anything else is padding).
    bool row_valid(int32_t slot, int32_t index) const {
        return slot >= 0 && slot < n_slots && index >= 0 && index < n_ctx;
    }
    // Whether the cell's page is mapped (kv_store writes only mapped cells).
    bool cell_mapped(int32_t slot, int32_t cell) const {
        const int32_t p = pages[(size_t)slot * slot_pages + cell / kPageCells];
        return p >= 0 && p < n_pages;
    }
};

struct EmbedArgs {
    const void* table; int32_t dtype; int64_t n_vocab, dim;
    const int32_t* ids; int64_t n_rows;
    float* out;
};

struct RmsNormArgs {
    const float* x; const float* weight; float* out;  // out may equal x
    int64_t n_rows, dim; float eps;
};

struct MatmulArgs {
    const float* x; int64_t n_rows, k;
    const void* w; int32_t w_dtype; int64_t n_out;
    const float* bias;  // may be null
    float* y; bool accumulate;
    // strata_matmul_ex only (strata_matmul leaves the defaults): the fused
    // prologue (enum strata_matmul_prologue), its norm weight ([k], RMSNORM)
    // and eps, and the x row stride in elements (0: dense, k or 2k for SILU_MUL).
    int32_t prologue = STRATA_PROLOGUE_NONE;
    const float* norm_weight = nullptr;
    float eps = 0.0f;
    int64_t x_row_stride = 0;
    // Elements between y rows (0: dense, n_out; else >= n_out): one part of a wider row, e.g. the
    // q+k columns of [q | k | v] while v comes from another matmul. Columns outside [0, n_out) of
    // each row are never written.
    int64_t y_row_stride = 0;
    // strata_matmul_prefetch's hint (null: none): bytes the device may bring into L2 while this
    // call runs. Never changes a result.
    const void* prefetch = nullptr;
    uint64_t prefetch_bytes = 0;
    // The activation hand-off (strata_matmul_params.handoff_*), checked by the API layer.
    // emit_prologue >= 0: also prepare y's rows (dense) as the x of a later call with that prologue,
    // emit_norm ([emit_k] F32, RMSNORM) and weights of emit_dtype; emit_k = n_out (SILU_MUL: n_out / 2).
    // use_handoff: x's rows (dense) are y of the latest such call, with this call's prologue and norm.
    // A backend may ignore both; never changes a result.
    int32_t emit_prologue = -1;
    const float* emit_norm = nullptr;
    int32_t emit_dtype = 0;
    int64_t emit_k = 0;
    bool use_handoff = false;
};

struct RopeArgs {
    strata_rope_params p;
    float* x; int64_t x_row_stride, n_rows;
    SlotsView slots; const int32_t* rows;  // [n_rows][2] {slot, index}
    const float* freq_factors;             // may be null, [rot_dim / 2]
};

struct KvStoreArgs {
    SlotsView slots; int32_t layer;
    const float* k; int64_t k_row_stride;
    const float* v; int64_t v_row_stride;
    const int32_t* rows; int64_t n_rows;
};

// rope(q) and rope(k) in place, then kv_store(k, v), over rows [q | k | v]
// of one buffer (the fused qkv projection's output).
struct RopeKvStoreArgs {
    strata_rope_params q_params, k_params;  // k_params.n_heads == slots.n_kv_heads
    SlotsView slots; int32_t layer;
    float* qkv; int64_t row_stride, n_rows;
    const int32_t* rows;
    const float* freq_factors;  // may be null
};

struct AttentionArgs {
    SlotsView slots; int32_t layer;
    const float* q; int64_t q_row_stride, n_rows; int32_t n_heads;
    const int32_t* rows; float scale;
    float* out;  // [n_rows][n_heads * head_dim]
    int32_t window = 0;  // > 0: row r sees cells max(0, index - window + 1)..index (sliding-window layers)
    // strata_attention_handoff (>= 0): also prepare out's rows as the x of a later matmul with no
    // prologue and weights of this dtype (MatmulArgs' emit_* with emit_prologue NONE and emit_k =
    // n_heads * head_dim). A backend may ignore it; never changes a result.
    int32_t emit_dtype = -1;
};

struct DenseAttentionArgs {
    const float* q; const float* k; const float* v; int64_t row_stride;
    int64_t n_tokens; int32_t n_heads, head_dim;
    const int32_t* segments; int64_t n_segments; float scale;
    float* out;
};

struct SiluMulArgs {
    const float* gate; int64_t gate_row_stride;
    const float* up; int64_t up_row_stride;
    float* out; int64_t n_rows, n_cols;
    int32_t gelu_tanh = 0;  // 0: silu(gate) * up; 1: gelu_tanh(gate) * up (strata_gelu_tanh_mul)
};

struct UnaryArgs { const float* x; float* out; int64_t n; float factor = 1.0f; /* scale */ };
struct BinaryArgs { const float* a; const float* b; float* out; int64_t n; };

struct GatherRowsArgs {
    const void* src; int64_t n_src_rows, row_bytes;
    const int32_t* idx; int64_t n_rows;
    void* dst;
};

struct PositionsDecodeArgs { SlotsView slots; const int32_t* rows; int64_t n_rows; };

struct StepAdvanceArgs {
    int32_t* ids; int32_t* rows; strata_sampling_params* params; const int32_t* out_ids; int64_t n_rows;
};

struct ArgmaxArgs { const float* logits; int64_t n_rows, n_vocab; int32_t* out_ids; };

// strata_logits_adjust: table is [n_slots][2][n_vocab] (additive row, repetition row).
struct LogitsAdjustArgs {
    float* logits; int64_t n_rows, n_vocab;
    const int32_t* row_slots; const float* table; int64_t n_slots;
};
struct SampleArgs {
    const float* logits; int64_t n_rows, n_vocab;
    const strata_sampling_params* params;  // device pointer, [n_rows]
    int32_t* out_ids;
};

// A finished recording, launched any number of times.
class GraphExec {
public:
    virtual ~GraphExec() = default;
    virtual void launch() = 0;
    virtual int64_t kernel_count() const = 0;  // kernels one launch runs (benchmarks: launches per step)
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual void info(strata_device_info* out) = 0;

    // Memory. alloc throws Error(STRATA_ERR_OUT_OF_MEMORY) on failure.
    virtual void* alloc(uint64_t n_bytes) = 0;
    virtual void release(void* p) noexcept = 0;                          // waits for queued work first
    virtual void upload(void* dst, const void* src, uint64_t n) = 0;     // synchronous
    virtual void download(void* dst, const void* src, uint64_t n) = 0;   // waits, then copies
    virtual void fill(void* dst, uint8_t value, uint64_t n) = 0;         // enqueued
    virtual void copy(void* dst, const void* src, uint64_t n) = 0;       // enqueued, device to device
    virtual void synchronize() = 0;

    // Kernels (enqueued).
    virtual void embed(const EmbedArgs& a) = 0;
    virtual void rmsnorm(const RmsNormArgs& a) = 0;
    virtual void matmul(const MatmulArgs& a) = 0;
    virtual void rope(const RopeArgs& a) = 0;
    virtual void kv_store(const KvStoreArgs& a) = 0;
    // Must equal the three calls below bit for bit; backends override it to fuse them.
    virtual void rope_kv_store(const RopeKvStoreArgs& a) {
        const int64_t q_width = int64_t(a.q_params.n_heads) * a.q_params.head_dim;
        const int64_t kv_width = int64_t(a.k_params.n_heads) * a.k_params.head_dim;
        rope(RopeArgs{a.q_params, a.qkv, a.row_stride, a.n_rows, a.slots, a.rows, a.freq_factors});
        rope(RopeArgs{a.k_params, a.qkv + q_width, a.row_stride, a.n_rows, a.slots, a.rows, a.freq_factors});
        kv_store(KvStoreArgs{a.slots, a.layer, a.qkv + q_width, a.row_stride, a.qkv + q_width + kv_width,
                             a.row_stride, a.rows, a.n_rows});
    }
    // strata_matmul_rope_kv_store: must equal matmul(m) then rope_kv_store(r) bit for bit (r.qkv is
    // m.y's rows); backends override it to fuse.
    virtual void matmul_rope_kv_store(const MatmulArgs& m, const RopeKvStoreArgs& r) {
        matmul(m);
        rope_kv_store(r);
    }
    // strata_matmul_chain_begin / _end: the matmul calls between them (the API allows nothing else on the
    // context there) may be held and run at the end, in order, with the bits they have run one by one;
    // the CUDA backend runs one-row calls that pass their activations by local hand-off as one kernel.
    // By default each call runs at once.
    virtual void matmul_chain_begin() {}
    virtual void matmul_chain_end() {}
    virtual void attention(const AttentionArgs& a) = 0;
    // strata_rope_kv_store_attention: must equal rope_kv_store(r) then attention(a) bit for bit, for
    // launches whose rows read no cell another row of the launch writes; backends override it to fuse.
    virtual void rope_kv_store_attention(const RopeKvStoreArgs& r, const AttentionArgs& a) {
        rope_kv_store(r);
        attention(a);
    }
    virtual void attention_dense(const DenseAttentionArgs& a) = 0;
    virtual void silu_mul(const SiluMulArgs& a) = 0;
    virtual void gelu(const UnaryArgs& a) = 0;
    virtual void scale(const UnaryArgs& a) = 0;  // out = x * a.factor
    virtual void add(const BinaryArgs& a) = 0;
    virtual void gather_rows(const GatherRowsArgs& a) = 0;
    virtual void positions_decode(const PositionsDecodeArgs& a) = 0;
    virtual void argmax(const ArgmaxArgs& a) = 0;
    virtual void sample(const SampleArgs& a) = 0;
    virtual void logits_adjust(const LogitsAdjustArgs& a) = 0;

    // Host memory the device copies into asynchronously; markers that say when
    // enqueued work has finished. Synchronous backends (the CPU) finish
    // everything before a call returns, so their markers are always reached.
    virtual void* host_alloc(uint64_t n_bytes) = 0;
    virtual void host_release(void* p) noexcept = 0;
    virtual void copy_to_host(void* dst, const void* src, uint64_t n) = 0;   // enqueued (never recorded)
    virtual uint64_t marker() = 0;
    virtual void wait_marker(uint64_t marker) = 0;
    virtual void step_advance(const StepAdvanceArgs& a) = 0;                 // enqueued, recordable

    // Recording.
    virtual void capture_begin() = 0;
    virtual std::unique_ptr<GraphExec> capture_end() = 0;  // throws if recording failed
    virtual void capture_abort() noexcept = 0;
};

// Factories. make_cuda_backend throws Error(STRATA_ERR_UNSUPPORTED) when the
// CUDA backend is not compiled in or the device does not exist.
std::unique_ptr<Backend> make_cpu_backend(int32_t num_threads);
std::unique_ptr<Backend> make_cuda_backend(int32_t device_index);
int32_t cuda_device_count() noexcept;  // 0 when not compiled in or no device
const char* cuda_build_info() noexcept;  // e.g. "cuda 13.0 sm_90" or "no cuda"

}  // namespace strata
