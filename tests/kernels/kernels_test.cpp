// The CUDA kernels of kernels/, run on the CPU by tests/kernels/cuda_on_cpu.hpp, against the cpu backend's
// operations (fp32) and the host reduce-add, on random BF16 inputs and awkward shapes (C not a multiple of 32, one
// row, one element, more rows than a block's warps, a grid smaller than the data).
//
// Tolerances, from the arithmetic. A BF16 value has 8 significant bits, so one rounding to nearest moves a result v
// by at most 2⁻⁸·|v|; when the kernel's fp32 value differs from the reference's in its last bits (another order of
// summation, a constant rounded differently) the rounding may land on the other neighbour, at most one BF16 ulp
// (2⁻⁷·|v|) away. The fp32 differences themselves are far smaller: a sum of C terms of size s in another order
// differs by at most ≈ 2·C·2⁻²⁴·s (≤ 1e-4·s for C ≤ 768), which is what the LayerNorm statistics are held to.
#include "cuda_on_cpu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/core/reduce_add.hpp"
#include "../../kernels/elementwise.cu"
#include "../../kernels/layernorm.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

class Kernels : public KernelTest {};

TEST_F(Kernels, ReduceAddIsBitwiseTheHostReduceAdd) {
  for (std::size_t n : {std::size_t(1), std::size_t(31), std::size_t(1000), std::size_t(4099)}) {
    // Mixed magnitudes, so many sums round; a NaN and infinities take the special paths.
    std::vector<bf16> acc = random_bf16(rng, n, -3, 3), in = random_bf16(rng, n, -3e-2f, 3e-2f);
    if (n > 3) acc[0] = to_bf16(NAN), acc[1] = to_bf16(INFINITY), in[2] = to_bf16(-INFINITY);
    std::vector<bf16> expected = acc;
    host_reduce_add(expected.data(), in.data(), n, DType::bf16);
    cuda_on_cpu::launch(kernels::reduce_add_bf16, dim3(2), dim3(64), acc.data(), in.data(), n);  // grid < n
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i].bits, expected[i].bits) << "n " << n << " i " << i;
  }
}

TEST_F(Kernels, GeluForwardAndBackwardMatchTheCpuBackend) {
  for (std::size_t n : {std::size_t(1), std::size_t(33), std::size_t(3000)}) {
    const std::vector<bf16> x = random_bf16(rng, n, -5, 5), dout = random_bf16(rng, n, -1, 1);
    const std::vector<float> xf = widen(x), doutf = widen(dout);
    std::vector<float> ref(n), dref(n, NAN);  // the backward writes din, reading none of it
    cpu->gelu_forward(ref.data(), xf.data(), n);
    cpu->gelu_backward(dref.data(), xf.data(), doutf.data(), n);
    std::vector<bf16> out(n), din(n, to_bf16(NAN));
    cuda_on_cpu::launch(kernels::gelu_forward, dim3(3), dim3(32), out.data(), x.data(), n);
    cuda_on_cpu::launch(kernels::gelu_backward, dim3(1), dim3(128), din.data(), x.data(), dout.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      // One BF16 rounding of an fp32 value, plus where the two tanh differ: the kernel's tanhf and the cpu
      // backend's rational one (which is ±1 exactly past |u| = 7.9, where 1 − |tanh u| < 3e-7) agree to
      // δt = 4e-7 absolute. gelu = ½x(1 + t) moves by ½|x|·δt ≤ 1e-6 (2⁻²⁰ covers it), and gelu' =
      // ½(1 + t) + ½x(1 − t²)·u' by |½ − x·t·u'|·δt ≤ (½ + |x|·u')·δt, up to 7e-6 at |x| = 5: the results near
      // zero, where the relative bound says nothing.
      const double x = xf[i], du = kernels::kGeluScale * (1 + 3 * 0.044715 * x * x);
      EXPECT_NEAR(to_float(out[i]), ref[i], kBf16Ulp * std::abs(ref[i]) + 0x1p-20) << "x " << x;
      EXPECT_NEAR(to_float(din[i]), dref[i],
                  kBf16Ulp * std::abs(dref[i]) + (0.5 + std::abs(x) * du) * std::abs(doutf[i]) * 4e-7)
          << "x " << x;
    }
  }
}

