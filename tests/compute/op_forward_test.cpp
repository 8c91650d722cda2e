// Every Backend forward against a straightforward double-precision reference, plus the properties the model
// relies on (normalised rows, causal rows summing to one with zeros above the diagonal, stable softmax).
//
// Tolerances: an fp32 result built from k rounded operations on values of magnitude M is within ≈ k·u·M of the
// exact value (u = 2⁻²⁴ ≈ 6e-8); the sizes here keep k·u ≤ 1e-6, so 1e-5 relative to the magnitude of the terms
// involved leaves a 10× margin and still catches any wrong constant (eps, 1/√d, the GELU coefficients) at the
// 1e-3 level or above.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

using test::uniform;

constexpr double kU = 0x1p-24;  // fp32 unit round-off

class OpForward : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::mt19937 rng{7};
};

TEST_F(OpForward, EmbeddingAddsTokenAndPositionRows) {
  const std::size_t T = 5, C = 6, V = 7, N = 3 * T;
  std::vector<std::int32_t> tokens(N);
  for (std::size_t i = 0; i < N; ++i) tokens[i] = std::int32_t((i * 5 + 2) % V);
  const auto wte = uniform(rng, V * C, -1, 1), wpe = uniform(rng, T * C, -1, 1);
  std::vector<float> out(N * C);
  be->embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), N, T, C);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c)  // one fp32 addition: bitwise
      ASSERT_EQ(out[i * C + c], wte[tokens[i] * C + c] + wpe[(i % T) * C + c]) << i << "," << c;
}

TEST_F(OpForward, LayerNormMatchesDoubleReference) {
  const std::size_t N = 5, C = 10;
  auto in = uniform(rng, N * C, -2, 2);
  for (std::size_t c = 0; c < C; ++c) in[4 * C + c] = 3.0f;  // a constant row: variance 0, rstd = 1/√eps
  for (std::size_t c = 0; c < C; ++c) in[3 * C + c] += 100.0f;  // a large offset the mean must remove
  const auto w = uniform(rng, C, 0.5, 1.5), b = uniform(rng, C, -0.5, 0.5);
  std::vector<float> out(N * C), mean(N), rstd(N);
  be->layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), N, C);
  for (std::size_t i = 0; i < N; ++i) {
    double m = 0, var = 0;
    for (std::size_t c = 0; c < C; ++c) m += in[i * C + c];
    m /= C;
    for (std::size_t c = 0; c < C; ++c) var += (in[i * C + c] - m) * (in[i * C + c] - m);
    var /= C;  // biased variance, as PyTorch's LayerNorm
    const double s = 1.0 / std::sqrt(var + 1e-5);
    // A sum of C fp32 values of size |m| is within C·u·|m| of exact; that error of the mean passes into every
    // normalised value times rstd·w. It matters only for the row with offset 100 (≈ 1e-4 there).
    const double mean_error = C * kU * std::abs(m) + 1e-7;
    EXPECT_NEAR(mean[i], m, mean_error) << "row " << i;
    EXPECT_NEAR(rstd[i], s, 1e-5 * s) << "row " << i;
    for (std::size_t c = 0; c < C; ++c)
      EXPECT_NEAR(out[i * C + c], (in[i * C + c] - m) * s * w[c] + b[c], 1e-5 + mean_error * s * w[c])
          << i << "," << c;
  }
  EXPECT_NEAR(rstd[4], 1.0 / std::sqrt(1e-5), 1e-2);
  for (std::size_t c = 0; c < C; ++c) EXPECT_EQ(out[4 * C + c], b[c]);

  // With w = 1, b = 0 every row has mean 0 and variance var/(var + eps) ≈ 1.
  const std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
  be->layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), ones.data(), zeros.data(), N - 1, C);
  for (std::size_t i = 0; i + 1 < N; ++i) {
    double m = 0, sq = 0;
    for (std::size_t c = 0; c < C; ++c) m += out[i * C + c], sq += double(out[i * C + c]) * out[i * C + c];
    // As above, the fp32 mean's own error (C·u·|mean|, times rstd) shifts every normalised value.
    EXPECT_NEAR(m / C, 0.0, 1e-6 + C * kU * std::abs(mean[i]) * rstd[i]) << "row " << i;
    EXPECT_NEAR(sq / C, 1.0, 1e-4) << "row " << i;  // 1 − eps/var ≥ 1 − 3e-5 for these rows (var ≥ 0.3)
  }
}

