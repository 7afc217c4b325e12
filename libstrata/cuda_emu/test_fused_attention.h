// test_fused_attention.h — part of test_kernels.cpp (`run.sh fused`): the fused decode kernel
// (strata_rope_kv_store_attention: cuda_attention_decode.cu with FUSED) against rope_kv_store
// followed by the decode attention, bit for bit: the attention output, the rotated q and k left in
// the qkv rows, and every byte of the KV pool (values and int8 scales). Rows of distinct slots at
// cells 0, 31, 32, 255, 256 and 1000, a padding row, a row whose slot has no position table (not
// rotated, still stored and attended), a row whose cell lies in an unmapped page (not stored: the
// attention reads the null page); cells past each row's end hold NaN, and the new cells hold NaN
// until the launch writes them. Every split, both block orders (reversed, the block that writes a
// cell runs after the blocks that read it, so a read of the unwritten cell shows as NaN; in launch
// order, a block that wrote its rotated q or k back too early would have the later blocks rotate
// them twice: the first version of this kernel did, at S = 4), query heads spread over blocks or not. Negative control: the variant that takes the new cell before
// its rounding must differ.

template <int HD, int NQ, bool I8, int FUSED>
static void run_fused_plan(const DecodePlan& base, int S, bool reverse) {
    DecodePlan P = base;
    P.split = S;
    const int64_t items = P.a.n_rows * P.a.slots.n_kv_heads * P.n_hgroups;
    std::vector<float> states(S > 1 ? items * P.max_chunks * 4 * NQ * (2 + HD) : 0, NAN);
    std::vector<int32_t> arrivals(items, 0), kv_arrivals(P.a.n_rows * P.a.slots.n_kv_heads, 0);
    P.states = states.data();
    P.arrivals = arrivals.data();
    P.kv_arrivals = kv_arrivals.data();
    const unsigned grid = (unsigned)(items * S);
    run_grid_ex(grid, 1, 128, 1, 0, [&] {
        if (reverse) blockIdx.x = grid - 1 - blockIdx.x;
        T_cuda_attention_decode::attention_decode_kernel<HD, NQ, I8, FUSED>(P);
    });
    for (int32_t c : arrivals) CHECK(c == 0, "fused attention: an arrival counter was left at %d", c);
    for (int32_t c : kv_arrivals) CHECK(c == 0, "fused attention: a (row, KV head) counter was left at %d", c);
}

template <int FUSED>
static void run_fused(const DecodePlan& P, int nq, int S, bool reverse) {
    const bool i8 = P.a.slots.kv_dtype == STRATA_KV_INT8;
    const int hd = P.a.slots.head_dim;
#define FU(HD, NQ) (i8 ? run_fused_plan<HD, NQ, true, FUSED>(P, S, reverse) : run_fused_plan<HD, NQ, false, FUSED>(P, S, reverse))
    if (hd == 64) { if (nq == 4) FU(64, 4); else FU(64, 8); }
    else { if (nq == 4) FU(128, 4); else FU(128, 8); }
#undef FU
}

