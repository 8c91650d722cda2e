// KernelCalls<Launcher>: Bf16Kernels from the kernels of kernels/, each launched with the shape its kernel file
// computes. Launcher is a callable (the Bf16Kernels operation's name, Launch, kernel, args...) that runs the kernel:
// `<<<>>>` on a CUDA stream (the cuda backend) or the CPU harness (tests/kernels/cuda_on_cpu.hpp). Include it after
// the kernels' declarations are reachable: nvcc, or the harness first. C++17.
#pragma once
#include "attention.cuh"
#include "bf16_kernels.hpp"
#include "classifier.cuh"
#include "elementwise.cuh"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "optimizer.cuh"
#include "reductions.cuh"

namespace dptrain {

template <typename Launcher>
class KernelCalls final : public Bf16Kernels {
 public:
  explicit KernelCalls(Launcher launcher) : run_(launcher) {}

  std::size_t layernorm_backward_scratch_bytes(std::size_t N, std::size_t C) const override {
    return kernels::layernorm_backward_scratch_bytes(N, C);
  }
  std::size_t bias_backward_scratch_bytes(std::size_t N, std::size_t OC) const override {
    return kernels::bias_backward_scratch_bytes(N, OC);
  }
  std::size_t sum_of_squares_scratch_bytes(std::size_t n) const override {
    return kernels::sum_squares_scratch_bytes(n);
  }

  void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe, std::size_t N,
                         std::size_t T, std::size_t C) override {
    run_(__func__, kernels::embedding_forward_launch(N, C), kernels::embedding_forward, out, tokens, wte, wpe, N, T,
         C);
  }

  void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const std::int32_t* tokens, std::size_t N,
                          std::size_t T, std::size_t C) override {
    run_(__func__, kernels::embedding_backward_wte_launch(N, C), kernels::embedding_backward_wte, dwte, dout, tokens,
         N, C);
    run_(__func__, kernels::embedding_backward_wpe_launch(T, C), kernels::embedding_backward_wpe, dwpe, dout, N, T,
         C);
  }

  void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                         std::size_t N, std::size_t C) override {
    run_(__func__, kernels::layernorm_forward_launch(N), kernels::layernorm_forward, out, mean, rstd, in, w, b, N, C);
  }

  void layernorm_backward(bf16* din, float* dw, float* db, const bf16* dout, const bf16* in, const bf16* w,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C,
                          void* scratch) override {
    auto* partials = static_cast<float*>(scratch);
    run_(__func__, kernels::layernorm_backward_launch(N, C), kernels::layernorm_backward, din, dout, in, w, mean,
         rstd, N, C, partials);
    run_(__func__, kernels::sum_partials_launch(2 * C), kernels::sum_partials, dw, db,
         static_cast<const float*>(partials), std::size_t(kernels::partial_row_blocks(N)), C);
  }

  void bias_backward(float* dbias, const bf16* dout, std::size_t N, std::size_t OC, std::size_t ld,
                     void* scratch) override {
    auto* partials = static_cast<float*>(scratch);
    run_(__func__, kernels::bias_backward_launch(N, OC), kernels::bias_backward, partials, dout, N, OC, ld);
    run_(__func__, kernels::sum_partials_launch(OC), kernels::sum_partials, dbias, static_cast<float*>(nullptr),
         static_cast<const float*>(partials), std::size_t(kernels::partial_row_blocks(N)), OC);
  }

  void gelu_forward(bf16* out, const bf16* in, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::gelu_forward, out, in, n);
  }
  void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::gelu_backward, din, in, dout, n);
  }

  void permute_qkv(bf16* q, bf16* k_, bf16* v, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
                   std::size_t NH) override {
    run_(__func__, kernels::attention_permute_launch(B, T, C), kernels::permute_qkv, q, k_, v, qkv, B, T, C, NH);
  }
  void unpermute(bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH) override {
    run_(__func__, kernels::attention_permute_launch(B, T, C), kernels::unpermute, out, y, B, T, C, NH);
  }
  void permute_heads(bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                     std::size_t NH) override {
    run_(__func__, kernels::attention_permute_launch(B, T, C), kernels::permute_heads, dy, dout, B, T, C, NH);
  }
  void unpermute_qkv(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, std::size_t B, std::size_t T,
                     std::size_t C, std::size_t NH) override {
    run_(__func__, kernels::attention_permute_launch(B, T, C), kernels::unpermute_qkv, dqkv, dq, dk, dv, B, T, C, NH);
  }
  void causal_softmax_forward(bf16* probs, const float* scores, std::size_t heads, std::size_t T) override {
    run_(__func__, kernels::causal_softmax_launch(heads, T), kernels::causal_softmax_forward, probs, scores, heads,
         T);
  }
  void causal_softmax_backward(bf16* dscores, const bf16* probs, const float* dprobs, std::size_t heads,
                               std::size_t T) override {
    run_(__func__, kernels::causal_softmax_launch(heads, T), kernels::causal_softmax_backward, dscores, probs, dprobs,
         heads, T);
  }

  void classifier(bf16* logits, float* losses, const std::int32_t* targets, float dloss, std::size_t N, std::size_t V,
                  std::size_t ld, double* loss_sum) override {
    run_(__func__, kernels::classifier_launch(N), kernels::classifier, logits, losses, targets, dloss, N, V, ld);
    run_(__func__, kernels::loss_sum_launch(), kernels::loss_sum, loss_sum, static_cast<const float*>(losses), N);
  }

  void add_bf16(bf16* acc, const bf16* in, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::reduce_add_bf16, acc, in, n);
  }
  void add_f32(float* acc, const float* in, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::add_f32, acc, in, n);
  }
  void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::cast_f32_to_bf16, out, in, n);
  }
  void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n) override {
    run_(__func__, kernels::vectorized_launch(n), kernels::cast_bf16_to_f32, out, in, n);
  }

  void sum_of_squares_f32(double* acc, const float* g, std::size_t n, void* scratch) override {
    auto* partials = static_cast<double*>(scratch);
    run_(__func__, kernels::sum_squares_launch(n), kernels::sum_squares_f32, partials, g, n);
    run_(__func__, kernels::sum_squares_finish_launch(), kernels::sum_squares_finish, acc,
         static_cast<const double*>(partials), kernels::sum_squares_blocks(n));
  }
  void sum_of_squares_bf16(double* acc, const bf16* g, std::size_t n, void* scratch) override {
    auto* partials = static_cast<double*>(scratch);
    run_(__func__, kernels::sum_squares_launch(n), kernels::sum_squares_bf16, partials, g, n);
    run_(__func__, kernels::sum_squares_finish_launch(), kernels::sum_squares_finish, acc,
         static_cast<const double*>(partials), kernels::sum_squares_blocks(n));
  }

  void adamw_f32_grad(float* master, float* m, float* v, bf16* weights, const float* grad, std::size_t n,
                      const AdamWStep& p) override {
    run_(__func__, kernels::adamw_launch(n), kernels::adamw_f32_grad, master, m, v, weights, grad, n, scalars(p));
  }
  void adamw_bf16_grad(float* master, float* m, float* v, bf16* weights, const bf16* grad, std::size_t n,
                       const AdamWStep& p) override {
    run_(__func__, kernels::adamw_launch(n), kernels::adamw_bf16_grad, master, m, v, weights, grad, n, scalars(p));
  }

 private:
  static kernels::AdamWScalars scalars(const AdamWStep& p) {
    return kernels::adamw_scalars(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step);
  }

  Launcher run_;
};

}  // namespace dptrain
