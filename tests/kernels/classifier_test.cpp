// The fused classifier of kernels/classifier.cu (losses, and the logits' gradient in the same pass), run on the CPU
// by cuda_on_cpu.hpp, against the cpu backend's softmax_cross_entropy (fp32) and against exact values (double)
// computed from the same BF16 logits. Shapes: V = 1, V < 32, V not a multiple of the block's 512 threads, a single
// row, the GPT-2 vocabulary; rows whose target has a probability near 1, and one whose loss is capped; rows padded
// past V (the model's logits), whose padding neither side may read or write.
//
// Tolerances, from the arithmetic (test_data.hpp: a BF16 rounding moves v by ≤ 2⁻⁸·|v|, an fp32 operation by
// ≤ 2⁻²⁴·|v|; u = 2⁻²⁴ below):
// - The kernel's Σ exp is a thread's online sum of ⌈V/512⌉ terms (≤ 3 roundings a term: add, and a rescale per
//   chunk of 8 at most), a five-level butterfly and up to 15 warps merged in order (≤ 3 roundings each), then exp,
//   log1p or a reciprocal and a product; and each term e^{x−m} = 2^{x·log₂e − m·log₂e} is within (|x − m| + 2)·u
//   of exact (the exponent's one rounding, exp2f's 2 ulp), |x − m| at most the row's spread (its largest logit
//   less its smallest). So its probabilities (as dloss·p: dloss/Σ, then the product, two more roundings) and
//   Σ_{j≠t} e^{x_j−x_t} are within kernel_rel = (3·⌈V/512⌉ + 64 + spread + 2)·u, relative, of the exact values.
// - The cpu backend sums V terms in a row: within cpu_rel = (V + 8)·u.
// - loss = log1p(Q) with Q within kernel_rel: off by ≤ kernel_rel·Q/(1 + Q) ≤ kernel_rel·min(1, 1.5·loss), plus a
//   few ulps of log1p. p[t] − 1 = expm1(−loss) then moves by ≤ 2·kernel_rel relative, before its BF16 rounding.
#include "cuda_on_cpu.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "../padded_rows.hpp"
#include "test_data.hpp"
#include "../../kernels/classifier.cu"

namespace dptrain {
namespace {

using namespace kernel_tests;

constexpr double u = kFp32Rounding;
const double kLossCap = -std::log(double(1e-30f));  // the cpu backend's: −log(max(p, 1e-30))

double kernel_rel(std::size_t V, double spread) { return (3.0 * std::ceil(V / 512.0) + 64 + spread + 2) * u; }
double cpu_rel(std::size_t V) { return (double(V) + 8) * u; }

// One row's exact softmax, loss and p[t] − 1, in double from its logits.
struct ExactRow {
  std::vector<double> p;
  double loss, target_p_minus_one;
};

ExactRow exact_row(const float* x, std::size_t V, std::size_t t) {
  const double top = *std::max_element(x, x + V);
  double sum = 0, others = 0;  // Σ e^{x_j − top}; Σ_{j≠t} e^{x_j − x_t}
  for (std::size_t j = 0; j < V; ++j) {
    sum += std::exp(x[j] - top);
    if (j != t) others += std::exp(double(x[j]) - x[t]);
  }
  ExactRow row{std::vector<double>(V), std::min(std::log1p(others), kLossCap), -others / (1 + others)};
  for (std::size_t j = 0; j < V; ++j) row.p[j] = std::exp(x[j] - top) / sum;
  return row;
}

class Classifier : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::mt19937 rng{5};

  std::vector<std::int32_t> random_targets(std::size_t N, std::size_t V) {
    std::uniform_int_distribution<std::int32_t> draw(0, std::int32_t(V) - 1);
    std::vector<std::int32_t> targets(N);
    for (std::int32_t& t : targets) t = draw(rng);
    targets[0] = std::int32_t(V) - 1;  // the last column
    return targets;
  }

