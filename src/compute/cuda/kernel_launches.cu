// The launches of the kernels of kernels/, each with the launch shape its kernel file computes, on the given
// stream, each followed by a check of the launch (a bad configuration fails here, at its call, not at the next
// synchronisation). Multi-stage kernels run their stages back to back on the stream.
#include "kernel_launches.hpp"

#include "attention.cuh"
#include "classifier.cuh"
#include "cuda_check.hpp"
#include "elementwise.cuh"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "optimizer.cuh"
#include "reductions.cuh"

namespace dptrain::cuda::launch {

namespace k = dptrain::kernels;

namespace {

template <typename Kernel, typename... Args>
void run(cudaStream_t s, const k::Launch& l, Kernel kernel, Args... args) {
  kernel<<<l.grid, l.block, l.shared_bytes, s>>>(args...);
  DP_CUDA(cudaGetLastError());
}

}  // namespace

std::size_t layernorm_backward_scratch_bytes(std::size_t N, std::size_t C) {
  return k::layernorm_backward_scratch_bytes(N, C);
}
std::size_t bias_backward_scratch_bytes(std::size_t N, std::size_t OC) { return k::bias_backward_scratch_bytes(N, OC); }
std::size_t sum_of_squares_scratch_bytes(std::size_t n) { return k::sum_squares_scratch_bytes(n); }

void embedding_forward(cudaStream_t s, bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe,
                       std::size_t N, std::size_t T, std::size_t C) {
  run(s, k::embedding_forward_launch(N, C), k::embedding_forward, out, tokens, wte, wpe, N, T, C);
}

void embedding_backward(cudaStream_t s, float* dwte, float* dwpe, const bf16* dout, const std::int32_t* tokens,
                        std::size_t N, std::size_t T, std::size_t C) {
  run(s, k::embedding_backward_wte_launch(N, C), k::embedding_backward_wte, dwte, dout, tokens, N, C);
  run(s, k::embedding_backward_wpe_launch(T, C), k::embedding_backward_wpe, dwpe, dout, N, T, C);
}

void layernorm_forward(cudaStream_t s, bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w,
                       const bf16* b, std::size_t N, std::size_t C) {
  run(s, k::layernorm_forward_launch(N), k::layernorm_forward, out, mean, rstd, in, w, b, N, C);
}

void layernorm_backward(cudaStream_t s, bf16* din, float* dw, float* db, const bf16* dout, const bf16* in,
                        const bf16* w, const float* mean, const float* rstd, std::size_t N, std::size_t C,
                        void* scratch) {
  auto* partials = static_cast<float*>(scratch);
  run(s, k::layernorm_backward_launch(N), k::layernorm_backward, din, dout, in, w, mean, rstd, N, C, partials);
  run(s, k::sum_partials_launch(2 * C), k::sum_partials, dw, db, static_cast<const float*>(partials),
      std::size_t(k::partial_row_blocks(N)), C);
}

void bias_backward(cudaStream_t s, float* dbias, const bf16* dout, std::size_t N, std::size_t OC, void* scratch) {
  auto* partials = static_cast<float*>(scratch);
  run(s, k::bias_backward_launch(N), k::bias_backward, partials, dout, N, OC);
  run(s, k::sum_partials_launch(OC), k::sum_partials, dbias, static_cast<float*>(nullptr),
      static_cast<const float*>(partials), std::size_t(k::partial_row_blocks(N)), OC);
}

void gelu_forward(cudaStream_t s, bf16* out, const bf16* in, std::size_t n) {
  run(s, k::elementwise_launch(n), k::gelu_forward, out, in, n);
}
void gelu_backward(cudaStream_t s, bf16* din, const bf16* in, const bf16* dout, std::size_t n) {
  run(s, k::elementwise_launch(n), k::gelu_backward, din, in, dout, n);
}

void permute_qkv(cudaStream_t s, bf16* q, bf16* k_, bf16* v, const bf16* qkv, std::size_t B, std::size_t T,
                 std::size_t C, std::size_t NH) {
  run(s, k::attention_permute_launch(B, T, C), k::permute_qkv, q, k_, v, qkv, B, T, C, NH);
}
void unpermute(cudaStream_t s, bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  run(s, k::attention_permute_launch(B, T, C), k::unpermute, out, y, B, T, C, NH);
}
void permute_heads(cudaStream_t s, bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                   std::size_t NH) {
  run(s, k::attention_permute_launch(B, T, C), k::permute_heads, dy, dout, B, T, C, NH);
}
void unpermute_accumulate_qkv(cudaStream_t s, bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv,
                              std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  run(s, k::attention_permute_launch(B, T, C), k::unpermute_accumulate_qkv, dqkv, dq, dk, dv, B, T, C, NH);
}
void causal_softmax_forward(cudaStream_t s, bf16* probs, const float* scores, std::size_t heads, std::size_t T) {
  run(s, k::causal_softmax_launch(heads, T), k::causal_softmax_forward, probs, scores, heads, T);
}
void causal_softmax_backward(cudaStream_t s, bf16* dscores, const bf16* probs, const float* dprobs,
                             std::size_t heads, std::size_t T) {
  run(s, k::causal_softmax_launch(heads, T), k::causal_softmax_backward, dscores, probs, dprobs, heads, T);
}

void classifier_forward(cudaStream_t s, bf16* logits, float* losses, const std::int32_t* targets, std::size_t N,
                        std::size_t V, double* loss_sum) {
  run(s, k::classifier_launch(N), k::classifier_forward, logits, losses, targets, N, V);
  run(s, k::loss_sum_launch(), k::loss_sum, loss_sum, static_cast<const float*>(losses), N);
}
void classifier_backward(cudaStream_t s, bf16* probs, const float* losses, const std::int32_t* targets, float dloss,
                         std::size_t N, std::size_t V) {
  run(s, k::classifier_launch(N), k::classifier_backward, probs, losses, targets, dloss, N, V);
}

void add_bf16(cudaStream_t s, bf16* acc, const bf16* in, std::size_t n) {
  run(s, k::elementwise_launch(n), k::reduce_add_bf16, acc, in, n);
}
void add_f32(cudaStream_t s, float* acc, const float* in, std::size_t n) {
  run(s, k::elementwise_launch(n), k::add_f32, acc, in, n);
}
void cast_f32_to_bf16(cudaStream_t s, bf16* out, const float* in, std::size_t n) {
  run(s, k::elementwise_launch(n), k::cast_f32_to_bf16, out, in, n);
}
void cast_bf16_to_f32(cudaStream_t s, float* out, const bf16* in, std::size_t n) {
  run(s, k::elementwise_launch(n), k::cast_bf16_to_f32, out, in, n);
}

void sum_of_squares_f32(cudaStream_t s, double* acc, const float* g, std::size_t n, void* scratch) {
  auto* partials = static_cast<double*>(scratch);
  run(s, k::sum_squares_launch(n), k::sum_squares_f32, partials, g, n);
  run(s, k::sum_squares_finish_launch(), k::sum_squares_finish, acc, static_cast<const double*>(partials),
      k::sum_squares_blocks(n));
}
void sum_of_squares_bf16(cudaStream_t s, double* acc, const bf16* g, std::size_t n, void* scratch) {
  auto* partials = static_cast<double*>(scratch);
  run(s, k::sum_squares_launch(n), k::sum_squares_bf16, partials, g, n);
  run(s, k::sum_squares_finish_launch(), k::sum_squares_finish, acc, static_cast<const double*>(partials),
      k::sum_squares_blocks(n));
}

namespace {
k::AdamWScalars scalars(const AdamWStep& p) {
  return k::adamw_scalars(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step);
}
}  // namespace

void adamw_f32_grad(cudaStream_t s, float* master, float* m, float* v, bf16* weights, const float* grad,
                    std::size_t n, const AdamWStep& p) {
  run(s, k::adamw_launch(n), k::adamw_f32_grad, master, m, v, weights, grad, n, scalars(p));
}
void adamw_bf16_grad(cudaStream_t s, float* master, float* m, float* v, bf16* weights, const bf16* grad,
                     std::size_t n, const AdamWStep& p) {
  run(s, k::adamw_launch(n), k::adamw_bf16_grad, master, m, v, weights, grad, n, scalars(p));
}

}  // namespace dptrain::cuda::launch
