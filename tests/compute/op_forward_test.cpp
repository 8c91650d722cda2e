// Every Backend forward against a straightforward double-precision reference, plus the properties the model
// relies on (normalised rows, causal rows summing to one with zeros above the diagonal, stable softmax), and the
// loss accumulator adding (not storing). Run on every backend of the factory (backend_fixture.hpp).
//
// Tolerances: an fp32 result built from k rounded operations on values of magnitude M is within ≈ k·u·M of the
// exact value (u = 2⁻²⁴ ≈ 6e-8); the sizes here keep k·u ≤ 1e-6, so 1e-5 relative to the magnitude of the terms
// involved leaves a 10× margin and still catches any wrong constant (eps, 1/√d, the GELU coefficients) at the
// 1e-3 level or above. Each bound goes through tol(): the same number of round-offs of the backend's activation
// dtype (exactly the stated bound on fp32). Inputs are made representable in the dtype they are stored in, so the
// references see what the device sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "../padded_rows.hpp"
#include "backend_fixture.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

using test::representable;
using test::round_to;
using test::uniform;

template <typename Param>
class OpForwardTest : public test::BackendTest<Param> {
 protected:
  // An fp32 bound in round-offs of the activation dtype (backend_fixture.hpp).
  double tol(double fp32_bound) const { return test::tolerance(fp32_bound, this->act()); }
  std::mt19937 rng{7};
};
using OpForward = OpForwardTest<std::string>;

TEST_P(OpForward, EmbeddingAddsTokenAndPositionRows) {
  const std::size_t T = 5, C = 6, V = 7, N = 3 * T;
  std::vector<std::int32_t> tokens(N);
  for (std::size_t i = 0; i < N; ++i) tokens[i] = std::int32_t((i * 5 + 2) % V);
  const auto wte = representable(wt(), uniform(rng, V * C, -1, 1));
  const auto wpe = representable(wt(), uniform(rng, T * C, -1, 1));
  auto out = activations(N * C);
  be->embedding_forward(out.data(), on_device(tokens).data(), compute_weights(wte).data(), compute_weights(wpe).data(),
                        N, T, C);
  const auto o = out.download();
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t c = 0; c < C; ++c)  // one fp32 addition, stored once: bitwise
      ASSERT_EQ(o[i * C + c], round_to(act(), wte[tokens[i] * C + c] + wpe[(i % T) * C + c])) << i << "," << c;
}

TEST_P(OpForward, LayerNormMatchesDoubleReference) {
  const std::size_t N = 5, C = 10;
  auto in = uniform(rng, N * C, -2, 2);
  for (std::size_t c = 0; c < C; ++c) in[4 * C + c] = 3.0f;  // a constant row: variance 0, rstd = 1/√eps
  for (std::size_t c = 0; c < C; ++c) in[3 * C + c] += 100.0f;  // a large offset the mean must remove
  in = representable(act(), in);
  const auto w = representable(wt(), uniform(rng, C, 0.5, 1.5)), b = representable(wt(), uniform(rng, C, -0.5, 0.5));
  auto d_in = activations(in), d_out = activations(N * C);
  test::DeviceVector<float> d_mean(device(), N), d_rstd(device(), N);
  be->layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_in.data(), compute_weights(w).data(),
                        compute_weights(b).data(), N, C);
  auto out = d_out.download(), mean = d_mean.download(), rstd = d_rstd.download();
  for (std::size_t i = 0; i < N; ++i) {
    double m = 0, var = 0;
    for (std::size_t c = 0; c < C; ++c) m += in[i * C + c];
    m /= C;
    for (std::size_t c = 0; c < C; ++c) var += (in[i * C + c] - m) * (in[i * C + c] - m);
    var /= C;  // biased variance, as PyTorch's LayerNorm
    const double s = 1.0 / std::sqrt(var + 1e-5);
    // A sum of C fp32 values of size |m| is within C·u·|m| of exact; that error of the mean passes into every
    // normalised value times rstd·w. It matters only for the row with offset 100 (≈ 1e-4 there).
    const double mean_error = C * test::kFp32RoundOff * std::abs(m) + 1e-7;
    EXPECT_NEAR(mean[i], m, mean_error) << "row " << i;
    EXPECT_NEAR(rstd[i], s, 1e-5 * s) << "row " << i;
    for (std::size_t c = 0; c < C; ++c)
      EXPECT_NEAR(out[i * C + c], (in[i * C + c] - m) * s * w[c] + b[c], tol(1e-5) + mean_error * s * w[c])
          << i << "," << c;
  }
  EXPECT_NEAR(rstd[4], 1.0 / std::sqrt(1e-5), 1e-2);
  for (std::size_t c = 0; c < C; ++c) EXPECT_EQ(out[4 * C + c], b[c]);

  // With w = 1, b = 0 every row has mean 0 and variance var/(var + eps) ≈ 1.
  be->layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_in.data(),
                        compute_weights(std::vector(C, 1.0f)).data(), compute_weights(std::vector(C, 0.0f)).data(),
                        N - 1, C);
  out = d_out.download(), mean = d_mean.download(), rstd = d_rstd.download();
  for (std::size_t i = 0; i + 1 < N; ++i) {
    double m = 0, sq = 0;
    for (std::size_t c = 0; c < C; ++c) m += out[i * C + c], sq += double(out[i * C + c]) * out[i * C + c];
    // As above, the fp32 mean's own error (C·u·|mean|, times rstd) shifts every normalised value.
    EXPECT_NEAR(m / C, 0.0, tol(1e-6) + C * test::kFp32RoundOff * std::abs(mean[i]) * rstd[i]) << "row " << i;
    EXPECT_NEAR(sq / C, 1.0, tol(1e-4)) << "row " << i;  // 1 − eps/var ≥ 1 − 3e-5 for these rows (var ≥ 0.3)
  }
}

