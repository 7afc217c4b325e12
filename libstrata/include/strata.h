/*
 * strata.h — the C ABI of libstrata, Strata's native library.
 *
 * This is the only public header. Everything between STRATA_CDEF_BEGIN and
 * STRATA_CDEF_END is plain C declarations that cffi's cdef() reads verbatim:
 * no macros, no includes, no conditionals inside that region.
 *
 * Conventions (they hold for every function below unless its comment says
 * otherwise):
 *   - Every fallible call returns an int32_t status: STRATA_OK (0) or one of
 *     enum strata_status. On failure, strata_last_error() returns a message
 *     for the calling thread that says what was wrong and what is allowed.
 *   - A failed call changes nothing: output handles are left untouched,
 *     buffers are not written, the context stays usable — except
 *     STRATA_ERR_DEVICE, after which the context's device state is unknown and
 *     the context should be destroyed.
 *   - The library never exits, aborts or lets a C++ exception escape.
 *   - Handles are opaque and come in create/destroy pairs. The library keeps a
 *     registry of live handles: a destroyed or foreign handle passed back is
 *     refused with STRATA_ERR_INVALID_ARGUMENT instead of being dereferenced.
 *     Destroying a context destroys nothing else: destroy its graphs, slots
 *     and buffers first (destroying a context that still owns objects fails
 *     with STRATA_ERR_STATE).
 *   - Thread-safety: a context and everything created from it must be used
 *     by one thread at a time (calls may move between threads). Different
 *     contexts may be used concurrently. strata_last_error() is per thread.
 *     Calls release no locks that Python holds; cffi releases the GIL.
 *   - Kernels are enqueued on the context's single stream and run in the
 *     order they were called. strata_buffer_download and
 *     strata_context_synchronize wait for everything enqueued before them.
 *   - Tensors are addressed as (buffer, byte offset). Activations are dense
 *     row-major float32 unless a comment says otherwise; "row stride" counts
 *     elements. Offsets must be multiples of the element size (4 for F32 and
 *     I32, 2 for F16, BF16 and every quantized type). Every operand is checked
 *     against its buffer's size.
 *   - Batch invariance (Strata's first invariant): every kernel computes
 *     output row r from input row r alone (attention: and from the cache cells
 *     of row r's slot up to row r's index), with an arithmetic order that does
 *     not depend on the number of rows, their order, or which slot they use.
 *     Row r's output is bit-identical whatever else is in the batch.
 *
 * Row metadata ("rows"): a buffer of n_rows int32 pairs {slot, index}. The
 * row's token sits at cache cell `index` of slot `slot` (0 <= index < n_ctx).
 * A row with slot == -1 is padding: kernels that read or write slot state skip
 * it (attention writes zeros for it). Rows whose slot or index are out of
 * range are treated as padding, so device memory is never touched out of
 * bounds; callers validate rows before enqueueing them.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* STRATA_CDEF_BEGIN */

/* ---------------------------------------------------------------- status */

enum strata_status {
    STRATA_OK = 0,
    STRATA_ERR_INVALID_ARGUMENT = 1, /* bad handle, pointer, shape, dtype, offset or range */
    STRATA_ERR_OUT_OF_MEMORY = 2,    /* an allocation failed; nothing was allocated */
    STRATA_ERR_UNSUPPORTED = 3,      /* not available in this build or on this backend */
    STRATA_ERR_DEVICE = 4,           /* the device reported an error; destroy the context */
    STRATA_ERR_STATE = 5,            /* not allowed now (e.g. a download while recording a graph) */
    STRATA_ERR_INTERNAL = 6          /* a bug in libstrata; the message says where */
};

/* The ABI version this header describes. Python refuses a library whose
 * strata_abi_version() differs. Bumped on every incompatible change (ABI 5:
 * strata_matmul_params.y_row_stride and strata_matmul_prefetch; ABI 6: the activation hand-off,
 * strata_matmul_params.handoff_*; ABI 7: strata_matmul_rope_kv_store; ABI 8:
 * strata_attention_handoff; ABI 9: strata_matmul_chain_begin / _end). */
enum strata_abi { STRATA_ABI_VERSION = 9 };

/* Returns STRATA_ABI_VERSION of the library that was loaded. Never fails. */
int32_t strata_abi_version(void);

/* The message of the last failed call on this thread ("" if none). The
 * pointer stays valid until the next libstrata call on this thread. */
const char *strata_last_error(void);

/* A constant name for a status code ("STRATA_ERR_STATE"), "unknown" otherwise. */
const char *strata_status_name(int32_t status);

/* A constant, human-readable description of the build: compiler, CPU
 * instruction set in use, and whether the CUDA backend was compiled in. */
const char *strata_build_info(void);

/* ---------------------------------------------------------------- types */

/* Element and block types. The values are GGUF's ggml_type ids. */
enum strata_dtype {
    STRATA_F32 = 0,
    STRATA_F16 = 1,
    STRATA_Q4_0 = 2,
    STRATA_Q4_1 = 3,
    STRATA_Q5_0 = 6,
    STRATA_Q5_1 = 7,
    STRATA_Q8_0 = 8,
    STRATA_Q2_K = 10,
    STRATA_Q3_K = 11,
    STRATA_Q4_K = 12,
    STRATA_Q5_K = 13,
    STRATA_Q6_K = 14,
    STRATA_IQ4_NL = 20,
    STRATA_IQ3_S = 21,
    STRATA_IQ4_XS = 23,
    STRATA_I32 = 26,
    STRATA_BF16 = 30
};

/* Values per block and bytes per block of a dtype (1 and the element size for
 * plain types). Fails with STRATA_ERR_INVALID_ARGUMENT for an unknown dtype. */
