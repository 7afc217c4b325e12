// thread_pool.cpp — spin-then-sleep workers for ThreadPool (see thread_pool.h).
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
        for (int i = 1; i < num_threads_; i++) workers_.emplace_back([this, i] { worker_main(i); });
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
    stop_.store(true);
    generation_.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
    }
    for (auto& w : workers_) w.join();
}

void ThreadPool::execute(int index) {
    try {
        job_fn_(job_ctx_, index, job_n_);
    } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
    }
}

void ThreadPool::dispatch(int n, JobFn fn, void* ctx) {
    job_fn_ = fn;
    job_ctx_ = ctx;
    job_n_ = n;
    error_ = nullptr;
    acknowledged_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
    }
    execute(0);
    const int n_workers = int(workers_.size());
    for (uint32_t spins = 0; acknowledged_.load(std::memory_order_acquire) != n_workers; spins++) {
        if (spins < (1u << 16)) STRATA_PAUSE();
        else std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_main(int index) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        if (gen == seen) {
            auto start = std::chrono::steady_clock::now();
            for (uint32_t spins = 1;; spins++) {
                STRATA_PAUSE();
                gen = generation_.load(std::memory_order_acquire);
                if (gen != seen) break;
                if ((spins & 255) == 0 && std::chrono::steady_clock::now() - start > kSpin) {
                    std::unique_lock<std::mutex> lock(mutex_);
                    sleepers_.fetch_add(1, std::memory_order_seq_cst);
                    wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
                    sleepers_.fetch_sub(1, std::memory_order_relaxed);
                    gen = generation_.load(std::memory_order_acquire);
                    break;
                }
            }
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        if (index < job_n_) execute(index);
        acknowledged_.fetch_add(1, std::memory_order_acq_rel);
    }
}

}  // namespace strata
