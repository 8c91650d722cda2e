// Bf16Kernels: the kernels of kernels/ as the BF16 backend calls them, one call per operation (several launches
// where a reduction has two stages), each with the launch shape its kernel file computes. Two implementations of
// one template (kernel_calls.hpp): launches on a CUDA stream (src/compute/cuda/), and the same kernels run on the
// CPU harness by the tests, so the backend's own code runs in CI. C++17: nvcc compiles it too. Shapes as in
// compute/backend.hpp; activations BF16, parameter gradients fp32; scratch of the size the *_scratch_bytes give.
#pragma once
#include <cstddef>
#include <cstdint>

#include "dptrain/core/bf16_type.hpp"

namespace dptrain {

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int step;  // 1-based
};

class Bf16Kernels {
 public:
  virtual ~Bf16Kernels() = default;

  virtual std::size_t layernorm_backward_scratch_bytes(std::size_t N, std::size_t C) const = 0;
  virtual std::size_t bias_backward_scratch_bytes(std::size_t N, std::size_t OC) const = 0;
  virtual std::size_t sum_of_squares_scratch_bytes(std::size_t n) const = 0;

  virtual void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe,
                                 std::size_t N, std::size_t T, std::size_t C) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const std::int32_t* tokens,
                                  std::size_t N, std::size_t T, std::size_t C) = 0;
  virtual void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                                 std::size_t N, std::size_t C) = 0;
  virtual void layernorm_backward(bf16* din, float* dw, float* db, const bf16* dout, const bf16* in, const bf16* w,
                                  const float* mean, const float* rstd, std::size_t N, std::size_t C,
                                  void* scratch) = 0;
  // dbias[OC] += Σ_rows dout, dout's rows ld ≥ OC elements apart.
  virtual void bias_backward(float* dbias, const bf16* dout, std::size_t N, std::size_t OC, std::size_t ld,
                             void* scratch) = 0;
  virtual void gelu_forward(bf16* out, const bf16* in, std::size_t n) = 0;
  virtual void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n) = 0;

  // Attention's non-GEMM steps: q, k, v, y, dy, dq, dk, dv [B,NH,T,hs]; scores, dprobs fp32 and probs, dscores
  // BF16 [B,NH,T,T].
  virtual void permute_qkv(bf16* q, bf16* k, bf16* v, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
                           std::size_t NH) = 0;
  virtual void unpermute(bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH) = 0;
  virtual void permute_heads(bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                             std::size_t NH) = 0;
  virtual void unpermute_qkv(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, std::size_t B, std::size_t T,
                             std::size_t C, std::size_t NH) = 0;
  virtual void causal_softmax_forward(bf16* probs, const float* scores, std::size_t heads, std::size_t T) = 0;
  virtual void causal_softmax_backward(bf16* dscores, const bf16* probs, const float* dprobs, std::size_t heads,
                                       std::size_t T) = 0;

  // The classifier: losses (their sum added into *loss_sum) and, where dloss ≠ 0, the logits' gradient in place;
  // rows of V values ld ≥ V elements apart.
  virtual void classifier(bf16* logits, float* losses, const std::int32_t* targets, float dloss, std::size_t N,
                          std::size_t V, std::size_t ld, double* loss_sum) = 0;

  virtual void add_bf16(bf16* acc, const bf16* in, std::size_t n) = 0;  // fp32 add, one rounding
  virtual void add_f32(float* acc, const float* in, std::size_t n) = 0;
  virtual void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n) = 0;
  virtual void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n) = 0;
  virtual void sum_of_squares_f32(double* acc, const float* g, std::size_t n, void* scratch) = 0;
  virtual void sum_of_squares_bf16(double* acc, const bf16* g, std::size_t n, void* scratch) = 0;
  virtual void adamw_f32_grad(float* master, float* m, float* v, bf16* weights, const float* grad, std::size_t n,
                              const AdamWStep& p) = 0;
  virtual void adamw_bf16_grad(float* master, float* m, float* v, bf16* weights, const bf16* grad, std::size_t n,
                               const AdamWStep& p) = 0;
};

}  // namespace dptrain
