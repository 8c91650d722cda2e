// AdamW (optimizer.cu): fp32 master weights and moments, BF16 weights rounded from the master, the gradient fp32
// or BF16. The same arithmetic as the cpu backend's adamw, element by element.
#pragma once
#include <cmath>

#include "common.cuh"
#include "elementwise.cuh"

namespace dptrain::kernels {

// The step's scalars, passed by value. correction1 = 1 − β1^t and correction2 = 1 − β2^t come from the host
// (adamw_scalars), computed as the cpu backend computes them.
struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, correction1, correction2;
};

// step: 1-based. Bitwise the cpu backend's bias corrections: 1.0f − std::pow(β, float(step)) in fp32.
inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay,
                                  float grad_scale, int step) {
  return {lr,         beta1, beta2, eps, weight_decay, grad_scale, 1.0f - std::pow(beta1, float(step)),
          1.0f - std::pow(beta2, float(step))};
}

// For i < n: g = grad_scale·grad[i]; m = β1·m + (1 − β1)·g; v = β2·v + (1 − β2)·g²;
// master −= lr·(m/correction1 / (sqrt(v/correction2) + eps) + weight_decay·master); weights[i] = bf16(master) (RNE).
__global__ void adamw_f32_grad(float* master, float* m, float* v, bf16* weights, const float* grad, std::size_t n,
                               AdamWScalars s);
__global__ void adamw_bf16_grad(float* master, float* m, float* v, bf16* weights, const bf16* grad, std::size_t n,
                                AdamWScalars s);
inline Launch adamw_launch(std::size_t n) { return vectorized_launch(n); }

}  // namespace dptrain::kernels
