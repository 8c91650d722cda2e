// The cpu backend's vectorizable math (src/compute/cpu/vector_math.hpp) against libm and double references.
#include "vector_math.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dptrain::cpu {
namespace {

// Distance in units in the last place between two positive finite floats.
std::int64_t ulps(float a, float b) {
  return std::abs(std::int64_t(std::bit_cast<std::int32_t>(a)) - std::int64_t(std::bit_cast<std::int32_t>(b)));
}

TEST(VectorMath, ExpIsWithinTwoUlpOfTheCorrectlyRoundedValue) {
  // The softmaxes' inputs x − max ≤ 0, down to where e^x leaves the normal range, and some positive arguments.
  std::int64_t worst = 0;
  for (float x = -87.0f; x <= 80.0f; x += 0.0137f) {
    const float expected = float(std::exp(double(x)));
    worst = std::max(worst, ulps(exp_poly(x), expected));
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ(exp_poly(0.0f), 1.0f);
  EXPECT_LE(exp_poly(-1000.0f), 1.3e-38f);  // far below: negligible in any softmax sum, never NaN
  EXPECT_GE(exp_poly(-1000.0f), 0.0f);
}

TEST(VectorMath, TanhIsWithinItsStatedErrorOfTanhInDouble) {
  double worst = 0;
  for (float x = -12.0f; x <= 12.0f; x += 0.00071f)
    worst = std::max(worst, std::abs(double(tanh_rational(x)) - std::tanh(double(x))));
  EXPECT_LE(worst, 2.8e-7);  // measured 2.72e-7 on this grid
  EXPECT_EQ(tanh_rational(1e-5f), 1e-5f);
}

TEST(VectorMath, LaneSumAddsEightLanesInItsStatedOrder) {
  // 19 terms: lanes l0…l7 hold terms l, l+8 and (l < 3) l+16; then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
  std::vector<float> x(19);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / float(3 + i * i);
  float lanes[8] = {};
  for (std::size_t i = 0; i < x.size(); ++i) lanes[i % 8] += x[i];
  const float expected =
      ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  EXPECT_EQ(lane_sum(x.size(), [&](std::size_t i) { return x[i]; }), expected);
  EXPECT_EQ(lane_sum(0, [&](std::size_t i) { return x[i]; }), 0.0f);
  EXPECT_EQ(lane_sum(3, [&](std::size_t i) { return x[i]; }), (x[0] + x[1]) + x[2]);
}

TEST(VectorMath, SoftmaxMatchesDoubleAndSumsToOne) {
  for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(128), std::size_t(257)}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = float((i * 37) % 23) * 0.7f - 6.0f;
    std::vector<double> expected(n);
    double max = x[0], sum = 0;
    for (float v : x) max = std::max(max, double(v));
    for (std::size_t i = 0; i < n; ++i) sum += expected[i] = std::exp(double(x[i]) - max);
    softmax_in_place(x.data(), n);
    double total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      // exp within 2 ulp, the sum's rounding over n terms, one division and one product: a few 1e-7 relative.
      EXPECT_NEAR(x[i], expected[i] / sum, 1e-6 * expected[i] / sum + 1e-12) << "n " << n << " i " << i;
      total += x[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-6) << "n " << n;
  }
}

}  // namespace
}  // namespace dptrain::cpu
