// thread_pool.cpp — dynamic chunk claiming and spin-then-sleep workers for
// ThreadPool (see thread_pool.h).
#include "thread_pool.h"

#include <sched.h>

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() ((void)0)
#endif

namespace strata {
namespace {

// How long an idle worker spins before sleeping.
constexpr auto kSpin = std::chrono::microseconds(2000);

inline uint32_t gen_of(uint64_t claim) { return uint32_t(claim >> 32); }
inline int chunks_of(uint64_t claim) { return int((claim >> 16) & 0xFFFF); }
inline int index_of(uint64_t claim) { return int(claim & 0xFFFF); }

}  // namespace

int default_thread_count() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
    try {
        for (int i = 1; i < num_threads_; i++) workers_.emplace_back([this] { worker_main(); });
    } catch (...) {
        stop_.store(true);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            wake_.notify_all();
        }
        for (auto& w : workers_) w.join();
        throw;
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        wake_.notify_all();
    }
    for (auto& w : workers_) w.join();
}

uint32_t ThreadPool::work_on_job() {
    for (;;) {
        const uint64_t claim = claim_.fetch_add(1, std::memory_order_acq_rel);
        const int chunk = index_of(claim), n = chunks_of(claim);
        if (chunk >= n) return gen_of(claim);
        try {
            job_fn_(job_ctx_, chunk, n);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
        finished_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::dispatch(int n, JobFn fn, void* ctx) {
    job_fn_ = fn;
    job_ctx_ = ctx;
    error_ = nullptr;
    finished_.store(0, std::memory_order_relaxed);
    const uint32_t gen = gen_of(claim_.load(std::memory_order_relaxed)) + 1;
    claim_.store((uint64_t(gen) << 32) | (uint64_t(n) << 16), std::memory_order_seq_cst);  // publishes the job
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
    }
    work_on_job();
    for (uint32_t spins = 0; finished_.load(std::memory_order_acquire) != n; spins++) {
        if (spins < (1u << 14)) STRATA_PAUSE();
        else std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_main() {
    uint32_t seen = 0;
    while (!stop_.load(std::memory_order_acquire)) {
        if (gen_of(claim_.load(std::memory_order_acquire)) == seen) {
            const auto start = std::chrono::steady_clock::now();
            for (uint32_t spins = 1; gen_of(claim_.load(std::memory_order_acquire)) == seen; spins++) {
                STRATA_PAUSE();
                if ((spins & 255) == 0 && std::chrono::steady_clock::now() - start > kSpin) {
                    std::unique_lock<std::mutex> lock(mutex_);
                    sleepers_.fetch_add(1, std::memory_order_seq_cst);
                    wake_.wait(lock, [&] {
                        return stop_.load() || gen_of(claim_.load(std::memory_order_seq_cst)) != seen;
                    });
                    sleepers_.fetch_sub(1, std::memory_order_relaxed);
                    break;
                }
            }
            if (stop_.load(std::memory_order_acquire)) return;
        }
        seen = work_on_job();
    }
}

}  // namespace strata
