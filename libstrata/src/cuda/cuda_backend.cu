// cuda_backend.cu — the CUDA backend: device, stream, memory and graphs.
//
// One CudaBackend per context: a device index and one non-blocking stream on
// which every kernel, fill and copy is enqueued in call order. Memory is plain
// cudaMalloc (never managed). Graph recording is CUDA stream capture in
// thread-local mode; a recording becomes a cudaGraphExec launched on the same
// stream. The kernels themselves live in one file per op family (see
// cuda_kernels.cuh); this file only forwards to them.
//
// Without a driver or device (libcuda absent, no GPU), cuda_device_count()
// returns 0 and make_cuda_backend throws STRATA_ERR_UNSUPPORTED: the CUDA
// runtime is linked statically and reports that as an error code, never a crash.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "cuda_kernels.cuh"
#include "cuda_scratch.cuh"
#include "cuda_handoff.cuh"

namespace strata {

namespace {

using cuda::check;

// cudaGetDeviceCount, with the runtime's reason when it fails.
int32_t probe_devices(std::string* reason) noexcept {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (reason) *reason = cudaGetErrorString(err);
        return 0;
    }
    if (n == 0 && reason) *reason = "no CUDA device found";
    return (int32_t)n;
}

// While a stream is being captured in thread-local mode, calls such as
// cudaMalloc are refused on the capturing thread (and would invalidate the
// recording). They touch no stream, so this thread is switched to relaxed
// mode around them and back afterwards.
class RelaxedCaptureMode {
public:
    RelaxedCaptureMode() noexcept { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
    ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
    RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
    RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

private:
    cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

class CudaGraphExec final : public GraphExec {
public:
    CudaGraphExec(int device, cudaStream_t stream, cudaGraphExec_t exec, int64_t kernels)
        : device_(device), stream_(stream), exec_(exec), kernels_(kernels) {}
    ~CudaGraphExec() override {
        int cur = -1;
        if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) (void)cudaSetDevice(device_);
        (void)cudaGraphExecDestroy(exec_);
        (void)cudaGetLastError();
    }
    void launch() override {
        int cur = -1;
        if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) check(cudaSetDevice(device_), "cudaSetDevice");
        check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
    }
    int64_t kernel_count() const override { return kernels_; }

private:
    int device_;
    cudaStream_t stream_;
    cudaGraphExec_t exec_;
    int64_t kernels_;
};

// Kernel nodes of a captured graph (memsets and copies are not counted).
int64_t count_kernel_nodes(cudaGraph_t graph) {
    size_t n = 0;
    if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) return -1;
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0 && cudaGraphGetNodes(graph, nodes.data(), &n) != cudaSuccess) return -1;
    int64_t kernels = 0;
    for (size_t i = 0; i < n; ++i) {
        cudaGraphNodeType type;
        if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess) return -1;
        kernels += type == cudaGraphNodeTypeKernel;
    }
    return kernels;
}

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int32_t device) : device_(device) {
        check(cudaSetDevice(device_), "cudaSetDevice");
        check(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
        if (props_.major < 9) {
            fail(STRATA_ERR_UNSUPPORTED, "cuda:" + std::to_string(device_) + " (" + props_.name +
                                             ") has compute capability " + std::to_string(props_.major) + "." +
                                             std::to_string(props_.minor) +
                                             "; this libstrata was built for sm_90 and needs 9.0 or newer");
        }
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }

    ~CudaBackend() override {
        use_device_noexcept();
        capture_abort();
        (void)cudaStreamSynchronize(stream_);
        cuda::dot_chain_delete(chain_);  // after the stream (its barrier words); calls still held are dropped
        free_deferred();
        for (cudaEvent_t ev : events_)
            if (ev) (void)cudaEventDestroy(ev);
        (void)cudaStreamDestroy(stream_);
        (void)cudaGetLastError();
    }

    void info(strata_device_info* out) override {
        use_device();
        size_t free_b = 0, total_b = 0;
        {
            RelaxedCaptureMode relaxed;
            check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
        }
        std::memset(out, 0, sizeof(*out));
        out->backend = STRATA_BACKEND_CUDA;
        out->device_index = device_;
        out->num_threads = 0;
        out->compute_capability = props_.major * 10 + props_.minor;
        out->free_bytes = free_b;
        out->total_bytes = total_b;
        std::memcpy(out->name, props_.name, strnlen(props_.name, sizeof(out->name) - 1));  // memset keeps the NUL
    }

    void* alloc(uint64_t n_bytes) override {
        use_device();
        void* p = nullptr;
        cudaError_t err;
        {
            RelaxedCaptureMode relaxed;  // allocating never joins a recording
            err = cudaMalloc(&p, n_bytes);
        }
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            fail(STRATA_ERR_OUT_OF_MEMORY, "cudaMalloc of " + std::to_string(n_bytes) + " bytes on cuda:" +
                                               std::to_string(device_) + " failed: out of device memory");
        }
        check(err, "cudaMalloc");
        return p;
    }

    void release(void* p) noexcept override {
        if (!p) return;
        use_device_noexcept();
        if (capturing()) {
            // Synchronizing or freeing would invalidate the recording; free it
            // once the recording has ended and the stream has drained.
            deferred_.push_back(p);
            return;
        }
        (void)cudaStreamSynchronize(stream_);
        (void)cudaFree(p);
        (void)cudaGetLastError();
    }

    void upload(void* dst, const void* src, uint64_t n) override {
        use_device();
        if (n == 0) return;
        check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (upload)");
    }

    void download(void* dst, const void* src, uint64_t n) override {
        use_device();
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)");
        if (n == 0) return;
        check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (download)");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (download)");
    }

    void fill(void* dst, uint8_t value, uint64_t n) override {
        use_device();
        if (n == 0) return;
        check(cudaMemsetAsync(dst, value, n, stream_), "cudaMemsetAsync (fill)");
    }

    void copy(void* dst, const void* src, uint64_t n) override {
        use_device();
        if (n == 0) return;
        check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (copy)");
    }

    void synchronize() override {
        use_device();
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }

    void embed(const EmbedArgs& a) override { use_device(); cuda::launch_embed(a, stream_); }
    void rmsnorm(const RmsNormArgs& a) override { use_device(); cuda::launch_rmsnorm(a, stream_); }
    void matmul(const MatmulArgs& a) override {
        use_device();
        cuda::launch_matmul(a, stream_, scratch_, handoff_, nullptr, chain_open_ ? chain_ : nullptr);
    }
    void matmul_chain_begin() override {
        use_device();
        if (chain_ == nullptr) chain_ = cuda::dot_chain_new();
        chain_open_ = true;
    }
    void matmul_chain_end() override {
        use_device();
        chain_open_ = false;
        if (chain_ != nullptr) cuda::dot_chain_flush(*chain_, stream_);
    }
    void rope(const RopeArgs& a) override { use_device(); cuda::launch_rope(a, stream_); }
    void kv_store(const KvStoreArgs& a) override { use_device(); cuda::launch_kv_store(a, stream_); }
    void rope_kv_store(const RopeKvStoreArgs& a) override { use_device(); cuda::launch_rope_kv_store(a, stream_); }
    void matmul_rope_kv_store(const MatmulArgs& m, const RopeKvStoreArgs& r) override {
        use_device();
        // One-row integer calls rotate and store in the matmul's epilogue; any other: the two launches.
        if (!cuda::launch_matmul(m, stream_, scratch_, handoff_, &r)) cuda::launch_rope_kv_store(r, stream_);
    }
    void attention(const AttentionArgs& a) override {
        use_device();
        // strata_attention_handoff: out's rows also prepared for the o projection (cuda_handoff.cuh), only
        // for a next call on the integer path; the decode kernel rounds them itself up to
        // kHandoffAttentionMaxK values a row (STRATA_HANDOFF_ATTENTION_MAX_K), other launches are followed
        // by the pre-pass.
        const bool emit = a.emit_dtype >= 0 && cuda::int_matmul_supports(a.emit_dtype);
        const int64_t k = (int64_t)a.n_heads * a.slots.head_dim;
        cuda::HandoffView ev;
        if (emit) ev = handoff_.next(a.n_rows, k);
        const bool in_kernel = emit && k <= cuda::handoff_attention_max_k();
        const bool emitted = cuda::launch_attention(a, stream_, attn_scratch_, in_kernel ? &ev : nullptr);
        if (emit && !emitted) cuda::launch_prepass_rows(a.out, a.n_rows, k, ev, stream_);
        if (a.emit_dtype >= 0) handoff_.publish(ev, emit);
    }
    void rope_kv_store_attention(const RopeKvStoreArgs& r, const AttentionArgs& a) override {
        use_device();
        if (cuda::launch_rope_kv_store_attention(r, a, stream_, attn_scratch_)) return;
        cuda::launch_rope_kv_store(r, stream_);  // not decode-sized or not covered: the two launches
        cuda::launch_attention(a, stream_, attn_scratch_);
    }
    void attention_dense(const DenseAttentionArgs& a) override {
        use_device();
        cuda::launch_attention_dense(a, stream_);
    }
    void silu_mul(const SiluMulArgs& a) override { use_device(); cuda::launch_silu_mul(a, stream_); }
    void gelu(const UnaryArgs& a) override { use_device(); cuda::launch_gelu(a, stream_); }
    void scale(const UnaryArgs& a) override { use_device(); cuda::launch_scale(a, stream_); }
    void add(const BinaryArgs& a) override { use_device(); cuda::launch_add(a, stream_); }
    void gather_rows(const GatherRowsArgs& a) override { use_device(); cuda::launch_gather_rows(a, stream_); }
    void positions_decode(const PositionsDecodeArgs& a) override {
        use_device();
        cuda::launch_positions_decode(a, stream_);
    }
    void argmax(const ArgmaxArgs& a) override { use_device(); cuda::launch_argmax(a, stream_); }
    void sample(const SampleArgs& a) override { use_device(); cuda::launch_sample(a, stream_, scratch_); }

    void* host_alloc(uint64_t n_bytes) override {
        use_device();
        void* p = nullptr;
        cudaError_t err;
        {
            RelaxedCaptureMode relaxed;
            err = cudaHostAlloc(&p, n_bytes, cudaHostAllocDefault);
        }
        if (err == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            fail(STRATA_ERR_OUT_OF_MEMORY, "cudaHostAlloc of " + std::to_string(n_bytes) + " bytes failed");
        }
        check(err, "cudaHostAlloc");
        return p;
    }

    void host_release(void* p) noexcept override {
        if (!p) return;
        use_device_noexcept();
        (void)cudaStreamSynchronize(stream_);
        (void)cudaFreeHost(p);
        (void)cudaGetLastError();
    }

    void copy_to_host(void* dst, const void* src, uint64_t n) override {
        use_device();
        check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (copy_to_host)");
    }

    // Markers are events from a ring; waiting on a marker whose event was
    // since reused waits for that later work, which the contract allows.
    uint64_t marker() override {
        use_device();
        const uint64_t id = ++markers_;
        cudaEvent_t& ev = events_[id % kMarkerRing];
        if (ev == nullptr) check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(ev, stream_), "cudaEventRecord (marker)");
        return id;
    }

    void wait_marker(uint64_t marker) override {
        use_device();
        if (marker == 0 || marker > markers_) fail(STRATA_ERR_INVALID_ARGUMENT, "no such marker");
        if (markers_ - marker >= kMarkerRing) return;   // long finished: later markers have been waited on
        check(cudaEventSynchronize(events_[marker % kMarkerRing]), "cudaEventSynchronize (marker)");
    }

    void step_advance(const StepAdvanceArgs& a) override { use_device(); cuda::launch_step_advance(a, stream_); }
    void logits_adjust(const LogitsAdjustArgs& a) override { use_device(); cuda::launch_logits_adjust(a, stream_); }

    void capture_begin() override {
        use_device();
        if (capturing()) fail(STRATA_ERR_STATE, "a graph is already being recorded on this context");
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    }

    std::unique_ptr<GraphExec> capture_end() override {
        use_device();
        cudaGraph_t graph = nullptr;
        cudaError_t err = cudaStreamEndCapture(stream_, &graph);
        if (err != cudaSuccess) {
            (void)cudaGetLastError();
            if (graph) (void)cudaGraphDestroy(graph);
            free_deferred();
            fail(STRATA_ERR_STATE, std::string("graph recording failed: ") + cudaGetErrorString(err));
        }
        const int64_t kernels = count_kernel_nodes(graph);
        (void)cudaGetLastError();
        cudaGraphExec_t exec = nullptr;
        err = cudaGraphInstantiate(&exec, graph, 0);
        (void)cudaGraphDestroy(graph);
        free_deferred();
        check(err, "cudaGraphInstantiate");
        return std::make_unique<CudaGraphExec>(device_, stream_, exec, kernels);
    }

    void capture_abort() noexcept override {
        if (!capturing()) {
            free_deferred();
            return;
        }
        cudaGraph_t graph = nullptr;
        (void)cudaStreamEndCapture(stream_, &graph);
        if (graph) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        free_deferred();
    }

