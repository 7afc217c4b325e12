// cuda_kv_layout.cuh — where a KV cache row lives in the paged pool: the one formula the
// attention kernels read with and the KV stores write with (backend.h SlotsView::kv_index).
#pragma once

#include <cuda_fp16.h>

#include <cstring>

#include "cuda_common.cuh"

namespace strata {
namespace cuda {

// First element of the cache row of `cell` of (slot, layer, K|V, kv head). The cell's page comes
// from the slot's page table; an unmapped entry reads the null page (index n_pages, which no kernel
// writes). Rows of a page are contiguous per (layer, K|V, head): a tile of cells at a multiple of
// its size never straddles pages when kPageCells is a multiple of it.
__device__ __forceinline__ size_t kv_row(const SlotsView& s, int32_t slot, int32_t layer, int which, int32_t head,
                                         int32_t cell) {
    int32_t page = s.pages[(size_t)slot * s.slot_pages + cell / kPageCells];
    if (page < 0 || page >= s.n_pages) page = s.n_pages;
    const size_t plane = (size_t)s.n_kv_heads * kPageCells * s.head_dim;
    return (size_t)page * ((size_t)s.n_layers * 2 * plane) + ((size_t)layer * 2 + which) * plane +
           ((size_t)head * kPageCells + cell % kPageCells) * s.head_dim;
}

// The pool page of (slot, cell), or -1 when unmapped (backend.h SlotsView::pages).
__device__ __forceinline__ int32_t kv_page(const SlotsView& s, int32_t slot, int32_t cell) {
    const int32_t p = s.pages[(size_t)slot * s.slot_pages + cell / kPageCells];
    return p >= 0 && p < s.n_pages ? p : -1;
}

// A row is stored when it names a real cell of a mapped page (unmapped cells are skipped): the rule
// of every KV store (cuda_kv_store.cu, and the fused store of cuda_attention_decode.cu).
__device__ __forceinline__ bool kv_row_valid(const SlotsView& s, int32_t layer, int32_t slot, int32_t index) {
    return slot >= 0 && slot < s.n_slots && index >= 0 && index < s.n_ctx && layer >= 0 && layer < s.n_layers &&
           kv_page(s, slot, index) >= 0;
}

// Two F16 values (one 32-bit word of a cache row) as floats.
__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t bits) {
    __half2 h;
    memcpy(&h, &bits, 4);
    return __half22float2(h);
}

}  // namespace cuda
}  // namespace strata
