// Every Backend backward against central finite differences of its own fp32 forward.
//
// For an op out = f(inputs) the test function is L = Σ out·R with R fixed and uniform in [−1, 1], summed in double
// from the fp32 outputs, so ∂L/∂out = R is exactly the `dout` handed to the backward. Every element of every
// input, weight and bias is perturbed. Gradient buffers start from random non-zero values and the test compares
// the increment, so a backward that overwrites instead of adding (+=) fails too.
//
// Numerical derivatives are Richardson-extrapolated central differences (gradient_check.hpp): the h² truncation
// cancels and the O(h⁴) rest is h⁴/480·f⁽⁵⁾ ≈ 2e-9·f⁽⁵⁾ at the step h = 3e-2 used on these O(1) inputs, so what
// is left is the fp32 rounding of L. Tolerances (|analytic − numeric| ≤ abs + rel·|numeric|), u = 2⁻²⁴ ≈ 6e-8:
// - Perturbing one input changes at most one row of outputs (≤ 10 of them, O(1) each, a few u of rounding that
//   does not cancel between L(x+h) and L(x−h)): L is known to ≈ 10·2u ≈ 1.2e-6; over the smaller step's 2·h/2 =
//   3e-2 that is 4e-5, ×1.5 for the extrapolation 6e-5. Hence abs = 1e-4; rel = 1e-4 for the larger gradients,
//   whose outputs are larger. Measured maxima are 1e-6 to 1.1e-5 (recorded as properties: run with --gtest_output=xml).
// - LayerNorm's input gradient is the exception: rows centred at up to 2.5 lose ≈ C·u·2.5 ≈ 1.5e-6 in x − mean,
//   amplified by rstd ≈ 3.5 in each of the row's 10 outputs: L's noise is ≈ 5e-5 → abs = 1e-3 (measured 1.6e-4).
// The gradients under test are O(0.1–3), so a wrong factor (×2, a missing 1/√d), a missing term (the layernorm
// mean or variance path, the softmax Σ p·dP term), a wrong sign or a lost += moves some element by ≥ 1e-2 —
// 10× the loosest bound, 100× the others. (Checked by mutating a copy of the CPU backend: each such mutation fails.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

using test::added;
using test::check_gradient;
using test::Tolerance;
using test::uniform;
using test::weighted_sum;

constexpr float kStep = 3e-2f;
constexpr Tolerance kTolerance{1e-4, 1e-4};
constexpr Tolerance kLayerNormInput{1e-3, 1e-4};

class OpGradient : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::mt19937 rng{20240601};
};

TEST_F(OpGradient, Embedding) {
  const std::size_t T = 5, C = 6, V = 7, N = 2 * T;
  // Token 3 repeats (its rows accumulate), tokens 2 and 4 never occur (their gradient must stay exactly 0).
  const std::vector<std::int32_t> tokens{3, 1, 3, 0, 5, 1, 1, 6, 3, 0};
  auto wte = uniform(rng, V * C, -1, 1), wpe = uniform(rng, T * C, -1, 1), r = uniform(rng, N * C, -1, 1);
  std::vector<float> out(N * C);
  auto loss = [&] {
    be->embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), N, T, C);
    return weighted_sum(out.data(), r);
  };
  const auto dwte0 = uniform(rng, V * C, -1, 1), dwpe0 = uniform(rng, T * C, -1, 1);
  auto dwte = dwte0, dwpe = dwpe0;
  be->embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), N, T, C);
  for (std::size_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[2 * C + c], dwte0[2 * C + c]);
    EXPECT_EQ(dwte[4 * C + c], dwte0[4 * C + c]);
  }
  check_gradient("dwte", wte.data(), added(dwte, dwte0).data(), wte.size(), loss, kStep, kTolerance);
  check_gradient("dwpe", wpe.data(), added(dwpe, dwpe0).data(), wpe.size(), loss, kStep, kTolerance);
}

