// thread_pool.h — the CPU backend's persistent worker threads.
//
// run(n, fn) calls fn(c, n) once for every chunk c in [0, n) and returns when
// all are done. Chunks are claimed dynamically, and the calling thread claims
// them too: if a worker is slow to wake (or descheduled on a busy machine),
// the caller simply does its chunks, and it only ever waits for chunks a
// worker has actually started. Workers spin briefly between jobs (kernels
// arrive microseconds apart during a decode step), then sleep on a condition
// variable so an idle context costs no CPU. Plain std::thread: no OpenMP,
// whose runtime may clash with the one torch loads in the same process.
// Which chunk covers which rows or columns is the kernel's choice, and no
// kernel lets the chunking or the thread that runs a chunk change any value.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
public:
    static constexpr int kMaxChunks = 4096;  // the 16-bit claim index never overflows

    explicit ThreadPool(int num_threads);  // total, the caller included (>= 1)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return num_threads_; }

    // Runs fn(c, n) for every chunk c in [0, n), n = clamp(n_chunks, 1, kMaxChunks).
    template <class F>
    void run(int64_t n_chunks, F&& fn) {
        int n = n_chunks < 1 ? 1 : (n_chunks > kMaxChunks ? kMaxChunks : int(n_chunks));
        if (n == 1 || num_threads_ == 1) {
            for (int c = 0; c < n; c++) fn(c, n);
            return;
        }
        auto trampoline = [](void* p, int c, int count) { (*static_cast<F*>(p))(c, count); };
        dispatch(n, trampoline, static_cast<void*>(&fn));
    }

private:
    using JobFn = void (*)(void*, int, int);

    void dispatch(int n, JobFn fn, void* ctx);
    void worker_main();
    // Claims and runs chunks of the current job; returns the generation seen.
    uint32_t work_on_job();

    int num_threads_;
    std::vector<std::thread> workers_;

    // The job. claim_ packs {generation:32, n_chunks:16, next_chunk:16}; a
    // chunk index below n_chunks taken by fetch_add belongs to that
    // generation, whose job fields stay valid until its chunks are finished.
    JobFn job_fn_ = nullptr;
    void* job_ctx_ = nullptr;
    std::atomic<uint64_t> claim_{0};
    std::atomic<int> finished_{0};
    std::atomic<bool> stop_{false};

    std::mutex mutex_;  // guards sleeping and error_
    std::condition_variable wake_;
    std::atomic<int> sleepers_{0};
    std::exception_ptr error_;
};

// Worker threads for "0 = one per online core".
int default_thread_count();

}  // namespace strata
