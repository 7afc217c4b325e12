// api_slots.cpp — C entry points for slot sets: creation (the KV page pool and
// page tables), position tables, rope deltas and the host-side lengths. The
// page-table calls are in api_pages.cpp.
//
// The device layout is backend.h's SlotsView: five regions (KV pool, table,
// delta, table_of, page tables) allocated through the backend. Lengths live on the host. Every
// call here touches only the regions of the slot it names.
#include <algorithm>
#include <memory>
#include <vector>

#include "call.h"
#include "export.h"

using namespace strata;

static_assert(kPageCells == STRATA_PAGE_CELLS, "backend.h and strata.h disagree on the page size");

namespace {

constexpr uint64_t kCellBytes = 4 * sizeof(int32_t);  // one table row: 4 positions

void require_slot(const strata_slots* s, const char* name, int32_t slot) {
    require_range(name, slot, 0, s->view.n_slots - 1);
}

// Byte address of table row `row` in the table region of slot `region`.
uint8_t* table_row(const strata_slots* s, int32_t region, int32_t row) {
    return reinterpret_cast<uint8_t*>(s->view.table) + ((uint64_t)region * s->view.n_ctx + row) * kCellBytes;
}

void free_regions(strata_context* ctx, strata_slots* s) {
    for (void*& region : s->regions) {
        if (region != nullptr) ctx->backend->release(region);
        region = nullptr;
    }
}

}  // namespace