int32_t strata_dtype_block(int32_t dtype, int64_t *out_block_values, int64_t *out_block_bytes);

/* ---------------------------------------------------------------- context */

enum strata_backend {
    STRATA_BACKEND_CPU = 0,
    STRATA_BACKEND_CUDA = 1
};

typedef struct strata_context strata_context;
typedef struct strata_buffer strata_buffer;
typedef struct strata_slots strata_slots;
typedef struct strata_graph strata_graph;

typedef struct strata_device_info {
    int32_t backend;            /* enum strata_backend */
    int32_t device_index;       /* N of "cuda:N"; 0 for the CPU */
    int32_t num_threads;        /* CPU worker threads; 0 on CUDA */
    int32_t compute_capability; /* 90 for sm_90; 0 on the CPU */
    uint64_t free_bytes;        /* device memory (CPU: available RAM) */
    uint64_t total_bytes;
    char name[128];             /* NUL-terminated device name */
} strata_device_info;

/* Number of CUDA devices usable by this library: 0 when the CUDA backend was
 * not compiled in or no device/driver is present (that is not an error). */
int32_t strata_cuda_device_count(int32_t *out_count);

/* Opens a context on `device`: "cpu" or "cuda:N" ("cuda" means "cuda:0").
 * num_threads: CPU worker threads (0 = one per online core); ignored on CUDA.
 * On success *out_ctx owns a stream (CUDA) or a thread pool (CPU). Fails with
 * STRATA_ERR_UNSUPPORTED when the backend is not compiled in or no such
 * device exists, and STRATA_ERR_INVALID_ARGUMENT for a malformed name. */
int32_t strata_context_create(const char *device, int32_t num_threads, strata_context **out_ctx);

/* Waits for queued work and frees the context. Fails with STRATA_ERR_STATE
 * (and frees nothing) while buffers, slots or graphs of it are alive. */
int32_t strata_context_destroy(strata_context *ctx);

/* Fills *out_info; free/total memory are read now. */
int32_t strata_context_info(strata_context *ctx, strata_device_info *out_info);

/* Waits until every enqueued kernel and copy has finished. Reports
 * asynchronous device errors as STRATA_ERR_DEVICE. Not allowed while
 * recording a graph. */
int32_t strata_context_synchronize(strata_context *ctx);

/* ---------------------------------------------------------------- buffers */

/* Allocates n_bytes (> 0) of device memory (cudaMalloc on CUDA, never managed
 * memory; 64-byte aligned host memory on the CPU). Contents are undefined.
 * The buffer keeps a fixed address for its whole life. */
int32_t strata_buffer_create(strata_context *ctx, uint64_t n_bytes, strata_buffer **out_buf);

/* Frees a buffer after queued work that uses it has finished. Fails with
 * STRATA_ERR_STATE while a live graph references it. */
int32_t strata_buffer_destroy(strata_buffer *buf);

int32_t strata_buffer_size(strata_buffer *buf, uint64_t *out_bytes);

/* Copies n_bytes from host memory `src` into the buffer at `offset`, after
 * the work queued before it; `src` may be reused when the call returns.
 * Not allowed while recording a graph. */
int32_t strata_buffer_upload(strata_buffer *buf, uint64_t offset, const void *src, uint64_t n_bytes);

/* Waits for queued work, then copies n_bytes at `offset` to host memory
 * `dst`. Not allowed while recording a graph. */
int32_t strata_buffer_download(strata_buffer *buf, uint64_t offset, void *dst, uint64_t n_bytes);

/* Enqueues: set n_bytes at `offset` to `value`. May be recorded in a graph. */
int32_t strata_buffer_fill(strata_buffer *buf, uint64_t offset, uint64_t n_bytes, uint8_t value);

/* Enqueues a copy between buffers of the same context (ranges may not
 * overlap). May be recorded in a graph. */
int32_t strata_buffer_copy(strata_buffer *dst, uint64_t dst_offset, strata_buffer *src,
                           uint64_t src_offset, uint64_t n_bytes);

/* ---------------------------------------------------------------- slots */

/* A slot set: n_slots slots, each owning
 *   - a page table: ceil(n_ctx / STRATA_PAGE_CELLS) int32 entries at a fixed
 *     device address; entry j names the pool page that holds the slot's cells
 *     [j * STRATA_PAGE_CELLS, (j + 1) * STRATA_PAGE_CELLS), or -1 (unmapped);
 *   - a position-table region: n_ctx cells of 4 int32 positions;
 *   - a rope delta (int32) used by strata_positions_decode;
 *   - a length: the number of table rows written (host bookkeeping).
 * KV memory is a pool of pages shared by the set's slots; a page holds
 * n_layers x {K, V} x n_kv_heads x STRATA_PAGE_CELLS x head_dim F16 values.
 * Kernels reach a slot's cells only through its page table: kv_store skips a
 * cell whose page is unmapped, attention reads such a cell as zeros (never
 * another page). Tables, deltas and page tables of different slots never
 * overlap, and a kernel enqueued for rows of one slot writes only that slot's
 * regions and the pages mapped in its table. A page may be mapped in several
 * tables (a shared prefix): whoever maps it shared must not write it.
 * n_layers may be 0 (tables only, e.g. for the vision encoder's patch
 * positions). */
typedef struct strata_slots_params {
    int32_t n_slots;    /* >= 1 */
    int32_t n_layers;   /* >= 0 */
    int32_t n_ctx;      /* cells per slot, >= 1 */
    int32_t n_kv_heads; /* >= 1 */
    int32_t head_dim;   /* even, 2..512 */
} strata_slots_params;

/* Cells per KV page: a multiple of every backend's attention key block, so a
 * block of keys never straddles two pages. */