TEST_F(OpForward, MatmulMatchesDoubleReference) {
  const std::size_t N = 6, C = 10, OC = 7;
  const auto in = uniform(rng, N * C, -1, 1), w = uniform(rng, OC * C, -1, 1), bias = uniform(rng, OC, -1, 1);
  for (bool with_bias : {true, false}) {
    std::vector<float> out(N * OC, 123.0f);  // stale contents that must be overwritten
    be->matmul_forward(out.data(), in.data(), w.data(), with_bias ? bias.data() : nullptr, N, 3, C, OC);
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t o = 0; o < OC; ++o) {
        double ref = with_bias ? bias[o] : 0.0, mag = std::abs(ref);
        for (std::size_t c = 0; c < C; ++c) {
          ref += double(in[i * C + c]) * w[o * C + c];
          mag += std::abs(double(in[i * C + c]) * w[o * C + c]);
        }
        EXPECT_NEAR(out[i * OC + o], ref, 1e-6 * mag) << i << "," << o << " bias " << with_bias;
      }
  }
}

struct AttentionShape {
  std::size_t B, T, C, NH;
};

std::string to_string(const AttentionShape& s) { return fmt::format("B{}_T{}_C{}_NH{}", s.B, s.T, s.C, s.NH); }
std::string shape_name(const ::testing::TestParamInfo<AttentionShape>& info) { return to_string(info.param); }
void PrintTo(const AttentionShape& s, std::ostream* os) { *os << to_string(s); }

class AttentionForward : public OpForward, public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(AttentionForward, CausalSoftmaxAndOutput) {
  const auto [B, T, C, NH] = GetParam();
  const std::size_t hs = C / NH;
  auto qkv = uniform(rng, B * T * 3 * C, -2, 2);
  std::vector<float> out(B * T * C), probs(B * NH * T * T, 42.0f);
  be->attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
  auto at = [&](std::size_t b, std::size_t t, std::size_t part, std::size_t h, std::size_t d) {
    return double(qkv[(b * T + t) * 3 * C + part * C + h * hs + d]);
  };
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t i = 0; i < T; ++i) {
        const float* p = probs.data() + ((b * NH + h) * T + i) * T;
        std::vector<double> ref(i + 1);
        double maxv = -1e300, sum = 0, psum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          for (std::size_t d = 0; d < hs; ++d) ref[j] += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          ref[j] /= std::sqrt(double(hs));
          maxv = std::max(maxv, ref[j]);
        }
        for (double& x : ref) sum += (x = std::exp(x - maxv));
        for (std::size_t j = 0; j <= i; ++j) {
          EXPECT_NEAR(p[j], ref[j] / sum, 1e-6) << b << "," << h << "," << i << "," << j;
          psum += p[j];
        }
        EXPECT_NEAR(psum, 1.0, 1e-6);
        for (std::size_t j = i + 1; j < T; ++j) EXPECT_EQ(p[j], 0.0f) << "above the diagonal " << i << "," << j;
        for (std::size_t d = 0; d < hs; ++d) {
          double o = 0;
          for (std::size_t j = 0; j <= i; ++j) o += ref[j] / sum * at(b, j, 2, h, d);
          EXPECT_NEAR(out[(b * T + i) * C + h * hs + d], o, 1e-5) << b << "," << h << "," << i << "," << d;
        }
      }

  // Causality: changing every q, k and v at the last position leaves all earlier outputs bitwise unchanged.
  auto changed = qkv;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < 3 * C; ++k) changed[(b * T + T - 1) * 3 * C + k] *= -3.0f;
  std::vector<float> out2(out.size());
  be->attention_forward(out2.data(), probs.data(), changed.data(), B, T, C, NH);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < (T - 1) * C; ++k) EXPECT_EQ(out2[b * T * C + k], out[b * T * C + k]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionForward,
                         ::testing::Values(AttentionShape{2, 5, 6, 2}, AttentionShape{1, 7, 9, 3},
                                           AttentionShape{3, 1, 4, 1}, AttentionShape{1, 13, 8, 2}),
                         shape_name);

