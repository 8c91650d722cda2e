// kernels/optimizer.cu on the CPU harness against the cpu backend's adamw, with an fp32 and a BF16 gradient.
//
// Both sides evaluate the same expression in fp32, but a compiler may fuse a·b + c into one rounding (nvcc does by
// default, g++ -march=x86-64-v3 may, each where it likes), so the results may differ in their last bits. Bounds,
// from the arithmetic (u = 2⁻²⁴; a sum of two products rounded two or three times is within 2u·(|a·b| + |c·d|) of
// the exact value, so two evaluations differ by at most twice that):
//   m: 4u·(β1·|m₀| + (1 − β1)·|g|)          v: 6u·(β2·v₀ + (1 − β2)·g²)   (g² is itself rounded)
//   master: those differences carried through m̂ = m/c1, v̂ = v/c2, √v̂ + ε, the quotient, + wd·p and lr·(…),
//   each operation adding 2u of its own result (spelled out in master_tolerance below).
// The BF16 weights are bitwise equal wherever the masters are (both round to nearest even), and are checked so.
#include "cuda_on_cpu.hpp"

#include <iostream>

#include "../../kernels/optimizer.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

struct State {
  std::vector<float> master, m, v;
  std::vector<bf16> weights;
};

class AdamW : public KernelTest {
 protected:

  State random_state(std::size_t n) {
    State s{random_f32(rng, n, -1, 1), random_f32(rng, n, -1e-2f, 1e-2f), random_f32(rng, n, 0, 1e-4f),
            std::vector<bf16>(n)};
    if (n > 3) s.m[0] = s.v[0] = 0.0f;  // with a zero gradient below: no update but the decay
    return s;
  }

  // Compares the kernel's state with the reference's, element i having started from `start` with gradient g.
  static void compare(const State& got, const State& ref, const State& start, const std::vector<float>& g,
                      const AdamWParams& p, const kernels::AdamWScalars& s) {
    constexpr double u = kF32Eps;
    int bitwise_masters = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "i " << i << " g " << g[i]);
      const double gs = double(p.grad_scale) * g[i];
      const double tol_m = 4 * u * (p.beta1 * std::abs(start.m[i]) + (1 - p.beta1) * std::abs(gs));
      const double tol_v = 6 * u * (p.beta2 * start.v[i] + (1 - p.beta2) * gs * gs);
      ASSERT_NEAR(got.m[i], ref.m[i], tol_m);
      ASSERT_NEAR(got.v[i], ref.v[i], tol_v);
      ASSERT_NEAR(got.master[i], ref.master[i], master_tolerance(ref.m[i], ref.v[i], start.master[i], tol_m, tol_v, p, s));
      if (bits(got.master[i]) == bits(ref.master[i])) {
        ++bitwise_masters;
        ASSERT_EQ(got.weights[i].bits, ref.weights[i].bits);
      }
    }
    std::cout << "  " << bitwise_masters << " of " << g.size() << " masters bitwise equal\n";
  }

  static double master_tolerance(double m, double v, double p0, double tol_m, double tol_v, const AdamWParams& p,
                                 const kernels::AdamWScalars& s) {
    constexpr double u = kF32Eps;
    const double m_hat = m / s.correction1, v_hat = v / s.correction2;
    const double dm_hat = tol_m / s.correction1 + 2 * u * std::abs(m_hat);
    const double dv_hat = tol_v / s.correction2 + 2 * u * v_hat;
    const double root = std::sqrt(v_hat);
    const double droot = (root > 0 ? std::min(dv_hat / (2 * root), std::sqrt(dv_hat)) : std::sqrt(dv_hat)) + 2 * u * root;
    const double D = root + p.eps, dD = droot + 2 * u * D;
    const double U = m_hat / D, dU = dm_hat / D + std::abs(U) * dD / D + 2 * u * std::abs(U);
    const double inner = U + p.weight_decay * p0, dinner = dU + 2 * u * (std::abs(U) + std::abs(p.weight_decay * p0));
    return p.lr * dinner + 4 * u * (std::abs(p0) + p.lr * std::abs(inner));
  }
};

TEST_F(AdamW, MatchesTheCpuBackend) {
  const AdamWParams settings[] = {
      {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 1, .grad_scale = 1.0f},
      {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f, .step = 7, .grad_scale = 0.5f},
      {.lr = 6e-4f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.01f, .step = 1000, .grad_scale = 0.25f}};
  for (const AdamWParams& p : settings) {
    // One element; not a multiple of a block; several blocks.
    for (const std::size_t n : {std::size_t(1), std::size_t(37), std::size_t(3000)}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " step " << p.step);
      const kernels::AdamWScalars s =
          kernels::adamw_scalars(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step);
      const State start = random_state(n);
      std::vector<float> gf = random_f32(rng, n, -0.1f, 0.1f);
      std::vector<bf16> gb = random_bf16(rng, n, -0.1f, 0.1f);
      if (n > 3) gf[0] = 0.0f, gb[0] = to_bf16(0.0f);
      for (const bool bf16_grad : {false, true}) {
        SCOPED_TRACE(bf16_grad ? "bf16 gradient" : "fp32 gradient");
        State ref = start, got = start;
        if (bf16_grad) {
          cpu->adamw(ref.master.data(), ref.m.data(), ref.v.data(), ref.weights.data(), gb.data(), DType::bf16, n, p);
          cuda_on_cpu::launch(kernels::adamw_bf16_grad, kernels::adamw_launch(n), got.master.data(), got.m.data(),
                              got.v.data(), got.weights.data(), static_cast<const bf16*>(gb.data()), n, s);
        } else {
          cpu->adamw(ref.master.data(), ref.m.data(), ref.v.data(), ref.weights.data(), gf.data(), DType::f32, n, p);
          cuda_on_cpu::launch(kernels::adamw_f32_grad, kernels::adamw_launch(n), got.master.data(), got.m.data(),
                              got.v.data(), got.weights.data(), static_cast<const float*>(gf.data()), n, s);
        }
        compare(got, ref, start, bf16_grad ? widen(gb) : gf, p, s);
      }
    }
  }
}

}  // namespace
}  // namespace dptrain