enum strata_page { STRATA_PAGE_CELLS = 64 };

/* Allocates the regions (tables zeroed, lengths and deltas 0) and a pool of
 * n_slots x ceil(n_ctx / STRATA_PAGE_CELLS) pages, each slot's table mapped
 * to its own pages (slot s, entry j -> page s * ceil(n_ctx / 64) + j): the
 * fixed per-slot regions of ABI 2, nothing for the caller to map. */
int32_t strata_slots_create(strata_context *ctx, const strata_slots_params *params, strata_slots **out_slots);

/* How a pool page stores K/V cells (docs/kv_pool.md).
 *   F16:  the values as F16.
 *   INT8: per (cell, kv_head) row of head_dim values x: amax = max|x_i|,
 *         scale = amax / 127 (float32), q_i = round-half-even(x_i / scale)
 *         clamped to [-127, 127] (all 0 when amax = 0); kernels read
 *         q_i * scale in float32. A row's bytes depend on that row alone.
 *         A page is its int8 values ([layer][K|V][kv_head][64][head_dim])
 *         followed by its float32 scales ([layer][K|V][kv_head][64]). */
enum strata_kv_dtype { STRATA_KV_F16 = 0, STRATA_KV_INT8 = 1 };

/* Allocates the regions and a pool of n_pages pages (0 <= n_pages < 2^31 - 1)
 * of kv_dtype cells (enum strata_kv_dtype) with every page-table entry
 * unmapped (-1): the caller maps pages before a slot's cells are stored or
 * read (strata_slots_map_pages). ABI 4 added kv_dtype. */
int32_t strata_slots_create_paged(strata_context *ctx, const strata_slots_params *params, int32_t n_pages,
                                  int32_t kv_dtype, strata_slots **out_slots);

/* Pages in the pool, and how many of them no page-table entry maps. */
int32_t strata_slots_pages(strata_slots *slots, int32_t *out_n_pages, int32_t *out_n_free);

/* Sets entries [first, first + n) of a slot's page table: pages[i] is a pool
 * page (0 <= page < n_pages) or -1 to unmap. The same page may be mapped in
 * several entries and slots. Validated as a whole first (nothing changes on
 * error); not allowed while recording. KV contents are not touched. */
int32_t strata_slots_map_pages(strata_slots *slots, int32_t slot, int32_t first, int32_t n,
                               const int32_t *pages);

/* Sets entries [first, first + n) of a slot's page table to -1. */
int32_t strata_slots_unmap_pages(strata_slots *slots, int32_t slot, int32_t first, int32_t n);

/* Reads entries [first, first + n) of a slot's page table into host memory. */
int32_t strata_slots_read_pages(strata_slots *slots, int32_t slot, int32_t first, int32_t n, int32_t *out_pages);

/* Enqueues a copy of every layer's K and V of pool page src into pool page
 * dst (dst != src), e.g. copy-on-write of a partly shared page. Not allowed
 * while recording. */
int32_t strata_slots_copy_page(strata_slots *slots, int32_t dst, int32_t src);

/* Bytes of one pool page: n_layers x 2 x n_kv_heads x STRATA_PAGE_CELLS x
 * head_dim x 2 (F16), laid out [layer][K|V][kv_head][cell][head_dim]; for
 * INT8 the int8 values (x 1 byte) then one float32 scale per row. */
int32_t strata_slots_page_bytes(strata_slots *slots, uint64_t *out_bytes);

/* Waits for queued work, then copies pool page `page` to host memory (n_bytes
 * must be the page size), e.g. to save a cached prefix to a file. */
int32_t strata_slots_read_page(strata_slots *slots, int32_t page, void *dst, uint64_t n_bytes);

/* Copies host memory into pool page `page` (n_bytes must be the page size)
 * after the work queued before it. Not allowed while recording. */
int32_t strata_slots_write_page(strata_slots *slots, int32_t page, const void *src, uint64_t n_bytes);

/* Frees the slot set. Fails with STRATA_ERR_STATE while a live graph
 * references it. */
int32_t strata_slots_destroy(strata_slots *slots);

/* Returns a slot to empty: zeroes its table region, sets its length and delta
 * to 0 and undoes a debug table share of this slot. KV contents and the page
 * table are left as they are (no kernel reads a cell before writing it in the same sequence).
 * Touches no other slot. Enqueued after prior work; not allowed while
 * recording. */
int32_t strata_slots_reset(strata_slots *slots, int32_t slot);

/* Forgets cells n_tokens.. of a slot: zeroes those table rows and sets its
 * length to min(length, n_tokens). 0 <= n_tokens <= n_ctx. */
int32_t strata_slots_truncate(strata_slots *slots, int32_t slot, int32_t n_tokens);

int32_t strata_slots_length(strata_slots *slots, int32_t slot, int32_t *out_length);

/* Writes table rows [first_row, first_row + n_rows) of one slot from host
 * memory: positions[4 * i + c] is component c (T, H, W, E for M-RoPE; only
 * c = 0 for plain RoPE) of row first_row + i. Requires first_row <= length
 * (no gaps) and first_row + n_rows <= n_ctx; sets length to
 * max(length, first_row + n_rows). Not allowed while recording. */
int32_t strata_slots_write_positions(strata_slots *slots, int32_t slot, int32_t first_row, int32_t n_rows,
                                     const int32_t *positions);

/* Reads table rows back into host memory (same layout). Waits for queued work. */
int32_t strata_slots_read_positions(strata_slots *slots, int32_t slot, int32_t first_row, int32_t n_rows,
                                    int32_t *out_positions);

/* Sets the slot's rope delta: strata_positions_decode gives cell c the
 * position c + delta on every component. Not allowed while recording. */
