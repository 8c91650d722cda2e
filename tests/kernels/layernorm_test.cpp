// The LayerNorm backward of kernels/layernorm.cu (stage 1) with sum_partials of kernels/reductions.cu (stage 2),
// on the CPU harness against the cpu backend's layernorm_backward (fp32 on the BF16 inputs widened, the forward's
// own mean and rstd given to both).
//
// Tolerances, from the arithmetic (u = 2⁻²⁴, fp32's unit roundoff; a sum of k terms in any order is within
// (k − 1)·u·Σ|term| of the exact sum, so two orders differ by at most twice that):
// - din: w·dout is exact (two 8-bit significands), norm = (x − mean)·rstd is computed alike on both sides. The
//   two row means differ by at most 2u·Σ|w·dout| and 4u·Σ|w·dout·norm| (their products may be fused or not), so
//   the fp32 value the kernel rounds differs from the reference by
//   E ≤ rstd·(2u·Σ|a| + |norm|·4u·Σ|a·norm|) + 4u·rstd·(|a| + |mean a| + |norm·mean(a·norm)|) + u·(|din₀| + |Δ|)
//   (a = w·dout), and the BF16 rounding adds at most a neighbouring value's distance: |out − ref| ≤ 2⁻⁷·|ref| + 2E.
// - dw, db: the kernel adds the rows block by block and then the blocks, the cpu backend row by row into dw:
//   |Δ| ≤ 2(N + 2)·u·(|dw₀| + Σ_rows |term|).
// With dout and db₀ small multiples of 1/4, every partial sum of db is exact: db is then bitwise the reference.
#include "cuda_on_cpu.hpp"

#include "../../kernels/layernorm.cu"
#include "../../kernels/reductions.cu"
#include "kernel_test_util.hpp"

