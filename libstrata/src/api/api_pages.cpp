// api_pages.cpp — C entry points for a slot set's KV page pool: mapping pool
// pages into a slot's page table, reading the table back, copying a page,
// reading and writing a page from host memory, and counting free pages.
//
// The page tables live in one device region at a fixed address (captured
// graphs read them, never host-chosen pointers); the host keeps a mirror and
// a per-page count of the entries that map it, so "free" (mapped nowhere) is
// known without a device read. Every call validates all of its arguments
// before it changes anything. docs/kv_pool.md.
#include <string>
#include <vector>

#include "call.h"
#include "export.h"

using namespace strata;

namespace {

void require_entries(const strata_slots* s, int32_t slot, int32_t first, int32_t n) {
    require_range("slot", slot, 0, s->view.n_slots - 1);
    require_range("first", first, 0, s->view.slot_pages);
    require_range("n", n, 0, s->view.slot_pages - first);
}

// Writes entries [first, first + n) of `slot` (host mirror, page counts, device table).
void set_entries(strata_slots* s, int32_t slot, int32_t first, int32_t n, const int32_t* pages) {
    int32_t* mirror = s->pages.data() + size_t(slot) * s->view.slot_pages + first;
    for (int32_t i = 0; i < n; i++) {
        const int32_t old = mirror[i], now = pages == nullptr ? -1 : pages[i];
        if (old >= 0 && --s->page_refs[old] == 0) s->n_free_pages++;
        if (now >= 0 && s->page_refs[now]++ == 0) s->n_free_pages--;
        mirror[i] = now;
    }
    if (n > 0) s->ctx->backend->upload(s->view.pages + size_t(slot) * s->view.slot_pages + first, mirror,
                                       uint64_t(n) * sizeof(int32_t));
}

}  // namespace

STRATA_EXPORT int32_t strata_slots_pages(strata_slots* slots, int32_t* out_n_pages, int32_t* out_n_free) {
    return guarded("strata_slots_pages", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        if (out_n_pages == nullptr || out_n_free == nullptr) invalid("out_n_pages and out_n_free must not be NULL");
        *out_n_pages = slots->view.n_pages;
        *out_n_free = slots->n_free_pages;
    });
}

STRATA_EXPORT int32_t strata_slots_map_pages(strata_slots* slots, int32_t slot, int32_t first, int32_t n,
                                             const int32_t* pages) {
    return guarded("strata_slots_map_pages", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "mapping pages");
        require_entries(slots, slot, first, n);
        if (pages == nullptr && n > 0) invalid("pages is NULL");
        for (int32_t i = 0; i < n; i++)
            if (pages[i] < -1 || pages[i] >= slots->view.n_pages)
                invalid("pages[" + str(i) + "]=" + str(pages[i]) + " is not a pool page; allowed -1 (unmap) or 0.." +
                        str(slots->view.n_pages - 1));
        set_entries(slots, slot, first, n, pages);
    });
}

STRATA_EXPORT int32_t strata_slots_unmap_pages(strata_slots* slots, int32_t slot, int32_t first, int32_t n) {
    return guarded("strata_slots_unmap_pages", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "unmapping pages");
        require_entries(slots, slot, first, n);
        set_entries(slots, slot, first, n, nullptr);
    });
}

STRATA_EXPORT int32_t strata_slots_read_pages(strata_slots* slots, int32_t slot, int32_t first, int32_t n,
                                              int32_t* out_pages) {
    return guarded("strata_slots_read_pages", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_entries(slots, slot, first, n);
        if (out_pages == nullptr && n > 0) invalid("out_pages is NULL");
        const int32_t* mirror = slots->pages.data() + size_t(slot) * slots->view.slot_pages + first;
        for (int32_t i = 0; i < n; i++) out_pages[i] = mirror[i];
    });
}

STRATA_EXPORT int32_t strata_slots_copy_page(strata_slots* slots, int32_t dst, int32_t src) {
    return guarded("strata_slots_copy_page", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "copying a page");
        require_range("dst", dst, 0, slots->view.n_pages - 1);
        require_range("src", src, 0, slots->view.n_pages - 1);
        if (dst == src) invalid("dst and src are the same page (" + str(dst) + ")");
        const SlotsView& v = slots->view;
        if (v.n_layers == 0) return;  // a tables-only set has no KV to copy
        slots->ctx->backend->copy(v.kv + size_t(dst) * v.page_elems(), v.kv + size_t(src) * v.page_elems(),
                                  uint64_t(v.page_elems()) * 2);
    });
}

namespace {

// The page's device address after checking the page index and the byte count.
uint16_t* page_at(strata_slots* s, int32_t page, uint64_t n_bytes) {
    const SlotsView& v = s->view;
    if (v.n_layers == 0) fail(STRATA_ERR_UNSUPPORTED, "a tables-only slot set (n_layers = 0) has no KV pages");
    require_range("page", page, 0, v.n_pages - 1);
    const uint64_t size = uint64_t(v.page_elems()) * 2;
    if (n_bytes != size) invalid("n_bytes=" + std::to_string(n_bytes) + " must be the page size, " + std::to_string(size));
    return v.kv + size_t(page) * v.page_elems();
}

}  // namespace

STRATA_EXPORT int32_t strata_slots_page_bytes(strata_slots* slots, uint64_t* out_bytes) {
    return guarded("strata_slots_page_bytes", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        if (out_bytes == nullptr) invalid("out_bytes is NULL");
        *out_bytes = uint64_t(slots->view.page_elems()) * 2;
    });
}

STRATA_EXPORT int32_t strata_slots_read_page(strata_slots* slots, int32_t page, void* dst, uint64_t n_bytes) {
    return guarded("strata_slots_read_page", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "reading a page");
        uint16_t* src = page_at(slots, page, n_bytes);
        if (dst == nullptr) invalid("dst is NULL");
        slots->ctx->backend->download(dst, src, n_bytes);
    });
}

STRATA_EXPORT int32_t strata_slots_write_page(strata_slots* slots, int32_t page, const void* src, uint64_t n_bytes) {
    return guarded("strata_slots_write_page", [&](Call& call) {
        use_slots(call, slots, "slots", false);
        require_eager(call, "writing a page");
        uint16_t* dst = page_at(slots, page, n_bytes);
        if (src == nullptr) invalid("src is NULL");
        slots->ctx->backend->upload(dst, src, n_bytes);
    });
}
