// Every Backend backward against central finite differences of its own fp32 forward, on every backend of the
// factory whose activations are fp32 (skipped elsewhere: a BF16 forward's rounding noise over the step exceeds the
// gradients; backend_fixture.hpp). Inputs are perturbed on the host and uploaded for each evaluation of L.
//
// For an op out = f(inputs) the test function is L = Σ out·R with R fixed and uniform in [−1, 1], summed in double
// from the fp32 outputs, so ∂L/∂out = R is exactly the `dout` handed to the backward. Every element of every
// input, weight and bias is perturbed. Gradient buffers that the backward adds into (parameter gradients,
// LayerNorm's and the embedding's) start from random non-zero values and the test compares the increment, so a
// backward that overwrites instead of adding (+=) fails too; those it writes (matmul's din, attention's dqkv,
// GELU's din) start as NaN, so one that reads or adds to them fails.
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
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_fixture.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

using test::added;
using test::check_gradient;
using test::Tolerance;
using test::uniform;
using test::weighted_sum;
using test::widened;

std::vector<float> not_numbers(std::size_t n) { return std::vector(n, std::numeric_limits<float>::quiet_NaN()); }

constexpr float kStep = 3e-2f;
constexpr Tolerance kTolerance{1e-4, 1e-4};
constexpr Tolerance kLayerNormInput{1e-3, 1e-4};

template <typename Param>
class OpGradientTest : public test::BackendTest<Param> {
 protected:
  void SetUp() override {
    SKIP_UNLESS(this->unavailable);
    SKIP_UNLESS(this->skip_unless_fp32_activations());
  }
  void check_matmul(bool with_bias);
  std::mt19937 rng{20240601};
};
using OpGradient = OpGradientTest<std::string>;

TEST_P(OpGradient, Embedding) {
  const std::size_t T = 5, C = 6, V = 7, N = 2 * T;
  // Token 3 repeats (its rows accumulate), tokens 2 and 4 never occur (their gradient must stay exactly 0).
  const auto tokens = on_device(std::vector<std::int32_t>{3, 1, 3, 0, 5, 1, 1, 6, 3, 0});
  auto wte = uniform(rng, V * C, -1, 1), wpe = uniform(rng, T * C, -1, 1), r = uniform(rng, N * C, -1, 1);
  auto out = activations(N * C);
  auto loss = [&] {
    be->embedding_forward(out.data(), tokens.data(), compute_weights(wte).data(), compute_weights(wpe).data(), N, T, C);
    return weighted_sum(out.download(), r);
  };
  const auto dwte0 = uniform(rng, V * C, -1, 1), dwpe0 = uniform(rng, T * C, -1, 1);
  auto d_dwte = gradients(dwte0), d_dwpe = gradients(dwpe0);
  be->embedding_backward(d_dwte.data(), d_dwpe.data(), activations(r).data(), tokens.data(), N, T, C);
  const auto dwte = d_dwte.download(), dwpe = d_dwpe.download();
  for (std::size_t c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[2 * C + c], dwte0[2 * C + c]);
    EXPECT_EQ(dwte[4 * C + c], dwte0[4 * C + c]);
  }
  check_gradient("dwte", wte.data(), added(dwte, dwte0).data(), wte.size(), loss, kStep, kTolerance);
  check_gradient("dwpe", wpe.data(), added(dwpe, dwpe0).data(), wpe.size(), loss, kStep, kTolerance);
}

