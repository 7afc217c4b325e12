// cpu_backend.cpp — the CPU implementation of Backend: host memory, a thread
// pool, and recording as a list of closures.
//
// The CPU "stream" is the calling thread: an enqueued kernel runs before the
// call returns, so synchronize has nothing to wait for. While recording, each
// enqueueing method stores a closure holding a copy of its (already
// validated) arguments; a graph launch runs them in order.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "core/errors.h"

namespace strata {
namespace {

using Op = std::function<void()>;

class CpuGraph final : public GraphExec {
public:
    explicit CpuGraph(std::vector<Op> ops) : ops_(std::move(ops)) {}
    void launch() override {
        for (const Op& op : ops_) op();
    }
    int64_t kernel_count() const override { return (int64_t)ops_.size(); }

private:
    std::vector<Op> ops_;
};

// A line "key : value" of a /proc file, or "" if absent.
std::string proc_field(const char* path, const std::string& key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, key.size(), key) != 0) continue;
        size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
    }
    return "";
}

constexpr uint64_t kHugeAlign = 2u << 20;  // large buffers: 2 MiB aligned, transparent huge pages

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int num_threads) : pool_(num_threads) {}

    void info(strata_device_info* out) override {
        out->backend = STRATA_BACKEND_CPU;
        out->device_index = 0;
        out->num_threads = pool_.size();
        out->compute_capability = 0;
        const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
        out->total_bytes = uint64_t(sysconf(_SC_PHYS_PAGES)) * page;
        const std::string avail = proc_field("/proc/meminfo", "MemAvailable");
        out->free_bytes = avail.empty() ? uint64_t(sysconf(_SC_AVPHYS_PAGES)) * page
                                        : std::strtoull(avail.c_str(), nullptr, 10) * 1024;
        std::string name = proc_field("/proc/cpuinfo", "model name");
        if (name.empty()) name = "CPU";
        std::snprintf(out->name, sizeof out->name, "%s (%d threads)", name.c_str(), pool_.size());
    }

    void* alloc(uint64_t n_bytes) override {
        const uint64_t align = n_bytes >= 4 * kHugeAlign ? kHugeAlign : 64;
        if (n_bytes > UINT64_MAX - align)
            fail(STRATA_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(n_bytes) + " bytes of host memory");
        const uint64_t rounded = (n_bytes + align - 1) / align * align;
        void* p = std::aligned_alloc(size_t(align), size_t(rounded));
        if (p == nullptr)
            fail(STRATA_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(n_bytes) + " bytes of host memory");
        if (align == kHugeAlign) madvise(p, size_t(rounded), MADV_HUGEPAGE);  // a hint; failure is harmless
        return p;
    }
    void release(void* p) noexcept override { std::free(p); }
    void upload(void* dst, const void* src, uint64_t n) override { std::memcpy(dst, src, size_t(n)); }
    void download(void* dst, const void* src, uint64_t n) override { std::memcpy(dst, src, size_t(n)); }
    void fill(void* dst, uint8_t value, uint64_t n) override {
        enqueue([dst, value, n] { std::memset(dst, value, size_t(n)); });
    }
    void copy(void* dst, const void* src, uint64_t n) override {
        enqueue([dst, src, n] { std::memcpy(dst, src, size_t(n)); });
    }
    void synchronize() override {}

    void embed(const EmbedArgs& a) override { enqueue([this, a] { cpu::embed(pool_, a); }); }
    void rmsnorm(const RmsNormArgs& a) override { enqueue([this, a] { cpu::rmsnorm(pool_, a); }); }
    void matmul(const MatmulArgs& a) override { enqueue([this, a] { cpu::matmul_ex(pool_, a); }); }
    void rope(const RopeArgs& a) override { enqueue([this, a] { cpu::rope(pool_, a); }); }
    void kv_store(const KvStoreArgs& a) override { enqueue([this, a] { cpu::kv_store(pool_, a); }); }
    void attention(const AttentionArgs& a) override { enqueue([this, a] { cpu::attention(pool_, a); }); }
    void attention_dense(const DenseAttentionArgs& a) override {
        enqueue([this, a] { cpu::attention_dense(pool_, a); });
    }
    void silu_mul(const SiluMulArgs& a) override { enqueue([this, a] { cpu::silu_mul(pool_, a); }); }
    void gelu(const UnaryArgs& a) override { enqueue([this, a] { cpu::gelu(pool_, a); }); }
    void scale(const UnaryArgs& a) override { enqueue([this, a] { cpu::scale(pool_, a); }); }
    void add(const BinaryArgs& a) override { enqueue([this, a] { cpu::add(pool_, a); }); }
    void gather_rows(const GatherRowsArgs& a) override { enqueue([this, a] { cpu::gather_rows(pool_, a); }); }
    void positions_decode(const PositionsDecodeArgs& a) override { enqueue([a] { cpu::positions_decode(a); }); }
    void argmax(const ArgmaxArgs& a) override { enqueue([this, a] { cpu::argmax(pool_, a); }); }
    void sample(const SampleArgs& a) override { enqueue([this, a] { cpu::sample(pool_, a); }); }
    void logits_adjust(const LogitsAdjustArgs& a) override { enqueue([this, a] { cpu::logits_adjust(pool_, a); }); }

    // The CPU finishes everything before a call returns: host buffers are plain
    // memory, copies happen at once, and every marker is already reached.
    void* host_alloc(uint64_t n_bytes) override { return alloc(n_bytes); }
    void host_release(void* p) noexcept override { std::free(p); }
    void copy_to_host(void* dst, const void* src, uint64_t n) override {
        enqueue([dst, src, n] { std::memcpy(dst, src, size_t(n)); });
    }
    uint64_t marker() override { return ++markers_; }
    void wait_marker(uint64_t) override {}
    void step_advance(const StepAdvanceArgs& a) override {
        enqueue([a] {
            for (int64_t r = 0; r < a.n_rows; r++) {
                if (a.rows[2 * r] < 0) continue;
                a.ids[r] = a.out_ids[r];
                a.rows[2 * r + 1] += 1;
                a.params[r].position += 1;
            }
        });
    }

    void capture_begin() override {
        ops_.clear();
        recording_ = true;
    }
    std::unique_ptr<GraphExec> capture_end() override {
        recording_ = false;
        return std::make_unique<CpuGraph>(std::move(ops_));
    }
    void capture_abort() noexcept override {
        recording_ = false;
        ops_.clear();
    }

private:
    template <class F>
    void enqueue(F&& op) {
        if (recording_) ops_.emplace_back(std::forward<F>(op));
        else op();
    }

    ThreadPool pool_;
    uint64_t markers_ = 0;
    bool recording_ = false;
    std::vector<Op> ops_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int32_t num_threads) {
    return std::make_unique<CpuBackend>(num_threads > 0 ? num_threads : default_thread_count());
}

}  // namespace strata