TEST_F(OpGradient, LayerNorm) {
  const std::size_t N = 6, C = 10;
  // Rows with different offsets and spreads: the mean and variance paths of the backward both carry weight.
  auto in = uniform(rng, N * C, -1, 1);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c) in[i * C + c] = in[i * C + c] * (0.5f + 0.3f * i) + (float(i) - 2.5f);
  auto w = uniform(rng, C, 0.5, 1.5), b = uniform(rng, C, -0.5, 0.5), r = uniform(rng, N * C, -1, 1);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), N, C);
    return weighted_sum(out.data(), r);
  };
  loss();  // mean and rstd of the unperturbed input, as the backward receives them in the model
  const auto din0 = uniform(rng, N * C, -1, 1), dw0 = uniform(rng, C, -1, 1), db0 = uniform(rng, C, -1, 1);
  auto din = din0, dw = dw0, db = db0;
  be->layernorm_backward(din.data(), dw.data(), db.data(), r.data(), in.data(), w.data(), mean.data(), rstd.data(),
                         N, C);
  // h = 3e-2 is 10× below the narrowest row's standard deviation (0.29), so the extrapolation is accurate.
  check_gradient("din", in.data(), added(din, din0).data(), in.size(), loss, kStep, kLayerNormInput);
  check_gradient("dw", w.data(), added(dw, dw0).data(), C, loss, kStep, kTolerance);
  check_gradient("db", b.data(), added(db, db0).data(), C, loss, kStep, kTolerance);
}

void check_matmul(Backend& be, std::mt19937& rng, bool with_bias) {
  const std::size_t N = 6, C = 10, OC = 7;
  auto in = uniform(rng, N * C, -1, 1), w = uniform(rng, OC * C, -1, 1), bias = uniform(rng, OC, -1, 1);
  const auto r = uniform(rng, N * OC, -1, 1);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    // The output's old contents must not matter (beta = 0 without bias): start from NaN.
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    be.matmul_forward(out.data(), in.data(), w.data(), with_bias ? bias.data() : nullptr, N, 3, C, OC);
    return weighted_sum(out.data(), r);
  };
  EXPECT_TRUE(std::isfinite(loss()));
  const auto din0 = uniform(rng, N * C, -1, 1), dw0 = uniform(rng, OC * C, -1, 1), db0 = uniform(rng, OC, -1, 1);
  auto din = din0, dw = dw0, db = db0;
  be.matmul_backward(din.data(), dw.data(), with_bias ? db.data() : nullptr, r.data(), in.data(), w.data(), N, 3, C,
                     OC);
  // Two windows of T = 3 rows. L is linear in each element (no truncation at all); an input element feeds OC = 7
  // outputs, a weight N = 6.
  check_gradient("din", in.data(), added(din, din0).data(), in.size(), loss, kStep, kTolerance);
  check_gradient("dw", w.data(), added(dw, dw0).data(), w.size(), loss, kStep, kTolerance);
  if (with_bias) {
    check_gradient("dbias", bias.data(), added(db, db0).data(), OC, loss, kStep, kTolerance);
  } else {
    EXPECT_EQ(db, db0);
  }
}

TEST_F(OpGradient, MatmulWithBias) { check_matmul(*be, rng, true); }
TEST_F(OpGradient, MatmulWithoutBias) { check_matmul(*be, rng, false); }

struct AttentionShape {
  std::size_t B, T, C, NH;
};

std::string to_string(const AttentionShape& s) { return fmt::format("B{}_T{}_C{}_NH{}", s.B, s.T, s.C, s.NH); }
std::string shape_name(const ::testing::TestParamInfo<AttentionShape>& info) { return to_string(info.param); }
void PrintTo(const AttentionShape& s, std::ostream* os) { *os << to_string(s); }

class AttentionGradient : public OpGradient, public ::testing::WithParamInterface<AttentionShape> {};

