// Attention under --cpu-gemm onednn-bf16 (compute/cpu/bf16_attention.hpp): one batched BF16 product per window
// for each of its products, operands rounded to BF16 at q, k, v, dO, the probabilities and dS, fp32 accumulation.
//
// The tolerance is a running error bound computed beside a double-precision reference from the same fp32 inputs:
// every rounding to BF16 is a relative error of at most u = 2⁻⁸ (8 significand bits, nearest), a product of two
// rounded operands at most 2u + u², an fp32 sum of n terms at most γₙ = (n + 3)·2⁻²⁴ of the sum of magnitudes
// (Higham, first order, with the scaling and the final addition), and the softmax of scores each within E of
// their exact values at most p·(e^{2E} − 1) plus its own fp32 error, (T + 8)·2⁻²⁴·p (exp within 2 ulp, a sum of
// ≤ T terms, one division). Each element's error is propagated through the formulas the backend computes, so the
// bound is per element; the test requires every element within it, and the fp32 attention of the onednn library
// to stay far inside it (the rounding is what ran). The backward takes the same probabilities on both
// sides, so its bound starts from exact p.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/onednn_bf16_gemm.hpp"

namespace dptrain {
namespace {

constexpr double kU = 1.0 / 256;  // BF16 unit roundoff, 2⁻⁸

double gamma(std::size_t n) { return double(n + 3) * std::ldexp(1.0, -24); }

struct Shape {
  std::size_t B, T, C, NH;
  std::string describe() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " C " + std::to_string(C) + " NH " +
           std::to_string(NH);
  }
};

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

// The exact forward in double, and each element's bound: out[B,T,C], probs[B,NH,T,T].
struct Reference {
  std::vector<double> out, out_bound, probs;
  std::vector<double> dqkv, dqkv_bound;  // the backward's, from the given probs
};

// qkv[b,t,part·C + h·hs + d]
struct View {
  const Shape& s;
  std::size_t hs() const { return s.C / s.NH; }
  std::size_t qkv(std::size_t b, std::size_t t, std::size_t part, std::size_t h, std::size_t d) const {
    return (b * s.T + t) * 3 * s.C + part * s.C + h * hs() + d;
  }
  std::size_t out(std::size_t b, std::size_t t, std::size_t h, std::size_t d) const {
    return (b * s.T + t) * s.C + h * hs() + d;
  }
  std::size_t probs(std::size_t b, std::size_t h, std::size_t i, std::size_t j) const {
    return ((b * s.NH + h) * s.T + i) * s.T + j;
  }
};

void forward_reference(const Shape& s, const std::vector<float>& qkv, Reference& r) {
  const View at{s};
  const std::size_t hs = at.hs();
  const double scale = 1.0 / std::sqrt(double(hs));
  r.out.assign(s.B * s.T * s.C, 0.0);
  r.out_bound.assign(s.B * s.T * s.C, 0.0);
  r.probs.assign(s.B * s.NH * s.T * s.T, 0.0);
  const double product_error = 2 * kU + kU * kU;
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.NH; ++h)
      for (std::size_t i = 0; i < s.T; ++i) {
        std::vector<double> score(i + 1), p(i + 1), p_bound(i + 1);
        double worst_score_error = 0.0, max_score = -1e300;
        for (std::size_t j = 0; j <= i; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (std::size_t d = 0; d < hs; ++d) {
            const double term = double(qkv[at.qkv(b, i, 0, h, d)]) * qkv[at.qkv(b, j, 1, h, d)];
            sum += term;
            magnitude += std::abs(term);
          }
          score[j] = scale * sum;
          worst_score_error =
              std::max(worst_score_error, scale * magnitude * (product_error + gamma(hs) * (1 + kU) * (1 + kU)));
          max_score = std::max(max_score, score[j]);
        }
        double total = 0.0;
        for (std::size_t j = 0; j <= i; ++j) total += p[j] = std::exp(score[j] - max_score);
        const double softmax_error = std::expm1(2 * worst_score_error) + double(s.T + 8) * std::ldexp(1.0, -24);
        for (std::size_t j = 0; j <= i; ++j) {
          p[j] /= total;
          r.probs[at.probs(b, h, i, j)] = p[j];
          const double computed = p[j] * softmax_error;    // p̂ against p
          p_bound[j] = computed + kU * (p[j] + computed);  // bf16(p̂) against p
        }
        for (std::size_t d = 0; d < hs; ++d) {
          double sum = 0.0, bound = 0.0, magnitude = 0.0;
          for (std::size_t j = 0; j <= i; ++j) {
            const double v = qkv[at.qkv(b, j, 2, h, d)];
            sum += p[j] * v;
            bound += p_bound[j] * std::abs(v) + (p[j] + p_bound[j]) * kU * std::abs(v);
            magnitude += (p[j] + p_bound[j]) * std::abs(v) * (1 + kU);
          }
          r.out[at.out(b, i, h, d)] = sum;
          r.out_bound[at.out(b, i, h, d)] = bound + gamma(s.T) * magnitude;
        }
      }
}

