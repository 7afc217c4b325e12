// cuda_async.cuh — the few sm_90 device primitives beyond plain CUDA C++ that
// the attention kernels use: asynchronous global→shared copies (cp.async),
// dynamic shared memory, and thread-block clusters (barrier and distributed
// shared memory).
//
// Kept in one small header so the host emulator (libstrata/cuda_emu) can
// substitute its own version of exactly these functions: mk.py does not copy
// this file, and cuda_emu/cuda_async.cuh stands in for it. None of them does
// arithmetic, so they cannot affect a result's bits — only when data arrives.
#pragma once

#include <cooperative_groups.h>

namespace strata {
namespace cuda {

// 16 bytes global → shared, bypassing L1 (both addresses 16-byte aligned).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

// 4 bytes global → shared (both addresses 4-byte aligned).
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

// Closes the group of copies issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight.
// Other threads see the data only after a barrier (__syncwarp / __syncthreads).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The block's dynamic shared memory (size given at launch), 16-byte aligned.
template <class T>
__device__ __forceinline__ T* dynamic_smem() {
    extern __shared__ __align__(16) unsigned char strata_dynamic_smem[];
    return reinterpret_cast<T*>(strata_dynamic_smem);
}

// Barrier over every thread of the cluster (also orders shared-memory writes
// before it with reads after it, in any block of the cluster).
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }

// The two halves of cluster_sync: arrive says this thread is done with the
// cluster's shared memory so far, wait blocks until every thread has arrived.
// Work between them overlaps the barrier's latency (every thread calls both,
// in that order, warp-uniformly).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// A cluster barrier that only publishes: every shared-memory access this
// thread made to its own CTA's shared memory before it is ordered before
// every access any thread of the cluster makes after it (the published
// words may then be read through cluster_map). It does NOT order this
// thread's earlier reads of other CTAs' shared memory: use it only where no
// such read since the thread's last full barrier (cluster_sync /
// cluster_arrive) touches a word its owner writes again, or frees by exiting,
// before the next full barrier (docs/cuda_backend.md, "Cluster barriers", has
// the argument from the PTX memory model and the SASS of both forms).
// fence.release.sync_restrict::shared::cta.cluster compiles to MEMBAR.ALL.CTA
// (plus FENCE.VIEW.ASYNC.S) where the release arrive of cluster_sync compiles
// to MEMBAR.ALL.GPU, ERRBAR, CGAERRBAR.
__device__ __forceinline__ void cluster_sync_publish() {
    asm volatile(
        "fence.release.sync_restrict::shared::cta.cluster;\n"
        "barrier.cluster.arrive.relaxed.aligned;\n"
        "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The address of the same shared-memory object in block `rank` of the cluster.
template <class T>
__device__ __forceinline__ const T* cluster_map(const T* p, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(const_cast<T*>(p), (unsigned)rank);
}

}  // namespace cuda
}  // namespace strata
