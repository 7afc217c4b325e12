// test_kernels.cpp — the CUDA kernels (run under emu.h) against float64
// references: matmul for every dtype (odd k, misaligned x, bias, accumulate),
// kv_store + causal GQA attention (unwritten cells hold NaN and must never be
// read), dense attention (empty and odd-head-dim segments), rope in all four
// modes (padding rows and tails untouched, a debug-shared table), rmsnorm in
// place, embed with bad ids, gather_rows, silu_mul, gelu, positions_decode;
// and batch invariance bit for bit (a row alone vs in a batch, a segment
// moved); rope_kv_store + attention fused (test_fused_attention.h). Usage:
// test_kernels [matmul|attention|decode|fused|dense|rope|misc] (decode: the decode attention kernel's
// plans against the legacy kernel's reference plan only).
#define STRATA_CUDA_EMU 1
#include "emu.h"
#include "cuda_matmul.cu"
#include "cuda_attention.cu"
#include "cuda_attention_decode.cu"
#include "cuda_kv_store.cu"
#include "cuda_attention_dense.cu"
#include "cuda_norm_rope.cu"
#include "cuda_embed.cu"
#include "cuda_elementwise.cu"
#include <cstdio>
#include <random>
using namespace strata;
using namespace strata::cuda;
static std::mt19937_64 rng(3);
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { ++fails; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
static float randn() { static std::normal_distribution<float> nd(0, 1); return nd(rng); }
static uint16_t f2h(float x) { return __float2half_rn(x).b; }
static float h2f(uint16_t b) { return __half2float(__half{b}); }

// ---------------------------------------------------------------- matmul
static std::vector<uint8_t> random_weights(int dt, int64_t n_out, int64_t k) {
    int64_t rb = row_bytes(dt, k); std::vector<uint8_t> w(n_out * rb + 16);
    for (auto& b : w) b = rng() & 255;
    auto fixh = [&](int64_t off) { w[off] = rng() & 255; w[off + 1] = (rng() & 0x03) | 0x28 | ((rng() & 1) << 7); };  // small finite f16
    for (int64_t o = 0; o < n_out; ++o) {
        uint8_t* r = w.data() + o * rb; int64_t base = r - w.data();
        switch (dt) {
        case STRATA_F32: for (int64_t i = 0; i < k; ++i) { float v = randn(); memcpy(r + 4 * i, &v, 4); } break;
        case STRATA_F16: for (int64_t i = 0; i < k; ++i) { uint16_t h = f2h(randn()); memcpy(r + 2 * i, &h, 2); } break;
        case STRATA_BF16: for (int64_t i = 0; i < k; ++i) { float v = randn(); uint32_t u; memcpy(&u, &v, 4); uint16_t h = u >> 16; memcpy(r + 2 * i, &h, 2); } break;
        case STRATA_Q8_0: for (int64_t b = 0; b < k / 32; ++b) fixh(base + 34 * b); break;
        case STRATA_Q4_0: for (int64_t b = 0; b < k / 32; ++b) fixh(base + 18 * b); break;
        case STRATA_Q4_1: for (int64_t b = 0; b < k / 32; ++b) { fixh(base + 20 * b); fixh(base + 20 * b + 2); } break;
        case STRATA_Q4_K: for (int64_t b = 0; b < k / 256; ++b) { fixh(base + 144 * b); fixh(base + 144 * b + 2); } break;
        case STRATA_Q6_K: for (int64_t b = 0; b < k / 256; ++b) fixh(base + 210 * b + 208); break;
        case STRATA_Q5_0: for (int64_t b = 0; b < k / 32; ++b) fixh(base + 22 * b); break;
        case STRATA_Q5_1: for (int64_t b = 0; b < k / 32; ++b) { fixh(base + 24 * b); fixh(base + 24 * b + 2); } break;
        case STRATA_Q5_K: for (int64_t b = 0; b < k / 256; ++b) { fixh(base + 176 * b); fixh(base + 176 * b + 2); } break;
        case STRATA_IQ4_NL: for (int64_t b = 0; b < k / 32; ++b) fixh(base + 18 * b); break;
        case STRATA_IQ4_XS: for (int64_t b = 0; b < k / 256; ++b) fixh(base + 136 * b); break;
        case STRATA_Q2_K: for (int64_t b = 0; b < k / 256; ++b) { fixh(base + 84 * b + 80); fixh(base + 84 * b + 82); } break;
        case STRATA_Q3_K: for (int64_t b = 0; b < k / 256; ++b) fixh(base + 110 * b + 108); break;
        case STRATA_IQ3_S: for (int64_t b = 0; b < k / 256; ++b) fixh(base + 110 * b); break;
        }
    }
    return w;
}
// The plain kernel writes y at a stride of n_out + 2 (strata_matmul_ex's y_row_stride) into a wider
// scratch; the dense values are copied back to y, and the gap columns must come back untouched.
static void run_matmul(int dt, const float* x, int64_t n_rows, int64_t k, const uint8_t* w, int64_t n_out, const float* bias, float* y_dense, bool acc) {
    const int64_t ys = n_out + 2;
    std::vector<float> wide(n_rows * ys, -7.5f);
    for (int64_t r = 0; r < n_rows; ++r) std::memcpy(wide.data() + r * ys, y_dense + r * n_out, n_out * 4);
    float* y = wide.data();
    struct CopyBack {
        float* dense; const std::vector<float>& wide; int64_t n_rows, n_out, ys;
        ~CopyBack() {
            int gap = 0;
            for (int64_t r = 0; r < n_rows; ++r) {
                std::memcpy(dense + r * n_out, wide.data() + r * ys, n_out * 4);
                gap += wide[r * ys + n_out] != -7.5f || wide[r * ys + n_out + 1] != -7.5f;
            }
            CHECK(gap == 0, "plain matmul, y stride %ld: gap columns of %d rows written", (long)ys, gap);
        }
    } copy_back{y_dense, wide, n_rows, n_out, ys};
    T_cuda_matmul::MatmulParams p;
    p.x = x; p.n_rows = n_rows; p.k = k; p.w = w; p.w_row_bytes = row_bytes(dt, k); p.n_out = n_out;
    p.n_units = T_cuda_matmul::units_per_row(dt, k); p.bias = bias; p.y = y; p.y_stride = ys; p.accumulate = acc;
    p.x_vec = (reinterpret_cast<uintptr_t>(x) % 16 == 0) && (k % 4 == 0);
    p.w_vec = (reinterpret_cast<uintptr_t>(w) % 16 == 0) && (p.w_row_bytes % 16 == 0);
    const int64_t n_tiles = (n_rows + 7) / 8;
    unsigned gx = (unsigned)((n_out + 3) / 4), gy = (unsigned)std::min<int64_t>(n_tiles, 3);  // gy < tiles: exercises the stride loop
    auto go = [&](auto tag) { constexpr int D = decltype(tag)::value; run_grid(gx, gy, 128, [&] { T_cuda_matmul::matmul_kernel<D>(p); }); };
    switch (dt) {
    case STRATA_F32: go(std::integral_constant<int, STRATA_F32>()); break;
    case STRATA_F16: go(std::integral_constant<int, STRATA_F16>()); break;
    case STRATA_BF16: go(std::integral_constant<int, STRATA_BF16>()); break;
    case STRATA_Q8_0: go(std::integral_constant<int, STRATA_Q8_0>()); break;
    case STRATA_Q4_0: go(std::integral_constant<int, STRATA_Q4_0>()); break;
    case STRATA_Q4_1: go(std::integral_constant<int, STRATA_Q4_1>()); break;
    case STRATA_Q4_K: go(std::integral_constant<int, STRATA_Q4_K>()); break;
    case STRATA_Q6_K: go(std::integral_constant<int, STRATA_Q6_K>()); break;
    case STRATA_Q5_0: go(std::integral_constant<int, STRATA_Q5_0>()); break;
    case STRATA_Q5_1: go(std::integral_constant<int, STRATA_Q5_1>()); break;
    case STRATA_Q5_K: go(std::integral_constant<int, STRATA_Q5_K>()); break;
    case STRATA_IQ4_NL: go(std::integral_constant<int, STRATA_IQ4_NL>()); break;
    case STRATA_IQ4_XS: go(std::integral_constant<int, STRATA_IQ4_XS>()); break;
    case STRATA_Q2_K: go(std::integral_constant<int, STRATA_Q2_K>()); break;
    case STRATA_Q3_K: go(std::integral_constant<int, STRATA_Q3_K>()); break;
    case STRATA_IQ3_S: go(std::integral_constant<int, STRATA_IQ3_S>()); break;
    }
}
static void test_matmul() {
    struct Case { int dt; int64_t k; };
    std::vector<Case> cases = {{STRATA_F32, 1}, {STRATA_F32, 7}, {STRATA_F32, 36}, {STRATA_F32, 576}, {STRATA_F16, 5}, {STRATA_F16, 64}, {STRATA_F16, 1176},
        {STRATA_BF16, 9}, {STRATA_BF16, 576}, {STRATA_Q8_0, 32}, {STRATA_Q8_0, 576}, {STRATA_Q4_0, 64}, {STRATA_Q4_0, 1536}, {STRATA_Q4_1, 576},
        {STRATA_Q4_1, 2080}, {STRATA_Q4_K, 256}, {STRATA_Q4_K, 2304}, {STRATA_Q6_K, 256}, {STRATA_Q6_K, 1536},
        {STRATA_Q5_0, 96}, {STRATA_Q5_1, 576}, {STRATA_Q5_K, 512}, {STRATA_IQ4_NL, 576}, {STRATA_IQ4_XS, 768},
        {STRATA_Q2_K, 512}, {STRATA_Q3_K, 256}, {STRATA_Q3_K, 768}, {STRATA_IQ3_S, 512}};
    for (auto c : cases) for (int xoff : {0, 1}) {
        const int64_t n_out = 9, n_rows = 13, k = c.k;
        auto wv = random_weights(c.dt, n_out, k);
        const uint8_t* w = wv.data();
        std::vector<float> xs(n_rows * k + 8); for (auto& v : xs) v = randn();
        const float* x = xs.data() + xoff;
        std::vector<float> bias(n_out); for (auto& v : bias) v = randn();
        std::vector<float> y(n_rows * n_out, 0.f), y0(n_rows * n_out);
        for (auto& v : y) v = randn(); y0 = y;
        run_matmul(c.dt, x, n_rows, k, w, n_out, bias.data(), y.data(), true);
        const int64_t rb = row_bytes(c.dt, k);
        for (int64_t r = 0; r < n_rows; ++r) for (int64_t o = 0; o < n_out; ++o) {
            double s = 0, mag = 0; for (int64_t i = 0; i < k; ++i) { double wv_ = dequant_value(w + o * rb, c.dt, i); s += wv_ * x[r * k + i]; mag += std::fabs(wv_ * x[r * k + i]); }
            double want = y0[r * n_out + o] + s + bias[o], got = y[r * n_out + o];
            CHECK(std::fabs(got - want) <= 1e-5 * (mag + std::fabs(y0[r*n_out+o]) + std::fabs(bias[o])) + 1e-30, "matmul dt=%d k=%ld r=%ld o=%ld got %g want %g", c.dt, (long)k, (long)r, (long)o, got, want);
        }
        // batch invariance: each row alone (and a 3-row batch starting at it) gives the same bits
        std::vector<float> z(n_rows * n_out, 0.f);
        run_matmul(c.dt, x, n_rows, k, w, n_out, nullptr, z.data(), false);
        for (int64_t r = 0; r < n_rows; r += 4) {
            std::vector<float> z1(n_out, 0.f), z3(3 * n_out, 0.f);
            run_matmul(c.dt, x + r * k, 1, k, w, n_out, nullptr, z1.data(), false);
            if (r + 3 <= n_rows) run_matmul(c.dt, x + r * k, 3, k, w, n_out, nullptr, z3.data(), false);
            for (int64_t o = 0; o < n_out; ++o) {
                CHECK(memcmp(&z1[o], &z[r * n_out + o], 4) == 0, "matmul invariance dt=%d k=%ld r=%ld", c.dt, (long)k, (long)r);
                if (r + 3 <= n_rows) CHECK(memcmp(&z3[o], &z[r * n_out + o], 4) == 0, "matmul invariance(3) dt=%d", c.dt);
            }
        }
    }
    printf("matmul done\n");
}

// ---------------------------------------------------------------- attention
// Runs the causal attention kernel with a forced plan: R rows per block and a
// cluster of S blocks. Every plan must give the same bits (the arithmetic is
// fixed by each row's index alone).
template <int PPL, int NQ, int ST>
static void run_attention_plan(const AttentionArgs& a, int R, int S) {
    AttnPlan P;
    P.a = a;
    P.group = a.n_heads / a.slots.n_kv_heads;
    P.heads_per_cta = std::min(P.group, NQ);
    P.n_hgroups = (P.group + P.heads_per_cta - 1) / P.heads_per_cta;
    P.rows_per_cta = R;
    P.split = S;
    P.copy16 = a.slots.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(a.slots.kv) % 16 == 0;
    if (R * P.heads_per_cta > NQ) { printf("bad plan\n"); abort(); }
    const int64_t items = (a.n_rows + R - 1) / R * a.slots.n_kv_heads * P.n_hgroups;
    const auto L = T_cuda_attention::attn_layout(a.slots.head_dim, NQ, ST);
    run_grid_ex((unsigned)(items * S), 1, 128, (unsigned)S, (size_t)L.total,
                [&] { T_cuda_attention::attention_kernel<PPL, NQ, ST>(P); });
}
// The variant the launcher would take (small/large NQ), by head_dim.
static void run_attention(const AttentionArgs& a, int R, int S, bool big) {
    const int hd = a.slots.head_dim;
    if (hd <= 64) { if (big) run_attention_plan<1, 16, 2>(a, R, S); else run_attention_plan<1, 4, 2>(a, R, S); }
    else if (hd <= 128) { if (big) run_attention_plan<2, 8, 2>(a, R, S); else run_attention_plan<2, 4, 2>(a, R, S); }
    else run_attention_plan<4, 4, 1>(a, R, S);  // head_dim 129..256; wider heads are refused on CUDA
}
// Runs the decode kernel (cuda_attention_decode.cu) with a forced split S, the blocks in launch
// order or reversed (so that another block of each item arrives last and folds); checks that the
// arrival counters are back at zero. Scratch states start as NaN: only written ones may be read.
// hpc > 0: that many query heads per block (the launcher's spread plans), else as many as the slots hold.
// DecodePlan::early_kv for every decode run (STRATA_ATTENTION_EARLY_KV: the L2 hints before the wait).
static int g_early_kv = 0;
template <int HD, int NQ, bool I8>
static void run_decode_plan(const AttentionArgs& a, int S, bool reverse, const HandoffView* emit, int hpc = 0) {
    DecodePlan P{};
    P.a = a;
    P.early_kv = g_early_kv;
    if (emit != nullptr) {  // strata_attention_handoff's emission (launch_attention_decode's fields)
        const int64_t nb = (int64_t)a.n_heads * HD / 32;
        P.emit_xq = emit->xq;
        P.emit_meta = emit->meta;
        P.emit_nbp = (int32_t)((nb + 1) / 2 * 2);
    }
    P.group = a.n_heads / a.slots.n_kv_heads;
    P.heads_per_cta = std::min(P.group, hpc > 0 ? std::min(hpc, NQ) : NQ);
    P.n_hgroups = (P.group + P.heads_per_cta - 1) / P.heads_per_cta;
    P.split = S;
    P.max_chunks = (a.slots.n_ctx + 255) / 256;
    const int64_t items = a.n_rows * a.slots.n_kv_heads * P.n_hgroups;
    std::vector<float> states(S > 1 ? items * P.max_chunks * 4 * NQ * (2 + HD) : 0, NAN);
    std::vector<int32_t> arrivals(items, 0);
    P.states = states.data();
    P.arrivals = arrivals.data();
    const unsigned grid = (unsigned)(items * S);
    run_grid_ex(grid, 1, 128, 1, 0, [&] {
        if (reverse) blockIdx.x = grid - 1 - blockIdx.x;
        T_cuda_attention_decode::attention_decode_kernel<HD, NQ, I8>(P);
    });
    for (int32_t c : arrivals) CHECK(c == 0, "decode attention: an arrival counter was left at %d", c);
}
// The decode variant the launcher takes (NQ 4 for groups up to 4, else 8); false when none covers hd.
// hpc > 0: blocks of that many query heads on the narrow kernel decode_launch takes for them
// (STRATA_ATTENTION_NARROW: its narrow_query_slots).
static bool run_decode(const AttentionArgs& a, int S, bool reverse, const HandoffView* emit = nullptr, int hpc = 0) {
    const int hd = a.slots.head_dim, g = a.n_heads / a.slots.n_kv_heads;
    const bool i8 = a.slots.kv_dtype == STRATA_KV_INT8;
    int nq = g <= 4 ? 4 : 8;
    if (hpc > 0) nq = T_cuda_attention_decode::narrow_query_slots(nq, hpc, hd);
#define DEC(HD, NQ) (i8 ? run_decode_plan<HD, NQ, true>(a, S, reverse, emit, hpc) : run_decode_plan<HD, NQ, false>(a, S, reverse, emit, hpc))
    if (hd == 64) { if (nq == 2) DEC(64, 2); else if (nq == 4) DEC(64, 4); else DEC(64, 8); return true; }
    if (hd == 128) { if (nq == 1) DEC(128, 1); else if (nq == 2) DEC(128, 2); else if (nq == 4) DEC(128, 4); else DEC(128, 8); return true; }
#undef DEC
    return false;
}
// The activation pre-pass's blocks (int_prepass_kernel, prologue NONE) of n_rows rows of k values: the
// reference for strata_attention_handoff's emission. Lane order as the pre-pass's warp: the max and the
// integer sum are exact in any order.
static void prepass_reference(const float* x, int64_t n_rows, int64_t k, std::vector<int8_t>& xq, std::vector<uint2>& meta) {
    const int64_t nb = k / 32, nbp = (nb + 1) / 2 * 2;
    xq.assign(n_rows * k, 0);
    meta.assign(n_rows * nbp, make_uint2(0, 0));
    for (int64_t r = 0; r < n_rows; ++r) for (int64_t b = 0; b < nb; ++b) {
        const float* v = x + r * k + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, int_act_abs(v[j]));
        const float d = int_act_scale(amax);
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            const int q = int_act_quant(v[j], d);
            xq[r * k + 32 * b + j] = (int8_t)q;
            sum += q;
        }
        meta[r * nbp + b] = make_uint2(__float_as_uint(d), (uint32_t)sum);
    }
}
static bool same_meta(const std::vector<uint2>& a, const std::vector<uint2>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) if (a[i].x != b[i].x || a[i].y != b[i].y) return false;
    return true;
}
static int nq_of(int hd, bool big) { return hd <= 64 ? (big ? 16 : 4) : hd <= 128 ? (big ? 8 : 4) : 4; }

