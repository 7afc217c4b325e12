// cuda_async.cuh (host emulation) — stands in for libstrata/src/cuda_async.cuh
// under emu.h: cp.async copies at once (so waits are no-ops), dynamic shared
// memory is the emulated block's buffer, and cluster barriers and distributed
// shared memory address the other blocks of the cluster running beside it.
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

inline void cluster_sync() { t_cluster_bar->arrive_and_wait(); }
inline thread_local std::optional<std::barrier<>::arrival_token> t_cluster_token;
inline void cluster_arrive() { t_cluster_token.emplace(t_cluster_bar->arrive()); }
inline void cluster_wait() { t_cluster_bar->wait(std::move(*t_cluster_token)); t_cluster_token.reset(); }

template <class T> inline const T* cluster_map(const T* p, int rank) {
    const unsigned char* mine = dynamic_smem<unsigned char>();
    EmuBlock* other = (*t_cluster)[rank];
    unsigned char* base = other->smem.data();
    base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
    return reinterpret_cast<const T*>(base + (reinterpret_cast<const unsigned char*>(p) - mine));
}

}  // namespace cuda
}  // namespace strata