int32_t strata_slots_set_delta(strata_slots *slots, int32_t slot, int32_t delta);

/* NEGATIVE-CONTROL DEBUG SWITCH, never for serving: makes `slot` read and
 * write the position-table region of `target` (target == slot undoes it).
 * Exists so tests can show that the exactness checks catch a shared table. */
int32_t strata_slots_debug_share_table(strata_slots *slots, int32_t slot, int32_t target);

/* ---------------------------------------------------------------- kernels */

/* out[r, :] = dequantized row ids[r] of `table` ([n_vocab, dim] in `dtype`,
 * any dtype except I32; dim a multiple of the dtype's block). ids: int32.
 * An id outside [0, n_vocab) yields a row of zeros. out: F32 [n_rows, dim]. */
int32_t strata_embed(strata_context *ctx, strata_buffer *table, uint64_t table_offset, int32_t dtype,
                     int64_t n_vocab, int64_t dim, strata_buffer *ids, uint64_t ids_offset, int64_t n_rows,
                     strata_buffer *out, uint64_t out_offset);

/* out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight. weight: F32
 * [dim]. out may equal x (same buffer and offset). */
int32_t strata_rmsnorm(strata_context *ctx, strata_buffer *x, uint64_t x_offset, strata_buffer *weight,
                       uint64_t weight_offset, strata_buffer *out, uint64_t out_offset, int64_t n_rows,
                       int64_t dim, float eps);

/* y[r, o] = (accumulate ? y[r, o] : 0) + sum_i x[r, i] * W[o, i] (+ bias[o]).
 * x: F32 [n_rows, k]; W: [n_out, k] in w_dtype (F32, F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ3_S, IQ4_NL, IQ4_XS; GGUF block layouts along k,
 * k a multiple of the block);
 * bias: F32 [n_out] or NULL; y: F32 [n_rows, n_out], must not overlap x.
 * Backends may round activations inside the kernel (documented per backend
 * in docs/kernels.md); the result of a row never depends on other rows. */
int32_t strata_matmul(strata_context *ctx, strata_buffer *x, uint64_t x_offset, int64_t n_rows, int64_t k,
                      strata_buffer *w, uint64_t w_offset, int32_t w_dtype, int64_t n_out, strata_buffer *bias,
                      uint64_t bias_offset, strata_buffer *y, uint64_t y_offset, int32_t accumulate);

/* What strata_matmul_ex computes from each x row before the product. */
enum strata_matmul_prologue {
    STRATA_PROLOGUE_NONE = 0,     /* x' = x (k values per row) */
    STRATA_PROLOGUE_RMSNORM = 1,  /* x' = x / sqrt(mean(x^2) + eps) * norm_weight (k values per row) */
    STRATA_PROLOGUE_SILU_MUL = 2  /* rows hold [gate (k values) | up (k values)]; x' = silu(gate) * up */
};

/* Options of strata_matmul_ex. A zeroed struct is a plain matmul (no
 * prologue, no bias, y overwritten, dense rows). */
typedef struct strata_matmul_params {
    int32_t prologue;          /* enum strata_matmul_prologue */
    int32_t accumulate;        /* nonzero: y += result */
    float eps;                 /* RMSNORM: in [0, 1] */
    int32_t y_row_stride;      /* elements between y rows; 0 = dense (n_out), else >= n_out */
    strata_buffer *norm_weight; /* RMSNORM: F32 [k]; otherwise NULL */
    uint64_t norm_weight_offset;
    strata_buffer *bias;       /* F32 [n_out] or NULL */
    uint64_t bias_offset;
    int64_t x_row_stride;      /* elements between x rows; 0 = dense (k, or 2k for SILU_MUL) */
    /* The activation hand-off: a chain of matmuls where one's y is the next one's x (a decoder
     * layer's o -> gate_up -> down -> next qkv) lets a backend that rounds activations before the
     * product (CUDA's integer path, docs/kernels.md) prepare the next call's x while it writes y,
     * instead of in a pass of its own. No result ever depends on it: a backend may ignore both flags
     * (the CPU does) and computes from x whenever it has nothing prepared. */
    int32_t handoff_emit;      /* nonzero: after y is written, also prepare y's rows as the x of the
                                  next call that sets handoff_use, whose prologue, norm weight and
                                  weight dtype are the three fields below. y must be dense (y_row_stride
                                  0 or n_out) and is that call's x with k = n_out (SILU_MUL: n_out / 2,
                                  n_out even); that k must be a multiple of 32. */
    int32_t handoff_use;       /* nonzero: x is y of the latest handoff_emit call on this context, not
                                  written since, read dense with that call's handoff_prologue and
                                  handoff_norm_weight (checked: same x, n_rows, k, prologue, norm weight;
                                  any other call of the chain may use it too, until the next emit) */
    int32_t handoff_prologue;  /* handoff_emit: enum strata_matmul_prologue of the next call */
    int32_t handoff_dtype;     /* handoff_emit: the next call's w_dtype (a backend may prepare only for
                                  the types it rounds activations for) */
    strata_buffer *handoff_norm_weight; /* handoff_emit with RMSNORM: the next call's norm_weight (F32 [k]) */
    uint64_t handoff_norm_weight_offset;
} strata_matmul_params;

/* y[r, :] = (accumulate ? y[r, :] : 0) + x'[r, :]·Wᵀ (+ bias), x' the
 * prologue of row r of x (F32, n_rows rows at x_row_stride). W, bias, y and
 * the rounding rules as strata_matmul (per backend in docs/kernels.md: the
 * CPU computes the prologue rows exactly as strata_rmsnorm / strata_silu_mul
 * would, then the matmul). One launch instead of two; y must not overlap x,
 * norm_weight or bias. With y_row_stride > n_out, y is one part of wider
 * rows (row r's n_out values start at y + r * y_row_stride): the columns
 * between are never read or written, and every written value has the bits
 * the dense call gives it. */
