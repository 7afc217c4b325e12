// gpu_sample_alone.cu — times the CUDA sampler (cuda_sample_cluster.cu) on its
// own, without building libstrata: it includes that one source file (the
// first cuda_sample_cluster.cu on the include path), so it builds and times
// in seconds on the GPU machine and a device call can time several versions
// of the sampler side by side (docs/gpu.md). The method is
// bench/gpu_sample.py's: one CUDA graph records `calls` sample calls on the
// same logits (normal, std 3), is launched once to warm up and then
// `launches` times; the time per call is the wall time over launches x calls.
// Each line ends with a hash of the sampled ids, so versions that must draw
// the same tokens can be compared by it. Before each vocabulary and row count a
// line starting with # gives the cluster size launch_sample picks for them and
// how many such rows fit on the device at once. Built with -DSAMPLE_PHASES, it also
// prints one row's timeline after each setting: the clock of its first CTA's
// thread 0 at the kernel's SAMPLE_PHASE points, in cycles from the kernel's
// start (0): 1 pass 1 done (the slice loaded, its maxima; the early top-k
// histogram), 2 the cluster's maximum read; top-k: 3 its bin picked, 4 listed,
// 5 the lists gathered, 6 the k-th largest found, 7 drawn; the weights route:
// 8 the weights pass done, 9 its masses published, 12 top-p's bin picked,
// 13 listed, 14 gathered, 15 w* and the kept masses known, 10 the draw's
// target, 11 drawn.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -Ilibstrata/src/cuda -Ilibstrata/include -Ilibstrata/src \
//        [-DSAMPLE_PHASES] bench/gpu_sample_alone.cu -o /tmp/sample_alone
//   /tmp/sample_alone [VOCABS=49152,128256] [ROWS=1,64] [CALLS=50] [LAUNCHES=5]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef SAMPLE_PHASES
__device__ long long g_sample_phase[16];
#define SAMPLE_PHASE(n)                                                             \
    do {                                                                            \
        if (blockIdx.x == 0 && threadIdx.x == 0) g_sample_phase[(n)] = clock64(); \
    } while (0)
#endif
#include "cuda_sample_cluster.cu"

namespace {

void ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

std::vector<long> parse_list(const char* s) {
    std::vector<long> v;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ',')) v.push_back(std::stol(item));
    return v;
}

struct Setting {
    const char* name;
    float temperature, top_p, min_p;
    int top_k;
};

}  // namespace