TEST_P(OpForward, MatmulMatchesDoubleReference) {
  const std::size_t N = 6, C = 10, OC = 7;
  const auto in = representable(act(), uniform(rng, N * C, -1, 1));
  const auto w = representable(wt(), uniform(rng, OC * C, -1, 1));
  const auto bias = representable(wt(), uniform(rng, OC, -1, 1));
  const auto d_in = activations(in), d_w = compute_weights(w), d_bias = compute_weights(bias);
  for (bool with_bias : {true, false}) {
    auto d_out = activations(std::vector(N * OC, 123.0f));  // stale contents that must be overwritten
    be->matmul_forward(d_out.data(), d_in.data(), d_w.data(), with_bias ? d_bias.data() : nullptr, N, 3, C, OC, OC);
    const auto out = d_out.download();
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t o = 0; o < OC; ++o) {
        double ref = with_bias ? bias[o] : 0.0, mag = std::abs(ref);
        for (std::size_t c = 0; c < C; ++c) {
          ref += double(in[i * C + c]) * w[o * C + c];
          mag += std::abs(double(in[i * C + c]) * w[o * C + c]);
        }
        EXPECT_NEAR(out[i * OC + o], ref, tol(1e-6) * mag) << i << "," << o << " bias " << with_bias;
      }
  }
}

// out = residual + in·wᵀ + bias, the residual stream's update (fused into the GEMM on a BF16 backend: the residual
// is its C); the residual itself left as it was.
TEST_P(OpForward, MatmulOntoAResidualAddsItToTheProduct) {
  for (const auto& [N, C, OC] : {std::tuple<std::size_t, std::size_t, std::size_t>{6, 10, 7}, {9, 16, 8}}) {
    const auto in = representable(act(), uniform(rng, N * C, -1, 1));
    const auto w = representable(wt(), uniform(rng, OC * C, -1, 1));
    const auto bias = representable(wt(), uniform(rng, OC, -1, 1));
    const auto residual = representable(act(), uniform(rng, N * OC, -4, 4));
    auto d_out = activations(std::vector(N * OC, 123.0f)), d_residual = activations(residual);
    be->matmul_residual_forward(d_out.data(), d_residual.data(), activations(in).data(), compute_weights(w).data(),
                                compute_weights(bias).data(), N, 3, C, OC);
    const auto out = d_out.download();
    EXPECT_EQ(d_residual.download(), residual);
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t o = 0; o < OC; ++o) {
        double ref = residual[i * OC + o] + double(bias[o]), mag = std::abs(residual[i * OC + o]) + std::abs(bias[o]);
        for (std::size_t c = 0; c < C; ++c) {
          ref += double(in[i * C + c]) * w[o * C + c];
          mag += std::abs(double(in[i * C + c]) * w[o * C + c]);
        }
        EXPECT_NEAR(out[i * OC + o], ref, tol(1e-6) * mag) << i << "," << o << " C " << C;
      }
  }
}