  // Runs the classifier and loss_sum kernels on logits [N,V] in rows of ld ≥ V (the padding holds NaN, which must
  // stay as it is and never be read) with dloss, and checks everything they write against the cpu backend (on rows
  // of ld too) and the exact values; and again with dloss = 0, which must give the same losses and leave the logits
  // as they were. Returns the kernel's dlogits (rows of V) and losses.
  struct Result {
    std::vector<bf16> dlogits;
    std::vector<float> losses;
    double loss_sum;
  };
  Result check(const std::vector<bf16>& logits, const std::vector<std::int32_t>& targets, std::size_t N,
               std::size_t V, float dloss, std::size_t ld = 0) {
    if (ld == 0) ld = V;
    Result k{test::padded_rows(logits, N, V, ld, to_bf16(NAN)), std::vector<float>(N, NAN), 0.25};
    cuda_on_cpu::launch(kernels::classifier, kernels::classifier_launch(N), k.dlogits.data(), k.losses.data(),
                        targets.data(), dloss, N, V, ld);
    cuda_on_cpu::launch(kernels::loss_sum, kernels::loss_sum_launch(), &k.loss_sum, k.losses.data(), N);
    k.dlogits = test::unpadded_rows(k.dlogits, N, V, ld, to_bf16(NAN));
    const double acc = k.loss_sum;  // loss_sum added to the 0.25 that was there

    // The losses only: the logits untouched, the same losses.
    std::vector<bf16> untouched = test::padded_rows(logits, N, V, ld, to_bf16(NAN));
    std::vector<float> eval_losses(N, NAN);
    cuda_on_cpu::launch(kernels::classifier, kernels::classifier_launch(N), untouched.data(), eval_losses.data(),
                        targets.data(), 0.0f, N, V, ld);
    untouched = test::unpadded_rows(untouched, N, V, ld, to_bf16(NAN));
    for (std::size_t i = 0; i < N * V; ++i) EXPECT_EQ(untouched[i].bits, logits[i].bits) << i;
    for (std::size_t n = 0; n < N; ++n) EXPECT_EQ(eval_losses[n], k.losses[n]) << "row " << n;

    // The cpu backend on the fp32 logits.
    const std::vector<float> logits_f = as_floats(logits);
    std::vector<float> ref = test::padded_rows(logits_f, N, V, ld, NAN), losses_ref(N);
    double sum_ref = 0.25;
    cpu->softmax_cross_entropy(ref.data(), losses_ref.data(), targets.data(), N, V, ld, dloss, &sum_ref);
    ref = test::unpadded_rows(ref, N, V, ld, NAN);

    const double cr = cpu_rel(V);
    double host_sum = 0.25, magnitude = 0.25, sum_tolerance = 0;
    for (std::size_t n = 0; n < N; ++n) {
      SCOPED_TRACE(::testing::Message() << "row " << n << " target " << targets[n]);
      const std::size_t t = std::size_t(targets[n]);
      const auto [smallest, largest] = std::minmax_element(logits_f.begin() + n * V, logits_f.begin() + (n + 1) * V);
      const double kr = kernel_rel(V, double(*largest) - *smallest);
      const ExactRow exact = exact_row(logits_f.data() + n * V, V, t);
      for (std::size_t j = 0; j < V; ++j) {
        const std::size_t i = n * V + j;
        const double d = to_float(k.dlogits[i]);
        if (j != t) {
          // Off the target: dloss·p within kernel_rel (and the product's rounding) of the exact, rounded once; the
          // cpu backend's p·dloss within cpu_rel and its two fp32 roundings.
          const double e = exact.p[j] * dloss;
          EXPECT_NEAR(d, e, (kBf16Rounding + kr + 2 * u) * e + kSmallestNormal) << "j " << j;
          EXPECT_NEAR(d, ref[i], (kBf16Rounding + kr + cr + 4 * u) * std::abs(ref[i]) + kSmallestNormal) << "j " << j;
        } else {
          // At the target: expm1(−loss)·dloss, within 2·kernel_rel of the exact, then one BF16 rounding. The cpu
          // backend's (p − 1)·dloss carries its p's absolute error cpu_rel·p, which dominates as p nears 1.
          const double e = exact.target_p_minus_one * dloss;
          EXPECT_NEAR(d, e, (kBf16Rounding + 2 * kr) * std::abs(e) + kSmallestNormal);
          EXPECT_NEAR(d, ref[i], (kBf16Rounding + 2 * kr) * std::abs(ref[i]) + 2 * cr * exact.p[j] * dloss);
        }
      }
      // Losses: from the exact within kernel_rel·min(1, 1.5·loss) and a few ulps; from the cpu's also within its
      // cpu_rel (−log of a p that is cpu_rel off, relative).
      const double loss_tolerance = kr * std::min(1.0, 1.5 * exact.loss) + 4 * u * exact.loss;
      EXPECT_NEAR(k.losses[n], exact.loss, loss_tolerance);
      EXPECT_NEAR(k.losses[n], losses_ref[n], loss_tolerance + cr + 4 * u * exact.loss);
      host_sum += k.losses[n];
      magnitude += std::abs(k.losses[n]);
      sum_tolerance += loss_tolerance + cr + 4 * u * exact.loss;
    }
    // loss_sum: the same N + 1 doubles added in another order, each addition within 2⁻⁵³ of the running sum.
    EXPECT_NEAR(acc, host_sum, double(N + 1) * 0x1p-53 * magnitude);
    EXPECT_NEAR(acc, sum_ref, sum_tolerance + double(N + 1) * 0x1p-53 * magnitude);
    return k;
  }
};

TEST_F(Classifier, LossesAndGradientMatchTheCpuBackendAndTheExactValues) {
  struct Shape {
    std::size_t N, V;
  };
  // V = 1 (p = 1, loss 0); V < 32 (most threads idle); V = 513 (one thread has two columns, the rest one);
  // a single row; the GPT-2 vocabulary.
  for (const Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{2, 31}, Shape{4, 513}, Shape{3, 1000}, Shape{1, 50257}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " V " << s.V);
    const std::vector<bf16> logits = uniform_bf16(rng, s.N * s.V, -4, 4);
    check(logits, random_targets(s.N, s.V), s.N, s.V, 0.37f / float(s.N));
  }
}

