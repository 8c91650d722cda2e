// Causal attention under --cpu-gemm onednn-bf16: each of its products for all NH heads of a window in one batched
// BF16 call, over the full T×T with the causal part kept by the softmax (the per-head path of cpu_backend.cpp makes
// NH·T/32 small calls per product instead, which oneDNN runs on a generic kernel at a tenth of its BF16 peak:
// docs/cpu-speed.md). The operands are rounded to BF16 where the per-head path rounds them — q, k, v, dO, the
// probabilities and dS — and every product accumulates in fp32. One window's products run on one thread, and the
// windows are shared among the threads: the same bits for any thread count and any grouping of windows (and a
// micro-batch of fewer windows than threads leaves the other threads idle during attention).
#pragma once
#include <cmath>
#include <cstddef>

#include "dptrain/compute/cpu_gemm.hpp"

namespace dptrain::cpu {

// One window's attention: T tokens, C channels, NH heads of C/NH.
struct AttentionShape {
  std::size_t T, C, NH;
  float scale() const { return 1.0f / std::sqrt(float(C / NH)); }  // of the scores: 1/√(head size)
};

// The scratch one thread needs for a window (the backward's; the forward uses part of it), in bytes.
std::size_t bf16_attention_scratch_bytes(const AttentionShape& shape);

// out[B,T,C] and probs[B,NH,T,T] from qkv[B,T,3C] (q, k, v side by side, heads C/NH wide within each).
// `scratch`: bf16_attention_scratch_bytes() for each of omp_get_max_threads() threads.
void bf16_attention_forward(BatchedBf16GemmFunction gemm, float* out, float* probs, const float* qkv, std::size_t B,
                            const AttentionShape& shape, std::byte* scratch);

// dqkv[B,T,3C] += attention's gradient from dout[B,T,C], given the forward's qkv and probs.
void bf16_attention_backward(BatchedBf16GemmFunction gemm, float* dqkv, const float* dout, const float* qkv,
                             const float* probs, std::size_t B, const AttentionShape& shape, std::byte* scratch);

}  // namespace dptrain::cpu