// A model whose width is no multiple of 8 has its biases at any alignment in the flat weights: the product is the
// same, bit for bit, wherever the bias lies (the GEMM runner takes a bias at 256 bytes: the cuda backend copies it).
TEST_P(OpForward, MatmulBiasAtAnyAlignmentGivesTheSameBits) {
  const std::size_t N = 6, C = 10, OC = 7;
  const auto d_in = activations(representable(act(), uniform(rng, N * C, -1, 1)));
  const auto d_w = compute_weights(representable(wt(), uniform(rng, OC * C, -1, 1)));
  const auto bias = representable(wt(), uniform(rng, OC, -1, 1));
  auto product = [&](std::size_t offset) {  // the bias `offset` elements into its array
    std::vector<float> padded(offset, 0.0f);
    padded.insert(padded.end(), bias.begin(), bias.end());
    const auto d_bias = compute_weights(padded);
    auto d_out = activations(N * OC);
    be->matmul_forward(d_out.data(), d_in.data(), d_w.data(),
                       static_cast<const std::byte*>(d_bias.data()) + offset * element_size(wt()), N, 3, C, OC,
                       OC);
    return d_out.download();
  };
  const auto aligned = product(0);
  for (std::size_t offset : {1, 2, 3, 5, 7}) EXPECT_EQ(product(offset), aligned) << "bias at element " << offset;
}

// The padding NaN: written, it would hold a number; read, it would have made some result NaN.
constexpr float kPadding = std::numeric_limits<float>::quiet_NaN();

// The LM head's logits lie in rows padded past the vocabulary (ModelConfig::logits_row_length): the matmul writing
// them, the one reading them back and the classifier never touch the padding, and give the same bits as on dense
// rows. A backend whose products may pick their kernel by the operands' row lengths (cuBLASLt chooses by alignment:
// rows of 7, 8 and 64 BF16 elements start 2, 16 and 128 bytes apart, and its kernels add in different orders) does
// not promise that for the products: there each element is within the reordering bound of the dense one — two fp32
// sums of the same k + 2 terms (products, the accumulated value, the bias) differ by at most 2·(k + 2)·u·Σ|terms|,
// plus one BF16 unit in the last place (2⁻⁷·|x|) where the result is stored in BF16 — and the classifier, given the
// dense run's logits in padded rows, still gives the same bits (it is the backend's own kernel).
TEST_P(OpForward, MatmulAndClassifierOnPaddedRowsGiveTheSameBits) {
  const std::size_t N = 6, T = 3, C = 10, OC = 7;
  const auto in = representable(act(), uniform(rng, N * C, -1, 1));
  const auto w = representable(wt(), uniform(rng, OC * C, -1, 1));
  const auto bias = representable(wt(), uniform(rng, OC, -1, 1));
  const auto dout = representable(act(), uniform(rng, N * OC, -1, 1));
  const auto din0 = representable(act(), uniform(rng, N * C, -1, 1));
  const auto dw0 = uniform(rng, OC * C, -1, 1), dbias0 = uniform(rng, OC, -1, 1);
  const auto targets = on_device(std::vector<std::int32_t>{0, 6, 3, 3, 1, 5});
  const auto d_in = activations(in), d_w = compute_weights(w), d_bias = compute_weights(bias);
  struct Results {
    std::vector<float> out, din, dw, dbias, dlogits, losses;
    double loss_sum;
  };
  // The classifier reads the matmul's logits, or `logits` written into the same padded rows where given.
  auto run = [&](std::size_t ld, const std::vector<float>* logits) {
    Results r;
    auto d_out = activations(test::padded_rows(std::vector(N * OC, 0.0f), N, OC, ld, kPadding));
    be->matmul_forward(d_out.data(), d_in.data(), d_w.data(), d_bias.data(), N, T, C, OC, ld);
    r.out = test::unpadded_rows(d_out.download(), N, OC, ld, kPadding);
    auto d_din = activations(din0), d_dw = gradients(dw0), d_db = gradients(dbias0);
    be->matmul_backward(d_din.data(), d_dw.data(), d_db.data(),
                        activations(test::padded_rows(dout, N, OC, ld, kPadding)).data(), d_in.data(), d_w.data(), N,
                        T, C, OC, ld);
    r.din = d_din.download(), r.dw = d_dw.download(), r.dbias = d_db.download();
    if (logits) d_out.upload(test::padded_rows(*logits, N, OC, ld, kPadding));
    test::DeviceVector<float> losses(device(), N);
    test::DeviceScalar total(device());
    be->softmax_cross_entropy(d_out.data(), losses.data(), targets.data(), N, OC, ld, 0.37f, total.data());
    r.dlogits = test::unpadded_rows(d_out.download(), N, OC, ld, kPadding);
    r.losses = losses.download(), r.loss_sum = total.value();
    return r;
  };
  // Σ|terms| of each product's elements: out[n,o] (k = C), din[n,c] (k = OC), dw[o,c] (k = N).
  std::vector<double> out_terms(N * OC), din_terms(N * C), dw_terms(OC * C);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t o = 0; o < OC; ++o)
      for (std::size_t c = 0; c < C; ++c) {
        out_terms[n * OC + o] += std::abs(double(in[n * C + c]) * w[o * C + c]);
        din_terms[n * C + c] += std::abs(double(dout[n * OC + o]) * w[o * C + c]);
        dw_terms[o * C + c] += std::abs(double(dout[n * OC + o]) * in[n * C + c]);
      }
  for (std::size_t o = 0; o < OC; ++o) {
    for (std::size_t n = 0; n < N; ++n) out_terms[n * OC + o] += std::abs(bias[o]);
    for (std::size_t c = 0; c < C; ++c) dw_terms[o * C + c] += std::abs(dw0[o * C + c]);
  }
  const auto expect_reordered = [](const std::vector<float>& got, const std::vector<float>& want,
                                   const std::vector<double>& terms, std::size_t k, DType stored, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double bound = 2.0 * double(k + 2) * 0x1p-24 * terms[i] +
                           (stored == DType::bf16 ? 0x1p-7 * std::abs(double(want[i])) : 0.0);
      EXPECT_LE(std::abs(double(got[i]) - want[i]), bound) << what << " element " << i;
    }
  };
  const Results dense = run(OC, nullptr);
  const bool invariant = be->guarantees().row_length_invariant;
  for (const std::size_t ld : {OC + 1, std::size_t(64)}) {
    SCOPED_TRACE(::testing::Message() << "rows of " << ld);
    const Results rows = run(ld, invariant ? nullptr : &dense.out);
    if (invariant) {
      EXPECT_EQ(rows.out, dense.out);
      EXPECT_EQ(rows.din, dense.din);
      EXPECT_EQ(rows.dw, dense.dw);
    } else {
      expect_reordered(rows.out, dense.out, out_terms, C, act(), "out");
      expect_reordered(rows.din, dense.din, din_terms, OC, act(), "din");
      expect_reordered(rows.dw, dense.dw, dw_terms, N, grad(), "dw");
    }
    EXPECT_EQ(rows.dbias, dense.dbias);
    EXPECT_EQ(rows.dlogits, dense.dlogits);
    EXPECT_EQ(rows.losses, dense.losses);
    EXPECT_EQ(rows.loss_sum, dense.loss_sum);
  }
  for (const float x : dense.dlogits) ASSERT_TRUE(std::isfinite(x));
}

