// kernels/reductions.cu on the CPU harness: the bias gradient (bias_backward, then sum_partials) against the cpu
// backend's matmul_backward dbias, and the squared norms (sum_squares_*, then sum_squares_finish) against its
// sum_of_squares.
//
// Tolerances, from the arithmetic (u = 2⁻²⁴ for fp32, 2⁻⁵³ for double; a sum of k terms in any order is within
// (k − 1)·u·Σ|term| of the exact sum):
// - dbias: the kernels add each column's rows block by block and then the blocks; the cpu backend adds the rows
//   one by one into dbias: |Δ| ≤ 2(N + 1)·u·(|dbias₀| + Σ_rows |dout|). With dout and dbias₀ small multiples of 1/4
//   every partial sum is exact and the result is bitwise the reference.
// - Σ g²: every square is exact in double (a 24-bit significand squared needs 48 bits), all terms are ≥ 0, so
//   each side is within (n + 1)·2⁻⁵³ of the exact sum, relatively: |Δ| ≤ 2(n + 2)·2⁻⁵³·total (≈ 1e-12 at n = 4,000).
#include "cuda_on_cpu.hpp"

#include "../../kernels/reductions.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

class Reductions : public KernelTest {
 protected:

  // The cpu backend's dbias: matmul_backward with one input channel (its dw is thrown away); dout [N,OC] in rows
  // of ld.
  std::vector<float> cpu_bias_gradient(std::vector<float> dbias, const std::vector<bf16>& dout, std::size_t N,
                                       std::size_t OC, std::size_t ld) {
    const std::vector<float> doutf = widen(dout), in(N, 0.0f), w(OC, 0.0f);
    std::vector<float> dw(OC, 0.0f);
    cpu->matmul_backward(nullptr, dw.data(), dbias.data(), doutf.data(), in.data(), w.data(), N, N, 1, OC, ld);
    return dbias;
  }

  static std::vector<float> bias_gradient(std::vector<float> dbias, const bf16* dout, std::size_t N, std::size_t OC,
                                          std::size_t ld) {
    std::vector<float> scratch(kernels::bias_backward_scratch_bytes(N, OC) / sizeof(float), NAN);
    cuda_on_cpu::launch(kernels::bias_backward, kernels::bias_backward_launch(N, OC), scratch.data(), dout, N, OC,
                        ld);
    cuda_on_cpu::launch(kernels::sum_partials, kernels::sum_partials_launch(OC), dbias.data(),
                        static_cast<float*>(nullptr), static_cast<const float*>(scratch.data()),
                        std::size_t(kernels::partial_row_blocks(N)), OC);
    return dbias;
  }

  template <typename G>
  static double sum_of_squares(void (*stage1)(double*, const G*, std::size_t), const std::vector<G>& g, double acc) {
    const std::size_t n = g.size();
    std::vector<double> partials(kernels::sum_squares_scratch_bytes(n) / sizeof(double), NAN);
    cuda_on_cpu::launch(stage1, kernels::sum_squares_launch(n), partials.data(), g.data(), n);
    cuda_on_cpu::launch(kernels::sum_squares_finish, kernels::sum_squares_finish_launch(), &acc,
                        static_cast<const double*>(partials.data()), kernels::sum_squares_blocks(n));
    return acc;
  }
};