int32_t strata_matmul_ex(strata_context *ctx, const strata_matmul_params *params, strata_buffer *x,
                         uint64_t x_offset, int64_t n_rows, int64_t k, strata_buffer *w, uint64_t w_offset,
                         int32_t w_dtype, int64_t n_out, strata_buffer *y, uint64_t y_offset);

/* A hint for the next strata_matmul or strata_matmul_ex call on ctx: while
 * that call runs, it also has the device bring bytes [offset, offset +
 * n_bytes) of buffer w into its L2 cache — typically the weights of the
 * matmul that comes after it, so they stream while the kernels in between wait
 * on their inputs. It never changes a result. The hint applies to that one
 * call and is then dropped (n_bytes 0 drops it now); it is recorded into a
 * graph like the call. The CPU backend accepts and ignores it; the CUDA
 * backend issues it from its one-row integer kernel (docs/cuda_backend.md,
 * "L2 prefetch"). w must belong to ctx and hold the range. */
int32_t strata_matmul_prefetch(strata_context *ctx, strata_buffer *w, uint64_t offset, uint64_t n_bytes);

/* A matmul chain: between strata_matmul_chain_begin and strata_matmul_chain_end
 * the only calls allowed on ctx (on it or on anything it owns) are
 * strata_matmul_ex and strata_matmul_chain_end; any other fails with
 * STRATA_ERR_STATE and leaves the chain open. The chain's calls are checked and fail as always,
 * but the backend may hold them and run them at strata_matmul_chain_end, in
 * order, with the bits they have run one by one. The CUDA backend runs up to
 * four one-row calls on the integer path, each reading the blocks the one
 * before it emitted with a local hand-off (a decoder layer's o, gate_up and
 * down, then the next layer's qkv; an emission made by a pre-pass is a phase of the
 * same kernel), as one kernel with a grid barrier between them instead of a kernel
 * boundary (docs/cuda_backend.md); the CPU backend runs each call at once.
 * Recordable: a chain ended while a graph is recorded is part of the graph.
 * begin fails when a chain is already open, end when none is. */
int32_t strata_matmul_chain_begin(strata_context *ctx);
int32_t strata_matmul_chain_end(strata_context *ctx);

enum strata_rope_mode {
    STRATA_ROPE_ADJACENT = 0, /* rotate (x[2i], x[2i+1]) with theta_i, position component 0 */
    STRATA_ROPE_HALF = 1,     /* rotate (x[i], x[i + rot_dim/2]), position component 0 */
    STRATA_ROPE_MROPE = 2,    /* half-split; frequency pair j uses component c where
                                 sections[0..c-1] sum <= j < sections[0..c] sum */
    STRATA_ROPE_VISION = 3    /* half-split; pair j in section c uses component c and the
                                 frequency of its index within the section, with
                                 theta computed over 2 * sections[c] dims */
};

typedef struct strata_rope_params {
    int32_t mode;        /* enum strata_rope_mode */
    int32_t n_heads;     /* heads in each row, laid out [n_heads, head_dim] */
    int32_t head_dim;
    int32_t rot_dim;     /* rotated leading dims of each head (even, <= head_dim) */
    float theta_base;    /* theta_j = position * theta_base^(-2j / rot_dim) */
    float freq_scale;    /* positions are multiplied by this; 1 = no scaling */
    int32_t sections[4]; /* MROPE/VISION: frequency pairs per component; sum = rot_dim / 2 */
} strata_rope_params;

/* Rotates, in place, the first n_heads * head_dim floats of each of n_rows
 * rows of x (row stride x_row_stride >= n_heads * head_dim). Row r's
 * positions are read from cell rows[r].index of the position table that
 * rows[r].slot reads. freq_factors: NULL or F32 [rot_dim / 2]; theta_j is
 * divided by freq_factors[j] (Llama 3 "rope_freqs"). Padding rows are left
 * as they are. */
int32_t strata_rope(strata_context *ctx, const strata_rope_params *params, strata_buffer *x, uint64_t x_offset,
                    int64_t x_row_stride, int64_t n_rows, strata_slots *slots, strata_buffer *rows,
                    uint64_t rows_offset, strata_buffer *freq_factors, uint64_t freq_factors_offset);

/* Writes K and V (F32 rows of n_kv_heads * head_dim values, row strides in
 * elements) into layer `layer` of each row's slot at its index, rounded to
 * F16 (round to nearest even). Padding rows are skipped. */
int32_t strata_kv_store(strata_context *ctx, strata_slots *slots, int32_t layer, strata_buffer *k,
                        uint64_t k_offset, int64_t k_row_stride, strata_buffer *v, uint64_t v_offset,
                        int64_t v_row_stride, strata_buffer *rows, uint64_t rows_offset, int64_t n_rows);

/* The fused form of rope(q), rope(k) and kv_store(k, v) for rows laid out as
 * one qkv projection's output: row r (at qkv + r * row_stride elements) holds
 * [q: q_params->n_heads x head_dim | k: n_kv_heads x head_dim | v: the same],
 * F32. Rotates q and k in place exactly as strata_rope does with q_params and
 * k_params, then stores the rotated k and v into layer `layer` of each row's
 * slot at its index as strata_kv_store does. Requires k_params->n_heads ==
 * the slot set's n_kv_heads and both head_dims == its head_dim. freq_factors:
 * NULL or F32 [max(rot_dim) / 2], used by both. Padding rows are skipped. The
 * result is bit-identical to the three separate calls on the same backend. */