class AttentionForward : public OpForwardTest<test::AttentionParam> {
 protected:
  const test::AttentionShape shape = std::get<1>(GetParam());
  const std::vector<float> qkv = representable(act(), uniform(rng, shape.B * shape.T * 3 * shape.C, -2, 2));

  // Whether the backend saves the probabilities (gemm) for these heads, or a fused attention's statistics.
  bool saves_probabilities() const {
    const auto [B, T, C, NH] = shape;
    return be->attention_saved_bytes(T, C, NH) == T * T * element_size(act());
  }
  // out [B,T,C] and probs [B,NH,T,T] of attention over `input` (probs start as 42: stale contents); probs empty
  // where the backend fuses attention (it keeps row statistics instead, not compared here).
  std::pair<std::vector<float>, std::vector<float>> attend(const std::vector<float>& input) {
    const auto [B, T, C, NH] = shape;
    auto out = activations(B * T * C);
    if (!saves_probabilities()) {
      test::DeviceVector<std::uint8_t> saved(device(), B * NH * be->attention_saved_bytes(T, C, NH));
      be->attention_forward(out.data(), saved.data(), activations(input).data(), B, T, C, NH);
      return {out.download(), {}};
    }
    auto probs = activations(std::vector(B * NH * T * T, 42.0f));
    be->attention_forward(out.data(), probs.data(), activations(input).data(), B, T, C, NH);
    return {out.download(), probs.download()};
  }
};

