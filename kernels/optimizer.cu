// AdamW over one tensor or a slice of one, kVector parameters per thread and step (vectorized.cuh: 16-byte accesses
// where every pointer is aligned, grid-stride): the cpu backend's expression
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
  for_each_element(n, aligned16(master, m, v, weights, grad), [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    const Lanes<G, W> g_in = load_lanes<W>(grad + i);
    Lanes<float, W> p = load_lanes<W>(master + i), mi = load_lanes<W>(m + i), vi = load_lanes<W>(v + i);
    Lanes<bf16, W> w;
    for (unsigned k = 0; k < W; ++k) {
      const float g = s.grad_scale * to_f32(g_in.at[k]);
      mi.at[k] = s.beta1 * mi.at[k] + (1.0f - s.beta1) * g;
      vi.at[k] = s.beta2 * vi.at[k] + (1.0f - s.beta2) * g * g;
      const float m_hat = mi.at[k] / s.correction1, v_hat = vi.at[k] / s.correction2;
      p.at[k] = p.at[k] - s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * p.at[k]);
      w.at[k] = to_bf16_rne(p.at[k]);
    }
    store_lanes<W>(m + i, mi);
    store_lanes<W>(v + i, vi);
    store_lanes<W>(master + i, p);
    store_lanes<W>(weights + i, w);
  });
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