int32_t strata_rope_kv_store(strata_context *ctx, const strata_rope_params *q_params,
                             const strata_rope_params *k_params, strata_slots *slots, int32_t layer,
                             strata_buffer *qkv, uint64_t qkv_offset, int64_t row_stride, int64_t n_rows,
                             strata_buffer *rows, uint64_t rows_offset, strata_buffer *freq_factors,
                             uint64_t freq_factors_offset);

/* strata_matmul_ex writing whole qkv projection rows, then strata_rope_kv_store
 * on them, in one call: y rows (at y_offset, params->y_row_stride apart) are
 * the qkv rows [q: q_params->n_heads x head_dim | k: n_kv_heads x head_dim |
 * v: the same], so n_out must be (q_params->n_heads + 2 * n_kv_heads) *
 * head_dim. Every result (the rotated q and k left in y, v, the KV cache
 * cells) is bit-identical to the two calls on the same backend. With
 * STRATA_MATMUL_ROPE=1 the CUDA backend runs one-row calls on its integer
 * path with F16 pools and ADJACENT rotation as one kernel (the rotation and
 * the F16 store in the matmul's epilogue); other calls, the default, and the
 * CPU backend run the two calls. params->handoff_emit must be 0;
 * handoff_use is allowed. */
int32_t strata_matmul_rope_kv_store(strata_context *ctx, const strata_matmul_params *params, strata_buffer *x,
                                    uint64_t x_offset, int64_t n_rows, int64_t k, strata_buffer *w,
                                    uint64_t w_offset, int32_t w_dtype, int64_t n_out, strata_buffer *y,
                                    uint64_t y_offset, const strata_rope_params *q_params,
                                    const strata_rope_params *k_params, strata_slots *slots, int32_t layer,
                                    strata_buffer *rows, uint64_t rows_offset, strata_buffer *freq_factors,
                                    uint64_t freq_factors_offset);

/* Causal grouped-query attention over the KV cache. Row r (query heads
 * [n_heads, head_dim] at q + r * q_row_stride) attends to cells
 * 0..rows[r].index of layer `layer` of its slot; query head h uses KV head
 * h / (n_heads / n_kv_heads). softmax(scale * q.k) weights V. Reductions over
 * keys run in blocks aligned to absolute cell indices. out: F32
 * [n_rows, n_heads * head_dim]; padding rows get zeros. */
int32_t strata_attention(strata_context *ctx, strata_slots *slots, int32_t layer, strata_buffer *q,
                         uint64_t q_offset, int64_t q_row_stride, int64_t n_rows, int32_t n_heads,
                         strata_buffer *rows, uint64_t rows_offset, float scale, strata_buffer *out,
                         uint64_t out_offset);

/* strata_attention with a sliding window (Gemma's local layers): row r
 * attends to cells max(0, index - window + 1)..rows[r].index, so the window is
 * a property of the row's own position. window 0 is strata_attention; the
 * key blocks start at the row's first visible cell. window >= 0. */
int32_t strata_attention_window(strata_context *ctx, strata_slots *slots, int32_t layer, strata_buffer *q,
                                uint64_t q_offset, int64_t q_row_stride, int64_t n_rows, int32_t n_heads,
                                strata_buffer *rows, uint64_t rows_offset, float scale, int32_t window,
                                strata_buffer *out, uint64_t out_offset);

/* strata_attention_window whose out rows are also prepared as the x of the
 * next strata_matmul_ex that sets handoff_use (the o projection): as a
 * strata_matmul_ex with handoff_emit whose y is out, n_rows and k =
 * n_heads * head_dim, and handoff_prologue NONE. handoff_dtype is that
 * call's w_dtype (a backend may prepare only for some types; the CUDA
 * backend's decode attention kernel rounds the int8 blocks of its own
 * output, other launches are followed by the activation pre-pass). out is
 * bit-identical to strata_attention_window's, and so is the result of the
 * matmul that reads the prepared rows. A failed call leaves no hand-off
 * behind; the CPU backend checks the arguments and prepares nothing. */
int32_t strata_attention_handoff(strata_context *ctx, strata_slots *slots, int32_t layer, strata_buffer *q,
                                 uint64_t q_offset, int64_t q_row_stride, int64_t n_rows, int32_t n_heads,
                                 strata_buffer *rows, uint64_t rows_offset, float scale, int32_t window,
                                 int32_t handoff_dtype, strata_buffer *out, uint64_t out_offset);

/* strata_rope_kv_store followed by strata_attention_window (window 0:
 * strata_attention) on the same rows, in one call: the queries are the
 * rotated q part of each qkv row (n_heads = q_params->n_heads, q_row_stride =
 * row_stride), out as strata_attention's. Every result (the rotated q and k
 * left in qkv, the KV cache cells, out) is bit-identical to the two calls on
 * the same backend PROVIDED no row's attention reads a cell that another row
 * of the call writes: decode rows of distinct slots. Speculative draft rows of
 * one slot and prompt chunks break that guarantee (a row would read a
 * neighbour's cell before it is written): use the two calls for them. The CUDA
 * backend runs decode-sized calls (fewer than 256 rows, head_dim 64 or 128) as
 * one kernel that uses each row's new cell as stored (after the F16 / int8
 * rounding) straight from the block that computed it; other calls, and the
 * CPU backend, run the two calls. out must not overlap qkv. */
int32_t strata_rope_kv_store_attention(strata_context *ctx, const strata_rope_params *q_params,
                                       const strata_rope_params *k_params, strata_slots *slots, int32_t layer,
                                       strata_buffer *qkv, uint64_t qkv_offset, int64_t row_stride, int64_t n_rows,
                                       strata_buffer *rows, uint64_t rows_offset, strata_buffer *freq_factors,
                                       uint64_t freq_factors_offset, float scale, int32_t window, strata_buffer *out,
                                       uint64_t out_offset);