namespace dptrain {
namespace {

using namespace kernel_test;

struct Shape {
  std::size_t N, C;
};

struct Gradients {
  std::vector<bf16> din;
  std::vector<float> dw, db;
};

class LayerNormBackward : public KernelTest {
 protected:
  // Both stages as the backend launches them, on a copy of the starting gradients; din, dout, in and w are placed
  // `shift` elements past a 16-byte boundary.
  static Gradients run(Gradients g, const std::vector<bf16>& dout, const std::vector<bf16>& in,
                       const std::vector<bf16>& w, const std::vector<float>& mean, const std::vector<float>& rstd,
                       std::size_t N, std::size_t C, unsigned shift = 0) {
    Placed<bf16> din(g.din, shift), dout_at(dout, shift), in_at(in, shift), w_at(w, shift);
    std::vector<float> scratch(kernels::layernorm_backward_scratch_bytes(N, C) / sizeof(float), NAN);
    cuda_on_cpu::launch(kernels::layernorm_backward, kernels::layernorm_backward_launch(N, C), din.data, dout_at.data,
                        in_at.data, w_at.data, mean.data(), rstd.data(), N, C, scratch.data());
    cuda_on_cpu::launch(kernels::sum_partials, kernels::sum_partials_launch(2 * C), g.dw.data(), g.db.data(),
                        static_cast<const float*>(scratch.data()), std::size_t(kernels::partial_row_blocks(N)), C);
    g.din = din.values();
    return g;
  }
};

TEST_F(LayerNormBackward, MatchesTheCpuBackend) {
  // One row and one channel; C below, at and above a warp and a block, not a multiple of 32; rows for one and for
  // several blocks (32 rows a block at these N), a row count no block size divides; the widest row of the one-pass
  // path and the narrowest of the two-pass one (kLayerNormOnePassMaxC), and 16-byte rows of more chunks of 8 than a
  // block has threads.
  static_assert(kernels::kLayerNormOnePassMaxC == 1536);
  for (const Shape s : {Shape{1, 1}, Shape{1, 37}, Shape{5, 32}, Shape{33, 300}, Shape{70, 5}, Shape{100, 768},
                        Shape{6, 1536}, Shape{4, 1537}, Shape{9, 2056}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " C " << s.C);
    const std::size_t N = s.N, C = s.C;
    std::vector<bf16> in = random_bf16(rng, N * C, -2, 2);
    for (std::size_t c = 0; c < C && N > 2; ++c) in[2 * C + c] = to_bf16(to_float(in[2 * C + c]) + 50.0f);
    const std::vector<bf16> w = random_bf16(rng, C, 0.5f, 1.5f), b = random_bf16(rng, C, -0.5f, 0.5f);
    const std::vector<bf16> dout = random_bf16(rng, N * C, -1, 1);
    const Gradients start{random_bf16(rng, N * C, -1, 1), random_f32(rng, C, -1, 1), random_f32(rng, C, -1, 1)};
    const std::vector<float> inf = widen(in), wf = widen(w), bf = widen(b), doutf = widen(dout);
    std::vector<float> y(N * C), mean(N), rstd(N);
    cpu->layernorm_forward(y.data(), mean.data(), rstd.data(), inf.data(), wf.data(), bf.data(), N, C);
    std::vector<float> ref_din = widen(start.din), ref_dw = start.dw, ref_db = start.db;
    cpu->layernorm_backward(ref_din.data(), ref_dw.data(), ref_db.data(), doutf.data(), inf.data(), wf.data(),
                            mean.data(), rstd.data(), N, C);

    const Gradients got = run(start, dout, in, w, mean, rstd, N, C);
    constexpr double u = kF32Eps;
    std::vector<double> dw_terms(C, 0.0), db_terms(C, 0.0);  // Σ_rows |term| per channel
    for (std::size_t r = 0; r < N; ++r) {
      double sum_a = 0, sum_an = 0, mean_a = 0, mean_an = 0;
      for (std::size_t c = 0; c < C; ++c) {
        const double a = double(wf[c]) * doutf[r * C + c], norm = (double(inf[r * C + c]) - mean[r]) * rstd[r];
        sum_a += std::abs(a), sum_an += std::abs(a * norm), mean_a += a, mean_an += a * norm;
        dw_terms[c] += std::abs(doutf[r * C + c] * norm);
        db_terms[c] += std::abs(doutf[r * C + c]);
      }
      mean_a /= double(C), mean_an /= double(C);
      for (std::size_t c = 0; c < C; ++c) {
        const std::size_t i = r * C + c;
        const double a = double(wf[c]) * doutf[i], norm = (double(inf[i]) - mean[r]) * rstd[r];
        const double delta = (a - mean_a - norm * mean_an) * rstd[r];
        const double E = rstd[r] * (2 * u * sum_a + std::abs(norm) * 4 * u * sum_an) +
                         4 * u * rstd[r] * (std::abs(a) + std::abs(mean_a) + std::abs(norm * mean_an)) +
                         u * (std::abs(to_float(start.din[i])) + std::abs(delta));
        ASSERT_NEAR(to_float(got.din[i]), ref_din[i], kBf16Ulp * std::abs(ref_din[i]) + 2 * E)
            << "row " << r << " c " << c;
      }
    }
    for (std::size_t c = 0; c < C; ++c) {
      const double k = 2.0 * double(N + 2) * u;
      EXPECT_NEAR(got.dw[c], ref_dw[c], k * (std::abs(start.dw[c]) + dw_terms[c])) << "c " << c;
      EXPECT_NEAR(got.db[c], ref_db[c], k * (std::abs(start.db[c]) + db_terms[c])) << "c " << c;
    }

    // Again from the same start: the same bits; and with every BF16 array one element past a 16-byte boundary
    // (the element-at-a-time path where the rows were 16-byte aligned): the same bits too.
    const Gradients again = run(start, dout, in, w, mean, rstd, N, C);
    const Gradients shifted = run(start, dout, in, w, mean, rstd, N, C, 1);
    for (std::size_t i = 0; i < N * C; ++i) {
      ASSERT_EQ(again.din[i].bits, got.din[i].bits) << "din " << i;
      ASSERT_EQ(shifted.din[i].bits, got.din[i].bits) << "din, shifted " << i;
    }
    for (std::size_t c = 0; c < C; ++c) {
      ASSERT_EQ(bits(again.dw[c]), bits(got.dw[c])) << "dw " << c;
      ASSERT_EQ(bits(again.db[c]), bits(got.db[c])) << "db " << c;
      ASSERT_EQ(bits(shifted.dw[c]), bits(got.dw[c])) << "dw, shifted " << c;
      ASSERT_EQ(bits(shifted.db[c]), bits(got.db[c])) << "db, shifted " << c;
    }
  }
}

TEST_F(LayerNormBackward, ExactSumsAreBitwise) {
  const std::size_t N = 150, C = 45;  // 5 blocks of 30 rows
  const std::vector<bf16> dout = random_quarters_bf16(rng, N * C);
  const std::vector<float> db0 = random_quarters_f32(rng, C);
  const std::vector<bf16> in = random_bf16(rng, N * C, -2, 2), w = random_bf16(rng, C, 0.5f, 1.5f);
  const std::vector<float> inf = widen(in), wf = widen(w), bf(C, 0.0f), doutf = widen(dout);
  std::vector<float> y(N * C), mean(N), rstd(N);
  cpu->layernorm_forward(y.data(), mean.data(), rstd.data(), inf.data(), wf.data(), bf.data(), N, C);
  const Gradients start{std::vector<bf16>(N * C), std::vector<float>(C, 0.0f), db0};
  std::vector<float> ref_din(N * C, 0.0f), ref_dw(C, 0.0f), ref_db = db0;
  cpu->layernorm_backward(ref_din.data(), ref_dw.data(), ref_db.data(), doutf.data(), inf.data(), wf.data(),
                          mean.data(), rstd.data(), N, C);
  const Gradients got = run(start, dout, in, w, mean, rstd, N, C);
  for (std::size_t c = 0; c < C; ++c) ASSERT_EQ(bits(got.db[c]), bits(ref_db[c])) << "db " << c;
}

}  // namespace
}  // namespace dptrain