TEST_F(Classifier, RowsPaddedPastTheVocabularyGiveTheSameBitsAndKeepTheirPadding) {
  struct Shape {
    std::size_t N, V, ld;
  };
  // Padded by one; to a multiple of 64 (the model's logits); GPT-2's 50,257 in rows of 50,304.
  for (const Shape s : {Shape{3, 7, 8}, Shape{4, 513, 576}, Shape{1, 50257, 50304}}) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " V " << s.V << " ld " << s.ld);
    const std::vector<bf16> logits = uniform_bf16(rng, s.N * s.V, -4, 4);
    const std::vector<std::int32_t> targets = random_targets(s.N, s.V);
    const float dloss = 0.37f / float(s.N);
    const Result dense = check(logits, targets, s.N, s.V, dloss), rows = check(logits, targets, s.N, s.V, dloss, s.ld);
    for (std::size_t i = 0; i < s.N * s.V; ++i) ASSERT_EQ(rows.dlogits[i].bits, dense.dlogits[i].bits) << i;
    for (std::size_t n = 0; n < s.N; ++n) EXPECT_EQ(rows.losses[n], dense.losses[n]);
    EXPECT_EQ(rows.loss_sum, dense.loss_sum);
  }
}

TEST_F(Classifier, TargetNearOneKeepsItsGradientAndAHopelessTargetCapsItsLoss) {
  const std::size_t N = 4, V = 300;
  std::vector<bf16> logits = uniform_bf16(rng, N * V, -1, 1);
  const std::vector<std::int32_t> targets = {17, 0, 299, 150};
  // Row 0: 1 − p[t] ≈ 300·e⁻¹⁴ ≈ 3e-4, below half a BF16 step under 1 (2⁻⁹): the stored probability is 1.
  // Row 1: 1 − p[t] ≈ 1e-8: even the fp32 probability is 1. Row 2: an ordinary confident row, 1 − p ≈ 0.03.
  // Row 3: the target 80 below the others: p[t] ≈ e⁻⁸⁰/300 < 1e-30, the loss capped at −log(1e-30).
  logits[0 * V + 17] = to_bf16(14.0f);
  logits[1 * V + 0] = to_bf16(24.0f);
  logits[2 * V + 299] = to_bf16(9.0f);
  for (std::size_t j = 0; j < V; ++j) logits[3 * V + j] = to_bf16(j == 150 ? -40.0f : 40.0f);
  const float dloss = 0.25f;
  const Result k = check(logits, targets, N, V, dloss);

  const std::vector<float> logits_f = as_floats(logits);
  for (std::size_t n = 0; n < 2; ++n) {
    SCOPED_TRACE(::testing::Message() << "row " << n);
    const std::size_t t = std::size_t(targets[n]);
    const ExactRow exact = exact_row(logits_f.data() + n * V, V, t);
    // check() held the dlogit to one BF16 rounding of the exact; p rounded to BF16 (1) would have given 0.
    EXPECT_EQ(to_bf16(float(1 + exact.target_p_minus_one)).bits, to_bf16(1.0f).bits);
    EXPECT_NE(to_float(k.dlogits[n * V + t]), 0.0f);
    EXPECT_NEAR(to_float(k.dlogits[n * V + t]), exact.target_p_minus_one * dloss,
                kBf16Rounding * std::abs(exact.target_p_minus_one * dloss) * 1.01);
    // And the loss keeps its relative accuracy, although it is far below one ulp of 1.
    EXPECT_NEAR(k.losses[n], exact.loss, 1e-5 * exact.loss);
  }
  EXPECT_NEAR(k.losses[3], kLossCap, 4 * u * kLossCap);
  EXPECT_EQ(to_float(k.dlogits[3 * V + 150]), -dloss);  // p[t] − 1 = −1 to fp32 precision
}

