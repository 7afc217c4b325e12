// test_attention_prompt.cpp — the prompt attention kernel (cuda_attention_prompt.cu, run under
// emu.h) against the legacy kernel of cuda_attention.cu bit for bit, and against a float64
// reference: prompt chunks from cell 0 and from mid-context, chunk lengths 1 to 512, GQA groups
// 1/3/4/8/16, head_dim 64 and 128, F16 and int8 pools, sliding window on and off, NaN in every
// cell past the chunk's last row. A mixed launch (decode rows of other slots, padding, a chunk,
// a second chunk) checks the hand-off of multi-slot blocks to the decode kernel; a negative
// control (workers walked and folded in the order 1, 0, 3, 2) must be caught. First, the warp
// reductions the softmax uses (warp_allreduce) against the one-value butterflies, with a control.
// Usage: test_attention_prompt [full|long] (run.sh attention runs the default set after test_kernels;
// full adds the long chunks, long runs only them).
#define STRATA_CUDA_EMU 1
#include "emu.h"
#include "cuda_attention.cu"
#include "cuda_attention_decode.cu"
#include "cuda_attention_prompt.cu"
#include <cstdio>
#include <random>
using namespace strata;
using namespace strata::cuda;
static std::mt19937_64 rng(11);
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { ++fails; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
static float randn() { static std::normal_distribution<float> nd(0, 1); return nd(rng); }

// The legacy kernel with the plan launch_attention takes for prompt-sized launches (the big
// variant, R = NQ / Gc rows per block, no split): the canonical bits.
template <int PPL, int NQ>
static void run_legacy_plan(const AttentionArgs& a) {
    AttnPlan P;
    P.a = a;
    P.group = a.n_heads / a.slots.n_kv_heads;
    P.heads_per_cta = std::min(P.group, NQ);
    P.n_hgroups = (P.group + P.heads_per_cta - 1) / P.heads_per_cta;
    P.rows_per_cta = std::max(1, NQ / P.heads_per_cta);
    P.split = 1;
    P.copy16 = a.slots.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(a.slots.kv) % 16 == 0;
    const int64_t items = (a.n_rows + P.rows_per_cta - 1) / P.rows_per_cta * a.slots.n_kv_heads * P.n_hgroups;
    const auto L = T_cuda_attention::attn_layout(a.slots.head_dim, NQ, 2);
    run_grid_ex((unsigned)items, 1, 128, 1, (size_t)L.total, [&] { T_cuda_attention::attention_kernel<PPL, NQ, 2>(P); });
}
static void run_legacy(const AttentionArgs& a) {
    if (a.slots.head_dim <= 64) run_legacy_plan<1, 16>(a);
    else run_legacy_plan<2, 8>(a);
}

// The prompt kernel with the launcher's plan, then the decode kernel over the rows it left
// (launch_attention_prompt, cuda_attention_prompt.cu). walk_xor = 2: the negative control.
template <int HD, bool I8>
static void run_prompt_plan(const AttentionArgs& a, int walk_xor) {
    constexpr int NW = T_cuda_attention_prompt::kWarps, NV = T_cuda_attention_prompt::vectors_per_warp(HD);
    PromptPlan P{};
    P.a = a;
    P.group = a.n_heads / a.slots.n_kv_heads;
    P.rows_per_cta = T_cuda_attention_prompt::prompt_rows_per_cta(P.group, HD);
    if (P.rows_per_cta < 1) { printf("bad prompt plan\n"); abort(); }
    P.n_blocks = (int32_t)((a.n_rows + P.rows_per_cta - 1) / P.rows_per_cta);
    P.walk_xor = walk_xor;
    const size_t smem = T_cuda_attention_prompt::prompt_smem_bytes<HD, NW, NV, I8>();
    run_grid_ex((unsigned)(P.n_blocks * a.slots.n_kv_heads), 1, NW * 32, 1, smem,
                [&] { T_cuda_attention_prompt::attention_prompt_kernel<HD, NW, NV, I8>(P); });
    // The decode kernel over the whole launch, skipping the rows served above.
    const int g = P.group, nq = g <= 4 ? 4 : 8;
    DecodePlan D{};
    D.a = a;
    D.prompt_rows = P.rows_per_cta;
    D.group = g;
    D.heads_per_cta = std::min(g, nq);
    D.n_hgroups = (g + D.heads_per_cta - 1) / D.heads_per_cta;
    // Split in two, blocks in reverse order (the other block of each item arrives last and folds):
    // blocks of items the prompt kernel served return before arriving, so every counter stays 0.
    D.split = 2;
    D.max_chunks = (a.slots.n_ctx + 255) / 256;
    const int64_t items = a.n_rows * a.slots.n_kv_heads * D.n_hgroups;
    std::vector<float> states(items * D.max_chunks * 4 * nq * (2 + HD), NAN);
    std::vector<int32_t> arrivals(items, 0);
    D.states = states.data();
    D.arrivals = arrivals.data();
    const unsigned grid = (unsigned)(items * D.split);
    auto rev = [grid] { blockIdx.x = grid - 1 - blockIdx.x; };
    if (nq == 4) run_grid_ex(grid, 1, 128, 1, 0, [&] { rev(); T_cuda_attention_decode::attention_decode_kernel<HD, 4, I8>(D); });
    else run_grid_ex(grid, 1, 128, 1, 0, [&] { rev(); T_cuda_attention_decode::attention_decode_kernel<HD, 8, I8>(D); });
    for (int32_t c : arrivals) CHECK(c == 0, "decode kernel after the prompt kernel: an arrival counter was left at %d", c);
}
static void run_prompt(const AttentionArgs& a, int walk_xor = 0) {
    const bool i8 = a.slots.kv_dtype == STRATA_KV_INT8;
    if (a.slots.head_dim == 64) { if (i8) run_prompt_plan<64, true>(a, walk_xor); else run_prompt_plan<64, false>(a, walk_xor); }
    else { if (i8) run_prompt_plan<128, true>(a, walk_xor); else run_prompt_plan<128, false>(a, walk_xor); }
}

struct Chunk { int slot, start, len; };
struct Case {
    int hd, n_kv, n_heads, window;
    bool int8;
    std::vector<std::vector<Chunk>> launches;  // each launch: its rows, chunk after chunk (len 1: a decode row)
};

static void run_case(const Case& cs) {
    const int hd = cs.hd;
    SlotsView s;
    s.n_slots = 3; s.n_layers = 2; s.n_ctx = 1280; s.n_kv_heads = cs.n_kv; s.head_dim = hd;
    s.slot_pages = (s.n_ctx + kPageCells - 1) / kPageCells;
    s.n_pages = 3 * s.slot_pages;
    // A scrambled page table: neighbouring cells of a slot sit in unrelated pages. Every cell starts
    // as NaN (F16 0x7e00; int8: NaN scales); only the cells below each launch's rows get values.
    std::vector<uint16_t> kv(cs.int8 ? 0 : (s.n_pages + 1) * s.page_elems(), 0x7e00);
    std::vector<int8_t> kv8(cs.int8 ? (s.n_pages + 1) * s.page_elems() : 0, 0x55);
    std::vector<float> kvs(cs.int8 ? kv8.size() / hd : 0, NAN);
    std::vector<int32_t> perm(s.n_pages);
    for (int i = 0; i < s.n_pages; ++i) perm[i] = i;
    for (int i = s.n_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
    std::vector<int32_t> pages(perm.begin(), perm.end());
    std::vector<int32_t> table(s.n_slots * s.n_ctx * 4), delta(s.n_slots), table_of = {0, 1, 2};
    s.table = table.data(); s.delta = delta.data(); s.table_of = table_of.data(); s.pages = pages.data();
    if (cs.int8) { s.kv_dtype = STRATA_KV_INT8; s.kv8 = kv8.data(); s.kv_scale = kvs.data(); }
    else s.kv = kv.data();
    const int layer = 1;
    auto kval = [&](int sl, int which, int h, int c, int d) -> double {
        const size_t at = s.kv_index(sl, layer, which, h, c);
        return cs.int8 ? (double)((float)kv8[at + d] * kvs[at / hd]) : (double)__half2float(__half{kv[at + d]});
    };
    auto write_cell = [&](int sl, int c) {
        for (int which = 0; which < 2; ++which) for (int h = 0; h < s.n_kv_heads; ++h) {
            const size_t at = s.kv_index(sl, layer, which, h, c);
            if (cs.int8) {
                kvs[at / hd] = 0.01f + 0.02f * (float)(rng() % 1000) / 1000.0f;
                for (int d = 0; d < hd; ++d) kv8[at + d] = (int8_t)((int)(rng() % 255) - 127);
            } else {
                for (int d = 0; d < hd; ++d) kv[at + d] = __float2half_rn((which ? 1.0f : 2.0f) * randn()).b;
            }
        }
    };
    for (const auto& rowsdesc : cs.launches) {
        // Rows; the cells each slot's rows reach are written, the rest stays NaN.
        std::vector<int32_t> rows;
        int top[3] = {-1, -1, -1};
        for (const Chunk& ch : rowsdesc)
            for (int i = 0; i < ch.len; ++i) {
                rows.push_back(ch.slot);
                rows.push_back(ch.start + i);
                if (ch.slot >= 0 && ch.slot < 3) top[ch.slot] = std::max(top[ch.slot], ch.start + i);
            }
        // Fresh values for the cells in reach; NaN above them (left by earlier launches too).
        for (int sl = 0; sl < 3; ++sl) {
            for (int c = 0; c <= top[sl]; ++c) write_cell(sl, c);
            for (int c = top[sl] + 1; c < s.n_ctx; ++c)
                for (int which = 0; which < 2; ++which) for (int h = 0; h < s.n_kv_heads; ++h) {
                    const size_t at = s.kv_index(sl, layer, which, h, c);
                    if (cs.int8) kvs[at / hd] = NAN;
                    else for (int d = 0; d < hd; ++d) kv[at + d] = 0x7e00;
                }
        }
        const int64_t n_rows = rows.size() / 2, n_heads = cs.n_heads, qstride = n_heads * hd + 3;
        std::vector<float> q(n_rows * qstride);
        for (auto& x : q) x = randn();
        const float scale = 1.0f / std::sqrt((float)hd);
        auto attend = [&](int which, int walk_xor) {
            std::vector<float> out(n_rows * n_heads * hd, 123.f);
            AttentionArgs a{s, layer, q.data(), qstride, n_rows, (int32_t)n_heads, rows.data(), scale, out.data()};
            a.window = cs.window;
            if (which == 0) run_legacy(a);
            else run_prompt(a, walk_xor);
            return out;
        };
        const std::vector<float> want = attend(0, 0), got = attend(1, 0);
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) bad += memcmp(&got[i], &want[i], 4) != 0;
        std::string desc;
        for (const Chunk& ch : rowsdesc) desc += " " + std::to_string(ch.slot) + ":" + std::to_string(ch.start) + "+" + std::to_string(ch.len);
        CHECK(bad == 0, "prompt attention hd=%d G=%d window=%d int8=%d rows%s: %ld of %zu values differ from the legacy bits",
              hd, cs.n_heads / cs.n_kv, cs.window, (int)cs.int8, desc.c_str(), (long)bad, got.size());
        // float64 reference on a few rows (the first, the last, some between).
        for (int64_t r : {(int64_t)0, n_rows / 3, n_rows / 2, n_rows - 1}) {
            const int slot = rows[2 * r], index = rows[2 * r + 1];
            const bool valid = slot >= 0 && slot < 3 && index >= 0 && index < s.n_ctx;
            for (int h = 0; h < n_heads; ++h) {
                const float* o = &got[r * n_heads * hd + h * hd];
                if (!valid) { for (int d = 0; d < hd; ++d) CHECK(o[d] == 0.f, "padding row not zero"); continue; }
                const int kvh = h / (cs.n_heads / cs.n_kv);
                const int lo = cs.window > 0 ? std::max(0, index - cs.window + 1) : 0;
                std::vector<double> sc(index + 1, 0.0);
                double mx = -1e300, vmax = 0, l = 0;
                for (int c = lo; c <= index; ++c) {
                    double dd = 0;
                    for (int d = 0; d < hd; ++d) dd += (double)q[r * qstride + h * hd + d] * kval(slot, 0, kvh, c, d);
                    sc[c] = dd * scale;
                    mx = std::max(mx, sc[c]);
                }
                for (int c = lo; c <= index; ++c) { sc[c] = std::exp(sc[c] - mx); l += sc[c]; }
                for (int d = 0; d < hd; ++d) {
                    double acc = 0;
                    for (int c = lo; c <= index; ++c) { const double vv = kval(slot, 1, kvh, c, d); acc += sc[c] * vv; vmax = std::max(vmax, std::fabs(vv)); }
                    CHECK(std::fabs(acc / l - o[d]) < 2e-5 * vmax, "prompt attention vs float64 hd=%d r=%ld h=%d d=%d got %g want %g",
                          hd, (long)r, h, d, o[d], acc / l);
                }
            }
        }
        // Negative control: the workers of each chunk walked (and folded) out of order must show.
        // (Needs a row with cells in two workers' tiles: an index of 32 or more, within its window.)
        int64_t longest = 0;
        for (const Chunk& ch : rowsdesc) if (ch.slot >= 0) longest = std::max<int64_t>(longest, ch.start + ch.len);
        const bool control = &rowsdesc == &cs.launches[0] && longest > 40 && (cs.window == 0 || cs.window > 40);
        if (control) {
            const std::vector<float> wrong = attend(1, 2);
            int64_t differ = 0;
            for (size_t i = 0; i < got.size(); ++i) differ += memcmp(&wrong[i], &want[i], 4) != 0;
            CHECK(differ > 0, "negative control: workers folded out of order gave the legacy bits (rows%s)", desc.c_str());
        }
        printf("prompt attention hd=%d G=%d window=%d int8=%d rows%s: %s%s\n", hd, cs.n_heads / cs.n_kv, cs.window,
               (int)cs.int8, desc.c_str(), bad ? "DIFFER" : "same bits", control ? ", control caught" : "");
        fflush(stdout);
    }
}

// warp_allreduce (cuda_common.cuh), which both attention kernels' softmax uses for the warp max
// and warp sum of their vectors, against warp_max / warp_sum one value at a time, bit for bit on
// every lane: N = 1 .. 32 values, random magnitudes over many octaves with ±0, ±inf and NaN mixed
// in. Negative control: the same sums by a butterfly in another order (offsets 1, 2, 4, 8, 16)
// must differ somewhere, so the comparison sees the order. Any NaN equals any NaN here: the device's
// float arithmetic returns the one canonical NaN, while the host's keeps an operand's sign and
// payload, so on the host two lanes of the same butterfly can already hold different NaN bits.
static bool same_float(float a, float b) { return (a != a && b != b) || std::memcmp(&a, &b, 4) == 0; }
template <int N>
static void check_warp_allreduce_n(int trials) {
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    std::uniform_int_distribution<int> oct(-30, 30), pick(0, 1023);  // specials in ~15 % of the sums
    int order_caught = 0;
    for (int t = 0; t < trials; ++t) {
        std::vector<float> in(32 * N);
        for (float& x : in) {
            const int k = pick(rng);
            x = k == 0 ? 0.0f : k == 1 ? -0.0f : k == 2 ? INFINITY : k == 3 ? -INFINITY : k == 4 ? NAN
                                                                               : std::ldexp(ud(rng), oct(rng));
        }
        std::vector<float> sum_n(32 * N), max_n(32 * N), sum_1(32 * N), max_1(32 * N), sum_other(32 * N);
        run_grid_ex(1, 1, 32, 1, 0, [&] {
            const int lane = (int)threadIdx.x;
            float a[N], b[N];
            for (int v = 0; v < N; ++v) a[v] = b[v] = in[lane * N + v];
            warp_allreduce<N>(a, lane, [](float x, float y) { return __fadd_rn(x, y); });
            warp_allreduce<N>(b, lane, [](float x, float y) { return fmaxf(x, y); });
            for (int v = 0; v < N; ++v) {
                sum_n[lane * N + v] = a[v];
                max_n[lane * N + v] = b[v];
                sum_1[lane * N + v] = warp_sum(in[lane * N + v]);
                max_1[lane * N + v] = warp_max(in[lane * N + v]);
                float o = in[lane * N + v];
                for (int off = 1; off < 32; off <<= 1) o = __fadd_rn(o, __shfl_xor_sync(kFullMask, o, off));
                sum_other[lane * N + v] = o;
            }
        });
        for (int i = 0; i < 32 * N; ++i) {
            CHECK(same_float(sum_n[i], sum_1[i]), "warp_allreduce<%d> sum, lane %d value %d: %a vs warp_sum %a", N, i / N, i % N, sum_n[i], sum_1[i]);
            CHECK(same_float(max_n[i], max_1[i]), "warp_allreduce<%d> max, lane %d value %d: %a vs warp_max %a", N, i / N, i % N, max_n[i], max_1[i]);
            if (!same_float(sum_other[i], sum_1[i])) ++order_caught;
        }
    }
    CHECK(order_caught > 0, "warp_allreduce<%d>: the control (sums in another order) was not caught", N);
    printf("warp_allreduce<%d>: %d trials, same bits as warp_sum / warp_max one by one, control caught (%d values)\n", N, trials, order_caught);
}
static void check_warp_allreduce() {
    check_warp_allreduce_n<1>(20);
    check_warp_allreduce_n<2>(20);
    check_warp_allreduce_n<4>(20);
    check_warp_allreduce_n<8>(10);
    check_warp_allreduce_n<16>(10);
    check_warp_allreduce_n<32>(5);
}

int main(int argc, char** argv) {
    // The emulation costs about rows x tiles x heads; the default set keeps it to minutes, `full`
    // adds the long chunks (512 rows from cell 0, 300 and 256 rows mid-context; tens of minutes).
    const std::string arg = argc > 1 ? argv[1] : "";
    const bool full = arg == "full" || arg == "long", quick = arg != "long";  // long: only the long chunks
    if (quick) {
        check_warp_allreduce();
        // The 8B group and head_dim (G = 4, 128) at the chunk-length edges, from cell 0 and mid-context.
        run_case({128, 1, 4, 0, false, {{{1, 0, 100}}, {{1, 0, 1}}, {{1, 0, 31}}, {{1, 0, 32}}, {{1, 0, 33}}, {{1, 300, 33}}}});
        // Mixed launch: decode rows of slots 0 and 2, a padding row, a chunk of slot 1, a chunk of slot 2.
        run_case({128, 1, 4, 0, false, {{{0, 400, 1}, {2, 37, 1}, {-1, 5, 1}, {0, 901, 1}, {1, 250, 40}, {2, 64, 40}}}});
        // SmolLM2 (G = 3, head_dim 64), G = 1, 8 and 16; int8 pools; sliding windows.
        run_case({64, 1, 3, 0, false, {{{1, 0, 70}}, {{2, 517, 20}}}});
        run_case({64, 1, 1, 0, true, {{{1, 0, 256}}, {{1, 600, 31}}}});
        run_case({128, 1, 8, 0, true, {{{1, 0, 64}}, {{1, 300, 20}}}});
        run_case({64, 1, 16, 0, false, {{{1, 0, 33}}, {{1, 100, 8}}}});
        run_case({64, 1, 4, 45, false, {{{1, 0, 100}}, {{1, 700, 50}}}});
        run_case({128, 1, 4, 200, true, {{{1, 300, 64}}, {{2, 9, 1}, {1, 0, 64}}}});
    }
    if (full) {
        run_case({128, 2, 8, 0, false, {{{1, 0, 512}}, {{1, 0, 256}}, {{1, 0, 300}}, {{1, 517, 256}}}});
        run_case({128, 2, 8, 0, false, {{{0, 400, 1}, {2, 37, 1}, {-1, 5, 1}, {0, 901, 1}, {1, 250, 280}, {2, 64, 40}}}});
        run_case({64, 3, 9, 0, false, {{{1, 0, 300}}, {{2, 517, 256}}}});
        run_case({64, 2, 8, 0, false, {{{1, 0, 512}}, {{0, 333, 97}, {1, 0, 200}}}});
    }
    printf("%s: %d failures\n", fails ? "FAIL" : "ok", fails);
    return fails != 0;
}
