// cuda_async.cuh (host emulation) — stands in for libstrata/src/cuda_async.cuh
// under emu.h: cp.async copies at once (so waits are no-ops), dynamic shared
// memory is the emulated block's buffer, and cluster barriers and distributed
// shared memory address the other blocks of the cluster running beside it;
// the barriers and remote reads feed cluster_check.h (which remote reads each
// barrier form orders).
#pragma once
#include <cstring>
#include <optional>

namespace strata {
namespace cuda {

inline void cp_async16(void* smem, const void* gmem) {
    if ((reinterpret_cast<uintptr_t>(smem) | reinterpret_cast<uintptr_t>(gmem)) % 16 != 0) {
        fprintf(stderr, "misaligned cp.async of 16 bytes\n");
        abort();
    }
    std::memcpy(smem, gmem, 16);
}
inline void cp_async4(void* smem, const void* gmem) {
    if ((reinterpret_cast<uintptr_t>(smem) | reinterpret_cast<uintptr_t>(gmem)) % 4 != 0) {
        fprintf(stderr, "misaligned cp.async of 4 bytes\n");
        abort();
    }
    std::memcpy(smem, gmem, 4);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}

template <class T> inline T* dynamic_smem() {
    unsigned char* p = t_block->smem.data();
    p += (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16;
    return reinterpret_cast<T*>(p);
}

// Each arrival tells cluster_check.h its barrier's form: full (the device's
// release arrive) or publishing (cluster_sync_publish: the release fence
// restricted to the CTA's own shared memory, then a relaxed arrive).
inline int emu_full_form() { return emu_relax_full_barriers.load() ? kEmuPublish : kEmuFull; }
inline void cluster_sync() {
    t_cluster_check->arrive(*t_read_log, emu_full_form());
    t_cluster_bar->arrive_and_wait();
}
inline void cluster_sync_publish() {
    t_cluster_check->arrive(*t_read_log, kEmuPublish);
    t_cluster_bar->arrive_and_wait();
}
inline thread_local std::optional<std::barrier<EmuClusterCompletion>::arrival_token> t_cluster_token;
inline void cluster_arrive() {
    t_cluster_check->arrive(*t_read_log, emu_full_form());
    t_cluster_token.emplace(t_cluster_bar->arrive());
}
inline void cluster_wait() { t_cluster_bar->wait(std::move(*t_cluster_token)); t_cluster_token.reset(); }

// Also logs the word for cluster_check.h (every use reads the mapped word at once).
template <class T> inline const T* cluster_map(const T* p, int rank) {
    static_assert(sizeof(T) <= sizeof(EmuRemoteRead::bytes), "a logged word fits");
    const unsigned char* mine = dynamic_smem<unsigned char>();
    EmuBlock* other = (*t_cluster)[rank];
    unsigned char* base = other->smem.data();
    base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
    const unsigned char* at = base + (reinterpret_cast<const unsigned char*>(p) - mine);
    EmuRemoteRead r{at, (unsigned)sizeof(T), {}, t_read_log->arrivals, false};
    std::memcpy(r.bytes, at, sizeof(T));
    {
        std::lock_guard<std::mutex> lock(t_read_log->mu);
        t_read_log->reads.push_back(r);
    }
    return reinterpret_cast<const T*>(at);
}

}  // namespace cuda
}  // namespace strata
