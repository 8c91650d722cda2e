// Elementwise kernels on BF16 with fp32 arithmetic (elementwise.cu): GELU forward and backward, the ring's BF16
// reduce-add, the fp32 accumulate and the BF16 ↔ fp32 casts. One launch shape for all, vectorized_launch(n): kVector
// elements per thread and step, in 16-byte accesses where the pointers allow (vectorized.cuh), grid-stride.
#pragma once
#include "common.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

__global__ void gelu_forward(bf16* out, const bf16* in, std::size_t n);                      // out = gelu(in)
__global__ void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n);   // din = dout·gelu'(in)
__global__ void reduce_add_bf16(bf16* acc, const bf16* incoming, std::size_t n);             // acc = bf16(acc + in)
__global__ void add_f32(float* out, const float* a, std::size_t n);                           // out += a (fp32)
__global__ void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n);                 // RNE, as core/bf16.hpp
__global__ void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n);                 // exact

}  // namespace dptrain::kernels
