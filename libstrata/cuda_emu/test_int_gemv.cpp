// test_int_gemv.cpp — the memory-bound integer matmul for 1 to 8 rows
// (cuda_int_gemv.cu) under the host emulator. Reuses test_int.cpp's host
// reference of the canonical integer-matmul arithmetic (its main renamed away)
// and requires, for Q4_0, Q8_0, Q4_1, Q4_K and Q6_K, every prologue, bias and
// accumulate, 1 to 8 rows with each row template that holds them (1, 2, 4, 8),
// every weight alignment path (16-byte windows, words, halves: aligned rows,
// rows of 324 bytes as at k = 576, 2-byte aligned weights), k of one partial
// slice, full + partial slices and several slices per thread, n_out not a
// multiple of the CTA, and the CTA shapes of few and many SMs:
//  - every output bit-identical to the reference, and to the older dp4a
//    kernel (int_dot_kernel) on the same inputs for part of the cases;
//  - gemv_shape's choices at the 8B / 1B / 135M shapes on 132 SMs fit the
//    limits (threads, shared memory) and give every SM a CTA.
// Negative controls: the reference with two slices folded in the other order,
// the Q6_K reference with each block's two half scales swapped, and the kernel
// on weights with one block scale changed, must each differ
// from the kernel's output in some bit (so the comparisons can fail).
// Usage: test_int_gemv [smoke]
#define main test_int_main
#include "test_int.cpp"
#undef main
#include "cuda_int_gemv.cu"

namespace TG = strata::cuda::T_cuda_int_gemv;

template <int kDt, int kR>
static void run_gemv_r(const TG::GemvParams& p, int align) {
    const unsigned nt = (unsigned)p.threads;
    if (align == 16) run_grid((unsigned)p.n_tiles, 1, nt, [p] { TG::int_gemv_kernel<kDt, kR, 16>(p); });
    else if (align == 4) run_grid((unsigned)p.n_tiles, 1, nt, [p] { TG::int_gemv_kernel<kDt, kR, 4>(p); });
    else run_grid((unsigned)p.n_tiles, 1, nt, [p] { TG::int_gemv_kernel<kDt, kR, 2>(p); });
}

template <int kDt>
static void run_gemv_dt(const TG::GemvParams& p, int kr, int align) {
    if (kr == 1) run_gemv_r<kDt, 1>(p, align);
    else if (kr == 2) run_gemv_r<kDt, 2>(p, align);
    else if (kr == 4) run_gemv_r<kDt, 4>(p, align);
    else run_gemv_r<kDt, 8>(p, align);
}

static int align_seen[17];

// The pre-pass (as launch_int_matmul runs it), then the gemv kernel with kr rows per thread, the CTA
// shape gemv_shape picks for `sms` SMs and weight alignment path `align` (0, or wider than the weights
// allow: the launcher's choice).
static void run_gemv(int dt, int pro, const float* x, int64_t x_stride, int64_t n_rows, int64_t k, const uint8_t* w,
                     int64_t n_out, const float* g, float eps, const float* bias, float* y, bool accumulate, int kr,
                     int sms, int align) {
    const int64_t nb = k / 32;
    const int nchunks = (int)((nb + 7) / 8), nbp = (int)((nb + 1) / 2 * 2);
    std::vector<uint8_t> xq(n_rows * k + 16);
    std::vector<uint2> meta(n_rows * nbp + 2);
    std::vector<float> ssq(n_rows * nchunks);
    int8_t* xq16 = reinterpret_cast<int8_t*>(xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16);
    uint2* meta16 = reinterpret_cast<uintptr_t>(meta.data()) % 16 ? meta.data() + 1 : meta.data();
    I::PreParams pp{x, x_stride, k, (int)nb, nbp, nchunks, pro, g, xq16, meta16, ssq.data()};
    run_grid((unsigned)n_rows, (unsigned)nchunks, 256, [&] {
        if (pro == STRATA_PROLOGUE_RMSNORM) I::int_prepass_kernel<STRATA_PROLOGUE_RMSNORM>(pp);
        else if (pro == STRATA_PROLOGUE_SILU_MUL) I::int_prepass_kernel<STRATA_PROLOGUE_SILU_MUL>(pp);
        else I::int_prepass_kernel<STRATA_PROLOGUE_NONE>(pp);
    });
    TG::GemvParams p{};
    p.xq = xq16; p.meta = meta16; p.ssq = ssq.data();
    p.n_rows = n_rows; p.k = k; p.n_out = n_out; p.w_row_bytes = rowbytes(dt, k);
    p.nb = (int)nb; p.nbp = nbp; p.n_slices = nchunks;
    p.w = w; p.bias = bias; p.y = y; p.accumulate = accumulate; p.prologue = pro; p.eps = eps;
    const bool ok = TG::gemv_shape(p, kr, sms);
    CHECK(ok, "gemv_shape refused k %ld kr %d", (long)k, kr);
    if (!ok) return;
    const int64_t smem = TG::gemv_smem(p.n_slices, p.no, kr);
    CHECK(smem <= TG::kGemvSmem && p.threads <= TG::kGemvThreads && p.threads % 32 == 0 && p.no * p.sl <= p.threads,
          "shape no %d sl %d threads %d smem %ld", p.no, p.sl, p.threads, (long)smem);
    const int launcher = TG::gemv_align(w, p.w_row_bytes);
    if (align == 0 || align > launcher) align = launcher;
    if (dt == STRATA_Q6_K) align = 2;  // the launcher's only Q6_K path (Q6Src: any 2-byte phase)  // a narrower path than the launcher's is always valid
    align_seen[align]++;
    memset(g_emu_smem, 0xFF, sizeof(g_emu_smem));  // partials never written read as NaN
    if (dt == STRATA_Q4_0) run_gemv_dt<STRATA_Q4_0>(p, kr, align);
    else if (dt == STRATA_Q8_0) run_gemv_dt<STRATA_Q8_0>(p, kr, align);
    else if (dt == STRATA_Q4_1) run_gemv_dt<STRATA_Q4_1>(p, kr, align);
    else if (dt == STRATA_Q4_K) run_gemv_dt<STRATA_Q4_K>(p, kr, align);
    else run_gemv_dt<STRATA_Q6_K>(p, kr, align);
}