/* Bidirectional attention within segments (the vision encoder): token t of
 * segment s (segments[s] <= t < segments[s + 1], int32, n_segments + 1
 * entries, non-decreasing from 0 to n_tokens) attends to every token of its
 * segment. q, k, v: F32 rows of n_heads * head_dim values with row stride
 * row_stride. out: F32 [n_tokens, n_heads * head_dim]. */
int32_t strata_attention_dense(strata_context *ctx, strata_buffer *q, uint64_t q_offset, strata_buffer *k,
                               uint64_t k_offset, strata_buffer *v, uint64_t v_offset, int64_t row_stride,
                               int64_t n_tokens, int32_t n_heads, int32_t head_dim, strata_buffer *segments,
                               uint64_t segments_offset, int64_t n_segments, float scale, strata_buffer *out,
                               uint64_t out_offset);

/* out[r, c] = silu(gate[r, c]) * up[r, c]; gate and up rows at their row
 * strides; out dense [n_rows, n_cols]. silu(x) = x / (1 + exp(-x)). */
int32_t strata_silu_mul(strata_context *ctx, strata_buffer *gate, uint64_t gate_offset, int64_t gate_row_stride,
                        strata_buffer *up, uint64_t up_offset, int64_t up_row_stride, strata_buffer *out,
                        uint64_t out_offset, int64_t n_rows, int64_t n_cols);

/* out[r, c] = gelu_tanh(gate[r, c]) * up[r, c] (Gemma's feed-forward), with
 * PyTorch's tanh form: inner = sqrt(2/pi) * (g + 0.044715 g^3),
 * gelu_tanh(g) = 0.5 g (1 + tanh(inner)). Operands as strata_silu_mul. */
int32_t strata_gelu_tanh_mul(strata_context *ctx, strata_buffer *gate, uint64_t gate_offset,
                             int64_t gate_row_stride, strata_buffer *up, uint64_t up_offset, int64_t up_row_stride,
                             strata_buffer *out, uint64_t out_offset, int64_t n_rows, int64_t n_cols);

/* out[i] = x[i] * factor for n F32 values (Gemma's embedding scale); factor
 * finite. out may equal x. */
int32_t strata_scale(strata_context *ctx, strata_buffer *x, uint64_t x_offset, strata_buffer *out,
                     uint64_t out_offset, int64_t n, float factor);

/* out[i] = gelu(x[i]) with the exact erf form, for n F32 values. out may equal x. */
int32_t strata_gelu(strata_context *ctx, strata_buffer *x, uint64_t x_offset, strata_buffer *out,
                    uint64_t out_offset, int64_t n);

/* out[i] = a[i] + b[i] for n F32 values. out may equal a or b. */
int32_t strata_add(strata_context *ctx, strata_buffer *a, uint64_t a_offset, strata_buffer *b, uint64_t b_offset,
                   strata_buffer *out, uint64_t out_offset, int64_t n);

/* dst row i = src row idx[i] (int32, 0 <= idx[i] < n_src_rows; others give a
 * zero row), rows of row_bytes bytes (a multiple of 4). dst must not overlap src. */
int32_t strata_gather_rows(strata_context *ctx, strata_buffer *src, uint64_t src_offset, int64_t n_src_rows,
                           int64_t row_bytes, strata_buffer *idx, uint64_t idx_offset, int64_t n_rows,
                           strata_buffer *dst, uint64_t dst_offset);

/* For each non-padding row: table cell rows[r].index of its slot gets the
 * position index + delta(slot) on all 4 components. Recordable, so captured
 * decode graphs advance M-RoPE positions without host writes. Lengths are
 * host bookkeeping and are not changed. */
int32_t strata_positions_decode(strata_context *ctx, strata_slots *slots, strata_buffer *rows,
                                uint64_t rows_offset, int64_t n_rows);

/* out_ids[r] = the index of the largest logit of row r (the lowest such index
 * on ties; NaN never wins). logits: F32 [n_rows, n_vocab]; out_ids: int32. */
int32_t strata_argmax(strata_context *ctx, strata_buffer *logits, uint64_t logits_offset, int64_t n_rows,
                      int64_t n_vocab, strata_buffer *out_ids, uint64_t out_offset);

typedef struct strata_sampling_params {
    float temperature; /* <= 0: greedy (argmax) */
    float top_p;       /* (0, 1]; 1 = off */
    float min_p;       /* [0, 1); 0 = off */
    int32_t top_k;     /* <= 0 = off */
    uint64_t seed;
    int64_t position;  /* the sampled token's position in its sequence */
} strata_sampling_params;

/* Samples one token per row. params: a buffer of n_rows strata_sampling_params
 * (32 bytes each; params_offset a multiple of 8, the struct's alignment).
 * With temperature T > 0: weights w_i = exp((l_i - max l)/T);
 * top_k keeps tokens whose logit is >= the k-th largest (ties kept); top_p
 * keeps the smallest set of heaviest tokens whose weight reaches top_p of the
 * kept total (ties at the boundary kept); min_p keeps w_i >= min_p; the
 * filters apply in that order (top_k, top_p, min_p). NaN logits are never
 * kept. Then
 * u = strata_random_uniform(seed, position) picks the first kept token, in
 * ascending id order, whose running weight sum exceeds u * (kept total).
 * The draw depends only on (seed, position) and the row's logits. (CUDA
 * sums integer masses floor(w_i * 2^40), exact in any order; the CPU sums
 * floats in id order: both follow this rule up to rounding.) */