// dqkv = the gradient, from the given probs p (taken as exact), in double; and each element's bound.
void backward_reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                        const std::vector<float>& probs, Reference& r) {
  const View at{s};
  const std::size_t hs = at.hs();
  const double scale = 1.0 / std::sqrt(double(hs));
  r.dqkv.assign(qkv.size(), 0.0);
  r.dqkv_bound.assign(qkv.size(), 0.0);
  const double product_error = 2 * kU + kU * kU;
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.NH; ++h) {
      // dP, dS and their bounds, [T,T] (zero above the diagonal)
      std::vector<double> ds(s.T * s.T, 0.0), ds_bound(s.T * s.T, 0.0);
      for (std::size_t i = 0; i < s.T; ++i) {
        std::vector<double> dp(i + 1), dp_bound(i + 1);
        double dot = 0.0, dot_bound = 0.0, dot_magnitude = 0.0;
        for (std::size_t j = 0; j <= i; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (std::size_t d = 0; d < hs; ++d) {
            const double term = double(dout[at.out(b, i, h, d)]) * qkv[at.qkv(b, j, 2, h, d)];
            sum += term;
            magnitude += std::abs(term);
          }
          dp[j] = sum;
          dp_bound[j] = magnitude * (product_error + gamma(hs) * (1 + kU) * (1 + kU));
          const double p = probs[at.probs(b, h, i, j)];
          dot += p * sum;
          dot_bound += p * dp_bound[j];
          dot_magnitude += p * (std::abs(sum) + dp_bound[j]);
        }
        dot_bound += gamma(s.T) * dot_magnitude;
        for (std::size_t j = 0; j <= i; ++j) {
          const double p = probs[at.probs(b, h, i, j)], value = p * (dp[j] - dot);
          const double computed = p * (dp_bound[j] + dot_bound) +
                                  std::ldexp(1.0, -23) * p * (std::abs(dp[j] - dot) + dp_bound[j] + dot_bound);
          ds[i * s.T + j] = value;
          ds_bound[i * s.T + j] = computed + kU * (std::abs(value) + computed);  // bf16(dŜ) against dS
        }
      }
      for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t d = 0; d < hs; ++d) {
          // dq[t] = scale·Σ_j dS[t,j]·k[j]; dk[t] = scale·Σ_i dS[i,t]·q[i]; dv[t] = Σ_i p[i,t]·dO[i]
          double dq = 0, dq_b = 0, dq_m = 0, dk = 0, dk_b = 0, dk_m = 0, dv = 0, dv_b = 0, dv_m = 0;
          for (std::size_t j = 0; j <= t; ++j) {
            const double k = std::abs(qkv[at.qkv(b, j, 1, h, d)]), e = ds_bound[t * s.T + j];
            const double value = ds[t * s.T + j];
            dq += value * qkv[at.qkv(b, j, 1, h, d)];
            dq_b += e * k + (std::abs(value) + e) * kU * k;
            dq_m += (std::abs(value) + e) * k * (1 + kU);
          }
          for (std::size_t i = t; i < s.T; ++i) {
            const double q = std::abs(qkv[at.qkv(b, i, 0, h, d)]), e = ds_bound[i * s.T + t];
            const double value = ds[i * s.T + t];
            dk += value * qkv[at.qkv(b, i, 0, h, d)];
            dk_b += e * q + (std::abs(value) + e) * kU * q;
            dk_m += (std::abs(value) + e) * q * (1 + kU);
            const double p = probs[at.probs(b, h, i, t)], o = dout[at.out(b, i, h, d)];
            dv += p * o;
            dv_b += p * std::abs(o) * product_error;
            dv_m += p * std::abs(o) * (1 + kU) * (1 + kU);
          }
          const std::size_t rows[3] = {at.qkv(b, t, 0, h, d), at.qkv(b, t, 1, h, d), at.qkv(b, t, 2, h, d)};
          const double values[3] = {scale * dq, scale * dk, dv};
          const double bounds[3] = {scale * (dq_b + gamma(s.T) * dq_m), scale * (dk_b + gamma(s.T) * dk_m),
                                    dv_b + gamma(s.T) * dv_m};
          for (int part = 0; part < 3; ++part) {
            r.dqkv[rows[part]] = values[part];
            r.dqkv_bound[rows[part]] = bounds[part];
          }
        }
    }
}

// The largest |computed − reference| / bound over the elements (≤ 1: within the bound everywhere; infinite where
// a computed value is NaN).
double worst_ratio(const std::vector<float>& computed, const std::vector<double>& reference,
                   const std::vector<double>& bound) {
  double worst = 0.0;
  for (std::size_t i = 0; i < computed.size(); ++i) {
    const double error = std::abs(computed[i] - reference[i]);
    if (std::isnan(error)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, error == 0.0 ? 0.0 : error / bound[i]);
  }
  return worst;
}

