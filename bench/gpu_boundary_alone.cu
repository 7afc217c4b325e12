// gpu_boundary_alone.cu — what one kernel boundary of a decode step's launch chain costs, against a grid
// barrier inside one persistent kernel: the measurement that decides whether the persistent decode
// kernel (docs/cuda_backend.md, "What a fast version should change") is worth building. A one-row step is
// a chain of ~190 (135M) to ~300 (8B) small kernels, and at 135M each costs ~5.4 µs whatever its size
// (bench/RESULTS.md, 2026-12-06 sixth session); this separates the boundary from the work.
//
// Every phase does the same small piece of work: each thread reads one float that a thread of ANOTHER
// CTA wrote in the previous phase (so every phase depends on the whole previous one, as a matmul
// depends on every block of its input), and writes one float. With weights (the second half of the
// table), each phase also streams 16 KB a CTA of its own read-only bytes (a small matmul's weights:
// 2.1 MB a phase at 132 CTAs, distinct for every phase, so they come from DRAM), loaded BEFORE the wait or
// the barrier as libstrata's early_weights does, and folded into the phase's value. Four ways to run P
// phases over G CTAs of 256 threads, each timed over a CUDA graph launched `launches` times:
//   work     one kernel runs all P phases with no synchronization between them (a lower bound: the
//            work alone; its results are not the chain's, it only prices the loads and stores);
//   plain    P kernels in stream order (no programmatic dependent launch);
//   pdl      P kernels, each launched with programmatic stream serialization and starting with
//            griddepcontrol.wait then griddepcontrol.launch_dependents, as libstrata's kernels do
//            (cuda_pdl.cuh);
//   barrier  one cooperative kernel, P phases separated by a grid barrier (a self-resetting counter
//            and a generation word: thread 0 of each CTA fences, arrives, and the last arrival resets
//            the counter and bumps the generation the others wait on with acquire loads).
// plain, pdl and barrier must end with the same values (checked: the line ends with "same" or the
// first difference). The table gives µs per phase, one row per grid size without and with weights;
// pdl − barrier is what a persistent kernel would save per boundary, before any cost of running
// different work in one kernel.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/gpu_boundary_alone.cu -o /tmp/boundary
//   /tmp/boundary [PHASES=64] [LAUNCHES=20] [GRIDS=18,48,132,264]
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kThreads = 256;

#define CHECK(x)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (x);                                                                 \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

constexpr int kWords = 4;  // 16-byte weight words a thread loads a phase when weights are on (16 KB a CTA)

// Phase p's weight words of this thread (kW = 0: none), as plain loads whose results are used only in
// phase(): issued before a wait or barrier, they stream while it waits.
template <int kW>
struct Weights {
    uint4 v[kW > 0 ? kW : 1];
    __device__ __forceinline__ void load(const uint4* w, int p) {
        if constexpr (kW > 0) {
            const uint4* base = w + ((size_t)p * gridDim.x + blockIdx.x) * kW * kThreads + threadIdx.x;
#pragma unroll
            for (int u = 0; u < kW; ++u) v[u] = __ldg(base + u * kThreads);
        }
    }
    __device__ __forceinline__ float fold() const {
        unsigned s = 0;
        if constexpr (kW > 0)
#pragma unroll
            for (int u = 0; u < kW; ++u) s += (v[u].x ^ v[u].y ^ v[u].z ^ v[u].w) & 0xffu;
        return 1.0f + (float)s * (1.0f / 1024.0f);
    }
};

// One phase: element i of `out` from element (i + 256) mod n of `in`, i.e. from the next CTA's slice.
template <int kW>
__device__ __forceinline__ void phase(const float* in, float* out, int n, const Weights<kW>& w) {
    const int i = blockIdx.x * kThreads + threadIdx.x;
    const int j = (i + kThreads) % n;
    out[i] = fmaf(__ldcg(in + j), 1.0001f, w.fold());  // through L2: another SM wrote it
}

template <int kW>
__global__ void __launch_bounds__(kThreads) phase_kernel(const float* in, float* out, int n, int pdl, const uint4* wt,
                                                         int p) {
    Weights<kW> w;
    w.load(wt, p);  // weights only, before the wait (as early_weights)
    if (pdl) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
    phase(in, out, n, w);
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The grid barrier: counter[0] counts arrivals and is reset by the last one, counter[1] is the generation.
__device__ __forceinline__ void grid_barrier(unsigned* counter) {
    __syncthreads();  // the CTA's writes happen before thread 0's fence (cumulativity)
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire(counter + 1);  // read before arriving: it cannot move until we do
        __threadfence();
        if (atomicAdd(counter, 1u) == gridDim.x - 1) {
            atomicExch(counter, 0u);
            __threadfence();
            atomicAdd(counter + 1, 1u);
        } else {
            while (ld_acquire(counter + 1) == gen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

template <int kW>
__global__ void __launch_bounds__(kThreads) persistent_kernel(float* a, float* b, int n, int phases, unsigned* counter,
                                                              int sync, const uint4* wt) {
    Weights<kW> w;
    w.load(wt, 0);
    for (int p = 0; p < phases; ++p) {
        phase(p % 2 ? b : a, p % 2 ? a : b, n, w);
        if (p + 1 < phases) {
            w.load(wt, p + 1);  // the next phase's weights, before the barrier
            if (sync) grid_barrier(counter);
        }
    }
}

template <int kW>
void launch_phase(const float* in, float* out, int n, int grid, bool pdl, const uint4* wt, int p, cudaStream_t s) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&cfg, phase_kernel<kW>, in, out, n, pdl ? 1 : 0, wt, p));
}

template <int kW>
void launch_persistent(float* a, float* b, int n, int grid, int phases, unsigned* counter, bool sync, const uint4* wt,
                       cudaStream_t s) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;  // refused if the grid cannot be resident at once
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, persistent_kernel<kW>, a, b, n, phases, counter, sync ? 1 : 0, wt));
}