namespace {

// Creates a slot set with a pool of n_pages pages (identity: n_pages is
// n_slots * slot_pages and slot s maps pages s * slot_pages + j, the fixed
// regions of ABI 2; otherwise every entry starts unmapped).
void create_set(Call& call, strata_context* ctx, const strata_slots_params* params, int64_t n_pages,
                bool identity, strata_slots** out_slots) {
    use_context(call, ctx);
    if (params == nullptr || out_slots == nullptr) invalid("params and out_slots must not be NULL");
    require_eager(call, "creating slots");
    const strata_slots_params p = *params;
    require_range("n_slots", p.n_slots, 1, 1 << 20);
    require_range("n_layers", p.n_layers, 0, 1 << 16);
    require_range("n_ctx", p.n_ctx, 1, 1 << 30);
    require_range("n_kv_heads", p.n_kv_heads, 1, 1 << 16);
    require_range("head_dim", p.head_dim, 2, 512);
    if (p.head_dim % 2 != 0) invalid("head_dim=" + str(p.head_dim) + " must be even");
    const int64_t slot_pages = (int64_t(p.n_ctx) + kPageCells - 1) / kPageCells;
    if (identity) {
        n_pages = slot_pages * p.n_slots;
        if (n_pages >= INT32_MAX)
            fail(STRATA_ERR_OUT_OF_MEMORY, "the slot set would need " + str(n_pages) + " KV pages of " +
                                               str(kPageCells) + " cells; at most " + str(INT32_MAX - 1));
    }
    if (n_pages < 0 || n_pages >= INT32_MAX)
        invalid("n_pages=" + str(n_pages) + " is out of range; allowed 0.." + str(INT32_MAX - 1));

    // The pool holds n_pages + 1 pages (the last one is the null page unmapped cells read).
    u128 kv_bytes = p.n_layers == 0 ? u128(0)
                                    : mul_sat(mul_sat(mul_sat(u128(n_pages + 1) * p.n_layers * 2, u128(p.n_kv_heads)),
                                                      u128(kPageCells) * p.head_dim), 2);
    u128 table_bytes = u128(p.n_slots) * p.n_ctx * kCellBytes;
    u128 page_table_bytes = u128(p.n_slots) * slot_pages * sizeof(int32_t);
    if (kv_bytes > u128(UINT64_MAX / 2) || table_bytes > u128(UINT64_MAX / 2) ||
        page_table_bytes > u128(UINT64_MAX / 2))
        fail(STRATA_ERR_OUT_OF_MEMORY, "the slot set would need more than 2^63 bytes");

    auto s = std::make_unique<strata_slots>();
    s->ctx = ctx;
    try {
        if (kv_bytes > 0) s->regions[0] = ctx->backend->alloc(uint64_t(kv_bytes));
        s->regions[1] = ctx->backend->alloc(uint64_t(table_bytes));
        s->regions[2] = ctx->backend->alloc(uint64_t(p.n_slots) * sizeof(int32_t));
        s->regions[3] = ctx->backend->alloc(uint64_t(p.n_slots) * sizeof(int32_t));
        s->regions[4] = ctx->backend->alloc(uint64_t(page_table_bytes));
        SlotsView& v = s->view;
        v.n_slots = p.n_slots;
        v.n_layers = p.n_layers;
        v.n_ctx = p.n_ctx;
        v.n_kv_heads = p.n_kv_heads;
        v.head_dim = p.head_dim;
        v.n_pages = int32_t(n_pages);
        v.slot_pages = int32_t(slot_pages);
        v.kv = static_cast<uint16_t*>(s->regions[0]);
        v.table = static_cast<int32_t*>(s->regions[1]);
        v.delta = static_cast<int32_t*>(s->regions[2]);
        v.table_of = static_cast<int32_t*>(s->regions[3]);
        v.pages = static_cast<int32_t*>(s->regions[4]);
        s->lengths.assign(p.n_slots, 0);
        s->table_of.resize(p.n_slots);
        for (int32_t i = 0; i < p.n_slots; i++) s->table_of[i] = i;
        s->pages.assign(size_t(p.n_slots) * slot_pages, -1);
        s->page_refs.assign(size_t(n_pages), 0);
        s->n_free_pages = int32_t(n_pages);
        if (identity) {
            for (size_t i = 0; i < s->pages.size(); i++) s->pages[i] = int32_t(i), s->page_refs[i] = 1;
            s->n_free_pages = 0;
        }
        ctx->backend->fill(v.table, 0, uint64_t(table_bytes));
        ctx->backend->fill(v.delta, 0, uint64_t(p.n_slots) * sizeof(int32_t));
        ctx->backend->upload(v.table_of, s->table_of.data(), uint64_t(p.n_slots) * sizeof(int32_t));
        ctx->backend->upload(v.pages, s->pages.data(), uint64_t(page_table_bytes));
        // The null page reads as zeros (no kernel writes it).
        if (kv_bytes > 0) ctx->backend->fill(v.kv + size_t(n_pages) * v.page_elems(), 0, v.page_elems() * 2);
        ctx->backend->synchronize();
    } catch (...) {
        free_regions(ctx, s.get());
        throw;
    }
    publish_handle(s, HandleKind::Slots, &ctx->n_slot_sets, out_slots);
}

}  // namespace

STRATA_EXPORT int32_t strata_slots_create(strata_context* ctx, const strata_slots_params* params,
                                          strata_slots** out_slots) {
    return guarded("strata_slots_create",
                   [&](Call& call) { create_set(call, ctx, params, 0, true, out_slots); });
}

STRATA_EXPORT int32_t strata_slots_create_paged(strata_context* ctx, const strata_slots_params* params,
                                                int32_t n_pages, strata_slots** out_slots) {
    return guarded("strata_slots_create_paged",
                   [&](Call& call) { create_set(call, ctx, params, n_pages, false, out_slots); });
}

STRATA_EXPORT int32_t strata_slots_destroy(strata_slots* slots) {
    return guarded("strata_slots_destroy", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "destroying slots");
        if (slots->graph_refs > 0)
            fail(STRATA_ERR_STATE, "the slot set is used by " + str(slots->graph_refs) +
                                       " live graph(s); destroy those graphs first");
        free_regions(slots->ctx, slots);
        slots->ctx->n_slot_sets--;
        retire_handle(slots);
    });
}