static int kr_for(int64_t rows) { return rows <= 1 ? 1 : (rows <= 2 ? 2 : (rows <= 4 ? 4 : 8)); }

static void one_gemv(int dt, int pro, int64_t k, int64_t n_out, int64_t n_rows, int pad, bool bias_on, bool acc_on,
                     int kr, int sms, int align, bool with_old) {
    const int64_t in_k = pro == STRATA_PROLOGUE_SILU_MUL ? 2 * k : k;
    const int64_t stride = in_k + (rng() % 3);
    std::vector<float> x(n_rows * stride + 8), g(k), bias(n_out), y(n_rows * n_out), y0;
    for (auto& v : x) v = randn();
    if (n_rows > 2) for (int i = 0; i < 32; ++i) x[stride + i] = 0.0f;  // an all-zero block (dx = 0)
    for (auto& v : g) v = 1.0f + 0.1f * randn();
    for (auto& v : bias) v = randn();
    for (auto& v : y) v = randn();
    y0 = y;
    auto w = random_weights(dt, n_out, k, pad);
    const uint8_t* wp = w.data() + pad;
    const float eps = 1e-5f;
    const float* bp = bias_on ? bias.data() : nullptr;
    run_gemv(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, y.data(), acc_on, kr, sms, align);
    int bad_old = 0;
    if (with_old) {  // the older dp4a kernel (one row, or 8-row tiles) on the same inputs
        std::vector<float> yo = y0;
        run_int(dt, pro, x.data(), stride, n_rows, k, wp, n_out, g.data(), eps, bp, yo.data(), acc_on, 1000, 0);
        for (size_t i = 0; i < y.size(); ++i) bad_old += bits(yo[i]) != bits(y[i]);
    }
    const int64_t rb = rowbytes(dt, k);
    int bad = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const Act a = ref_act(pro, x.data() + r * stride, g.data(), k);
        for (int64_t o = 0; o < n_out; ++o) {
            const float ref = ref_out(dt, pro, a, wp + o * rb, k, eps, bp, o, y0[r * n_out + o], acc_on);
            if (bits(ref) != bits(y[r * n_out + o])) ++bad;
        }
    }
    CHECK(bad == 0, "gemv kr %d sms %d align %d dt %d pro %d k %ld n_out %ld rows %ld pad %d: %d outputs differ from the canonical bits",
          kr, sms, align, dt, pro, (long)k, (long)n_out, (long)n_rows, pad, bad);
    CHECK(bad_old == 0, "gemv kr %d dt %d pro %d k %ld n_out %ld rows %ld: %d outputs differ from int_dot_kernel", kr, dt,
          pro, (long)k, (long)n_out, (long)n_rows, bad_old);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const bool smoke = argc > 1 && std::string(argv[1]) == "smoke";
    const int dts[5] = {STRATA_Q4_0, STRATA_Q8_0, STRATA_Q4_1, STRATA_Q4_K, STRATA_Q6_K};
    if (smoke) {
        one_gemv(STRATA_Q4_0, 1, 576, 77, 1, 0, true, false, 1, 132, 0, true);
        one_gemv(STRATA_Q8_0, 2, 32 * 8 * 5 + 64, 70, 5, 2, false, true, 8, 1, 0, true);
        one_gemv(STRATA_Q4_K, 0, 512, 40, 3, 0, true, true, 4, 132, 0, true);
        one_gemv(STRATA_Q6_K, 1, 768, 21, 2, 2, false, false, 2, 132, 0, true);
    }
    {  // the 16-byte path's partial slice (Q4_1: 12 blocks = 240-byte rows) and its 8-row template
        one_gemv(STRATA_Q4_1, 2, 384, 19, 3, 0, true, true, 4, 132, 16, true);
        one_gemv(STRATA_Q4_0, 1, 4096, 21, 8, 0, false, true, 8, 1, 16, true);
    }
    if (!smoke) {
        // k: one partial slice (3 blocks); 2 full + 1 partial (k = 576: rows of 324 / 612 / 360 bytes);
        // 5 full + 1 partial; 16 slices (rows 16-byte aligned for every type). Q4_K: whole super-blocks.
        const int64_t ks[4] = {96, 576, 32 * 8 * 5 + 64, 4096};
        const int64_t ks_k[4] = {256, 512, 32 * 8 * 5, 4096};
        int cfg = 0;
        for (int dt : dts)
            for (int pro = 0; pro < 3; ++pro)
                for (int64_t rows = 1; rows <= 8; ++rows) {
                    ++cfg;
                    const int64_t k = (dt == STRATA_Q4_K || dt == STRATA_Q6_K ? ks_k : ks)[(cfg + rows) % 4];
                    const int64_t n_out = k >= 4096 ? 37 : 77;
                    // Row templates: the launcher's (kr_for), and sometimes the next wider one (fewer live rows).
                    const int kr = cfg % 5 == 0 && rows < 8 ? std::min(8, 2 * kr_for(rows)) : kr_for(rows);
                    // Weight alignment: pads 0, 2, 4, 6 bytes (Q6_K: 210-byte slices, every phase in each row), and paths forced narrower than the launcher's.
                    const int pad = 2 * (cfg % 4);
                    const int align = cfg % 3 == 0 ? 2 : (cfg % 3 == 1 && pad % 4 == 0 ? 4 : 0);
                    one_gemv(dt, pro, k, n_out, rows, pad, cfg % 2 == 0, cfg % 3 == 1, kr, cfg % 2 ? 132 : 1, align,
                             cfg % 4 == 1);
                    if (rows == 8)
                        printf("dt %d pro %d: rows 1..8 done, %d checks, %d failures so far\n", dt, pro, checks, fails);
                }
        // The aligned 16-byte path at several slices per thread (k = 14336 at 4 outputs: 56 slices, 32 lanes).
        one_gemv(STRATA_Q4_0, 1, 14336, 9, 1, 0, false, false, 1, 132, 16, false);
        one_gemv(STRATA_Q8_0, 2, 8192, 13, 2, 0, true, true, 2, 132, 16, false);
        one_gemv(STRATA_Q4_K, 0, 8192, 11, 7, 0, false, true, 8, 1, 16, true);
        one_gemv(STRATA_Q4_1, 0, 8192, 11, 4, 0, true, false, 4, 132, 16, false);
        one_gemv(STRATA_Q6_K, 2, 14336, 9, 8, 0, true, true, 8, 132, 0, false);
    }
    // gemv_shape at the shapes of the 8B (hidden 4096, ffn 14336), 1B (2048, 8192) and 135M (576, 1536)
    // models, Q4_0, 132 SMs: within the limits, and at least one CTA per SM where there are outputs to share.
    {
        struct S { int64_t n_out, k; } shapes[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336},
                                                   {49152, 4096}, {3072, 2048}, {2048, 2048}, {16384, 2048},
                                                   {2048, 8192}, {576, 576}, {192, 576}, {3072, 576}, {576, 1536}};
        for (auto s : shapes)
            for (int kr : {1, 8}) {
                TG::GemvParams q{};
                q.n_rows = kr; q.n_out = s.n_out; q.k = s.k; q.nb = (int)(s.k / 32); q.n_slices = (q.nb + 7) / 8;
                const bool ok = TG::gemv_shape(q, kr, 132);
                const int64_t smem = TG::gemv_smem(q.n_slices, q.no, kr);
                CHECK(ok && smem <= TG::kGemvSmem && q.threads <= 256 && (q.n_tiles >= 132 || q.no == 4),
                      "gemv_shape n_out %ld k %ld kr %d: no %d sl %d CTAs %d", (long)s.n_out, (long)s.k, kr, q.no, q.sl,
                      q.n_tiles);
                printf("gemv_shape %ldx%ld kr %d: %d outputs x %d slice lanes per CTA (%d threads), %d CTAs, %ld B\n",
                       (long)s.n_out, (long)s.k, kr, q.no, q.sl, q.threads, q.n_tiles, (long)smem);
            }
    }
    // Negative controls: (1) the reference with slices 1 and 2 folded the other way must differ from the
    // kernel's output somewhere (the bit comparison sees fold order); (2) one changed block scale must
    // change some output.
    {
        const int64_t k = 32 * 8 * 5, n_out = 64, n_rows = 2;
        std::vector<float> x(n_rows * k), y1(n_rows * n_out, 0.0f), y2(n_rows * n_out, 0.0f);
        for (auto& v : x) v = randn();
        auto w = random_weights(STRATA_Q4_0, n_out, k, 0);
        run_gemv(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y1.data(), false, 2, 132, 0);
        int same = 0, swapped = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
            const Act a = ref_act(0, x.data() + r * k, nullptr, k);
            for (int64_t o = 0; o < n_out; ++o) {
                const uint8_t* wr = w.data() + o * (k / 32 * 18);
                same += bits(ref_out(STRATA_Q4_0, 0, a, wr, k, 0, nullptr, o, 0, false)) == bits(y1[r * n_out + o]);
                swapped += bits(ref_out(STRATA_Q4_0, 0, a, wr, k, 0, nullptr, o, 0, false, true)) != bits(y1[r * n_out + o]);
            }
        }
        CHECK(same == n_rows * n_out, "negative control setup: %d of %ld outputs match", same, (long)(n_rows * n_out));
        CHECK(swapped > 0, "the negative control (slices folded in another order) changed no bit");
        w[18 * 5] ^= 0x10;  // row 0, block 5: scale bits
        run_gemv(STRATA_Q4_0, 0, x.data(), k, n_rows, k, w.data(), n_out, nullptr, 0, nullptr, y2.data(), false, 2, 132, 0);
        int differ = 0;
        for (size_t i = 0; i < y1.size(); ++i) differ += bits(y1[i]) != bits(y2[i]);
        CHECK(differ > 0, "the negative control (a changed weight scale) changed no bit");
        // Q6_K: the reference with each block's half scales swapped must differ from the kernel.
        auto w6 = random_weights(STRATA_Q6_K, n_out, k, 0);
        run_gemv(STRATA_Q6_K, 0, x.data(), k, n_rows, k, w6.data(), n_out, nullptr, 0, nullptr, y1.data(), false, 2, 132, 0);
        int same6 = 0, swapped6 = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
            const Act a = ref_act(0, x.data() + r * k, nullptr, k);
            for (int64_t o = 0; o < n_out; ++o) {
                const uint8_t* wr = w6.data() + o * rowbytes(STRATA_Q6_K, k);
                same6 += bits(ref_out(STRATA_Q6_K, 0, a, wr, k, 0, nullptr, o, 0, false)) == bits(y1[r * n_out + o]);
                swapped6 += bits(ref_out(STRATA_Q6_K, 0, a, wr, k, 0, nullptr, o, 0, false, false, true)) !=
                            bits(y1[r * n_out + o]);
            }
        }
        CHECK(same6 == n_rows * n_out, "Q6_K negative control setup: %d of %ld outputs match", same6, (long)(n_rows * n_out));
        CHECK(swapped6 > 0, "the negative control (Q6_K half scales swapped) changed no bit");
    }
    printf("alignment paths run: 16-byte %d, words %d, halves %d\n", align_seen[16], align_seen[4], align_seen[2]);
    CHECK(smoke || (align_seen[16] > 0 && align_seen[4] > 0 && align_seen[2] > 0), "an alignment path never ran");
    printf("test_int_gemv: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
