// cluster_check.h — the emulator's check of cluster-barrier forms
// (included by emu.h): which remote shared-memory reads a barrier orders.
//
// On the device a cluster barrier comes in two forms (docs/cuda_backend.md,
// "Cluster barriers"): the full one (barrier.cluster.arrive.release), whose
// arrive orders every earlier access of the thread, and the publishing one
// (a release fence restricted to the CTA's own shared memory, then
// barrier.cluster.arrive.relaxed), which orders only accesses to the CTA's own
// shared memory. A read of another CTA's shared memory (through cluster_map)
// before a publishing barrier is therefore not ordered by it: it may still be
// in flight while the owner, past the barrier, writes that word again or
// exits. The host's std::barrier orders everything, so the emulator cannot
// show such a reordering; instead it logs every cluster_map read and, at each
// barrier phase, checks that no word read before a publishing barrier (and
// not yet ordered by a full barrier of the reader) has changed since; and, at
// the end of a cluster, that every remote read was closed by a full barrier
// (so no CTA could have left while another read its memory). A failure is
// counted in emu_cluster_hazards (and the first few are printed): the test
// asserts it stays 0, and a negative control (emu_relax_full_barriers: every
// full barrier takes the publishing form) must make it count.
//
// Words a reader read that the owner rewrites with the same value are not
// seen (harmless for that reader: it would read that value either way).
#pragma once
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

inline std::atomic<long> emu_cluster_hazards{0};
// The negative control: every full cluster barrier (cluster_sync,
// cluster_arrive) takes the publishing form.
inline std::atomic<bool> emu_relax_full_barriers{false};

enum EmuBarrierForm : int { kEmuNoPhase = -1, kEmuFull = 0, kEmuPublish = 1, kEmuMixed = 2 };

struct EmuRemoteRead {
    const unsigned char* at;  // the word read, in another (or this) block's shared memory
    unsigned size;
    unsigned char bytes[16];  // its value when read
    long epoch;               // the reader's arrivals before the read: phases >= epoch order it
    bool exposed;             // a publishing barrier passed since the read, no full one yet
};

// One per thread of the cluster: its remote reads not yet ordered by a full barrier.
struct EmuReadLog {
    std::mutex mu;  // the thread appends; the phase's completion (another thread) reads
    std::vector<EmuRemoteRead> reads;
    long arrivals = 0;  // this thread's barrier arrivals so far (touched by its thread only)
};

struct EmuClusterCheck {
    std::unique_ptr<EmuReadLog[]> logs;
    std::atomic<int> form{kEmuNoPhase};  // the form of the phase now filling
    long phase = 0;                      // completed phases (touched by the completion only)
    explicit EmuClusterCheck(size_t threads) : logs(new EmuReadLog[threads]) {}

    static void hazard(const char* what) {
        if (emu_cluster_hazards.fetch_add(1) < 5 && !emu_relax_full_barriers.load())  // the control expects many
            fprintf(stderr, "cluster barrier hazard: %s\n", what);
    }
    void arrive(EmuReadLog& log, int f) {
        int none = kEmuNoPhase;
        if (!form.compare_exchange_strong(none, f) && none != f) form.store(kEmuMixed);
        ++log.arrivals;
    }
    // Runs once per phase, after every thread arrived and before any is released.
    void complete(size_t threads) noexcept {
        const int f = form.exchange(kEmuNoPhase);
        if (f == kEmuMixed) hazard("threads arrived with different barrier forms in one phase");
        for (size_t t = 0; t < threads; ++t) {
            std::lock_guard<std::mutex> lock(logs[t].mu);
            std::vector<EmuRemoteRead>& rs = logs[t].reads;
            size_t keep = 0;
            for (size_t i = 0; i < rs.size(); ++i) {
                EmuRemoteRead& r = rs[i];
                if (r.epoch > phase) {  // read after this thread's arrival (a split barrier): the next phase's
                    rs[keep++] = r;
                    continue;
                }
                if (r.exposed && std::memcmp(r.at, r.bytes, r.size) != 0)
                    hazard("a word read remotely before a publishing barrier changed before a full barrier");
                if (f == kEmuFull) continue;  // ordered from now on: dropped
                r.exposed = true;
                rs[keep++] = r;
            }
            rs.resize(keep);
        }
        ++phase;
    }
    // After the cluster's threads have ended.
    void finish(size_t threads) {
        for (size_t t = 0; t < threads; ++t)
            if (!logs[t].reads.empty()) {
                hazard("a remote read not closed by a full cluster barrier before the block ended");
                return;
            }
    }
};

struct EmuClusterCompletion {
    EmuClusterCheck* check;
    size_t threads;
    void operator()() noexcept { check->complete(threads); }
};
