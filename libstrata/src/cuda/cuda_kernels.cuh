// cuda_kernels.cuh — the host-side launchers of the CUDA kernels.
//
// cuda_backend.cu owns devices, streams, memory and graphs and forwards each
// kernel call here; each launcher lives in the file of its op family and
// enqueues on `stream` only (no allocation, no synchronization, no host reads
// of device memory, so every launcher can be recorded in a CUDA graph). Each
// checks its launch and throws strata::Error(STRATA_ERR_DEVICE) on failure.
// Arguments arrive validated by the entry points in api/; a launch with nothing to do returns
// without enqueueing anything.
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace strata {
namespace cuda {

class Scratch;  // cuda_scratch.cuh: the context's device scratch memory
class Handoff;  // cuda_handoff.cuh: the activation hand-off between matmuls
struct HandoffView;

void launch_embed(const EmbedArgs& a, cudaStream_t stream);              // cuda_embed.cu
void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream);   // cuda_embed.cu
// rope non-null (strata_matmul_rope_kv_store): true when the matmul's kernel also rotated y's q and k
// and stored k and v (the one-row integer path); false: the caller launches rope_kv_store after it.
// chain non-null (between strata_matmul_chain_begin and _end): a one-row integer call that reads the
// previous call's local emission may be held in it instead of launched (dot_chain_flush launches them).
struct DotChain;
bool launch_matmul(const MatmulArgs& a, cudaStream_t stream, Scratch& scratch, Handoff& handoff,
                   const RopeKvStoreArgs* rope = nullptr, DotChain* chain = nullptr);  // cuda_matmul.cu
// strata_matmul_chain_begin / _end (cuda_int_matmul.cu): up to kDotChainMax one-row dot calls, each reading
// the blocks the one before it emitted locally, held back and launched as one kernel with a grid barrier
// between them (one call alone: its own kernel, as without a chain). The same bits either way.
constexpr int kDotChainMax = 4;  // o, gate_up, down and the next layer's qkv
DotChain* dot_chain_new();
void dot_chain_delete(DotChain* c) noexcept;
void dot_chain_flush(DotChain& c, cudaStream_t stream);  // launches what is held, if anything
bool int_matmul_supports(int32_t w_dtype);                                // cuda_int_matmul.cu
// use: x's prepared blocks (null: the pre-pass runs); emit / emit_cnt: where the one-row dot kernel
// writes the hand-off and its arrival counters (a local emission marks emit->ssq_blocks). True when
// the launched kernel emitted it (else the caller runs launch_handoff_prepass after it). rope
// (strata_matmul_rope_kv_store): *rope_done tells whether the kernel ran it in its epilogue.
bool launch_int_matmul(const MatmulArgs& a, cudaStream_t stream, Scratch& scratch, const HandoffView* use,
                       HandoffView* emit, int* emit_cnt, const RopeKvStoreArgs* rope = nullptr,
                       bool* rope_done = nullptr, DotChain* chain = nullptr);  // cuda_int_matmul.cu
// chain: the pre-pass becomes a phase of the chain after `a` where `a` is the call it holds last (see
// ChainParams), else what it holds runs first.
void launch_handoff_prepass(const MatmulArgs& a, const HandoffView& v, cudaStream_t stream,
                            DotChain* chain = nullptr);  // cuda_int_matmul.cu
// The pre-pass of n_rows dense rows of x (k values, no prologue) into v: strata_attention_handoff's
// emission where the attention kernel did not make it.
void launch_prepass_rows(const float* x, int64_t n_rows, int64_t k, const HandoffView& v,
                         cudaStream_t stream);  // cuda_int_matmul.cu
bool mma_matmul_supports(int32_t w_dtype);                                // cuda_mma_matmul.cu
void launch_mma_matmul(const MatmulArgs& a, cudaStream_t stream);        // cuda_mma_matmul.cu
void launch_rmsnorm(const RmsNormArgs& a, cudaStream_t stream);          // cuda_norm_rope.cu
void launch_rope(const RopeArgs& a, cudaStream_t stream);                // cuda_norm_rope.cu
void launch_positions_decode(const PositionsDecodeArgs& a, cudaStream_t stream);  // cuda_norm_rope.cu
void launch_kv_store(const KvStoreArgs& a, cudaStream_t stream);         // cuda_kv_store.cu
void launch_rope_kv_store(const RopeKvStoreArgs& a, cudaStream_t stream);  // cuda_kv_store.cu
// emit (strata_attention_handoff): where the decode kernel rounds out's rows for the o projection;
// true when it did (else the caller runs launch_prepass_rows after the launch).
bool launch_attention(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch,
                      const HandoffView* emit = nullptr);  // cuda_attention.cu
// The lean decode kernel (cuda_attention_decode.cu): false when it does not cover the call (or
// STRATA_ATTENTION=legacy is set); launch_attention then runs the general kernel, same bits.
bool launch_attention_decode(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch,
                             const HandoffView* emit = nullptr);
// The prompt kernel (cuda_attention_prompt.cu) for launches of 128+ rows with head_dim 64 or 128,
// followed by the decode kernel for the rows of its blocks that read several slots: false when it
// does not cover the call (or STRATA_ATTENTION=legacy / noprompt is set); same bits.
bool launch_attention_prompt(const AttentionArgs& a, cudaStream_t stream, Scratch& scratch);
void launch_attention_decode_rest(const AttentionArgs& a, int32_t prompt_rows, cudaStream_t stream,
                                  Scratch& scratch);  // cuda_attention_decode.cu
// rope_kv_store + attention in one decode kernel (cuda_attention_decode.cu; the caller guarantees no
// row reads a cell another row writes): false when the fused kernel does not cover the call (the
// backend then runs the two launches, same bits).
bool launch_rope_kv_store_attention(const RopeKvStoreArgs& r, const AttentionArgs& a, cudaStream_t stream,
                                    Scratch& scratch);
void launch_attention_dense(const DenseAttentionArgs& a, cudaStream_t stream);  // cuda_attention_dense.cu
void launch_silu_mul(const SiluMulArgs& a, cudaStream_t stream);         // cuda_elementwise.cu
void launch_gelu(const UnaryArgs& a, cudaStream_t stream);               // cuda_elementwise.cu
void launch_scale(const UnaryArgs& a, cudaStream_t stream);              // cuda_elementwise.cu
void launch_add(const BinaryArgs& a, cudaStream_t stream);               // cuda_elementwise.cu
void launch_argmax(const ArgmaxArgs& a, cudaStream_t stream);            // cuda_sample.cu
void launch_sample(const SampleArgs& a, cudaStream_t stream, Scratch& scratch);  // cuda_sample_cluster.cu
void launch_step_advance(const StepAdvanceArgs& a, cudaStream_t stream); // cuda_step.cu
void launch_logits_adjust(const LogitsAdjustArgs& a, cudaStream_t stream);  // cuda_logits.cu

}  // namespace cuda
}  // namespace strata