TEST_F(Reductions, BiasGradientMatchesTheCpuBackend) {
  struct Shape {
    std::size_t N, OC, ld;
  };
  // One row, one column; OC not a multiple of 32, above a block's 256 threads; one block's rows and many blocks';
  // rows padded by one and to 64, the padding NaN (read, it would make the sums NaN); 16-byte rows (OC and ld
  // multiples of 8) of more columns than a block's threads take 8 at a time, and padded; enough rows for the most
  // blocks (512 partials: each of sum_partials' 8 warps adds 64 of them, 8 loads at a time).
  for (const Shape s :
       {Shape{1, 1, 1}, Shape{1, 300, 300}, Shape{33, 37, 37}, Shape{100, 600, 600}, Shape{700, 5, 5},
        Shape{33, 37, 38}, Shape{100, 5, 64}, Shape{40, 2056, 2056}, Shape{50, 64, 72}, Shape{16400, 40, 40}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " OC " << s.OC << " ld " << s.ld);
    std::vector<bf16> dout = random_bf16(rng, s.N * s.ld, -1, 1);
    for (std::size_t r = 0; r < s.N; ++r)
      for (std::size_t o = s.OC; o < s.ld; ++o) dout[r * s.ld + o] = to_bf16(NAN);
    const std::vector<float> dbias0 = random_f32(rng, s.OC, -1, 1);
    const std::vector<float> ref = cpu_bias_gradient(dbias0, dout, s.N, s.OC, s.ld);
    const std::vector<float> got = bias_gradient(dbias0, dout.data(), s.N, s.OC, s.ld);
    const std::vector<float> doutf = widen(dout);
    for (std::size_t o = 0; o < s.OC; ++o) {
      double terms = std::abs(dbias0[o]);
      for (std::size_t r = 0; r < s.N; ++r) terms += std::abs(doutf[r * s.ld + o]);
      ASSERT_TRUE(std::isfinite(terms)) << "column " << o;
      ASSERT_NEAR(got[o], ref[o], 2.0 * double(s.N + 1) * kF32Eps * terms) << "column " << o;
    }
    const std::vector<float> again = bias_gradient(dbias0, dout.data(), s.N, s.OC, s.ld);
    for (std::size_t o = 0; o < s.OC; ++o) ASSERT_EQ(bits(again[o]), bits(got[o])) << "column " << o;
  }
}

// The 16-byte path (aligned rows of a multiple of 8) and the one-element path (the same rows one element off 16-byte
// alignment) add each column's rows in the same order: the same bits.
TEST_F(Reductions, BiasGradientIsTheSameOnBothAccessPaths) {
  const std::size_t N = 333, OC = 264;  // 11 blocks of 31 rows (the last shorter), 33 chunks of 8
  const std::vector<bf16> dout = random_bf16(rng, N * OC, -1, 1);
  std::vector<bf16> shifted(dout.size() + 8);
  std::copy(dout.begin(), dout.end(), shifted.begin() + 1);
  const std::vector<float> dbias0 = random_f32(rng, OC, -1, 1);
  const std::vector<float> aligned = bias_gradient(dbias0, dout.data(), N, OC, OC);
  const std::vector<float> unaligned = bias_gradient(dbias0, shifted.data() + 1, N, OC, OC);
  for (std::size_t o = 0; o < OC; ++o) ASSERT_EQ(bits(aligned[o]), bits(unaligned[o])) << "column " << o;
}

TEST_F(Reductions, BiasGradientOfExactSumsIsBitwise) {
  const std::size_t N = 300, OC = 70;  // 10 blocks of 30 rows
  const std::vector<bf16> dout = random_quarters_bf16(rng, N * OC);
  const std::vector<float> dbias0 = random_quarters_f32(rng, OC);
  const std::vector<float> ref = cpu_bias_gradient(dbias0, dout, N, OC, OC);
  const std::vector<float> got = bias_gradient(dbias0, dout.data(), N, OC, OC);
  for (std::size_t o = 0; o < OC; ++o) ASSERT_EQ(bits(got[o]), bits(ref[o])) << "column " << o;
}

TEST_F(Reductions, SumOfSquaresMatchesTheCpuBackend) {
  // n = 0 and 1; below one block's 256 threads; several blocks with a grid-stride tail.
  for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(200), std::size_t(4000), std::size_t(20001)}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    std::vector<float> gf = random_f32(rng, n, -3, 3);
    if (n > 10) gf[7] = 1e-30f, gf[8] = 2e4f;  // the magnitudes of real gradients vary
    const std::vector<bf16> gb = random_bf16(rng, n, -3, 3);
    const double start = 1.5;  // the accumulator is added to
    double ref_f = start, ref_b = start;
    cpu->sum_of_squares(gf.data(), n, DType::f32, &ref_f);
    cpu->sum_of_squares(gb.data(), n, DType::bf16, &ref_b);
    const double got_f = sum_of_squares(kernels::sum_squares_f32, gf, start);
    const double got_b = sum_of_squares(kernels::sum_squares_bf16, gb, start);
    const double tolerance = 2.0 * double(n + 2) * 0x1p-53;
    EXPECT_NEAR(got_f, ref_f, tolerance * ref_f);
    EXPECT_NEAR(got_b, ref_b, tolerance * ref_b);
    EXPECT_EQ(sum_of_squares(kernels::sum_squares_f32, gf, start), got_f);  // the same bits again
    EXPECT_EQ(sum_of_squares(kernels::sum_squares_bf16, gb, start), got_b);
  }
}

}  // namespace
}  // namespace dptrain