STRATA_EXPORT int32_t strata_slots_reset(strata_slots* slots, int32_t slot) {
    return guarded("strata_slots_reset", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "resetting a slot");
        require_slot(slots, "slot", slot);
        Backend& be = *slots->ctx->backend;
        const int32_t zero = 0;
        be.fill(table_row(slots, slot, 0), 0, uint64_t(slots->view.n_ctx) * kCellBytes);
        be.upload(slots->view.delta + slot, &zero, sizeof zero);
        be.upload(slots->view.table_of + slot, &slot, sizeof slot);
        slots->table_of[slot] = slot;
        slots->lengths[slot] = 0;
    });
}

STRATA_EXPORT int32_t strata_slots_truncate(strata_slots* slots, int32_t slot, int32_t n_tokens) {
    return guarded("strata_slots_truncate", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "truncating a slot");
        require_slot(slots, "slot", slot);
        require_range("n_tokens", n_tokens, 0, slots->view.n_ctx);
        int32_t n_forget = slots->view.n_ctx - n_tokens;
        if (n_forget > 0)
            slots->ctx->backend->fill(table_row(slots, slots->table_of[slot], n_tokens), 0,
                                      uint64_t(n_forget) * kCellBytes);
        slots->lengths[slot] = std::min(slots->lengths[slot], n_tokens);
    });
}

STRATA_EXPORT int32_t strata_slots_length(strata_slots* slots, int32_t slot, int32_t* out_length) {
    return guarded("strata_slots_length", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_slot(slots, "slot", slot);
        if (out_length == nullptr) invalid("out_length is NULL");
        *out_length = slots->lengths[slot];
    });
}

STRATA_EXPORT int32_t strata_slots_write_positions(strata_slots* slots, int32_t slot, int32_t first_row,
                                                   int32_t n_rows, const int32_t* positions) {
    return guarded("strata_slots_write_positions", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "writing positions");
        require_slot(slots, "slot", slot);
        int32_t length = slots->lengths[slot];
        if (first_row < 0 || first_row > length)
            invalid("first_row=" + str(first_row) + " would leave a gap; allowed 0.." + str(length) +
                    " (the slot's length)");
        require_range("n_rows", n_rows, 1, slots->view.n_ctx - first_row);
        if (positions == nullptr) invalid("positions is NULL");
        slots->ctx->backend->upload(table_row(slots, slots->table_of[slot], first_row), positions,
                                    uint64_t(n_rows) * kCellBytes);
        slots->lengths[slot] = std::max(length, first_row + n_rows);
    });
}

STRATA_EXPORT int32_t strata_slots_read_positions(strata_slots* slots, int32_t slot, int32_t first_row,
                                                  int32_t n_rows, int32_t* out_positions) {
    return guarded("strata_slots_read_positions", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "reading positions");
        require_slot(slots, "slot", slot);
        require_range("first_row", first_row, 0, slots->view.n_ctx - 1);
        require_range("n_rows", n_rows, 1, slots->view.n_ctx - first_row);
        if (out_positions == nullptr) invalid("out_positions is NULL");
        slots->ctx->backend->download(out_positions, table_row(slots, slots->table_of[slot], first_row),
                                      uint64_t(n_rows) * kCellBytes);
    });
}

STRATA_EXPORT int32_t strata_slots_set_delta(strata_slots* slots, int32_t slot, int32_t delta) {
    return guarded("strata_slots_set_delta", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "setting a rope delta");
        require_slot(slots, "slot", slot);
        slots->ctx->backend->upload(slots->view.delta + slot, &delta, sizeof delta);
    });
}

STRATA_EXPORT int32_t strata_slots_debug_share_table(strata_slots* slots, int32_t slot, int32_t target) {
    return guarded("strata_slots_debug_share_table", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "sharing a table");
        require_slot(slots, "slot", slot);
        require_slot(slots, "target", target);
        slots->ctx->backend->upload(slots->view.table_of + slot, &target, sizeof target);
        slots->table_of[slot] = target;
    });
}