// decode_only: the legacy kernel's one reference plan and the decode kernel's plans, not the legacy
// kernel's other plans (the short mode CI runs: tests/kernels/test_emulator_kernels.py).
static void test_attention(bool decode_only = false) {
    int decode_plans = 0, emit_plans = 0, narrow_plans = 0, early_kv_plans = 0;
    // window > 0: sliding-window attention (Gemma); int8: an int8 pool (STRATA_KV_INT8)
    struct Case { int hd, n_kv, n_heads, window = 0; bool int8 = false; };
    for (Case cs : {Case{64, 3, 9}, Case{128, 2, 8}, Case{80, 1, 4}, Case{6, 2, 2}, Case{256, 1, 3}, Case{64, 1, 8},
                    Case{256, 1, 4, 100}, Case{64, 3, 9, 37}, Case{64, 3, 9, 0, true}, Case{128, 2, 8, 0, true},
                    Case{6, 2, 2, 0, true}, Case{80, 1, 4, 45, true}, Case{64, 2, 2}, Case{128, 1, 8, 45, true},
                    Case{128, 8, 32}}) {  // the 8B's heads: o's 4,096-wide input emitted in the kernel
        const int hd = cs.hd;
        SlotsView s; s.n_slots = 3; s.n_layers = 2; s.n_ctx = 600; s.n_kv_heads = cs.n_kv; s.head_dim = hd;
        // A paged pool read through a scrambled page table: 37 pages for 3 slots x 10 entries, a
        // permutation of them mapped (so neighbouring cells of a slot sit in unrelated pages), slot 2's
        // entries past its cells unmapped. The null page (index 37) is zeros, the rest NaN until written.
        s.slot_pages = (s.n_ctx + kPageCells - 1) / kPageCells; s.n_pages = 37;
        std::vector<uint16_t> kv((s.n_pages + 1) * s.page_elems(), 0x7e00);
        std::fill(kv.begin() + s.n_pages * s.page_elems(), kv.end(), 0);
        // int8: values 0x55 and NaN scales until written, the null page zeros.
        std::vector<int8_t> kv8(cs.int8 ? kv.size() : 0, 0x55);
        std::vector<float> kvs(cs.int8 ? kv.size() / hd : 0, NAN);
        if (cs.int8) {
            std::fill(kv8.begin() + s.n_pages * s.page_elems(), kv8.end(), 0);
            std::fill(kvs.begin() + s.n_pages * s.page_elems() / hd, kvs.end(), 0.0f);
        }
        std::vector<int32_t> perm(s.n_pages); for (int i = 0; i < s.n_pages; ++i) perm[i] = i;
        for (int i = s.n_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
        std::vector<int32_t> pages(s.n_slots * s.slot_pages);
        for (size_t i = 0; i < pages.size(); ++i) pages[i] = perm[i];
        for (int j = 3; j < s.slot_pages; ++j) pages[2 * s.slot_pages + j] = -1;  // slot 2 holds cells 0..191
        std::vector<int32_t> table(s.n_slots * s.n_ctx * 4), delta(s.n_slots), table_of = {0, 1, 2};
        s.kv = kv.data(); s.table = table.data(); s.delta = delta.data(); s.table_of = table_of.data();
        s.pages = pages.data();
        if (cs.int8) { s.kv = nullptr; s.kv_dtype = STRATA_KV_INT8; s.kv8 = kv8.data(); s.kv_scale = kvs.data(); }
        // The value attention must read for element d of (slot, layer 1, K|V, head, cell).
        auto kval = [&](int sl, int which, int h, int c, int d) -> double {
            const size_t at = s.kv_index(sl, 1, which, h, c);
            return cs.int8 ? (double)((float)kv8[at + d] * kvs[at / hd]) : (double)h2f(kv[at + d]);
        };
        const int layer = 1, n_heads = cs.n_heads;
        // rows 0..4: slot 1 cells 253..257 (a prefill chunk across a chunk boundary); then decode rows
        std::vector<int32_t> rows = {1, 253, 1, 254, 1, 255, 1, 256, 1, 257, 0, 0, 2, 31, 2, 32, -1, 5, 0, 599, 2, 150, 0, 600, 1, 63, 0, 520};
        const int64_t n_rows = rows.size() / 2;
        int maxidx[3] = {599, 257, 150};
        for (int sl = 0; sl < 3; ++sl) {
            const int64_t nr = maxidx[sl] + 1, width = s.n_kv_heads * hd;
            std::vector<float> k(nr * width), v(nr * width); for (auto& x : k) x = 2 * randn(); for (auto& x : v) x = randn();
            std::vector<int32_t> rr; for (int i = 0; i < nr; ++i) { rr.push_back(sl); rr.push_back(i); }
            KvStoreArgs a{s, layer, k.data(), width, v.data(), width, rr.data(), nr};
            run_grid(3, 1, 128, [&] { T_cuda_kv_store::kv_store_kernel<true>(a); });  // grid-stride over rows
            for (int i = 0; i < nr; ++i) for (int h = 0; h < s.n_kv_heads; ++h) {
                if (cs.int8) {  // the rule of strata.h in float32, as the CPU backend computes it
                    for (int which = 0; which < 2; ++which) {
                        const float* x = (which ? v.data() : k.data()) + i * width + h * hd;
                        float amax = 0.0f;
                        for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
                        const float sc = amax / 127.0f;
                        const size_t at = s.kv_index(sl, layer, which, h, i);
                        CHECK(memcmp(&kvs[at / hd], &sc, 4) == 0, "kv_store int8 scale");
                        for (int d = 0; d < hd; ++d) {
                            const float r = sc > 0.0f ? std::nearbyint(x[d] / sc) : 0.0f;
                            CHECK(kv8[at + d] == (int8_t)std::min(127.0f, std::max(-127.0f, r)), "kv_store int8 q");
                        }
                    }
                    continue;
                }
                for (int d = 0; d < hd; ++d) {
                    CHECK(kv[s.kv_index(sl, layer, 0, h, i) + d] == f2h(k[i * width + h * hd + d]), "kv_store K");
                    CHECK(kv[s.kv_index(sl, layer, 1, h, i) + d] == f2h(v[i * width + h * hd + d]), "kv_store V");
                }
            }
        }
        {   // a store into an unmapped page writes nothing (the pool, null page included, is unchanged)
            const std::vector<uint16_t> before = kv;
            const std::vector<int8_t> before8 = kv8;
            const std::vector<float> befores = kvs;
            const int64_t width = s.n_kv_heads * hd;
            std::vector<float> k(width, 1.5f), v(width, -2.5f);
            std::vector<int32_t> rr = {2, 300};
            KvStoreArgs a{s, layer, k.data(), width, v.data(), width, rr.data(), 1};
            run_grid(1, 1, 128, [&] { T_cuda_kv_store::kv_store_kernel<true>(a); });
            CHECK(kv == before && kv8 == before8, "kv_store wrote a cell of an unmapped page");
            CHECK(memcmp(kvs.data(), befores.data(), kvs.size() * 4) == 0, "kv_store wrote a scale of an unmapped page");
        }
        const int64_t qstride = n_heads * hd + 3;
        std::vector<float> q(n_rows * qstride); for (auto& x : q) x = randn();
        const float scale = 1.0f / std::sqrt((float)hd);
        auto attend = [&](const int32_t* rws, const float* qq, int64_t nrw, int R, int S, bool big) {
            std::vector<float> out(nrw * n_heads * hd, 123.f);
            AttentionArgs a{s, layer, qq, qstride, nrw, n_heads, rws, scale, out.data()};
            a.window = cs.window;
            run_attention(a, R, S, big);
            return out;
        };
        const std::vector<float> out = attend(rows.data(), q.data(), n_rows, 1, 1, false);
        for (int64_t r = 0; r < n_rows; ++r) {
            int slot = rows[2 * r], index = rows[2 * r + 1];
            bool valid = slot >= 0 && slot < 3 && index >= 0 && index < s.n_ctx;
            for (int h = 0; h < n_heads; ++h) {
                const float* o = &out[r * n_heads * hd + h * hd];
                if (!valid) { for (int d = 0; d < hd; ++d) CHECK(o[d] == 0.f, "padding row not zero"); continue; }
                int kvh = h / (n_heads / s.n_kv_heads);
                const int lo = cs.window > 0 ? std::max(0, index - cs.window + 1) : 0;
                std::vector<double> sc(index + 1, 0.0); double mx = -1e300, vmax = 0;
                for (int c = lo; c <= index; ++c) { double dd = 0; for (int d = 0; d < hd; ++d) dd += (double)q[r * qstride + h * hd + d] * kval(slot, 0, kvh, c, d); sc[c] = dd * scale; mx = std::max(mx, sc[c]); }
                double l = 0; for (int c = lo; c <= index; ++c) { sc[c] = std::exp(sc[c] - mx); l += sc[c]; }
                for (int d = 0; d < hd; ++d) { double acc = 0; for (int c = lo; c <= index; ++c) { double vv = kval(slot, 1, kvh, c, d); acc += sc[c] * vv; vmax = std::max(vmax, std::fabs(vv)); }
                    CHECK(std::fabs(acc / l - o[d]) < 2e-5 * vmax, "attention hd=%d r=%ld h=%d d=%d got %g want %g", hd, (long)r, h, d, o[d], acc / l); }
            }
        }
        // Every plan gives the same bits: splits, rows per block, the big variant, single rows.
        const int group = n_heads / s.n_kv_heads;
        if (!decode_only) for (bool big : {false, true}) for (int S : {1, 2, 4, 8}) {
            const int nq = nq_of(hd, big), gc = std::min(group, nq);
            for (int R : {1, nq / gc}) {
                if ((S > 2 && R > 1) || (big && S == 8)) continue;  // keep the emulation short
                const std::vector<float> o2 = attend(rows.data(), q.data(), n_rows, R, S, big);
                CHECK(memcmp(o2.data(), out.data(), out.size() * 4) == 0, "attention plan hd=%d big=%d R=%d S=%d", hd, big, R, S);
            }
        }
        if (!decode_only) for (int64_t r0 : {0, 3, 9}) {
            const std::vector<float> o1 = attend(rows.data() + 2 * r0, q.data() + r0 * qstride, 1, 1, 2, false);
            CHECK(memcmp(o1.data(), &out[r0 * n_heads * hd], o1.size() * 4) == 0, "attention single row hd=%d r=%ld", hd, (long)r0);
        }
        // The decode kernel gives the legacy kernel's bits, for every split and block order, the
        // whole batch and single rows.
        auto decode = [&](const int32_t* rws, const float* qq, int64_t nrw, int S, bool reverse) {
            std::vector<float> o(nrw * n_heads * hd, 123.f);
            AttentionArgs a{s, layer, qq, qstride, nrw, n_heads, rws, scale, o.data()};
            a.window = cs.window;
            const bool ran = run_decode(a, S, reverse);
            return ran ? o : std::vector<float>();
        };
        for (auto [S, reverse] : {std::pair{1, false}, std::pair{2, true}, std::pair{3, false}, std::pair{8, true}}) {
            const std::vector<float> od = decode(rows.data(), q.data(), n_rows, S, reverse);
            if (od.empty()) break;  // head_dim not covered: the legacy kernel serves it
            CHECK(memcmp(od.data(), out.data(), out.size() * 4) == 0, "decode attention hd=%d S=%d reverse=%d", hd, S, (int)reverse);
            ++decode_plans;
        }
        // The narrow kernels (blocks of one or two query heads), every split shape and block order.
        for (auto [S, reverse, hpc] : {std::tuple{1, false, 1}, std::tuple{2, true, 1}, std::tuple{1, true, 2},
                                       std::tuple{3, false, 2}}) {
            std::vector<float> o(n_rows * n_heads * hd, 123.f);
            AttentionArgs a{s, layer, q.data(), qstride, n_rows, n_heads, rows.data(), scale, o.data()};
            a.window = cs.window;
            if (!run_decode(a, S, reverse, nullptr, hpc)) break;
            CHECK(memcmp(o.data(), out.data(), out.size() * 4) == 0, "decode attention, narrow hd=%d S=%d hpc=%d", hd, S, hpc);
            ++narrow_plans;
        }
        // strata_attention_handoff: the same out, and the o projection's blocks the pre-pass would make of
        // it, for every split and block order (padding rows included: their zeros round to zeros).
        // (hpc > 0: the narrow kernel for blocks of that many heads; its one-element fold rounds blocks
        // over 32 lanes.)
        for (auto [S, reverse, hpc] : {std::tuple{1, false, 0}, std::tuple{2, true, 0}, std::tuple{8, true, 0},
                                       std::tuple{1, false, 1}, std::tuple{2, true, 2}}) {
            const int64_t k = (int64_t)n_heads * hd, nbp = (k / 32 + 1) / 2 * 2;
            if (k % 32 != 0) break;
            std::vector<float> o(n_rows * k, 123.f);
            std::vector<int8_t> exq(n_rows * k, 99);
            std::vector<uint2> emeta(n_rows * nbp, make_uint2(7, 7));
            for (int64_t r = 0; r < n_rows; ++r)  // the pad block of an odd nb is never written
                for (int64_t b = k / 32; b < nbp; ++b) emeta[r * nbp + b] = make_uint2(0, 0);
            HandoffView ev{exq.data(), emeta.data(), nullptr};
            AttentionArgs a{s, layer, q.data(), qstride, n_rows, n_heads, rows.data(), scale, o.data()};
            a.window = cs.window;
            if (!run_decode(a, S, reverse, &ev, hpc)) break;
            CHECK(memcmp(o.data(), out.data(), out.size() * 4) == 0, "decode attention with emission hd=%d S=%d hpc=%d", hd, S,
                  hpc);
            std::vector<int8_t> rq;
            std::vector<uint2> rm;
            prepass_reference(o.data(), n_rows, k, rq, rm);
            CHECK(rq == exq, "attention emission xq hd=%d n_heads=%d S=%d", hd, n_heads, S);
            CHECK(same_meta(rm, emeta), "attention emission meta hd=%d n_heads=%d S=%d", hd, n_heads, S);
            ++emit_plans;
            // Negative control: one output value changed makes the reference's blocks differ.
            std::vector<float> o2 = o;
            o2[k + 5] = -2.0f * o2[k + 5] + 1.0f;
            prepass_reference(o2.data(), n_rows, k, rq, rm);
            CHECK(rq != exq || !same_meta(rm, emeta), "attention emission: the comparison missed a changed value");
        }
        // STRATA_ATTENTION_EARLY_KV: the L2 hints before the wait change no bit, are made (more hints than
        // the same plan makes without them) and name only addresses inside the pool (rows with no slot, past
        // the context, through unmapped pages, in windows). Negative control: with the range cut to the
        // pool's first page, the same run's hints fall outside it.
        {
            const char* lo = cs.int8 ? reinterpret_cast<const char*>(kv8.data()) : reinterpret_cast<const char*>(kv.data());
            const size_t bytes = cs.int8 ? kv8.size() : kv.size() * 2, page = s.page_elems() * (cs.int8 ? 1 : 2);
            for (auto [S, hpc] : {std::pair{1, 0}, std::pair{3, 1}}) {
                auto run = [&](bool early, const char* hi, long& calls, long& outside) {
                    std::vector<float> o(n_rows * n_heads * hd, 123.f);
                    AttentionArgs a{s, layer, q.data(), qstride, n_rows, n_heads, rows.data(), scale, o.data()};
                    a.window = cs.window;
                    emu_prefetch_lo = lo;
                    emu_prefetch_hi = hi;
                    emu_prefetch_outside = 0;
                    g_early_kv = early ? 1 : 0;
                    const long c0 = emu_prefetch_calls.load();
                    const bool ran = run_decode(a, S, false, nullptr, hpc);
                    calls = emu_prefetch_calls.load() - c0;
                    outside = emu_prefetch_outside.load();
                    g_early_kv = 0;
                    emu_prefetch_lo = nullptr;
                    return ran ? o : std::vector<float>();
                };
                long off_calls = 0, on_calls = 0, cut_calls = 0, off_outside = 0, outside = 0, outside_cut = 0;
                if (run(false, lo + bytes, off_calls, off_outside).empty()) break;  // head_dim not covered: no hints
                const std::vector<float> o = run(true, lo + bytes, on_calls, outside);
                run(true, lo + page, cut_calls, outside_cut);
                CHECK(memcmp(o.data(), out.data(), out.size() * 4) == 0, "decode attention, early KV hints hd=%d S=%d hpc=%d",
                      hd, S, hpc);
                CHECK(on_calls > off_calls, "early KV hints: none made (%ld hints with them, %ld without; hd=%d S=%d)",
                      on_calls, off_calls, hd, S);
                CHECK(outside == 0 && off_outside == 0, "early KV hints: %ld addresses outside the pool (hd=%d S=%d)",
                      outside, hd, S);
                CHECK(outside_cut > 0, "early KV hints' negative control: no address outside the pool's first page");
                ++early_kv_plans;
            }
        }
        for (int64_t r0 : {4, 13}) {
            const std::vector<float> o1 = decode(rows.data() + 2 * r0, q.data() + r0 * qstride, 1, 2, true);
            if (o1.empty()) break;
            CHECK(memcmp(o1.data(), &out[r0 * n_heads * hd], o1.size() * 4) == 0, "decode attention single row hd=%d r=%ld", hd, (long)r0);
        }
        printf("attention hd=%d n_kv=%d n_heads=%d window=%d int8=%d ok so far (%d failures)\n", hd, cs.n_kv, n_heads,
               cs.window, (int)cs.int8, fails);
    }
    printf("attention done (%d decode-kernel plans compared with the legacy bits, %d with the o projection's "
           "blocks emitted, %d on the narrow kernels, %d with early KV hints)\n", decode_plans, emit_plans, narrow_plans,
           early_kv_plans);
    CHECK(narrow_plans > 0, "no narrow decode kernel was run");
    CHECK(early_kv_plans > 0, "no decode kernel ran with early KV hints");
}

static void test_dense() {
    for (int hd : {80, 33, 64, 128}) {
        const int n_heads = 2; const int64_t n_tokens = 200; const int64_t stride = n_heads * hd + 5;
        std::vector<int32_t> seg = {0, 5, 5, 70, 200}; const int64_t n_seg = 4;
        std::vector<float> q(n_tokens * stride), k(n_tokens * stride), v(n_tokens * stride);
        for (auto* vec : {&q, &k, &v}) for (auto& x : *vec) x = randn();
        std::vector<float> out(n_tokens * n_heads * hd);
        const float scale = 0.125f;
        DenseAttentionArgs a{q.data(), k.data(), v.data(), stride, n_tokens, n_heads, hd, seg.data(), n_seg, scale, out.data()};
        int Q = hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
        unsigned grid = n_tokens * n_heads;
        if (Q == 2) run_grid(grid, 1, 128, [&] { T_cuda_attention_dense::attention_dense_kernel<2>(a); });
        if (Q == 4) run_grid(grid, 1, 128, [&] { T_cuda_attention_dense::attention_dense_kernel<4>(a); });
        for (int64_t t = 0; t < n_tokens; ++t) {
            int s = 0; while (!(seg[s] <= t && t < seg[s + 1])) ++s;
            for (int h = 0; h < n_heads; ++h) {
                std::vector<double> sc; double mx = -1e300;
                for (int64_t u = seg[s]; u < seg[s + 1]; ++u) { double dd = 0; for (int d = 0; d < hd; ++d) dd += (double)q[t * stride + h * hd + d] * k[u * stride + h * hd + d]; sc.push_back(dd * scale); mx = std::max(mx, sc.back()); }
                double l = 0; for (auto& x : sc) { x = std::exp(x - mx); l += x; }
                for (int d = 0; d < hd; ++d) { double acc = 0; for (size_t j = 0; j < sc.size(); ++j) acc += sc[j] * v[(seg[s] + j) * stride + h * hd + d];
                    CHECK(std::fabs(acc / l - out[t * n_heads * hd + h * hd + d]) < 2e-5, "dense hd=%d t=%ld", hd, (long)t); }
            }
        }
        // segment shift invariance: segment [70,200) alone as tokens 0..129
        std::vector<int32_t> seg2 = {0, 130};
        std::vector<float> out2(130 * n_heads * hd);
        DenseAttentionArgs b{q.data() + 70 * stride, k.data() + 70 * stride, v.data() + 70 * stride, stride, 130, n_heads, hd, seg2.data(), 1, scale, out2.data()};
        if (Q == 2) run_grid(130 * n_heads, 1, 128, [&] { T_cuda_attention_dense::attention_dense_kernel<2>(b); });
        if (Q == 4) run_grid(130 * n_heads, 1, 128, [&] { T_cuda_attention_dense::attention_dense_kernel<4>(b); });
        CHECK(memcmp(out2.data(), &out[70 * n_heads * hd], out2.size() * 4) == 0, "dense segment invariance hd=%d", hd);
    }
    printf("dense done\n");
}

// ---------------------------------------------------------------- rope, norm, misc
static void test_rope() {
    SlotsView s; s.n_slots = 3; s.n_layers = 0; s.n_ctx = 40; s.n_kv_heads = 1; s.head_dim = 128;
    std::vector<int32_t> table(s.n_slots * s.n_ctx * 4), delta = {0, 7, -3}, table_of = {0, 1, 1};  // slot 2 debug-shares slot 1's table
    for (auto& v : table) v = (int32_t)(rng() % 5000);
    s.table = table.data(); s.delta = delta.data(); s.table_of = table_of.data();
    for (int mode = 0; mode < 4; ++mode) for (int hd : {64, 80, 128}) {
        strata_rope_params p{}; p.mode = mode; p.n_heads = 3; p.head_dim = hd; p.rot_dim = (mode == 0 && hd == 64) ? 32 : hd;
        p.theta_base = 10000.f; p.freq_scale = mode == 1 ? 0.5f : 1.f;
        int half = p.rot_dim / 2;
        if (mode == 2) { p.sections[0] = half / 4; p.sections[1] = (half - half / 4) / 2; p.sections[2] = half - p.sections[0] - p.sections[1]; p.sections[3] = 0; }
        if (mode == 3) { p.sections[0] = half / 2; p.sections[1] = half - half / 2; }
        std::vector<float> ff(half); for (auto& v : ff) v = 1.f + (rng() % 4);
        std::vector<int32_t> rows = {0, 3, 1, 39, -1, 2, 2, 10, 0, 40};
        const int64_t n_rows = 5, stride = p.n_heads * hd + 2;
        std::vector<float> x(n_rows * stride); for (auto& v : x) v = randn();
        auto x0 = x;
        RopeArgs a; a.p = p; a.x = x.data(); a.x_row_stride = stride; a.n_rows = n_rows; a.slots = s; a.rows = rows.data(); a.freq_factors = mode == 0 ? ff.data() : nullptr;
        run_grid(n_rows, 1, 256, [&] { T_cuda_norm_rope::rope_kernel(a); });
        for (int64_t r = 0; r < n_rows; ++r) {
            int slot = rows[2 * r], index = rows[2 * r + 1];
            bool valid = slot >= 0 && slot < 3 && index >= 0 && index < s.n_ctx;
            if (!valid) { CHECK(memcmp(&x[r * stride], &x0[r * stride], stride * 4) == 0, "rope padding touched"); continue; }
            const int32_t* pos = &table[(table_of[slot] * s.n_ctx + index) * 4];
            for (int h = 0; h < p.n_heads; ++h) for (int j = 0; j < half; ++j) {
                int c = 0, jj = j, start = 0; double D = p.rot_dim;
                if (mode >= 2) { for (c = 0; c < 4; ++c) { if (j < start + p.sections[c]) break; start += p.sections[c]; } if (mode == 3) { jj = j - start; D = 2.0 * p.sections[c]; } }
                // float32 angle as transformers computes it (the kernel's spec), cos/sin in double
                float inv = 1.0f / (float)std::pow(10000.0, (double)((float)(2 * jj) / (float)D)); if (a.freq_factors) inv = inv / ff[j];
                const double th = (double)(((float)pos[c] * p.freq_scale) * inv);
                int i0 = mode == 0 ? 2 * j : j, i1 = mode == 0 ? 2 * j + 1 : j + half;
                double a0 = x0[r * stride + h * hd + i0], a1 = x0[r * stride + h * hd + i1];
                double w0 = a0 * std::cos(th) - a1 * std::sin(th), w1 = a0 * std::sin(th) + a1 * std::cos(th);
                CHECK(std::fabs(w0 - x[r * stride + h * hd + i0]) < 1e-5 && std::fabs(w1 - x[r * stride + h * hd + i1]) < 1e-5, "rope mode=%d hd=%d", mode, hd);
            }
            for (int h = 0; h < p.n_heads; ++h) for (int d = p.rot_dim; d < hd; ++d) CHECK(x[r*stride+h*hd+d] == x0[r*stride+h*hd+d], "rope tail touched");
        }
    }
    // positions_decode
    std::vector<int32_t> rows = {1, 5, -1, 0, 2, 39, 0, 40};
    PositionsDecodeArgs pd{s, rows.data(), 4};
    run_grid(1, 1, 128, [&] { T_cuda_norm_rope::positions_decode_kernel(pd); });
    for (int c = 0; c < 4; ++c) { CHECK(table[(1 * 40 + 5) * 4 + c] == 12, "positions_decode"); CHECK(table[(1 * 40 + 39) * 4 + c] == 36, "positions_decode shared table"); }
    printf("rope done\n");
}

static void test_misc() {
    // rmsnorm, in place and odd dims
    for (int64_t dim : {1, 7, 576, 1000, 4100}) {
        const int64_t n = 5; std::vector<float> x(n * dim), w(dim); for (auto& v : x) v = randn(); for (auto& v : w) v = randn();
        auto x0 = x; std::vector<float> xs = x; RmsNormArgs a{x.data(), w.data(), x.data(), n, dim, 1e-5f};
        run_grid(n, 1, 256, [&] { T_cuda_norm_rope::rmsnorm_kernel<false>(a); });
        if (dim % 4 == 0) {  // the 16-byte path gives the same bits
            RmsNormArgs b{xs.data(), w.data(), xs.data(), n, dim, 1e-5f};
            run_grid(2, 1, 256, [&] { T_cuda_norm_rope::rmsnorm_kernel<true>(b); });
            CHECK(memcmp(xs.data(), x.data(), x.size() * 4) == 0, "rmsnorm vector path dim=%ld", (long)dim);
        }
        for (int64_t r = 0; r < n; ++r) { double ss = 0; for (int64_t i = 0; i < dim; ++i) ss += (double)x0[r*dim+i] * x0[r*dim+i];
            double inv = 1 / std::sqrt(ss / dim + 1e-5); for (int64_t i = 0; i < dim; ++i) CHECK(std::fabs(x0[r*dim+i] * inv * w[i] - x[r*dim+i]) < 1e-5 * (1 + std::fabs(x[r*dim+i])), "rmsnorm"); }
    }
    // embed with quantized table and bad ids
    for (int dt : {STRATA_F32, STRATA_F16, STRATA_Q4_K, STRATA_Q6_K, STRATA_Q4_0}) {
        const int64_t n_vocab = 11, dim = 512; auto t = random_weights(dt, n_vocab, dim);
        std::vector<int32_t> ids = {3, -1, 10, 11, 0}; std::vector<float> out(ids.size() * dim, 5.f);
        const uint8_t* tab = t.data(); int64_t rb = row_bytes(dt, dim);
        run_grid(ids.size(), 1, 256, [&] { T_cuda_embed::embed_kernel(tab, dt, n_vocab, dim, rb, ids.data(), ids.size(), out.data()); });
        for (size_t r = 0; r < ids.size(); ++r) for (int64_t e = 0; e < dim; ++e) {
            float want = (ids[r] >= 0 && ids[r] < n_vocab) ? dequant_value(tab + ids[r] * rb, dt, e) : 0.f;
            CHECK(memcmp(&want, &out[r * dim + e], 4) == 0, "embed dt=%d", dt);
        }
    }
    // gather rows
    { std::vector<uint32_t> src(4 * 3); for (auto& v : src) v = rng(); std::vector<int32_t> idx = {2, 4, -1, 0}; std::vector<uint32_t> dst(4 * 3, 9);
      run_grid(4, 1, 256, [&] { T_cuda_embed::gather_rows_kernel<uint32_t>(src.data(), 4, 3, idx.data(), 4, dst.data()); });
      for (int r = 0; r < 4; ++r) for (int w = 0; w < 3; ++w) CHECK(dst[r*3+w] == ((idx[r] >= 0 && idx[r] < 4) ? src[idx[r]*3+w] : 0u), "gather");
      std::vector<uint4> s16(4 * 2), d16(4 * 2); for (auto& v : s16) v = {(unsigned)rng(), (unsigned)rng(), (unsigned)rng(), (unsigned)rng()};
      run_grid(4, 1, 256, [&] { T_cuda_embed::gather_rows_kernel<uint4>(s16.data(), 4, 2, idx.data(), 4, d16.data()); });
      for (int r = 0; r < 4; ++r) for (int w = 0; w < 2; ++w) { uint4 want = (idx[r] >= 0 && idx[r] < 4) ? s16[idx[r]*2+w] : uint4{0, 0, 0, 0};
          CHECK(memcmp(&want, &d16[r*2+w], 16) == 0, "gather 16"); } }
    // elementwise
    { const int64_t rows = 3, cols = 1000; std::vector<float> g(rows * 1003), u(rows * 1001), o(rows * cols); for (auto& v : g) v = 4 * randn(); for (auto& v : u) v = randn();
      SiluMulArgs a{g.data(), 1003, u.data(), 1001, o.data(), rows, cols};
      run_grid(1, 2, 256, [&] { T_cuda_elementwise::silu_mul_kernel<false, false>(a); });  // grid.y < rows: the row loop
      for (int64_t r = 0; r < rows; ++r) for (int64_t c = 0; c < cols; ++c) { double gg = g[r*1003+c]; double want = gg / (1 + std::exp(-gg)) * u[r*1001+c]; CHECK(std::fabs(want - o[r*cols+c]) < 1e-5 * (1 + std::fabs(want)), "silu_mul"); }
      std::vector<float> x(1234), y(1234); for (auto& v : x) v = 3 * randn(); UnaryArgs ga{x.data(), y.data(), 1234};
      run_grid(1, 1, 256, [&] { T_cuda_elementwise::gelu_kernel<false>(ga); });
      for (int i = 0; i < 1234; ++i) { double want = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0))); CHECK(std::fabs(want - y[i]) < 1e-5 * (1 + std::fabs(want)), "gelu"); }
      // 16-byte paths give the same bits as the scalar ones
      std::vector<float> g4(rows * 1000), u4(rows * 1000), o4(rows * 1000), o1(rows * 1000);
      for (auto& v : g4) v = 4 * randn(); for (auto& v : u4) v = randn();
      SiluMulArgs s1{g4.data(), 1000, u4.data(), 1000, o1.data(), rows, 1000}, s4{g4.data(), 1000, u4.data(), 1000, o4.data(), rows, 1000};
      run_grid(1, 3, 256, [&] { T_cuda_elementwise::silu_mul_kernel<false, false>(s1); });
      run_grid(1, 3, 256, [&] { T_cuda_elementwise::silu_mul_kernel<true, false>(s4); });
      CHECK(memcmp(o1.data(), o4.data(), o1.size() * 4) == 0, "silu_mul vector path");
      std::vector<float> y4(1232); UnaryArgs g1{x.data(), y.data(), 1232}, g16{x.data(), y4.data(), 1232};
      run_grid(1, 1, 256, [&] { T_cuda_elementwise::gelu_kernel<true>(g16); });
      CHECK(memcmp(y.data(), y4.data(), 1232 * 4) == 0, "gelu vector path");
      std::vector<float> s_1(1232), s_4(1232); BinaryArgs b1{x.data(), y.data(), s_1.data(), 1231}, b4{x.data(), y.data(), s_4.data(), 1232};
      run_grid(2, 1, 256, [&] { T_cuda_elementwise::add_kernel<false>(b1); });
      run_grid(2, 1, 256, [&] { T_cuda_elementwise::add_kernel<true>(b4); });
      for (int i = 0; i < 1231; ++i) CHECK(s_1[i] == x[i] + y[i] && s_4[i] == s_1[i], "add");
    }
    printf("misc done\n");
}

#include "test_fused_attention.h"

int main(int argc, char** argv) {
    std::string only = argc > 1 ? argv[1] : "";
    if (only.empty() || only == "matmul") test_matmul();
    if (only.empty() || only == "attention") test_attention();
    if (only == "decode") test_attention(true);
    if (only.empty() || only == "attention" || only == "fused") test_fused();
    if (only.empty() || only == "dense") test_dense();
    if (only.empty() || only == "rope") test_rope();
    if (only.empty() || only == "misc") test_misc();
    printf("%s: %d failures\n", fails ? "FAIL" : "ok", fails);
    return fails != 0;
}
