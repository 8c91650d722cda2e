// Host functions that launch the kernels of kernels/ on a stream, with the launch shapes the kernel files compute
// (kernels/*.cuh). Compiled by nvcc (kernel_launches.cu); called from the cuda backend's C++ code. Shapes as in
// backend.hpp: activations BF16, parameter gradients fp32; `scratch` is device memory of the size the matching
// *_scratch_bytes function gives.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dptrain/core/bf16_type.hpp"

namespace dptrain::cuda::launch {

// ---- scratch each multi-stage kernel needs ---------------------------------------------------------------------
std::size_t layernorm_backward_scratch_bytes(std::size_t N, std::size_t C);
std::size_t bias_backward_scratch_bytes(std::size_t N, std::size_t OC);
std::size_t sum_of_squares_scratch_bytes(std::size_t n);

// ---- the model's operations -------------------------------------------------------------------------------------
void embedding_forward(cudaStream_t s, bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe,
                       std::size_t N, std::size_t T, std::size_t C);
void embedding_backward(cudaStream_t s, float* dwte, float* dwpe, const bf16* dout, const std::int32_t* tokens,
                        std::size_t N, std::size_t T, std::size_t C);
void layernorm_forward(cudaStream_t s, bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w,
                       const bf16* b, std::size_t N, std::size_t C);
void layernorm_backward(cudaStream_t s, bf16* din, float* dw, float* db, const bf16* dout, const bf16* in,
                        const bf16* w, const float* mean, const float* rstd, std::size_t N, std::size_t C,
                        void* scratch);
void bias_backward(cudaStream_t s, float* dbias, const bf16* dout, std::size_t N, std::size_t OC, void* scratch);
void gelu_forward(cudaStream_t s, bf16* out, const bf16* in, std::size_t n);
void gelu_backward(cudaStream_t s, bf16* din, const bf16* in, const bf16* dout, std::size_t n);

// Attention's non-GEMM steps; q, k, v, y, dy, dq, dk, dv [B,NH,T,hs], scores/dprobs fp32 and probs/dscores BF16
// [B,NH,T,T].
void permute_qkv(cudaStream_t s, bf16* q, bf16* k, bf16* v, const bf16* qkv, std::size_t B, std::size_t T,
                 std::size_t C, std::size_t NH);
void unpermute(cudaStream_t s, bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
void permute_heads(cudaStream_t s, bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                   std::size_t NH);
void unpermute_accumulate_qkv(cudaStream_t s, bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv,
                              std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
void causal_softmax_forward(cudaStream_t s, bf16* probs, const float* scores, std::size_t heads, std::size_t T);
void causal_softmax_backward(cudaStream_t s, bf16* dscores, const bf16* probs, const float* dprobs,
                             std::size_t heads, std::size_t T);

// The classifier: probabilities and losses (their sum added into *loss_sum), then dlogits in place.
void classifier_forward(cudaStream_t s, bf16* logits, float* losses, const std::int32_t* targets, std::size_t N,
                        std::size_t V, double* loss_sum);
void classifier_backward(cudaStream_t s, bf16* probs, const float* losses, const std::int32_t* targets, float dloss,
                         std::size_t N, std::size_t V);

// ---- elementwise, norms, the optimizer --------------------------------------------------------------------------
void add_bf16(cudaStream_t s, bf16* acc, const bf16* in, std::size_t n);  // fp32 add, one rounding
void add_f32(cudaStream_t s, float* acc, const float* in, std::size_t n);
void cast_f32_to_bf16(cudaStream_t s, bf16* out, const float* in, std::size_t n);
void cast_bf16_to_f32(cudaStream_t s, float* out, const bf16* in, std::size_t n);
void sum_of_squares_f32(cudaStream_t s, double* acc, const float* g, std::size_t n, void* scratch);
void sum_of_squares_bf16(cudaStream_t s, double* acc, const bf16* g, std::size_t n, void* scratch);

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int step;  // 1-based
};
void adamw_f32_grad(cudaStream_t s, float* master, float* m, float* v, bf16* weights, const float* grad,
                    std::size_t n, const AdamWStep& p);
void adamw_bf16_grad(cudaStream_t s, float* master, float* m, float* v, bf16* weights, const bf16* grad,
                     std::size_t n, const AdamWStep& p);

}  // namespace dptrain::cuda::launch
