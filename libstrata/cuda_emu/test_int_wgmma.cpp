// test_int_wgmma.cpp — the integer wgmma matmul (cuda_int_wgmma.cu) under the host
// emulator, its warpgroup MMA modelled by wgmma_emu.h. Runs test_int_tiles.cpp's
// checks (one_tiles; its main left out) on this kernel instead of the tile
// kernel: for Q4_0, Q8_0, Q4_1 and Q4_K (whose k one_tiles rounds to whole super-blocks), both configurations (two D banks, one bank), every
// prologue, bias and accumulate, 1 to 130 rows (one to three row tiles of 64), k of
// one slice, of partial slices and of more slices than stages, n_out not a multiple
// of the 128-output tile, weight rows at every 2-byte phase:
//  - every output bit-identical to the host reference of the canonical arithmetic
//    and to the older int8 tensor-core kernel (int_mma_kernel) on the same inputs;
//  - within the int8-activation bound of a float64 product;
//  - no cp.async copy and no wgmma left pending when a thread ends.
// Negative control: one block scale changed must change some output.
// (tests/kernels/test_emulator_kernels.py also deletes each wgmma wait and the slice
// barrier from the source: those runs must fail.) Usage: test_int_wgmma [smoke|full|first]
#define STRATA_TEST_INT_TILES_NO_MAIN 1
#include "test_int_tiles.cpp"
#include "cuda_int_wgmma.cu"

namespace WG = strata::cuda::T_cuda_int_wgmma;

// The pre-pass (test_int_tiles.cpp's prepare), then the wgmma kernel of one configuration.
template <int kDt, int kBanks>
static void run_wgmma_t(int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                        int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate) {
    using L = WG::WgLayout<kDt, kBanks>;
    Prepared pr;
    prepare(pr, kDt, pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);
    strata::cuda::TileParams p = pr.p;
    p.n_row_tiles = (int)((n_rows + L::kRows - 1) / L::kRows);
    p.n_tiles = p.n_row_tiles * (int)((n_out + L::kNO - 1) / L::kNO);
    CHECK(L::kBytes <= (int)sizeof(g_emu_smem), "smem %d", L::kBytes);
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));
    static int pending = 0;
    const unsigned gx = (unsigned)std::max(1, p.n_tiles / 2);  // fewer CTAs than tiles: the tile loop runs
    run_grid(gx, 1, L::kThreads, [p] {
        WG::int_wgmma_kernel<kDt, kBanks>(p);
        if (emu_pending_copies() != 0 || emu_pending_wgmma() != 0) pending++;
    });
    CHECK(pending == 0, "cp.async copies or wgmma operations left pending");
}

// one_tiles' kernel: `shape` is the configuration (0: two D banks, 1: one bank).
static void run_wgmma(int dt, int shape, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k,
                      const uint8_t* w, int64_t n_out, const float* g, float eps, const float* bias, float* y,
                      bool accumulate) {
#define WG_RUN(D)                                                                                                   \
    if (dt == D) {                                                                                                \
        if (shape == 0) run_wgmma_t<D, 2>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);   \
        else run_wgmma_t<D, 1>(pro, x, x_stride, n_rows, k, w, n_out, g, eps, bias, y, accumulate);              \
        return;                                                                                                   \
    }
    WG_RUN(STRATA_Q4_0)
    WG_RUN(STRATA_Q8_0)
    WG_RUN(STRATA_Q4_1)
    WG_RUN(STRATA_Q4_K)
#undef WG_RUN
    CHECK(false, "the wgmma kernel takes Q4_0, Q8_0, Q4_1 and Q4_K only (dt %d)", dt);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // FAIL lines as they happen
    const std::string what = argc > 1 ? argv[1] : "smoke";
    g_run_instead = run_wgmma;
    // (dt, banks, prologue, k, n_out, rows, pad, bias, accumulate): k 576 = 2 whole slices + one of 2 blocks;
    // 1568 = 6 whole + one of 1 (more slices than the 4 or 2 stages: the slots wrap); 256 = one slice;
    // 1600 with pad 0 or 4: every weight row 4-byte aligned. Rows 1, 9, 64 (one row tile), 70 and 130 (2, 3).
    struct Case { int dt, banks, pro; int64_t k, n_out, rows; int pad; bool bias, acc; };
    const Case smoke[] = {
        {STRATA_Q4_0, 0, 0, 576, 150, 70, 2, true, false},
        {STRATA_Q4_0, 0, 1, 1568, 45, 9, 0, false, true},
        {STRATA_Q4_0, 1, 2, 576, 131, 64, 4, true, true},
        {STRATA_Q8_0, 0, 1, 576, 77, 70, 6, false, false},
        {STRATA_Q8_0, 1, 0, 256, 150, 1, 2, true, false},
        {STRATA_Q4_0, 0, 2, 1600, 200, 130, 0, false, false},
        {STRATA_Q4_1, 0, 0, 576, 131, 70, 2, true, true},
        {STRATA_Q4_1, 1, 1, 1568, 45, 33, 4, false, false},
        {STRATA_Q4_K, 0, 2, 1536, 150, 70, 2, true, false},
        {STRATA_Q4_K, 1, 0, 512, 77, 9, 6, false, true},
    };
    // first: the first case alone (whole slices on two banks, then a partial one on one bank: every wait
    // and barrier of the kernel), for the emulator's negative-control runs
    for (const Case& c : smoke) {
        one_tiles(c.dt, c.banks, c.pro, c.k, c.n_out, c.rows, c.pad, c.bias, c.acc, true);
        if (what == "first") break;
    }
    if (what == "full") {
        const int64_t ks[3] = {256, 576, 1568}, rows[4] = {1, 33, 64, 130}, outs[3] = {45, 128, 150};
        int i = 0;
        for (int dt : {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K})
            for (int banks = 0; banks < 2; ++banks)
                for (int pro = 0; pro < 3; ++pro, ++i)
                    one_tiles(dt, banks, pro, ks[i % 3], outs[(i / 3) % 3], rows[i % 4], 2 * (i % 4), i % 3 == 0,
                              i % 3 == 1, i % 2 == 0);
    }
    // Negative control: the same kernel on weights with one block scale changed must change some output.
    {
        const int64_t k = 576, n_out = 40, n_rows = 9;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_wgmma(STRATA_Q4_0, 0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false);
        w[18 * 5] ^= 0x10;  // row 0, block 5: scale bits
        run_wgmma(STRATA_Q4_0, 0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false);
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (a changed weight scale) changed no bit");
    }
    printf("test_int_wgmma: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