TEST_P(AttentionForward, CausalSoftmaxAndOutput) {
  const auto [B, T, C, NH] = shape;
  const std::size_t hs = C / NH;
  const auto [out, probs] = attend(qkv);
  auto at = [&](std::size_t b, std::size_t t, std::size_t part, std::size_t h, std::size_t d) {
    return double(qkv[(b * T + t) * 3 * C + part * C + h * hs + d]);
  };
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t i = 0; i < T; ++i) {
        std::vector<double> ref(i + 1);
        double maxv = -1e300, sum = 0, psum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          for (std::size_t d = 0; d < hs; ++d) ref[j] += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          ref[j] /= std::sqrt(double(hs));
          maxv = std::max(maxv, ref[j]);
        }
        for (double& x : ref) sum += (x = std::exp(x - maxv));
        if (!probs.empty()) {
          const float* p = probs.data() + ((b * NH + h) * T + i) * T;
          for (std::size_t j = 0; j <= i; ++j) {
            EXPECT_NEAR(p[j], ref[j] / sum, tol(1e-6)) << b << "," << h << "," << i << "," << j;
            psum += p[j];
          }
          EXPECT_NEAR(psum, 1.0, tol(1e-6));
          for (std::size_t j = i + 1; j < T; ++j) EXPECT_EQ(p[j], 0.0f) << "above the diagonal " << i << "," << j;
        }
        for (std::size_t d = 0; d < hs; ++d) {
          double o = 0;
          for (std::size_t j = 0; j <= i; ++j) o += ref[j] / sum * at(b, j, 2, h, d);
          EXPECT_NEAR(out[(b * T + i) * C + h * hs + d], o, tol(1e-5)) << b << "," << h << "," << i << "," << d;
        }
      }
}

TEST_P(AttentionForward, LaterPositionsLeaveEarlierOutputsBitwiseUnchanged) {
  // Causality: changing every q, k and v at the last position leaves all earlier outputs bitwise unchanged —
  // a claim about bits, so only where the backend computes the same inputs to the same bits.
  SKIP_UNLESS(skip_unless_repeatable());
  const auto [B, T, C, NH] = shape;
  auto changed = qkv;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < 3 * C; ++k) changed[(b * T + T - 1) * 3 * C + k] *= -3.0f;
  const auto out = attend(qkv).first, out2 = attend(changed).first;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < (T - 1) * C; ++k) EXPECT_EQ(out2[b * T * C + k], out[b * T * C + k]);
}

using test::AttentionShape;
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionForward,
                         test::backends_and(AttentionShape{2, 5, 6, 2}, AttentionShape{1, 7, 9, 3},
                                            AttentionShape{3, 1, 4, 1}, AttentionShape{1, 13, 8, 2},
                                            // head sizes 16 and 64, which a fused attention takes
                                            AttentionShape{2, 17, 32, 2}, AttentionShape{1, 33, 128, 2}),
                         test::TestName());

TEST_P(OpForward, GeluIsTheTanhApproximation) {
  // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), values from Python in double. The exact (erf) GELU differs from
  // these by 1e-4 at x = 2 and 4e-4 at x = −3, far outside the 1e-6 tolerance.
  const std::vector<float> x{1.0f, -1.0f, 2.0f, 0.5f, -3.0f, 0.0f};
  const std::vector<double> expected{0.8411919906082768,  -0.15880800939172324, 1.954597694087775,
                                     0.34571400982514394, -0.0036373920817729943, 0.0};
  auto d_out = activations(x.size());
  be->gelu_forward(d_out.data(), activations(x).data(), x.size());
  auto out = d_out.download();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], expected[i], tol(1e-6)) << "x = " << x[i];

  const auto in = representable(act(), uniform(rng, 101, -6, 6));
  auto d_out2 = activations(in.size());
  be->gelu_forward(d_out2.data(), activations(in).data(), in.size());
  out = d_out2.download();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const double v = in[i];
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[i], ref, tol(1e-6) * (1 + std::abs(v))) << "x = " << v;
  }
}

TEST_P(OpForward, AccumulateIsExact) {
  // out += a, once per element in the dtype: bitwise the rounded sum, for activations and gradients alike.
  const std::size_t n = 21;
  for (DType dtype : {act(), grad()}) {
    const auto a0 = representable(dtype, uniform(rng, n, -1, 1)), b = representable(dtype, uniform(rng, n, -1, 1));
    test::DeviceArray a(device(), dtype, a0), d_b(device(), dtype, b);
    be->accumulate(a.data(), d_b.data(), n, dtype);
    be->accumulate(a.data(), d_b.data(), n, dtype);
    const auto result = a.download();
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(result[i], round_to(dtype, round_to(dtype, a0[i] + b[i]) + b[i])) << dtype_name(dtype) << " " << i;
  }
}

