// cpu_matmul_ex.cpp — strata_matmul_ex on the CPU: the fused prologue
// (RMSNorm or SiLU-gated product) and strided x rows, in front of the plain
// matmul.
//
// The CPU gains nothing from fusing, so it keeps the simplest exact form: the
// prologue rows are computed into a per-thread scratch by the very kernels
// strata_rmsnorm and strata_silu_mul run (cpu_elementwise.cpp), then
// cpu::matmul runs on that dense copy. A row's result is therefore bit for bit
// rmsnorm-then-matmul (or silu_mul-then-matmul), and — like those kernels —
// independent of the other rows. Plain dense calls go straight to cpu::matmul.
#include <cstring>
#include <vector>

#include "cpu_kernels.h"

namespace strata {
namespace cpu {

void matmul_ex(ThreadPool& pool, const MatmulArgs& a) {
    const int64_t width = a.prologue == STRATA_PROLOGUE_SILU_MUL ? 2 * a.k : a.k;
    const int64_t stride = a.x_row_stride > 0 ? a.x_row_stride : width;
    if (a.prologue == STRATA_PROLOGUE_NONE && stride == a.k) {
        matmul(pool, a);
        return;
    }
    thread_local std::vector<float> scratch;
    scratch.resize(size_t(a.n_rows * a.k));
    float* xs = scratch.data();  // [n_rows, k]
    if (a.prologue == STRATA_PROLOGUE_SILU_MUL) {
        SiluMulArgs s{a.x, stride, a.x + a.k, stride, xs, a.n_rows, a.k};
        silu_mul(pool, s);
    } else {
        for (int64_t r = 0; r < a.n_rows; r++) std::memcpy(xs + r * a.k, a.x + r * stride, size_t(a.k) * 4);
        if (a.prologue == STRATA_PROLOGUE_RMSNORM) {
            RmsNormArgs n{xs, a.norm_weight, xs, a.n_rows, a.k, a.eps};
            rmsnorm(pool, n);
        }
    }
    MatmulArgs m = a;
    m.x = xs;
    m.prologue = STRATA_PROLOGUE_NONE;
    m.norm_weight = nullptr;
    m.x_row_stride = 0;
    matmul(pool, m);
}

}  // namespace cpu
}  // namespace strata