int32_t strata_sample(strata_context *ctx, strata_buffer *logits, uint64_t logits_offset, int64_t n_rows,
                      int64_t n_vocab, strata_buffer *params, uint64_t params_offset, strata_buffer *out_ids,
                      uint64_t out_offset);

/* Per-row logit adjustments read from a per-slot table, for grammar masks,
 * logit bias and penalties (run before strata_sample / strata_argmax).
 * row_slots: int32 [n_rows]; table: F32 [n_slots][2][n_vocab]: for slot s,
 * row 0 is an additive term a and row 1 a repetition factor p (1 = none).
 * For each row r with 0 <= s = row_slots[r] < n_slots, each token v:
 *   l = logits[r][v]; if (p != 1) l = (l > 0) ? l / p : l * p; logits[r][v] = l + a
 * in F32, each operation rounded once (no contraction), so the result is a
 * pure function of the row's logits and its slot's table rows. Rows whose
 * s is out of [0, n_slots) (-1: no adjustment) are left as they are and
 * their table rows are not read. a = -inf masks a token. Recordable: a
 * captured graph reads row_slots and the table at their fixed addresses, so
 * the host changes adjustments by writing them between launches. */
int32_t strata_logits_adjust(strata_context *ctx, strata_buffer *logits, uint64_t logits_offset, int64_t n_rows,
                             int64_t n_vocab, strata_buffer *row_slots, uint64_t row_slots_offset,
                             strata_buffer *table, uint64_t table_offset, int64_t n_slots);

/* The sampler's uniform draw in [0, 1): with splitmix64(z) = the standard
 * 64-bit finalizer of (z + 0x9E3779B97F4A7C15),
 * h = splitmix64(seed ^ splitmix64((uint64_t)position)), u = (h >> 40) * 2^-24.
 * Never fails. */
float strata_random_uniform(uint64_t seed, int64_t position);

/* ---------------------------------------------------------------- host buffers, markers, step advance
 *
 * For a decode loop that keeps the device busy: results are copied into a
 * host buffer by work enqueued on the stream, and a marker says when they
 * have arrived, so the host can enqueue the next step first and read the
 * previous one while the device computes. */

typedef struct strata_host_buffer strata_host_buffer;

/* Allocates n_bytes (> 0) of host memory the device can copy into
 * asynchronously (page-locked on CUDA, 64-byte aligned memory on the CPU).
 * *out_data receives its address, valid until strata_host_buffer_destroy. */
int32_t strata_host_buffer_create(strata_context *ctx, uint64_t n_bytes, strata_host_buffer **out_hb,
                                  void **out_data);

/* Frees it after queued work has finished. */
int32_t strata_host_buffer_destroy(strata_host_buffer *hb);

/* Enqueues a copy of n_bytes from a device buffer into a host buffer of the
 * same context. Not allowed while recording. Read the host memory only after
 * a marker enqueued later has been waited for. */
int32_t strata_buffer_copy_to_host(strata_host_buffer *dst, uint64_t dst_offset, strata_buffer *src,
                                   uint64_t src_offset, uint64_t n_bytes);

/* Enqueues a marker and returns its number (increasing from 1). Not allowed
 * while recording. */
int32_t strata_context_marker(strata_context *ctx, uint64_t *out_marker);

/* Waits until all work enqueued before `marker` has finished (at least; it
 * may wait for later work too). Reports asynchronous device errors as
 * STRATA_ERR_DEVICE. Not allowed while recording. */
int32_t strata_context_wait(strata_context *ctx, uint64_t marker);

/* For each of n_rows rows whose rows[r].slot >= 0: ids[r] = out_ids[r],
 * rows[r].index += 1, params[r].position += 1 (all in buffer `io` at the
 * given offsets; ids, rows, out_ids int32, params strata_sampling_params).
 * Padding rows are left as they are. Recordable: a decode step begun with it
 * continues the previous step's sequences with no host writes. */
int32_t strata_step_advance(strata_context *ctx, strata_buffer *io, uint64_t ids_offset, uint64_t rows_offset,
                            uint64_t params_offset, uint64_t out_ids_offset, int64_t n_rows);

/* ---------------------------------------------------------------- graphs */

/* Starts recording: kernels and buffer fills/copies enqueued on ctx until
 * strata_graph_end are recorded, not run (CUDA: stream capture; CPU: a list
 * of kernel calls executed in C). While recording, uploads, downloads,
 * synchronize, slot writes and reads, creating or destroying buffers and slot
 * sets, graph launches and nested recording fail with STRATA_ERR_STATE.
 *
 * A graph stores the addresses and scalar arguments given at record time:
 * it may only reference buffers and slot sets that stay alive, at fixed
 * addresses, while the graph lives (the library refuses to destroy them
 * meanwhile). To vary inputs between launches, write new contents into the
 * same buffers (token ids, rows, sampling params, position tables). */
int32_t strata_graph_begin(strata_context *ctx);

/* Stops recording and returns the graph. If any call failed during
 * recording, fails with STRATA_ERR_STATE, returns no graph and discards the
 * recording; the context is back to eager execution either way. */
int32_t strata_graph_end(strata_context *ctx, strata_graph **out_graph);

/* Enqueues the recorded work once (same stream order as eager calls). */
int32_t strata_graph_launch(strata_graph *graph);

int32_t strata_graph_destroy(strata_graph *graph);

/* Writes the number of kernels one launch of the graph runs (CUDA: kernel
 * nodes, fills and copies not counted; CPU: recorded calls) to *out_count.
 * For benchmarks: launches per decode step. */
int32_t strata_graph_kernel_count(strata_graph *graph, int64_t *out_count);

/* STRATA_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* STRATA_H */