TEST_P(OpForward, SoftmaxCrossEntropyMatchesDoubleReference) {
  const std::size_t N = 6, V = 9;
  auto logits = uniform(rng, N * V, -4, 4);
  for (std::size_t j = 0; j < V; ++j) logits[5 * V + j] = 1000.0f + float(j);  // must not overflow
  logits = representable(act(), logits);
  const std::vector<std::int32_t> targets{0, 8, 3, 3, 1, 5};
  // dloss = 1: the logits become p − onehot(target); dloss = 0: the losses only, the same bits.
  auto d_dlogits = activations(logits), d_logits = activations(logits);
  test::DeviceVector<float> d_losses(device(), N), d_eval_losses(device(), N);
  test::DeviceScalar total(device()), eval_total(device());
  be->softmax_cross_entropy(d_dlogits.data(), d_losses.data(), on_device(targets).data(), N, V, V, 1.0f,
                            total.data());
  be->softmax_cross_entropy(d_logits.data(), d_eval_losses.data(), on_device(targets).data(), N, V, V, 0.0f,
                            eval_total.data());
  const auto dlogits = d_dlogits.download(), losses = d_losses.download();
  EXPECT_EQ(d_eval_losses.download(), losses);
  EXPECT_EQ(eval_total.value(), total.value());
  double sum_losses = 0;
  for (std::size_t i = 0; i < N; ++i) {
    double maxv = -1e300, z = 0, gradient_sum = 0;
    for (std::size_t j = 0; j < V; ++j) maxv = std::max(maxv, double(logits[i * V + j]));
    for (std::size_t j = 0; j < V; ++j) z += std::exp(logits[i * V + j] - maxv);
    const double loss = maxv + std::log(z) - logits[i * V + targets[i]];
    EXPECT_NEAR(losses[i], loss, tol(1e-5) * (1 + loss)) << "row " << i;
    for (std::size_t j = 0; j < V; ++j) {
      const double p = std::exp(logits[i * V + j] - maxv) / z;
      EXPECT_NEAR(dlogits[i * V + j], p - (std::int32_t(j) == targets[i] ? 1.0 : 0.0), tol(1e-6)) << i << "," << j;
      gradient_sum += dlogits[i * V + j];
    }
    EXPECT_NEAR(gradient_sum, 0.0, tol(1e-6));  // Σ p = 1
    sum_losses += losses[i];
  }
  EXPECT_NEAR(total.value(), sum_losses, 1e-12 * sum_losses);  // summed in double on every backend

  // Equal logits: every loss is log V.
  auto flat = activations(std::vector(2 * V, 0.5f));
  test::DeviceVector<float> flat_losses(device(), 2);
  test::DeviceScalar flat_total(device());
  be->softmax_cross_entropy(flat.data(), flat_losses.data(), on_device(std::vector<std::int32_t>{0, 4}).data(), 2, V,
                            V, 0.0f, flat_total.data());
  EXPECT_NEAR(flat_total.value(), 2 * std::log(double(V)), tol(1e-5));
}

TEST_P(OpForward, LossAccumulatorAdds) {
  // The loss sum is added into the accumulator, never stored: two forwards onto a non-zero start give the start
  // plus both sums (micro-steps of gradient accumulation share one accumulator).
  const std::size_t N = 4, V = 5;
  const auto logits = representable(act(), uniform(rng, N * V, -3, 3));
  const auto targets = on_device(std::vector<std::int32_t>{4, 0, 2, 2});
  test::DeviceVector<float> losses(device(), N);
  auto forward = [&](test::DeviceScalar& acc) {
    auto work = activations(logits);  // the logits become their gradient
    be->softmax_cross_entropy(work.data(), losses.data(), targets.data(), N, V, V, 1.0f, acc.data());
  };
  test::DeviceScalar once(device());
  forward(once);
  const double sum = once.value();
  EXPECT_GT(sum, 1.0);
  test::DeviceScalar acc(device(), 10.0);
  forward(acc);
  forward(acc);
  EXPECT_NEAR(acc.value(), 10.0 + 2 * sum, 1e-12 * (10.0 + 2 * sum));
}

INSTANTIATE_TEST_SUITE_P(Backends, OpForward, ::testing::ValuesIn(test::backends_under_test()),
                         test::TestName());

}  // namespace
}  // namespace dptrain