TEST_P(OpGradient, LayerNorm) {
  const std::size_t N = 6, C = 10;
  // Rows with different offsets and spreads: the mean and variance paths of the backward both carry weight.
  auto in = uniform(rng, N * C, -1, 1);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c) in[i * C + c] = in[i * C + c] * (0.5f + 0.3f * i) + (float(i) - 2.5f);
  auto w = uniform(rng, C, 0.5, 1.5), b = uniform(rng, C, -0.5, 0.5), r = uniform(rng, N * C, -1, 1);
  auto d_in = activations(in), out = activations(N * C);
  test::DeviceVector<float> mean(device(), N), rstd(device(), N);
  auto loss = [&] {
    d_in.upload(in);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), d_in.data(), compute_weights(w).data(),
                          compute_weights(b).data(), N, C);
    return weighted_sum(out.download(), r);
  };
  loss();  // mean and rstd of the unperturbed input, as the backward receives them in the model
  const auto din0 = uniform(rng, N * C, -1, 1), dw0 = uniform(rng, C, -1, 1), db0 = uniform(rng, C, -1, 1);
  auto din = activations(din0), dw = gradients(dw0), db = gradients(db0);
  be->layernorm_backward(din.data(), dw.data(), db.data(), activations(r).data(), d_in.data(),
                         compute_weights(w).data(), mean.data(), rstd.data(), N, C);
  // h = 3e-2 is 10× below the narrowest row's standard deviation (0.29), so the extrapolation is accurate.
  check_gradient("din", in.data(), added(din.download(), din0).data(), in.size(), loss, kStep, kLayerNormInput);
  check_gradient("dw", w.data(), added(dw.download(), dw0).data(), C, loss, kStep, kTolerance);
  check_gradient("db", b.data(), added(db.download(), db0).data(), C, loss, kStep, kTolerance);
}

template <typename Param>
void OpGradientTest<Param>::check_matmul(bool with_bias) {
  const std::size_t N = 6, C = 10, OC = 7;
  auto in = uniform(rng, N * C, -1, 1), w = uniform(rng, OC * C, -1, 1), bias = uniform(rng, OC, -1, 1);
  const auto r = uniform(rng, N * OC, -1, 1);
  auto out = this->activations(N * OC);
  Backend& be = *this->be;
  auto loss = [&] {
    // The output's old contents must not matter (beta = 0 without bias): start from NaN.
    out.upload(not_numbers(N * OC));
    be.matmul_forward(out.data(), this->activations(in).data(), this->compute_weights(w).data(),
                      with_bias ? this->compute_weights(bias).data() : nullptr, N, 3, C, OC, OC);
    return weighted_sum(out.download(), r);
  };
  EXPECT_TRUE(std::isfinite(loss()));
  const auto dw0 = uniform(rng, OC * C, -1, 1), db0 = uniform(rng, OC, -1, 1);
  auto din = this->activations(not_numbers(N * C)), dw = this->gradients(dw0), db = this->gradients(db0);
  be.matmul_backward(din.data(), dw.data(), with_bias ? db.data() : nullptr, this->activations(r).data(),
                     this->activations(in).data(), this->compute_weights(w).data(), N, 3, C, OC, OC);
  // Two windows of T = 3 rows. L is linear in each element (no truncation at all); an input element feeds OC = 7
  // outputs, a weight N = 6.
  check_gradient("din", in.data(), widened(din.download()).data(), in.size(), loss, kStep, kTolerance);
  check_gradient("dw", w.data(), added(dw.download(), dw0).data(), w.size(), loss, kStep, kTolerance);
  if (with_bias) {
    check_gradient("dbias", bias.data(), added(db.download(), db0).data(), OC, loss, kStep, kTolerance);
  } else {
    EXPECT_EQ(db.download(), db0);
  }
}

TEST_P(OpGradient, MatmulWithBias) { check_matmul(true); }
TEST_P(OpGradient, MatmulWithoutBias) { check_matmul(false); }

using AttentionGradient = OpGradientTest<test::AttentionParam>;

TEST_P(AttentionGradient, AllOfQkv) {
  const auto [B, T, C, NH] = std::get<1>(GetParam());
  auto qkv = uniform(rng, B * T * 3 * C, -1.5, 1.5);
  const auto r = uniform(rng, B * T * C, -1, 1);
  auto out = activations(B * T * C), d_qkv = activations(qkv.size());
  test::DeviceVector<std::uint8_t> saved(device(), B * NH * be->attention_saved_bytes(T, C, NH));
  auto loss = [&] {
    d_qkv.upload(qkv);
    be->attention_forward(out.data(), saved.data(), d_qkv.data(), B, T, C, NH);
    return weighted_sum(out.download(), r);
  };
  loss();
  auto dqkv = activations(not_numbers(qkv.size()));
  be->attention_backward(dqkv.data(), activations(r).data(), d_qkv.data(), out.data(), saved.data(), B, T, C, NH);
  // Scores are O(1) (|q·k|/√d ≲ 1.5), so the softmax's third derivatives are O(1): kTolerance. Keys and values of
  // later positions must get exactly nothing from earlier queries — the finite difference is then exactly 0.
  check_gradient("dqkv", qkv.data(), widened(dqkv.download()).data(), qkv.size(), loss, kStep, kTolerance);
}

