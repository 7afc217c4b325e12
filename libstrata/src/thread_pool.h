// thread_pool.h — the CPU backend's persistent worker threads.
//
// run(n, fn) calls fn(t, n) for t = 0..n-1 in parallel, t = 0 on the calling
// thread, and returns when all are done. Workers spin briefly between jobs
// (kernels arrive microseconds apart during a decode step), then sleep on a
// condition variable so an idle context costs no CPU. Plain std::thread: no
// OpenMP, whose runtime may clash with the one torch loads in the same
// process. Which rows or columns task t handles is the kernel's choice, and
// no kernel lets the split change any value it computes.
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
    explicit ThreadPool(int num_threads);  // total, the caller included (>= 1)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return num_threads_; }

    // Runs fn(t, n) for t in [0, n), n = clamp(n_wanted, 1, size()).
    template <class F>
    void run(int64_t n_wanted, F&& fn) {
        int n = n_wanted < 1 ? 1 : (n_wanted > num_threads_ ? num_threads_ : int(n_wanted));
        if (n == 1) {
            fn(0, 1);
            return;
        }
        auto trampoline = [](void* p, int t, int count) { (*static_cast<F*>(p))(t, count); };
        dispatch(n, trampoline, static_cast<void*>(&fn));
    }

private:
    using JobFn = void (*)(void*, int, int);

    void dispatch(int n, JobFn fn, void* ctx);
    void worker_main(int index);
    void execute(int index);

    int num_threads_;
    std::vector<std::thread> workers_;

    // The current job, published by bumping generation_.
    JobFn job_fn_ = nullptr;
    void* job_ctx_ = nullptr;
    int job_n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> acknowledged_{0};  // workers done with the current generation
    std::atomic<bool> stop_{false};

    std::mutex mutex_;  // guards sleeping and error_
    std::condition_variable wake_;
    std::atomic<int> sleepers_{0};
    std::exception_ptr error_;
};

// Worker threads for "0 = one per online core".
int default_thread_count();

}  // namespace strata
