// The non-GEMM kernels of causal multi-head attention (attention.cu). The CUDA backend does the four products with
// strided-batched cuBLASLt GEMMs over the B·NH heads, each head's matrices contiguous: q, k, v, y, dy, dq, dk, dv
// are [B,NH,T,hs] (hs = C/NH), scores and probabilities [B,NH,T,T]. These kernels move heads between that layout
// and the model's rows (qkv [B,T,3C] = q | k | v per row, head h's hs channels at h·hs in each; out, dout [B,T,C])
// and do the causal softmax and its backward.
//
// Forward:  permute_qkv → scores = scale·q·kᵀ (fp32) → causal_softmax_forward → y = probs·v → unpermute.
// Backward: permute_heads(dout) → dprobs = dy·vᵀ (fp32), dv = probsᵀ·dy → causal_softmax_backward →
//           dq = scale·dscores·k, dk = scale·dscoresᵀ·q → unpermute_qkv.
#pragma once
#include "common.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

// q, k, v [B,NH,T,hs] = the three parts of qkv [B,T,3C], exactly (a permutation).
__global__ void permute_qkv(bf16* q, bf16* k, bf16* v, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
                            std::size_t NH);
// out [B,T,C] = y [B,NH,T,hs], exactly.
__global__ void unpermute(bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
// dy [B,NH,T,hs] = dout [B,T,C], exactly (the inverse of unpermute).
__global__ void permute_heads(bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                              std::size_t NH);
// dqkv [B,T,3C] = dq | dk | dv (each [B,NH,T,hs]), exactly (the inverse of permute_qkv).
__global__ void unpermute_qkv(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, std::size_t B,
                              std::size_t T, std::size_t C, std::size_t NH);

// probs [heads·T, T] from scores [heads·T, T] (fp32, already scaled; heads = B·NH): row i of each head is the
// softmax of scores[i, 0..i] (max-subtracted, fp32), and exactly 0 at j > i. The upper triangle of the scores is
// not read. One warp per row.
__global__ void causal_softmax_forward(bf16* probs, const float* scores, std::size_t heads, std::size_t T);
// dscores [heads·T, T] = p ⊙ (dP − Σ_{j≤i} p·dP) on the causal part, exactly 0 at j > i, from the stored probs
// and dprobs (fp32). The scale is not applied (it is the next GEMMs' alpha). One warp per row.
__global__ void causal_softmax_backward(bf16* dscores, const bf16* probs, const float* dprobs, std::size_t heads,
                                        std::size_t T);

// The four permutes: for_each_element over the B·T·C elements of one tensor (vectorized.cuh), kVector per thread.
inline Launch attention_permute_launch(std::size_t B, std::size_t T, std::size_t C) {
  return vectorized_launch(B * T * C);
}

// Both softmaxes: one warp per row of heads·T rows, 8 warps per block.
constexpr unsigned kSoftmaxWarpsPerBlock = 8;
inline Launch causal_softmax_launch(std::size_t heads, std::size_t T) {
  const unsigned blocks = ceil_div(heads * T, kSoftmaxWarpsPerBlock);
  return {dim3(blocks == 0 ? 1 : blocks), dim3(32 * kSoftmaxWarpsPerBlock), 0};
}

}  // namespace dptrain::kernels
