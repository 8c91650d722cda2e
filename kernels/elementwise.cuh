// Elementwise kernels on BF16 with fp32 arithmetic (elementwise.cu): GELU forward and backward, the ring's BF16
// reduce-add, the fp32 accumulate and the BF16 ↔ fp32 casts. One launch shape for all, vectorized_launch(n): kVector
// elements per thread and step, in 16-byte accesses where the pointers allow (vectorized.cuh), grid-stride.
#pragma once
#include "common.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

// The tanh-approximate GELU and its derivative on one fp32 value: what gelu_forward and gelu_backward compute per
// element (and the harness's replay of cuBLASLt's GELU epilogues, tests/kernels/cuda_on_cpu_backend.cpp).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)
__host__ __device__ __forceinline__ float gelu_tanh(float x) {
  return tanhf(kGeluScale * (x + 0.044715f * x * x * x));
}
__host__ __device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + gelu_tanh(x)); }
__host__ __device__ __forceinline__ float gelu_derivative(float x) {
  const float t = gelu_tanh(x);
  const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * dt;
}

__global__ void gelu_forward(bf16* out, const bf16* in, std::size_t n);                      // out = gelu(in)
__global__ void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n);   // din = dout·gelu'(in)
__global__ void reduce_add_bf16(bf16* acc, const bf16* incoming, std::size_t n);             // acc = bf16(acc + in)
__global__ void add_f32(float* out, const float* a, std::size_t n);                           // out += a (fp32)
__global__ void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n);                 // RNE, as core/bf16.hpp
__global__ void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n);                 // exact

}  // namespace dptrain::kernels
