// cuda_embed.cu — row gathers: the token-embedding lookup and gather_rows.
//
// embed: out row r = table row ids[r], decoded from any weight dtype by the
// same formulas as the matmul (cuda_quant.cuh); an id outside [0, n_vocab)
// gives zeros. gather_rows: dst row i = src row idx[i] copied in 16-, 4- or
// 1-byte pieces (the widest the addresses allow), zeros for an index out of range. One block per output row; nothing is
// reduced, so both are trivially batch-invariant.
#include "cuda_kernels.cuh"
#include "cuda_quant.cuh"
#include "cuda_pdl.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 65535;  // rows beyond this are walked by a grid stride

__global__ void __launch_bounds__(kThreads) embed_kernel(const uint8_t* table, int dtype, int64_t n_vocab,
                                                         int64_t dim, int64_t table_row_bytes, const int32_t* ids,
                                                         int64_t n_rows, float* out) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const int32_t id = ids[r];
        float* o = out + r * dim;
        if (id < 0 || (int64_t)id >= n_vocab) {
            for (int64_t e = threadIdx.x; e < dim; e += kThreads) o[e] = 0.0f;
        } else {
            const uint8_t* row = table + (int64_t)id * table_row_bytes;
            for (int64_t e = threadIdx.x; e < dim; e += kThreads) o[e] = dequant_value(row, dtype, e);
        }
    }
}

template <class Word>
__global__ void __launch_bounds__(kThreads) gather_rows_kernel(const Word* src, int64_t n_src_rows, int64_t row_words,
                                                               const int32_t* idx, int64_t n_rows, Word* dst) {
    pdl_wait();  // first: see cuda_pdl.cuh
    pdl_launch_dependents();
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const int32_t i = idx[r];
        Word* d = dst + r * row_words;
        if (i < 0 || (int64_t)i >= n_src_rows) {
            for (int64_t w = threadIdx.x; w < row_words; w += kThreads) d[w] = Word{};
        } else {
            const Word* s = src + (int64_t)i * row_words;
            for (int64_t w = threadIdx.x; w < row_words; w += kThreads) d[w] = s[w];
        }
    }
}

unsigned row_blocks(int64_t n_rows) { return (unsigned)(n_rows < kMaxBlocks ? n_rows : kMaxBlocks); }

}  // namespace

void launch_embed(const EmbedArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.dim <= 0) return;
    const int64_t rb = row_bytes(a.dtype, a.dim);
    if (rb <= 0) fail(STRATA_ERR_INTERNAL, "cuda embed: unsupported table dtype " + std::to_string(a.dtype));
    launch_k(embed_kernel, row_blocks(a.n_rows), kThreads, 0, stream, static_cast<const uint8_t*>(a.table), a.dtype,
             a.n_vocab, a.dim, rb, a.ids, a.n_rows, a.out);
    check_launch("embed");
}

void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0 || a.row_bytes <= 0) return;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(a.src) | reinterpret_cast<uintptr_t>(a.dst);
    const bool words = addr % 4 == 0 && a.row_bytes % 4 == 0;
    if (addr % 16 == 0 && a.row_bytes % 16 == 0) {  // 16-byte copies (logits and hidden rows)
        launch_k(gather_rows_kernel<uint4>, row_blocks(a.n_rows), kThreads, 0, stream,
            static_cast<const uint4*>(a.src), a.n_src_rows, a.row_bytes / 16, a.idx, a.n_rows,
            static_cast<uint4*>(a.dst));
    } else if (words) {
        launch_k(gather_rows_kernel<uint32_t>, row_blocks(a.n_rows), kThreads, 0, stream,
            static_cast<const uint32_t*>(a.src), a.n_src_rows, a.row_bytes / 4, a.idx, a.n_rows,
            static_cast<uint32_t*>(a.dst));
    } else {
        launch_k(gather_rows_kernel<uint8_t>, row_blocks(a.n_rows), kThreads, 0, stream,
            static_cast<const uint8_t*>(a.src), a.n_src_rows, a.row_bytes, a.idx, a.n_rows,
            static_cast<uint8_t*>(a.dst));
    }
    check_launch("gather_rows");
}

}  // namespace cuda
}  // namespace strata
