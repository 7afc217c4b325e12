// handles.h — the objects behind the opaque C handles, and their registry.
//
// Every handle the library hands out is registered with its kind; a pointer
// passed back in is looked up before it is dereferenced, so a destroyed or
// foreign handle is refused instead of crashing. Destroyed handle shells are
// kept in a bounded quarantine so their addresses are not reused at once and a
// stale handle keeps being recognized as destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/backend.h"

namespace strata {

enum class HandleKind { Context, Buffer, Slots, Graph, HostBuffer };

struct HandleBase {
    virtual ~HandleBase() = default;
};

}  // namespace strata

struct strata_context : strata::HandleBase {
    std::unique_ptr<strata::Backend> backend;
    int32_t backend_kind = STRATA_BACKEND_CPU;
    int32_t device_index = 0;
    // Live objects created from this context (it cannot be destroyed before them).
    int64_t n_buffers = 0, n_slot_sets = 0, n_graphs = 0, n_host_buffers = 0;
    // strata_matmul_prefetch's hint, taken (and cleared) by the next matmul call, which checks the
    // buffer again as its own operand (so a recording graph holds it); destroying the buffer drops it.
    strata_buffer* matmul_prefetch = nullptr;
    uint64_t matmul_prefetch_offset = 0, matmul_prefetch_bytes = 0;
    // The latest strata_matmul_ex with handoff_emit (strata.h): what a handoff_use call must match.
    // Cleared by a failed matmul_ex call.
    struct Handoff {
        bool set = false;
        const void* y = nullptr;
        int64_t n_rows = 0, k = 0;
        int32_t prologue = 0;
        const void* norm = nullptr;
    } handoff;

    // strata_matmul_chain_begin .. _end: only strata_matmul_ex and the end are allowed on the context
    // (use_context / use_owned refuse the rest, call.cpp).
    bool chain_open = false;

    // Graph recording state.
    bool recording = false;
    bool recording_failed = false;
    std::string recording_error;  // the first failure while recording
    std::unordered_set<strata_buffer*> recorded_buffers;
    std::unordered_set<strata_slots*> recorded_slots;
};

struct strata_buffer : strata::HandleBase {
    strata_context* ctx = nullptr;
    uint8_t* ptr = nullptr;
    uint64_t size = 0;
    int64_t graph_refs = 0;  // live graphs that reference this buffer
};

struct strata_host_buffer : strata::HandleBase {
    strata_context* ctx = nullptr;
    uint8_t* ptr = nullptr;
    uint64_t size = 0;
};

struct strata_slots : strata::HandleBase {
    strata_context* ctx = nullptr;
    strata::SlotsView view;        // device pointers into the regions below
    std::vector<int32_t> lengths;  // host bookkeeping, per slot
    std::vector<int32_t> table_of; // host mirror of view.table_of
    std::vector<int32_t> pages;    // host mirror of view.pages ([slot][slot_pages], -1 = unmapped)
    std::vector<int32_t> page_refs;// per pool page: how many page-table entries map it
    int32_t n_free_pages = 0;      // pool pages with page_refs == 0
    int64_t graph_refs = 0;
    // Device regions (KV pool, tables, deltas, table_of, page tables), freed by
    // strata_slots_destroy (never by the destructor: a quarantined shell may
    // outlive its context).
    void* regions[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
};

struct strata_graph : strata::HandleBase {
    strata_context* ctx = nullptr;
    std::unique_ptr<strata::GraphExec> exec;
    std::vector<strata_buffer*> buffers;  // referenced; their graph_refs count this graph
    std::vector<strata_slots*> slots;
};

namespace strata {

// Registers a newly created handle; its memory stays the caller's until retired.
void registry_add(const void* handle, HandleKind kind);

// Whether `p` is a live handle of `kind`.
bool registry_contains(const void* p, HandleKind kind);

// Unregisters a handle and moves its shell (`object`, the same object as
// `handle`) into the quarantine, which deletes the oldest shells beyond a
// fixed bound.
void registry_retire(HandleBase* object, const void* handle);

template <class T>
void register_handle(T* object, HandleKind kind) {
    registry_add(static_cast<const void*>(object), kind);
}

template <class T>
void retire_handle(T* object) {
    registry_retire(object, static_cast<const void*>(object));
}

}  // namespace strata
