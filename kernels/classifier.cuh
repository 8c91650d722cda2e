// The fused classifier (classifier.cu): softmax cross-entropy over the vocabulary, the per-row losses, their sum,
// and in the same pass the logits' gradient written over the logits.
#pragma once
#include "common.cuh"

namespace dptrain::kernels {

// losses[n] = −log p[targets[n]] for the softmax p of row n of logits [N,V] (BF16; max and Σexp in fp32, one online
// pass), computed in fp32 from the fp32 logits (never from a rounded probability, so a loss near 0 keeps its
// relative accuracy) and capped at −log(1e-30) as the cpu backend does. Where dloss ≠ 0 a second pass writes the
// gradient over the logits: dloss·p (one rounding) off the target, and dloss·(p − 1) at the target with p − 1
// computed in fp32 as expm1(−loss) (a p near 1 would lose it); where dloss = 0 the logits are left as they are.
// targets[n] must lie in [0, V). One block per row; rows ld ≥ V elements apart (the columns past V untouched).
__global__ void classifier(bf16* logits, float* losses, const std::int32_t* targets, float dloss, std::size_t N,
                           std::size_t V, std::size_t ld);
// *acc += Σ losses[N], in double, by a fixed tree: one block.
__global__ void loss_sum(double* acc, const float* losses, std::size_t N);

// classifier: one block of 512 threads per row.
constexpr unsigned kClassifierThreads = 512;
// Chunks of 8 logits whose loads a thread issues before it processes the first of them (2: 32 registers, so 4
// blocks of 512 threads an SM, the most it holds; 4 took 40).
constexpr unsigned kClassifierLoadsAhead = 2;
inline Launch classifier_launch(std::size_t N) {
  return {dim3(N == 0 ? 1u : unsigned(N)), dim3(kClassifierThreads), 0};
}

// loss_sum: a single block of 256 threads (a power of two: the tree halves it).
constexpr unsigned kLossSumThreads = 256;
inline Launch loss_sum_launch() { return {dim3(1), dim3(kLossSumThreads), 0}; }

}  // namespace dptrain::kernels
