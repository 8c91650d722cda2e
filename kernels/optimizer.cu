// AdamW over one tensor or a slice of one, one thread per parameter (grid-stride): the cpu backend's expression
// evaluated in the same order in fp32. nvcc contracts a·b + c into fused multiply-adds (--fmad=true, its default)
// and g++ with -march=x86-64-v3 may too, differently: m, v and master then differ from the cpu backend's in their
// last bits (one rounding fewer per contracted pair), never in the arithmetic. sqrtf and the divisions are IEEE
// (correctly rounded) unless the build says --use_fast_math, which this project's does not.
#include "optimizer.cuh"

namespace dptrain::kernels {
namespace {

template <typename G>
__device__ __forceinline__ void adamw(float* master, float* m, float* v, bf16* weights, const G* grad, std::size_t n,
                                      const AdamWScalars& s) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float g = s.grad_scale * to_f32(grad[i]);
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.correction1, v_hat = vi / s.correction2;
    const float p = master[i] - s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * master[i]);
    master[i] = p;
    weights[i] = to_bf16_rne(p);
  }
}

}  // namespace

__global__ void adamw_f32_grad(float* master, float* m, float* v, bf16* weights, const float* grad, std::size_t n,
                               AdamWScalars s) {
  adamw(master, m, v, weights, grad, n, s);
}
__global__ void adamw_bf16_grad(float* master, float* m, float* v, bf16* weights, const bf16* grad, std::size_t n,
                                AdamWScalars s) {
  adamw(master, m, v, weights, grad, n, s);
}

}  // namespace dptrain::kernels