struct Results {
  std::vector<float> out, probs, dqkv;
};

// Forward, then backward from `probs_in` (the forward's own where empty), on `backend` with `threads` threads. dqkv
// starts as NaN: the backward writes every element and reads none.
Results run(Backend& backend, const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
            const std::vector<float>& probs_in, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Results r{std::vector<float>(s.B * s.T * s.C), std::vector<float>(s.B * s.NH * s.T * s.T),
            std::vector<float>(qkv.size(), std::numeric_limits<float>::quiet_NaN())};
  backend.attention_forward(r.out.data(), r.probs.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  backend.attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                             probs_in.empty() ? r.probs.data() : probs_in.data(), s.B, s.T, s.C, s.NH);
  omp_set_num_threads(saved);
  return r;
}

class Bf16Attention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = onednn_bf16_unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

// The small config's shape, and awkward ones: T = 1, T and head size no multiple of 16, one head, odd B.
const Shape kShapes[] = {{2, 128, 256, 4}, {3, 5, 12, 3}, {1, 1, 8, 2}, {2, 33, 40, 1}, {1, 17, 96, 2}};

TEST_F(Bf16Attention, EveryElementIsWithinTheBf16RoundingBoundOfTheExactAttention) {
  auto bf16 = make_cpu_backend("onednn-bf16");
  auto fp32 = make_cpu_backend("onednn");
  std::uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    const std::vector<float> qkv = random_values(s.B * s.T * 3 * s.C, seed++, 1.5f);
    const std::vector<float> dout = random_values(s.B * s.T * s.C, seed++, 1.0f);
    Reference reference;
    forward_reference(s, qkv, reference);
    // The backward of both backends from the exact probabilities, rounded to fp32 once.
    const std::vector<float> probs(reference.probs.begin(), reference.probs.end());
    backward_reference(s, qkv, dout, probs, reference);

    const Results low = run(*bf16, s, qkv, dout, probs, 2);
    const double low_out = worst_ratio(low.out, reference.out, reference.out_bound),
                 low_dqkv = worst_ratio(low.dqkv, reference.dqkv, reference.dqkv_bound);
    EXPECT_LE(low_out, 1.0) << s.describe();
    EXPECT_LE(low_dqkv, 1.0) << s.describe();
    // Above the diagonal the probabilities are exact zeros.
    for (std::size_t bh = 0; bh < s.B * s.NH; ++bh)
      for (std::size_t i = 0; i < s.T; ++i)
        for (std::size_t j = i + 1; j < s.T; ++j) ASSERT_EQ(low.probs[(bh * s.T + i) * s.T + j], 0.0f);

    // fp32 attention's errors are a small part of the bound (measured: ≤ 1e-5 of it forward, ≤ 0.07 backward,
    // where BF16's are 0.07-0.22 and 0.39-0.75): the rounding to BF16 is what the BF16 path computed with.
    const Results high = run(*fp32, s, qkv, dout, probs, 2);
    EXPECT_GT(low_out, 100 * worst_ratio(high.out, reference.out, reference.out_bound)) << s.describe();
    EXPECT_GT(low_dqkv, 5 * worst_ratio(high.dqkv, reference.dqkv, reference.dqkv_bound)) << s.describe();
  }
}

// One window's products run on one thread: the same bits for 1 and 3 threads, and for the windows one at a time.
TEST_F(Bf16Attention, TheSameBitsForAnyThreadCountAndAnyGroupingOfWindows) {
  auto bf16 = make_cpu_backend("onednn-bf16");
  const Shape s{4, 40, 48, 3};
  const std::vector<float> qkv = random_values(s.B * s.T * 3 * s.C, 11, 1.5f);
  const std::vector<float> dout = random_values(s.B * s.T * s.C, 12, 1.0f);
  const Results one = run(*bf16, s, qkv, dout, {}, 1), three = run(*bf16, s, qkv, dout, {}, 3);
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.probs, three.probs);
  EXPECT_EQ(one.dqkv, three.dqkv);
  const Shape window{1, s.T, s.C, s.NH};
  for (std::size_t b = 0; b < s.B; ++b) {
    const auto part = [&](const std::vector<float>& x, std::size_t per_window) {
      return std::vector<float>(x.begin() + std::ptrdiff_t(b * per_window),
                                x.begin() + std::ptrdiff_t((b + 1) * per_window));
    };
    const std::size_t qkv_size = s.T * 3 * s.C, out_size = s.T * s.C, probs_size = s.NH * s.T * s.T;
    const Results alone = run(*bf16, window, part(qkv, qkv_size), part(dout, out_size), {}, 2);
    EXPECT_EQ(alone.out, part(one.out, out_size)) << "window " << b;
    EXPECT_EQ(alone.probs, part(one.probs, probs_size)) << "window " << b;
    EXPECT_EQ(alone.dqkv, part(one.dqkv, qkv_size)) << "window " << b;
  }
}

}  // namespace
}  // namespace dptrain
