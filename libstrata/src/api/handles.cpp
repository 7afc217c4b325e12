// handles.cpp — the live-handle registry and the quarantine of destroyed shells.
//
// A single mutex guards both: lookups are a hash probe, cheap next to any
// kernel launch, and handles of different contexts may be used from
// different threads at once.
#include "handles.h"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace strata {
namespace {

// Destroyed shells kept before their memory is freed (addresses not reused).
constexpr size_t kQuarantine = 4096;

struct Registry {
    std::mutex mutex;
    std::unordered_map<const void*, HandleKind> live;
    std::deque<std::unique_ptr<HandleBase>> quarantine;
};

Registry& registry() {
    static Registry* r = new Registry();  // never destroyed: safe during process exit
    return *r;
}

}  // namespace

void registry_add(const void* handle, HandleKind kind) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.emplace(handle, kind);
}

bool registry_contains(const void* p, HandleKind kind) {
    if (p == nullptr) return false;
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find(p);
    return it != r.live.end() && it->second == kind;
}

void registry_retire(HandleBase* object, const void* handle) {
    std::unique_ptr<HandleBase> evicted;
    Registry& r = registry();
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.live.erase(handle);
        r.quarantine.emplace_back(object);
        if (r.quarantine.size() > kQuarantine) {
            evicted = std::move(r.quarantine.front());
            r.quarantine.pop_front();
        }
    }
    // `evicted` is deleted here, outside the lock.
}

}  // namespace strata