// T not a power of two, several heads, head size 3 and 2, one and two windows.
using test::AttentionShape;
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGradient,
                         test::backends_and(AttentionShape{2, 5, 6, 2}, AttentionShape{1, 7, 9, 3},
                                            AttentionShape{2, 3, 8, 4}),
                         test::TestName());

TEST_P(OpGradient, Gelu) {
  // Inputs over the whole interesting range, including the origin and both tails.
  auto in = uniform(rng, 37, -4, 4);
  in[0] = 0.0f, in[1] = 1e-3f, in[2] = -3.5f, in[3] = 3.5f;
  const auto r = uniform(rng, in.size(), -1, 1);
  auto out = activations(in.size());
  auto loss = [&] {
    be->gelu_forward(out.data(), activations(in).data(), in.size());
    return weighted_sum(out.download(), r);
  };
  auto din = activations(not_numbers(in.size()));
  be->gelu_backward(din.data(), activations(in).data(), activations(r).data(), in.size());
  // One output per input; GELU's derivatives are O(1).
  check_gradient("din", in.data(), widened(din.download()).data(), in.size(), loss, kStep, kTolerance);
}

TEST_P(OpGradient, ResidualAddAndAccumulate) {
  // The backward of a residual out = a + b (forward: out = a, then accumulate b) is da += dout, db += dout: the
  // Backend's accumulate, in the activation dtype.
  const std::size_t n = 19;
  auto a = uniform(rng, n, -1, 1), b = uniform(rng, n, -1, 1);
  const auto r = uniform(rng, n, -1, 1);
  auto out = activations(n);
  auto loss = [&] {
    out.upload(a);
    be->accumulate(out.data(), activations(b).data(), n, act());
    return weighted_sum(out.download(), r);
  };
  const auto da0 = uniform(rng, n, -1, 1), db0 = uniform(rng, n, -1, 1);
  auto da = activations(da0), db = activations(db0), dout = activations(r);
  be->accumulate(da.data(), dout.data(), n, act());
  be->accumulate(db.data(), dout.data(), n, act());
  check_gradient("da", a.data(), added(da.download(), da0).data(), n, loss, kStep, kTolerance);
  check_gradient("db", b.data(), added(db.download(), db0).data(), n, loss, kStep, kTolerance);
}

TEST_P(OpGradient, SoftmaxCrossEntropy) {
  const std::size_t N = 6, V = 7;
  auto logits = uniform(rng, N * V, -3, 3);
  const auto targets = on_device(std::vector<std::int32_t>{0, 6, 3, 3, 1, 5});
  const float dloss = 0.37f;  // as in a mean over windows: the gradient must be scaled by it
  auto work = activations(N * V);
  test::DeviceVector<float> losses(device(), N);
  auto loss = [&] {  // the losses only (dloss = 0)
    work.upload(logits);
    test::DeviceScalar total(device());
    be->softmax_cross_entropy(work.data(), losses.data(), targets.data(), N, V, V, 0.0f, total.data());
    return double(dloss) * total.value();
  };
  work.upload(logits);
  test::DeviceScalar total(device());
  be->softmax_cross_entropy(work.data(), losses.data(), targets.data(), N, V, V, dloss, total.data());  // → dlogits
  const auto dlogits32 = work.download();
  const std::vector<double> dlogits(dlogits32.begin(), dlogits32.end());
  // Each loss is a log-sum-exp minus a logit; its third derivative is ≤ 1 in any direction: kTolerance.
  check_gradient("dlogits", logits.data(), dlogits.data(), logits.size(), loss, kStep, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Backends, OpGradient, ::testing::ValuesIn(test::backends_under_test()),
                         test::TestName());

}  // namespace
}  // namespace dptrain