static void test_fused() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they come (the emulation takes minutes)
    struct Case { int hd, n_kv, n_heads, window; bool int8; int mode, rot_dim; bool ff; };
    int compared = 0;
    for (Case cs : {Case{64, 3, 9, 0, false, STRATA_ROPE_HALF, 64, false},      // SmolLM2: G = 3
                    Case{128, 2, 8, 0, false, STRATA_ROPE_ADJACENT, 128, true},  // Llama 3 freq_factors, G = 4
                    Case{128, 1, 8, 0, true, STRATA_ROPE_HALF, 128, false},      // G = 8, int8
                    Case{64, 2, 2, 37, true, STRATA_ROPE_HALF, 32, false},       // G = 1, window, partial rotation
                    Case{64, 1, 6, 0, false, STRATA_ROPE_MROPE, 64, false},      // G = 6, M-RoPE
                    Case{128, 2, 4, 100, false, STRATA_ROPE_HALF, 128, false},   // G = 2, window
                    Case{64, 1, 5, 0, true, STRATA_ROPE_ADJACENT, 64, true}}) {  // G = 5, int8
        const int hd = cs.hd;
        SlotsView s; s.n_slots = 8; s.n_layers = 2; s.n_ctx = 1040; s.n_kv_heads = cs.n_kv; s.head_dim = hd;
        s.slot_pages = (s.n_ctx + kPageCells - 1) / kPageCells;
        s.n_pages = s.n_slots * s.slot_pages;
        std::vector<uint16_t> kv((s.n_pages + 1) * s.page_elems(), 0x7e00);  // NaN until written
        std::fill(kv.begin() + s.n_pages * s.page_elems(), kv.end(), 0);    // the null page: zeros
        std::vector<int8_t> kv8(cs.int8 ? kv.size() : 0, 0x55);
        std::vector<float> kvs(cs.int8 ? kv.size() / hd : 0, NAN);
        if (cs.int8) {
            std::fill(kv8.begin() + s.n_pages * s.page_elems(), kv8.end(), 0);
            std::fill(kvs.begin() + s.n_pages * s.page_elems() / hd, kvs.end(), 0.0f);
        }
        std::vector<int32_t> perm(s.n_pages); for (int i = 0; i < s.n_pages; ++i) perm[i] = i;
        for (int i = s.n_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
        std::vector<int32_t> pages(perm);
        pages[7 * s.slot_pages + 0] = -1;  // slot 7: its first page unmapped (row {7, 40} is not stored)
        std::vector<int32_t> table(s.n_slots * s.n_ctx * 4), delta(s.n_slots), table_of = {0, 1, 2, 3, 4, 5, -1, 7};
        for (int sl = 0; sl < s.n_slots; ++sl) for (int c = 0; c < s.n_ctx; ++c) for (int j = 0; j < 4; ++j)
            table[((size_t)sl * s.n_ctx + c) * 4 + j] = c + 3 * sl + (cs.mode == STRATA_ROPE_MROPE ? 7 * j : 0);
        s.kv = kv.data(); s.table = table.data(); s.delta = delta.data(); s.table_of = table_of.data();
        s.pages = pages.data();
        if (cs.int8) { s.kv = nullptr; s.kv_dtype = STRATA_KV_INT8; s.kv8 = kv8.data(); s.kv_scale = kvs.data(); }
        const int layer = 1, n_heads = cs.n_heads;
        // Rows of distinct slots (slot 6 has no position table); one padding row.
        std::vector<int32_t> rows = {0, 0, 1, 31, 2, 32, 3, 255, 4, 256, 5, 1000, -1, 5, 6, 200, 7, 40};
        const int64_t n_rows = rows.size() / 2;
        const int64_t width = (int64_t)s.n_kv_heads * hd;
        for (int64_t r = 0; r < n_rows; ++r) {  // the cells before each row's: random K/V
            const int sl = rows[2 * r], nr = rows[2 * r + 1];
            if (sl < 0 || nr == 0) continue;
            std::vector<float> k(nr * width), v(nr * width); for (auto& x : k) x = 2 * randn(); for (auto& x : v) x = randn();
            std::vector<int32_t> rr; for (int i = 0; i < nr; ++i) { rr.push_back(sl); rr.push_back(i); }
            KvStoreArgs a{s, layer, k.data(), width, v.data(), width, rr.data(), nr};
            run_grid(3, 1, 128, [&] { T_cuda_kv_store::kv_store_kernel<true>(a); });
        }
        strata_rope_params pq{}; pq.mode = cs.mode; pq.n_heads = n_heads; pq.head_dim = hd; pq.rot_dim = cs.rot_dim;
        pq.theta_base = 10000.f; pq.freq_scale = 1.f;
        if (cs.mode == STRATA_ROPE_MROPE) {
            const int half = cs.rot_dim / 2;
            pq.sections[0] = half / 4; pq.sections[1] = (half - half / 4) / 2; pq.sections[2] = half - pq.sections[0] - pq.sections[1];
        }
        strata_rope_params pk = pq; pk.n_heads = s.n_kv_heads;
        std::vector<float> ff(cs.rot_dim / 2); for (auto& v : ff) v = 1.f + (rng() % 4);
        const int64_t stride = (int64_t)(n_heads + 2 * s.n_kv_heads) * hd + 2;  // even: the k/v parts stay 8-byte aligned
        std::vector<float> qkv0(n_rows * stride); for (auto& x : qkv0) x = randn();
        const float scale = 1.0f / std::sqrt((float)hd);
        const std::vector<uint16_t> kv_start = kv;
        const std::vector<int8_t> kv8_start = kv8;
        const std::vector<float> kvs_start = kvs;

        // The separate launches: rope_kv_store (its decode grid), then the decode attention.
        std::vector<float> qkv_ref = qkv0, out_ref(n_rows * n_heads * hd, 123.f);
        RopeKvStoreArgs ra{pq, pk, s, layer, qkv_ref.data(), stride, n_rows, rows.data(), cs.ff ? ff.data() : nullptr};
        run_grid((unsigned)n_rows, (unsigned)((n_heads + s.n_kv_heads + 3) / 4), 128,
                 [&] { T_cuda_kv_store::rope_kv_store_kernel<true>(ra); });
        const int group = n_heads / s.n_kv_heads, nq = group <= 4 ? 4 : 8;
        DecodePlan P{};
        P.a = AttentionArgs{s, layer, qkv_ref.data(), stride, n_rows, n_heads, rows.data(), scale, out_ref.data()};
        P.a.window = cs.window;
        P.group = group;
        P.heads_per_cta = std::min(group, nq);
        P.n_hgroups = (group + P.heads_per_cta - 1) / P.heads_per_cta;
        P.max_chunks = (s.n_ctx + 255) / 256;
        run_fused<0>(P, nq, 1, false);
        const std::vector<uint16_t> kv_ref = kv;
        const std::vector<int8_t> kv8_ref = kv8;
        const std::vector<float> kvs_ref = kvs;
        for (int64_t r = 0; r < n_rows; ++r) {  // no NaN reached a real row (cells past the end were never read)
            if (rows[2 * r] < 0) continue;
            for (int e = 0; e < n_heads * hd; ++e) CHECK(std::isfinite(out_ref[r * n_heads * hd + e]), "separate attention: NaN in row %ld", (long)r);
        }

        // The fused launch, from the same start, for every plan.
        auto fused = [&](auto variant, int hpc, int S, bool reverse, std::vector<float>& out, std::vector<float>& qkv) {
            kv = kv_start; kv8 = kv8_start; kvs = kvs_start;
            qkv = qkv0;
            out.assign(n_rows * n_heads * hd, 123.f);
            DecodePlan F = P;
            F.a.q = qkv.data();
            F.a.out = out.data();
            F.heads_per_cta = hpc;
            F.n_hgroups = (group + hpc - 1) / hpc;
            F.rope = RopeKvStoreArgs{pq, pk, s, layer, qkv.data(), stride, n_rows, rows.data(), cs.ff ? ff.data() : nullptr};
            variant(F, nq, S, reverse);
        };
        auto same_pool = [&] {
            return kv == kv_ref && kv8 == kv8_ref && memcmp(kvs.data(), kvs_ref.data(), kvs.size() * 4) == 0;
        };
        // Query heads of a KV head in one block, or spread one per block (then the blocks of head
        // groups 1.. read the new cell before head group 0 stores it, in reversed order).
        for (int hpc : {std::min(group, nq), 1}) {
            for (auto [S, reverse] : {std::pair{1, false}, std::pair{2, true}, std::pair{4, false}, std::pair{1, true}}) {
                if (hpc == 1 && (group == 1 || S == 4)) continue;  // keep the emulation short
                if (hpc > 1 && S == 1 && reverse) continue;
                std::vector<float> out, qkv;
                fused([](const DecodePlan& F, int q, int S2, bool rv) { run_fused<1>(F, q, S2, rv); }, hpc, S, reverse, out, qkv);
                CHECK(memcmp(out.data(), out_ref.data(), out.size() * 4) == 0,
                      "fused attention out hd=%d G=%d int8=%d hpc=%d S=%d reverse=%d", hd, group, (int)cs.int8, hpc, S, (int)reverse);
                CHECK(memcmp(qkv.data(), qkv_ref.data(), qkv.size() * 4) == 0,
                      "fused attention qkv hd=%d G=%d int8=%d hpc=%d S=%d reverse=%d", hd, group, (int)cs.int8, hpc, S, (int)reverse);
                CHECK(same_pool(), "fused attention KV pool hd=%d G=%d int8=%d hpc=%d S=%d reverse=%d", hd, group, (int)cs.int8, hpc, S, (int)reverse);
                ++compared;
            }
        }
        {   // Negative control: the new cell's K taken before its rounding changes the output.
            std::vector<float> out, qkv;
            fused([](const DecodePlan& F, int q, int S2, bool rv) { run_fused<T_cuda_attention_decode::kFusedUnroundedForTests>(F, q, S2, rv); },
                  std::min(group, nq), 1, true, out, qkv);
            CHECK(memcmp(out.data(), out_ref.data(), out.size() * 4) != 0, "negative control: the unrounded new cell went unnoticed (hd=%d)", hd);
            CHECK(same_pool(), "negative control: the pool still matches (hd=%d)", hd);
        }
        printf("fused hd=%d n_kv=%d n_heads=%d window=%d int8=%d mode=%d rot=%d ff=%d ok so far (%d failures)\n", hd,
               cs.n_kv, n_heads, cs.window, (int)cs.int8, cs.mode, cs.rot_dim, (int)cs.ff, fails);
    }
    printf("fused done (%d fused plans compared bit for bit with rope_kv_store + attention)\n", compared);
}
