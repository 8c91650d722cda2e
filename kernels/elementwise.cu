// Elementwise kernels on BF16 activations with fp32 arithmetic: the tanh-approximate GELU and its backward, the
// ring's BF16 reduce-add (fp32 add, one rounding: what NCCL does per hop), out += a on fp32 (gradients) and the
// casts between fp32 and BF16 (bitwise core/bf16.hpp's). Grid-stride loops, so any grid covers any n.
#include "elementwise.cuh"

namespace dptrain::kernels {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/π)

// out[i] = gelu(in[i]).
__global__ void gelu_forward(bf16* out, const bf16* in, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(in[i]);
    out[i] = to_bf16_rne(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

// din[i] = dout[i]·gelu'(in[i]), rounded once.
__global__ void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(in[i]);
    const float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = to_bf16_rne(to_f32(dout[i]) * (0.5f * (1.0f + t) + 0.5f * x * dt));
  }
}

// acc[i] = bf16(acc[i] + incoming[i]) with the sum in fp32: bitwise what host_reduce_add computes.
__global__ void reduce_add_bf16(bf16* acc, const bf16* incoming, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    acc[i] = to_bf16_rne(to_f32(acc[i]) + to_f32(incoming[i]));
}

// out[i] += a[i], fp32.
__global__ void add_f32(float* out, const float* a, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] += a[i];
}

// out[i] = bf16(in[i]), round to nearest even (NaN stays a quiet NaN): bitwise core/bf16.hpp's to_bf16.
__global__ void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16_rne(in[i]);
}

// out[i] = in[i] as fp32 (exact): bitwise core/bf16.hpp's to_float.
__global__ void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = to_f32(in[i]);
}

}  // namespace dptrain::kernels