TEST_F(Kernels, LayerNormForwardMatchesTheCpuBackend) {
  struct Shape {
    std::size_t N, C;
  };
  // C below, at and above a warp, not a multiple of 32; one row; more rows than one block's four warps; rows of
  // 16-byte chunks (C a multiple of 8), more of them than a warp has lanes.
  for (const Shape s : {Shape{1, 1}, Shape{1, 37}, Shape{5, 32}, Shape{9, 300}, Shape{13, 768}, Shape{3, 2056}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " C " << s.C);
    std::vector<bf16> in = random_bf16(rng, s.N * s.C, -2, 2);
    for (std::size_t c = 0; c < s.C && s.N > 2; ++c) in[2 * s.C + c] = to_bf16(to_float(in[2 * s.C + c]) + 50.0f);
    const std::vector<bf16> w = random_bf16(rng, s.C, 0.5f, 1.5f), b = random_bf16(rng, s.C, -0.5f, 0.5f);
    const std::vector<float> inf = widen(in), wf = widen(w), bf = widen(b);
    std::vector<float> ref(s.N * s.C), ref_mean(s.N), ref_rstd(s.N);
    cpu->layernorm_forward(ref.data(), ref_mean.data(), ref_rstd.data(), inf.data(), wf.data(), bf.data(), s.N, s.C);
    std::vector<bf16> out(s.N * s.C);
    std::vector<float> mean(s.N, NAN), rstd(s.N, NAN);
    cuda_on_cpu::launch(kernels::layernorm_forward, kernels::layernorm_forward_launch(s.N), out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), s.N, s.C);
    for (std::size_t r = 0; r < s.N; ++r) {
      double scale = 0;  // the row's largest |x|: the size of the terms summed
      for (std::size_t c = 0; c < s.C; ++c) scale = std::max(scale, double(std::abs(inf[r * s.C + c])));
      EXPECT_NEAR(mean[r], ref_mean[r], 1e-4 * scale) << "row " << r;
      EXPECT_NEAR(rstd[r], ref_rstd[r], 1e-4 * ref_rstd[r]) << "row " << r;
      for (std::size_t c = 0; c < s.C; ++c) {
        const float expected = ref[r * s.C + c];
        // A normalised value is (x − mean)·rstd·w + b with |w| ≤ 1.5: the statistics' 1e-4 relative error moves
        // it by ≤ 1e-4·(|x − mean|·rstd·|w|) ≤ 1e-4·(|expected| + |b|), then one BF16 rounding.
        EXPECT_NEAR(to_float(out[r * s.C + c]), expected,
                    kBf16Ulp * std::abs(expected) + 1e-4 * (std::abs(expected) + std::abs(bf[c])) + 0x1p-20)
            << "row " << r << " c " << c;
      }
    }
    // The same rows one element past a 16-byte boundary take the element-at-a-time path: the same bits.
    Placed<bf16> in1(in, 1), w1(w, 1), b1(b, 1), out1(std::vector<bf16>(out.size()), 1);
    std::vector<float> mean1(s.N, NAN), rstd1(s.N, NAN);
    cuda_on_cpu::launch(kernels::layernorm_forward, kernels::layernorm_forward_launch(s.N), out1.data, mean1.data(),
                        rstd1.data(), in1.data, w1.data, b1.data, s.N, s.C);
    for (std::size_t r = 0; r < s.N; ++r) {
      EXPECT_EQ(bits(mean1[r]), bits(mean[r])) << "row " << r;
      EXPECT_EQ(bits(rstd1[r]), bits(rstd[r])) << "row " << r;
    }
    const std::vector<bf16> shifted_out = out1.values();
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(shifted_out[i].bits, out[i].bits) << i;
  }
}

}  // namespace
}  // namespace dptrain
