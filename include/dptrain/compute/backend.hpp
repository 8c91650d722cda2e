// The compute Backend: every operation the GPT model needs, forward and backward, plus AdamW and the casts the
// gradient path needs. Pointers are the backend's memory (host for `cpu`). Activations and weights are fp32
// views (BF16 weights are expanded once per use; the values are BF16 values); gradients accumulate (+=) in fp32.
// N = rows (windows × positions), C = channels, OC = output channels. Shapes are row-major.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dptrain/core/bf16.hpp"
#include "dptrain/core/dtype.hpp"

namespace dptrain {

struct AdamWParams {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;              // 1-based, for bias correction
  float grad_scale = 1.0f;   // multiplies every gradient first (clipping)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // out[N,C] = wte[token] + wpe[position]; tokens [N] with N = windows·T, position = row % T.
  virtual void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                 std::size_t N, std::size_t T, std::size_t C) = 0;
  // dwte[V,C] += scatter of dout by token; dwpe[T,C] += dout summed over windows.
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                                  std::size_t N, std::size_t T, std::size_t C) = 0;

  // out[N,C] = (in − mean)·rstd·w + b; mean, rstd [N] saved for backward. eps 1e-5.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* w,
                                 const float* b, std::size_t N, std::size_t C) = 0;
  virtual void layernorm_backward(float* din, float* dw, float* db, const float* dout, const float* in,
                                  const float* w, const float* mean, const float* rstd, std::size_t N,
                                  std::size_t C) = 0;

  // out[N,OC] = in[N,C] · w[OC,C]ᵀ + bias[OC] (bias may be null).
  virtual void matmul_forward(float* out, const float* in, const float* w, const float* bias, std::size_t N,
                              std::size_t T, std::size_t C, std::size_t OC) = 0;
  // din[N,C] += dout·w; dw[OC,C] += doutᵀ·in; dbias[OC] += Σ_rows dout (dbias may be null).
  //
  // Both work window by window (T rows at a time, N a multiple of T), and the parameter gradients are summed into
  // dw and dbias in window order: a window's rows get the same bits whatever else is in the batch (a GEMM library
  // may pick another kernel for another row count), so a batch split into micro-batches gets bitwise the same
  // gradient as the batch in one piece.
  virtual void matmul_backward(float* din, float* dw, float* dbias, const float* dout, const float* in,
                               const float* w, std::size_t N, std::size_t T, std::size_t C, std::size_t OC) = 0;
  // Causal multi-head attention. qkv[B,T,3C] (q | k | v, heads of C/NH contiguous in each), probs[B,NH,T,T],
  // out[B,T,C].
  virtual void attention_forward(float* out, float* probs, const float* qkv, std::size_t B, std::size_t T,
                                 std::size_t C, std::size_t NH) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs,
                                  std::size_t B, std::size_t T, std::size_t C, std::size_t NH) = 0;

  // Tanh-approximate GELU, elementwise over n.
  virtual void gelu_forward(float* out, const float* in, std::size_t n) = 0;
  virtual void gelu_backward(float* din, const float* in, const float* dout, std::size_t n) = 0;

  // out = a + b, elementwise over n (out may alias a).
  virtual void add(float* out, const float* a, const float* b, std::size_t n) = 0;
  // out += a, elementwise (the backward of a residual branch).
  virtual void accumulate(float* out, const float* a, std::size_t n) = 0;

  // logits[N,V] becomes softmax probabilities in place; losses[N] = −log p[target]. Returns Σ losses (double).
  virtual double softmax_cross_entropy_forward(float* logits, float* losses, const std::int32_t* targets,
                                               std::size_t N, std::size_t V) = 0;
  // probs[N,V] becomes dlogits in place: (p − onehot(target))·dloss.
  virtual void softmax_cross_entropy_backward(float* probs, const std::int32_t* targets, float dloss,
                                              std::size_t N, std::size_t V) = 0;

  // Casts between the gradient/weight storage types and fp32.
  virtual void cast(const float* in, bf16* out, std::size_t n) = 0;
  virtual void cast(const bf16* in, float* out, std::size_t n) = 0;
  // acc[n] (dtype) += incoming[n] (dtype), adding in fp32 and storing in dtype: one hop of a ring.
  virtual void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) = 0;
  // Σ g² in double of a gradient range (for the global norm).
  virtual double sum_of_squares(const void* grad, std::size_t n, DType dtype) = 0;

  // One AdamW step on n parameters of one tensor (or a slice of it): master/m/v fp32, grad in dtype, then
  // weights (BF16) = round(master). Decoupled weight decay p.weight_decay (0 for biases and norms).
  virtual void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype,
                     std::size_t n, const AdamWParams& p) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace dptrain