int main(int argc, char** argv) {
    const std::vector<long> vocabs = parse_list(argc > 1 ? argv[1] : "49152,128256");
    const std::vector<long> rows_list = parse_list(argc > 2 ? argv[2] : "1,64");
    const int calls = argc > 3 ? std::atoi(argv[3]) : 50, launches = argc > 4 ? std::atoi(argv[4]) : 5;
    const Setting settings[] = {
        {"greedy (T=0)", 0.0f, 1.0f, 0.0f, 0},   {"T=0.8", 0.8f, 1.0f, 0.0f, 0},
        {"top-k 40", 0.8f, 1.0f, 0.0f, 40},      {"top-p 0.95", 0.8f, 0.95f, 0.0f, 0},
        {"top-k 40 + top-p 0.95", 0.8f, 0.95f, 0.0f, 40}, {"min-p 0.05", 0.8f, 1.0f, 0.05f, 0},
    };
    cudaStream_t stream;
    ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cudaEvent_t t0, t1;
    ok(cudaEventCreate(&t0), "event");
    ok(cudaEventCreate(&t1), "event");
    strata::cuda::Scratch scratch;
    std::printf("%-24s %7s %5s %10s %18s\n", "setting", "vocab", "rows", "us/call", "ids hash");
    for (long vocab : vocabs) {
        for (long n_rows : rows_list) {
            std::mt19937_64 gen(0);
            std::normal_distribution<float> normal(0.0f, 3.0f);
            std::vector<float> host((size_t)(n_rows * vocab));
            for (float& x : host) x = normal(gen);
            float* logits = nullptr;
            int32_t* ids = nullptr;
            strata_sampling_params* params = nullptr;
            ok(cudaMalloc(&logits, host.size() * sizeof(float)), "malloc");
            ok(cudaMalloc(&ids, n_rows * sizeof(int32_t)), "malloc");
            ok(cudaMalloc(&params, n_rows * sizeof(strata_sampling_params)), "malloc");
            ok(cudaMemcpy(logits, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "copy");
#ifdef STRATA_SAMPLE_CTAS_CHOICE  // not in a sampler from before 2026-12-06 (fourth session): A/Bs build those too
            {  // the cluster size launch_sample picks, and how many such rows fit at once (a line
               // bench/sample_ab_table.py skips: it ends in a word)
                namespace S = strata::cuda;
                const strata::SampleArgs probe{nullptr, n_rows, vocab, nullptr, nullptr};
                const int c = S::sample_ctas(probe);
                const size_t smem = S::smem_at(probe, c);
                const int at_once = c == S::kCtasWide ? S::resident_clusters<S::kCtasWide>(smem)
                                                      : S::with_ctas(c, [&](auto k) {
                                                            return S::resident_clusters<decltype(k)::value>(smem);
                                                        });
                std::printf("# %ld ids, %ld rows: %d CTAs a row, %d such rows at once (rows a wave holds)\n", vocab,
                            n_rows, c, at_once);
            }
#endif
            for (const Setting& st : settings) {
                std::vector<strata_sampling_params> p((size_t)n_rows);
                for (long r = 0; r < n_rows; ++r) {
                    p[r] = {};
                    p[r].temperature = st.temperature;
                    p[r].top_p = st.top_p;
                    p[r].min_p = st.min_p;
                    p[r].top_k = st.top_k;
                    p[r].seed = 7;
                    p[r].position = r;
                }
                ok(cudaMemcpy(params, p.data(), p.size() * sizeof(p[0]), cudaMemcpyHostToDevice), "copy");
                const strata::SampleArgs a{logits, n_rows, vocab, params, ids};
                strata::cuda::launch_sample(a, stream, scratch);  // first call: function attributes, outside capture
                ok(cudaStreamSynchronize(stream), "first call");
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
                for (int c = 0; c < calls; ++c) strata::cuda::launch_sample(a, stream, scratch);
                ok(cudaStreamEndCapture(stream, &graph), "end capture");
                ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
                ok(cudaGraphLaunch(exec, stream), "warm-up launch");
                ok(cudaEventRecord(t0, stream), "record");
                for (int l = 0; l < launches; ++l) ok(cudaGraphLaunch(exec, stream), "launch");
                ok(cudaEventRecord(t1, stream), "record");
                ok(cudaEventSynchronize(t1), "sync");
                float ms = 0.0f;
                ok(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
                std::vector<int32_t> out((size_t)n_rows);
                ok(cudaMemcpy(out.data(), ids, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), "copy");
                uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
                for (int32_t id : out) h = (h ^ (uint32_t)id) * 1099511628211ull;
                std::printf("%-24s %7ld %5ld %10.2f %18llx\n", st.name, vocab, n_rows, ms * 1000.0f / (launches * calls),
                            (unsigned long long)h);
#ifdef SAMPLE_PHASES
                long long ph[16] = {};
                ok(cudaMemcpyToSymbol(g_sample_phase, ph, sizeof(ph)), "clear phases");
                strata::cuda::launch_sample(a, stream, scratch);
                ok(cudaStreamSynchronize(stream), "phase call");
                ok(cudaMemcpyFromSymbol(ph, g_sample_phase, sizeof(ph)), "read phases");
                std::printf("  phases (cycles from 0):");
                for (int n = 1; n < 16; ++n)
                    if (ph[n] != 0) std::printf(" %d:%lld", n, ph[n] - ph[0]);
                std::printf("\n");
#endif
                std::fflush(stdout);
                ok(cudaGraphExecDestroy(exec), "destroy");
                ok(cudaGraphDestroy(graph), "destroy");
            }
            ok(cudaFree(logits), "free");
            ok(cudaFree(ids), "free");
            ok(cudaFree(params), "free");
        }
    }
    return 0;
}