TEST_F(OpForward, GeluIsTheTanhApproximation) {
  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), values from Python in double. The exact (erf) GELU differs from
  // these by 1e-4 at x = 2 and 4e-4 at x = −3, far outside the 1e-6 tolerance.
  const std::vector<float> x{1.0f, -1.0f, 2.0f, 0.5f, -3.0f, 0.0f};
  const std::vector<double> expected{0.8411919906082768,  -0.15880800939172324, 1.954597694087775,
                                     0.34571400982514394, -0.0036373920817729943, 0.0};
  std::vector<float> out(x.size());
  be->gelu_forward(out.data(), x.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-6) << "x = " << x[i];

  auto in = uniform(rng, 101, -6, 6);
  out.resize(in.size());
  be->gelu_forward(out.data(), in.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double v = in[i];
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[i], ref, 1e-6 * (1 + std::abs(v))) << "x = " << v;
  }
}

TEST_F(OpForward, AddAndAccumulateAreExactAndMayAlias) {
  const std::size_t n = 21;
  auto a = uniform(rng, n, -1, 1);
  const auto b = uniform(rng, n, -1, 1);
  std::vector<float> out(n);
  be->add(out.data(), a.data(), b.data(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  const auto a0 = a;
  be->add(a.data(), a.data(), b.data(), n);  // out aliases a
  EXPECT_EQ(a, out);
  be->accumulate(a.data(), b.data(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(a[i], (a0[i] + b[i]) + b[i]);
}

TEST_F(OpForward, SoftmaxCrossEntropyMatchesDoubleReference) {
  const std::size_t N = 6, V = 9;
  auto logits = uniform(rng, N * V, -4, 4);
  for (std::size_t j = 0; j < V; ++j) logits[5 * V + j] = 1000.0f + float(j);  // must not overflow
  const std::vector<std::int32_t> targets{0, 8, 3, 3, 1, 5};
  auto probs = logits;
  std::vector<float> losses(N);
  const double total = be->softmax_cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V);
  double sum_losses = 0;
  for (std::size_t i = 0; i < N; ++i) {
    double maxv = -1e300, z = 0, psum = 0;
    for (std::size_t j = 0; j < V; ++j) maxv = std::max(maxv, double(logits[i * V + j]));
    for (std::size_t j = 0; j < V; ++j) z += std::exp(logits[i * V + j] - maxv);
    const double loss = maxv + std::log(z) - logits[i * V + targets[i]];
    EXPECT_NEAR(losses[i], loss, 1e-5 * (1 + loss)) << "row " << i;
    for (std::size_t j = 0; j < V; ++j) {
      EXPECT_NEAR(probs[i * V + j], std::exp(logits[i * V + j] - maxv) / z, 1e-6) << i << "," << j;
      psum += probs[i * V + j];
    }
    EXPECT_NEAR(psum, 1.0, 1e-6);
    sum_losses += losses[i];
  }
  EXPECT_NEAR(total, sum_losses, 1e-12 * sum_losses);

  // Equal logits: every loss is log V.
  std::vector<float> flat(2 * V, 0.5f), flat_losses(2);
  const std::vector<std::int32_t> t2{0, 4};
  EXPECT_NEAR(be->softmax_cross_entropy_forward(flat.data(), flat_losses.data(), t2.data(), 2, V),
              2 * std::log(double(V)), 1e-5);
}

}  // namespace
}  // namespace dptrain