std::vector<int> parse_list(const char* s) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v.push_back(atoi(item.c_str()));
    return v;
}

// The launches `record` makes on s, as an instantiated graph, launched once (a warm-up, or the run whose
// values are checked) and synchronized.
template <class F>
cudaGraphExec_t graph_once(cudaStream_t s, F record) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    record();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    return ge;
}

// µs per phase of a graph recorded by `record`, launched `launches` times after one warm-up launch.
template <class F>
float time_graph(cudaStream_t s, int phases, int launches, F record) {
    cudaGraphExec_t ge = graph_once(s, record);
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < launches; ++i) CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    return 1000.0f * ms / (float)(launches * phases);
}

// One table row: G CTAs, weights (kW words a thread a phase) or none; the four variants timed, the three
// real ones' values compared.
template <int kW>
void run_row(int grid, int phases, int launches, unsigned* counter, cudaStream_t s) {
    const int n = grid * kThreads;
    std::vector<float> init(n);
    for (int i = 0; i < n; ++i) init[i] = (float)(i % 97) * 0.01f;
    float *a, *b;
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    uint4* wt = nullptr;
    const size_t w_bytes = (size_t)phases * grid * kW * kThreads * sizeof(uint4);
    if (kW > 0) {
        CHECK(cudaMalloc(&wt, w_bytes));
        CHECK(cudaMemset(wt, 0x5b, w_bytes));
    }
    std::vector<std::vector<float>> results;
    auto reset = [&] { CHECK(cudaMemcpy(a, init.data(), n * sizeof(float), cudaMemcpyHostToDevice)); };
    auto keep = [&] {  // the values after one more (untimed) graph launch from the initial state
        std::vector<float> r(n);
        CHECK(cudaMemcpy(r.data(), phases % 2 ? b : a, n * sizeof(float), cudaMemcpyDeviceToHost));
        results.push_back(r);
    };
    const float t_work =
        time_graph(s, phases, launches, [&] { launch_persistent<kW>(a, b, n, grid, phases, counter, false, wt, s); });
    float t[3];
    for (int v = 0; v < 3; ++v) {
        auto record = [&] {
            if (v == 2) {
                launch_persistent<kW>(a, b, n, grid, phases, counter, true, wt, s);
            } else {
                for (int p = 0; p < phases; ++p) launch_phase<kW>(p % 2 ? b : a, p % 2 ? a : b, n, grid, v == 1, wt, p, s);
            }
        };
        t[v] = time_graph(s, phases, launches, record);
        reset();
        CHECK(cudaGraphExecDestroy(graph_once(s, record)));
        keep();
    }
    std::string same = "same";
    for (int v = 1; v < 3 && same == "same"; ++v)
        for (int i = 0; i < n; ++i)
            if (memcmp(&results[v][i], &results[0][i], sizeof(float)) != 0) {
                same = std::string(v == 1 ? "pdl" : "barrier") + " differs at " + std::to_string(i);
                break;
            }
    printf("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", grid,
           kW > 0 ? (std::to_string(kW * kThreads * 16 / 1024) + " KB").c_str() : "none", t_work, t[0], t[1], t[2],
           t[1] - t[2], same.c_str());
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    if (wt) CHECK(cudaFree(wt));
}

}  // namespace

int main(int argc, char** argv) {
    const int phases = argc > 1 ? atoi(argv[1]) : 64;
    const int launches = argc > 2 ? atoi(argv[2]) : 20;
    const std::vector<int> grids = parse_list(argc > 3 ? argv[3] : "18,48,132,264");
    if (phases < 2 || launches < 1) {
        fprintf(stderr, "usage: %s [PHASES>=2] [LAUNCHES>=1] [GRIDS]\n", argv[0]);
        return 2;
    }
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int per_sm = 0, per_sm_w = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<0>, kThreads, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_w, persistent_kernel<kWords>, kThreads, 0));
    per_sm = per_sm < per_sm_w ? per_sm : per_sm_w;
    printf("# %s, %d SMs, %d persistent CTAs of %d threads per SM; %d phases, %d launches\n", prop.name,
           prop.multiProcessorCount, per_sm, kThreads, phases, launches);
    printf("| CTAs | weights a CTA a phase | work µs/phase | plain | pdl | barrier | pdl − barrier | values |\n");
    printf("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned* counter = nullptr;
    CHECK(cudaMalloc(&counter, 2 * sizeof(unsigned)));
    CHECK(cudaMemset(counter, 0, 2 * sizeof(unsigned)));
    for (const int grid : grids) {
        if (grid < 1 || grid > per_sm * prop.multiProcessorCount) {
            printf("| %d | | (not 1 to %d CTAs, what fits at once: no grid barrier) | | | | | |\n", grid,
                   per_sm * prop.multiProcessorCount);
            continue;
        }
        run_row<0>(grid, phases, launches, counter, s);
        run_row<kWords>(grid, phases, launches, counter, s);
    }
    CHECK(cudaFree(counter));
    return 0;
}