// A row with a NaN logit (off the target or at it) or a target of +∞ has a NaN loss, as on the cpu backend: a
// model gone non-finite must not report a finite (capped) loss, in training or in a validation (dloss = 0, where
// no gradient would show it). A target of −∞ is a hopeless target, capped as any other.
TEST_F(Classifier, NonFiniteRowsGiveTheCpuBackendsLosses) {
  const std::size_t N = 5, V = 40;
  std::vector<bf16> logits = uniform_bf16(rng, N * V, -1, 1);
  const std::vector<std::int32_t> targets = {3, 7, 11, 20, 39};
  logits[0 * V + 30] = to_bf16(NAN);        // off the target
  logits[1 * V + 7] = to_bf16(NAN);         // at the target
  logits[2 * V + 11] = to_bf16(INFINITY);   // a target of +∞
  logits[3 * V + 20] = to_bf16(-INFINITY);  // a target of −∞: capped
  const std::vector<float> logits_f = as_floats(logits);
  for (const float dloss : {0.0f, 0.25f}) {
    SCOPED_TRACE(::testing::Message() << "dloss " << dloss);
    std::vector<bf16> gradient = logits;
    std::vector<float> losses(N), ref = logits_f, losses_ref(N);
    double sum_ref = 0;
    cuda_on_cpu::launch(kernels::classifier, kernels::classifier_launch(N), gradient.data(), losses.data(),
                        targets.data(), dloss, N, V, V);
    cpu->softmax_cross_entropy(ref.data(), losses_ref.data(), targets.data(), N, V, V, dloss, &sum_ref);
    for (std::size_t n = 0; n < 3; ++n) {
      EXPECT_TRUE(std::isnan(losses[n])) << "row " << n << ": " << losses[n];
      EXPECT_TRUE(std::isnan(losses_ref[n])) << "row " << n << ": " << losses_ref[n];
    }
    EXPECT_NEAR(losses[3], kLossCap, 4 * u * kLossCap);
    EXPECT_NEAR(losses_ref[3], kLossCap, 4 * u * kLossCap);
    EXPECT_TRUE(std::isfinite(losses[4]) && losses[4] > 0) << losses[4];
  }
}

TEST_F(Classifier, LossSumAddsEveryLossInDoubleWhateverN) {
  // N below, at and above the block's 256 threads.
  for (const std::size_t N : {std::size_t(1), std::size_t(256), std::size_t(1001)}) {
    SCOPED_TRACE(::testing::Message() << "N " << N);
    std::uniform_real_distribution<float> draw(0, 12);
    std::vector<float> losses(N);
    for (float& l : losses) l = draw(rng);
    losses[0] = 1e-7f;  // magnitudes far apart: the double sum keeps both
    double acc = -3.5, again = -3.5, host = -3.5, magnitude = 3.5;
    for (const float l : losses) host += l, magnitude += l;
    cuda_on_cpu::launch(kernels::loss_sum, kernels::loss_sum_launch(), &acc, losses.data(), N);
    cuda_on_cpu::launch(kernels::loss_sum, kernels::loss_sum_launch(), &again, losses.data(), N);
    EXPECT_NEAR(acc, host, double(N + 1) * 0x1p-53 * magnitude);
    EXPECT_EQ(acc, again);
  }
}

}  // namespace
}  // namespace dptrain