private:
    void use_device() const {
        int cur = -1;
        if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) check(cudaSetDevice(device_), "cudaSetDevice");
    }
    void use_device_noexcept() const noexcept {
        int cur = -1;
        if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) (void)cudaSetDevice(device_);
        (void)cudaGetLastError();
    }

    bool capturing() const noexcept {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        return status != cudaStreamCaptureStatusNone;
    }

    // Frees buffers released while recording (never while still recording).
    void free_deferred() noexcept {
        if (deferred_.empty() || capturing()) return;
        (void)cudaStreamSynchronize(stream_);
        for (void* p : deferred_) (void)cudaFree(p);
        deferred_.clear();
        (void)cudaGetLastError();
    }

    static constexpr uint64_t kMarkerRing = 64;
    int32_t device_;
    cudaDeviceProp props_{};
    cudaStream_t stream_ = nullptr;
    std::vector<void*> deferred_;
    uint64_t markers_ = 0;
    cudaEvent_t events_[kMarkerRing] = {};
    cuda::Scratch scratch_;  // the integer matmul's activation blocks (freed after the stream, last)
    cuda::Scratch attn_scratch_;  // the decode attention's split states and arrival counters
    cuda::Handoff handoff_;       // the activation hand-off between matmuls (its buffers and counters)
    cuda::DotChain* chain_ = nullptr;  // strata_matmul_chain_begin / _end: the one-row calls held back
    bool chain_open_ = false;
};

}  // namespace

int32_t cuda_device_count() noexcept { return probe_devices(nullptr); }

const char* cuda_build_info() noexcept {
    static char info[64];
    static const int once = std::snprintf(info, sizeof(info), "cuda %d.%d sm_90", CUDART_VERSION / 1000,
                                          CUDART_VERSION % 1000 / 10);
    (void)once;
    return info;
}

std::unique_ptr<Backend> make_cuda_backend(int32_t device_index) {
    std::string reason;
    const int32_t n = probe_devices(&reason);
    if (n == 0) fail(STRATA_ERR_UNSUPPORTED, "no usable CUDA device: " + reason);
    if (device_index < 0 || device_index >= n) {
        fail(STRATA_ERR_UNSUPPORTED, "no device cuda:" + std::to_string(device_index) + " (" + std::to_string(n) +
                                         " CUDA device" + (n == 1 ? "" : "s") + " present: cuda:0" +
                                         (n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string()) + ")");
    }
    return std::make_unique<CudaBackend>(device_index);
}

}  // namespace strata
