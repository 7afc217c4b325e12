// cuda_pdl.cuh — programmatic dependent launch (PDL): every kernel of the CUDA
// backend may start while the kernel before it on the stream is still running.
//
// Why: a decode step is one CUDA graph of a few hundred small kernels, many
// lasting 2-10 us, so the drain of one grid and the launch and ramp-up of the
// next are a large share of the step. On Hopper (compute capability 9.0+) a
// kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may
// have its blocks scheduled before the previous kernel (its "primary") has
// finished; the blocks then stop in griddepcontrol.wait until the primary has
// completed and its memory writes are visible. Arithmetic is untouched, so
// every result is bit for bit what it is without PDL (STRATA_PDL=0).
//
// The rule every __global__ kernel in libstrata/src/cuda follows (checked by
// tests/kernels/test_pdl_coverage.py): its first statement is pdl_wait(), and
// pdl_launch_dependents() follows it. Nothing before the wait reads memory an
// earlier kernel writes or writes memory an earlier kernel may read. The one
// exception: calls to functions named early_* may precede the wait; they may
// read only what no kernel ever writes (a matmul's weights: uploaded by copies,
// never by kernels; or the launch's parameters) and write only the CTA's own
// shared memory, or return a value that initializes a local. The integer
// matmul kernels use it to start streaming their first weights while the
// previous kernel drains (cuda_int_matmul.cu, early_weights); rope_kv_store
// forms its rope powers there (cuda_kv_store.cu, early_rope_bases).
//
// Why waiting on the one previous kernel is enough (transitivity). The launch
// attribute makes kernel N+1 depend programmatically on kernel N only; its
// wait returns once N has completed and N's writes are visible. Kernel N
// completes only when all of its threads have exited, and each of its threads
// first returned from its own pdl_wait(), which required kernel N-1 to have
// completed. So by induction, when N+1's wait returns, every earlier kernel on
// the stream has completed and its writes are visible: N+1 sees the same
// memory as without PDL. Non-kernel work (memcpy, memset, event records, graph
// launches) is never launched programmatically: it waits for the whole
// previous kernel as always, which by the same induction includes everything
// before it. The same argument bounds what early_* work can overlap: N+1's
// blocks are scheduled only after every block of N has passed its own wait,
// i.e. after N-1 (and so everything before it) has completed; only kernel N
// itself can still be running. So early reads race only with N's writes, and
// N never writes weights.
//
// Why triggering early cannot starve anything. pdl_launch_dependents() lets
// the next kernel's blocks be scheduled only once every block of this grid
// has called it or exited, i.e. once every block of this grid is already
// resident on an SM: the early dependents can take only the room this grid no
// longer needs, and they hold it while they sit in their own wait, which returns
// once this grid has completed. A grid that never triggers behaves as if it
// triggered at its end (plain stream order).
//
// On/off: on by default on devices of compute capability 9.0 or higher;
// STRATA_PDL=0 launches everything in plain stream order (read at every
// launch, so tests can switch it within one process; a CUDA graph keeps what
// it was captured with). Devices below 9.0 never get the attribute, and the
// device helpers compile to nothing there and under the host emulator
// (libstrata/cuda_emu, which compiles the kernels as host C++).
#pragma once

#include "core/env_switch.h"
#include "cuda_common.cuh"

#ifdef __CUDACC__
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#endif

namespace strata {
namespace cuda {

// ------------------------------------------------------------------ device

// Blocks until the previous kernel on the stream (when this one was launched
// programmatically) has completed and its memory is visible. A no-op for a
// kernel launched in plain stream order.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel's blocks be scheduled once every block of this grid
// has called this or exited. Its memory is still protected by its own wait.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#ifdef __CUDACC__
// ------------------------------------------------------------------ host

// STRATA_PDL: unset, empty or "1" = on where the device supports it; "0" =
// off; anything else is an error naming the choices.
inline bool pdl_env_on() {
    return env_switch("STRATA_PDL", true, "0 (off) or 1 (on where the GPU supports it, the default)");
}

// Whether the current device has PDL (compute capability 9.0+), cached per
// device: one cudaGetDevice per launch, no attribute query after the first.
inline bool pdl_device_supports() {
    constexpr int kMaxDevices = 64;
    static std::atomic<int> known[kMaxDevices];  // 0 = not asked yet, 1 = no, 2 = yes
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    int v = (dev >= 0 && dev < kMaxDevices) ? known[dev].load(std::memory_order_relaxed) : 0;
    if (v == 0) {
        int major = 0;
        check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
              "cudaDeviceGetAttribute (compute capability)");
        v = major >= 9 ? 2 : 1;
        if (dev >= 0 && dev < kMaxDevices) known[dev].store(v, std::memory_order_relaxed);
    }
    return v == 2;
}

// Whether the next launch on the current device is programmatic.
inline bool pdl_enabled() { return pdl_env_on() && pdl_device_supports(); }

// Appends the PDL attribute to `attrs` (which has room for it) when PDL is
// on; returns the new attribute count. For launches that build their own
// cudaLaunchConfig_t (the attention kernel's cluster launch).
inline unsigned pdl_add_attr(cudaLaunchAttribute* attrs, unsigned n) {
    if (!pdl_enabled()) return n;
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    return n + 1;
}

// Every kernel launch of the backend: `kernel<<<grid, block, smem, stream>>>(args...)`,
// programmatic when PDL is on. Throws STRATA_ERR_DEVICE when the launch is refused
// (the caller's check_launch then finds no error left).
template <typename... Params, typename... Args>
inline void launch_k(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                     Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    cfg.attrs = attr;
    cfg.numAttrs = pdl_add_attr(attr, 0);
    check(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), "kernel launch");
}
#endif  // __CUDACC__

}  // namespace cuda
}  // namespace strata