TEST_P(AttentionGradient, AllOfQkv) {
  const auto [B, T, C, NH] = GetParam();
  auto qkv = uniform(rng, B * T * 3 * C, -1.5, 1.5);
  const auto r = uniform(rng, B * T * C, -1, 1);
  std::vector<float> out(B * T * C), probs(B * NH * T * T);
  auto loss = [&] {
    be->attention_forward(out.data(), probs.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(out.data(), r);
  };
  loss();
  const auto d0 = uniform(rng, qkv.size(), -1, 1);
  auto dqkv = d0;
  be->attention_backward(dqkv.data(), r.data(), qkv.data(), probs.data(), B, T, C, NH);
  // Scores are O(1) (|q·k|/√d ≲ 1.5), so the softmax's third derivatives are O(1): kTolerance. Keys and values of
  // later positions must get exactly nothing from earlier queries — the finite difference is then exactly 0.
  check_gradient("dqkv", qkv.data(), added(dqkv, d0).data(), qkv.size(), loss, kStep, kTolerance);
}

// T not a power of two, several heads, head size 3 and 2, one and two windows.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGradient,
                         ::testing::Values(AttentionShape{2, 5, 6, 2}, AttentionShape{1, 7, 9, 3},
                                           AttentionShape{2, 3, 8, 4}),
                         shape_name);

TEST_F(OpGradient, Gelu) {
  // Inputs over the whole interesting range, including the origin and both tails.
  auto in = uniform(rng, 37, -4, 4);
  in[0] = 0.0f, in[1] = 1e-3f, in[2] = -3.5f, in[3] = 3.5f;
  const auto r = uniform(rng, in.size(), -1, 1);
  std::vector<float> out(in.size());
  auto loss = [&] {
    be->gelu_forward(out.data(), in.data(), in.size());
    return weighted_sum(out.data(), r);
  };
  const auto d0 = uniform(rng, in.size(), -1, 1);
  auto din = d0;
  be->gelu_backward(din.data(), in.data(), r.data(), in.size());
  // One output per input; GELU's derivatives are O(1).
  check_gradient("din", in.data(), added(din, d0).data(), in.size(), loss, kStep, kTolerance);
}

TEST_F(OpGradient, AddAndAccumulate) {
  // The backward of out = a + b is da += dout, db += dout: the Backend's accumulate.
  const std::size_t n = 19;
  auto a = uniform(rng, n, -1, 1), b = uniform(rng, n, -1, 1);
  const auto r = uniform(rng, n, -1, 1);
  std::vector<float> out(n);
  auto loss = [&] {
    be->add(out.data(), a.data(), b.data(), n);
    return weighted_sum(out.data(), r);
  };
  const auto da0 = uniform(rng, n, -1, 1), db0 = uniform(rng, n, -1, 1);
  auto da = da0, db = db0;
  be->accumulate(da.data(), r.data(), n);
  be->accumulate(db.data(), r.data(), n);
  check_gradient("da", a.data(), added(da, da0).data(), n, loss, kStep, kTolerance);
  check_gradient("db", b.data(), added(db, db0).data(), n, loss, kStep, kTolerance);
}

TEST_F(OpGradient, SoftmaxCrossEntropy) {
  const std::size_t N = 6, V = 7;
  auto logits = uniform(rng, N * V, -3, 3);
  const std::vector<std::int32_t> targets{0, 6, 3, 3, 1, 5};
  const float dloss = 0.37f;  // as in a mean over windows: the backward must scale by it
  std::vector<float> work(N * V), losses(N);
  auto loss = [&] {
    work = logits;
    return double(dloss) * be->softmax_cross_entropy_forward(work.data(), losses.data(), targets.data(), N, V);
  };
  loss();
  be->softmax_cross_entropy_backward(work.data(), targets.data(), dloss, N, V);  // probabilities → dlogits
  std::vector<double> dlogits(work.begin(), work.end());
  // Each loss is a log-sum-exp minus a logit; its third derivative is ≤ 1 in any direction: kTolerance.
  check_gradient("dlogits", logits.data(), dlogits.data(), logits.size(), loss, kStep, kTolerance);
}

}  // namespace
}  // namespace dptrain
