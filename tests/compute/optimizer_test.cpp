// The non-graph Backend operations: AdamW (against hand-computed steps and a double reference), the casts, the
// ring's reduce-add (fp32 add, then one round-to-nearest-even to BF16) and the sum of squares for the grad norm,
// which adds into its device accumulator. Run on every backend of the factory. These operations take their dtypes
// as arguments and compute in fp32 (master, m, v) and double (the sum of squares) on every backend, so the
// tolerances are those of fp32 arithmetic whatever the backend's activation dtype.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend_fixture.hpp"
#include "gradient_check.hpp"

namespace dptrain {
namespace {

using test::DeviceArray;
using test::DeviceScalar;
using test::DeviceVector;
using test::uniform;

struct AdamState {
  float master, m, v;
};

class Optimizer : public test::BackendTest<> {
 protected:
  std::mt19937 rng{99};

  // One AdamW step on a single parameter, with the gradient passed as fp32 or BF16 (the values chosen are exact
  // in BF16, so both must give the same result).
  AdamState step_one(AdamState s, float grad, DType dtype, const AdamWParams& p, bf16* weight) {
    using One = std::vector<float>;
    DeviceVector<float> master(device(), One{s.master}), m(device(), One{s.m}), v(device(), One{s.v});
    DeviceVector<bf16> w(device(), 1);
    be->adamw(master.data(), m.data(), v.data(), w.data(), DeviceArray(device(), dtype, One{grad}).data(), dtype, 1,
              p);
    *weight = w.download()[0];
    return {master.download()[0], m.download()[0], v.download()[0]};
  }
  // The sum of squares of host values stored in `dtype`, from a zero accumulator.
  double sum_of_squares(const std::vector<float>& g, DType dtype) {
    DeviceScalar acc(device());
    be->sum_of_squares(DeviceArray(device(), dtype, g).data(), g.size(), dtype, acc.data());
    return acc.value();
  }
};

TEST_P(Optimizer, AdamWFirstStepByHand) {
  // p = 1, g = 0.5, lr = 0.1, wd = 0.1, step 1 from m = v = 0:
  //   m = 0.1·0.5 = 0.05, v = 0.05·0.25 = 0.0125, m̂ = 0.05/0.1 = 0.5, v̂ = 0.0125/0.05 = 0.25,
  //   p ← 1 − 0.1·(0.5/(0.5 + 1e-8) + 0.1·1) = 0.890000002; BF16(0.89) = 1.78125·2⁻¹ = 0.890625.
  for (DType dtype : {DType::f32, DType::bf16}) {
    AdamWParams p;
    p.lr = 0.1f, p.weight_decay = 0.1f, p.step = 1;
    bf16 w{};
    const AdamState s = step_one({1.0f, 0.0f, 0.0f}, 0.5f, dtype, p, &w);
    // m and v: the fp32 constants 1 − 0.9f = 0.10000002 and 1 − 0.95f = 0.05000001 are off by ≈ 2.4e-7
    // relative; 1e-6 relative allows that and nothing else.
    EXPECT_NEAR(s.m, 0.05, 0.05 * 1e-6);
    EXPECT_NEAR(s.v, 0.0125, 0.0125 * 1e-6);
    EXPECT_NEAR(s.master, 0.890000002, 1e-7) << dtype_name(dtype);
    EXPECT_EQ(to_float(w), 0.890625f);
  }
}

TEST_P(Optimizer, AdamWLaterStepWithGradScaleByHand) {
  // p = −2, m = 0.1, v = 0.01, g = −0.375 with grad_scale 0.5 → −0.1875, lr 0.01, wd 0.1, step 2:
  //   m = 0.09 − 0.01875 = 0.07125, v = 0.0095 + 0.05·0.03515625 = 0.0112578125,
  //   m̂ = 0.07125/(1 − 0.9²) = 0.375, v̂ = 0.0112578125/(1 − 0.95²) = 0.1154647436,
  //   p ← −2 − 0.01·(0.375/0.3398010) − 0.01·0.1·(−2) = −2.0090358695.
  for (DType dtype : {DType::f32, DType::bf16}) {
    AdamWParams p;
    p.lr = 0.01f, p.weight_decay = 0.1f, p.step = 2, p.grad_scale = 0.5f;
    bf16 w{};
    const AdamState s = step_one({-2.0f, 0.1f, 0.01f}, -0.375f, dtype, p, &w);
    EXPECT_NEAR(s.m, 0.07125, 0.07125 * 1e-6);
    EXPECT_NEAR(s.v, 0.0112578125, 0.0112578125 * 1e-6);
    EXPECT_NEAR(s.master, -2.009035869523912, 2e-7) << dtype_name(dtype);
    EXPECT_EQ(w.bits, to_bf16(s.master).bits);
  }
  // Without weight decay, step 3: p = 0.25, m = −0.05, v = 0.02, g = 0.75·0.5 = 0.375 → 0.2506478020.
  AdamWParams p;
  p.lr = 0.01f, p.weight_decay = 0.0f, p.step = 3, p.grad_scale = 0.5f;
  bf16 w{};
  const AdamState s = step_one({0.25f, -0.05f, 0.02f}, 0.75f, DType::bf16, p, &w);
  EXPECT_NEAR(s.master, 0.25064780199257225, 1e-7);
}

TEST_P(Optimizer, AdamWMatchesDoubleReferenceOnManyElements) {
  const std::size_t n = 37;  // not a multiple of any vector width
  for (DType dtype : {DType::f32, DType::bf16}) {
    auto master = uniform(rng, n, -1, 1), m = uniform(rng, n, -0.1, 0.1), v = uniform(rng, n, 0, 0.01);
    const auto g32 = uniform(rng, n, -2, 2);
    std::vector<bf16> g16(n);
    for (std::size_t i = 0; i < n; ++i) g16[i] = to_bf16(g32[i]);
    const auto master0 = master, m0 = m, v0 = v;
    DeviceVector<float> d_master(device(), master), d_m(device(), m), d_v(device(), v);
    DeviceVector<bf16> d_weights(device(), n);
    AdamWParams p;
    p.lr = 3e-3f, p.weight_decay = 0.1f, p.step = 5, p.grad_scale = 0.7f;
    be->adamw(d_master.data(), d_m.data(), d_v.data(), d_weights.data(), DeviceArray(device(), dtype, g32).data(),
              dtype, n, p);
    master = d_master.download(), m = d_m.download(), v = d_v.download();
    const auto weights = d_weights.download();
    for (std::size_t i = 0; i < n; ++i) {
      const double g = 0.7 * (dtype == DType::f32 ? double(g32[i]) : double(to_float(g16[i])));
      const double m1 = 0.9 * m0[i] + 0.1 * g, v1 = 0.95 * v0[i] + 0.05 * g * g;
      const double mh = m1 / (1 - std::pow(0.9, 5)), vh = v1 / (1 - std::pow(0.95, 5));
      const double p1 = master0[i] - 3e-3 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * master0[i]);
      // m and v are sums of two fp32 products (with the fp32 constants 0.9f, 0.95f and 1 − 0.9f off by up to
      // 2.4e-7 relative): within 1e-6 of the sum of the terms' magnitudes, even where the terms cancel. The master
      // weight moves by O(lr) = 3e-3 and is O(1) itself: 1e-6 absolute is a few u and 1000× below the step.
      EXPECT_NEAR(m[i], m1, 1e-6 * (0.9 * std::abs(m0[i]) + 0.1 * std::abs(g))) << i;
      EXPECT_NEAR(v[i], v1, 1e-6 * v1) << i;
      EXPECT_NEAR(master[i], p1, 1e-6) << i << " " << dtype_name(dtype);
      EXPECT_EQ(weights[i].bits, to_bf16(master[i]).bits) << i;
    }
  }
}

TEST_P(Optimizer, CastsRoundToNearestEvenAndBack) {
  auto x = uniform(rng, 33, -5, 5);
  x[0] = 1.0f + 0x1p-8f;         // tie → 1 (even)
  x[1] = 1.0f + 3 * 0x1p-8f;     // tie → 1 + 2⁻⁶ (even)
  x[2] = std::numeric_limits<float>::quiet_NaN();
  DeviceVector<bf16> d_y(device(), x.size());
  be->cast(DeviceVector<float>(device(), x).data(), DType::f32, d_y.data(), DType::bf16, x.size());
  const auto y = d_y.download();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i].bits, to_bf16(x[i]).bits) << i;
  EXPECT_EQ(y[0].bits, 0x3f80);
  EXPECT_EQ(y[1].bits, 0x3f82);
  DeviceVector<float> d_back(device(), x.size());
  be->cast(d_y.data(), DType::bf16, d_back.data(), DType::f32, y.size());
  const auto back = d_back.download();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i == 2) continue;  // NaN
    EXPECT_EQ(back[i], to_float(y[i])) << i;
  }
  EXPECT_TRUE(std::isnan(back[2]));
}

TEST_P(Optimizer, ReduceAddBf16AddsInFp32ThenRoundsOnce) {
  auto bits = [](float f) { return to_bf16(f); };
  // Hand cases (every operand exact in BF16; the fp32 sum is exact, so only the final rounding acts):
  //   1 + 2⁻⁸          is half-way between 1 and 1 + 2⁻⁷        → 1        (0x3f80, even)
  //   (1 + 2⁻⁷) + 2⁻⁸  is half-way between 1 + 2⁻⁷ and 1 + 2⁻⁶  → 1 + 2⁻⁶ (0x3f82, even)
  //   1 + 3·2⁻⁹        is ¾ of the way to 1 + 2⁻⁷              → 0x3f81 (truncation would give 0x3f80)
  //   −1 + −3·2⁻⁹      the same for negatives                   → 0xbf81
  //   256 + 1.5        = 257.5, between 256 and 258 (spacing 2) → 258 (0x4381); truncation gives 256
  DeviceVector<bf16> d_acc(device(), {bits(1.0f), bits(1.0f + 0x1p-7f), bits(1.0f), bits(-1.0f), bits(256.0f),
                                      bits(std::numeric_limits<float>::quiet_NaN())});
  const DeviceVector<bf16> in(device(), {bits(0x1p-8f), bits(0x1p-8f), bits(3 * 0x1p-9f), bits(-3 * 0x1p-9f),
                                         bits(1.5f), bits(1.0f)});
  be->reduce_add(d_acc.data(), in.data(), d_acc.size(), DType::bf16);
  const auto acc = d_acc.download();
  EXPECT_EQ(acc[0].bits, 0x3f80);
  EXPECT_EQ(acc[1].bits, 0x3f82);
  EXPECT_EQ(acc[2].bits, 0x3f81);
  EXPECT_EQ(acc[3].bits, 0xbf81);
  EXPECT_EQ(acc[4].bits, 0x4381);  // 258 = 1.0000001b·2⁸
  EXPECT_TRUE(std::isnan(to_float(acc[5])));
  EXPECT_EQ(to_float(acc[4]), 258.0f);

  // Many elements (a ragged length): bitwise equal to round(fp32(a) + fp32(b)).
  const std::size_t n = 1027;
  const auto a32 = uniform(rng, n, -3, 3), b32 = uniform(rng, n, -3, 3);
  DeviceVector<bf16> d_a(device(), n), d_b(device(), n);
  be->cast(DeviceVector<float>(device(), a32).data(), DType::f32, d_a.data(), DType::bf16, n);
  be->cast(DeviceVector<float>(device(), b32).data(), DType::f32, d_b.data(), DType::bf16, n);
  const auto a = d_a.download(), b = d_b.download();
  auto expected = a;
  for (std::size_t i = 0; i < n; ++i) expected[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
  be->reduce_add(d_a.data(), d_b.data(), n, DType::bf16);
  const auto sum = d_a.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i].bits, expected[i].bits) << i;
}

TEST_P(Optimizer, ReduceAddFp32IsPlainAddition) {
  const std::size_t n = 45;
  const auto a0 = uniform(rng, n, -3, 3), b = uniform(rng, n, -3, 3);
  DeviceVector<float> d_a(device(), a0);
  be->reduce_add(d_a.data(), DeviceVector<float>(device(), b).data(), n, DType::f32);
  const auto a = d_a.download();
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(a[i], a0[i] + b[i]);
}

TEST_P(Optimizer, SumOfSquares) {
  EXPECT_EQ(sum_of_squares({3.0f, -4.0f}, DType::f32), 25.0);
  EXPECT_EQ(sum_of_squares({3.0f, -4.0f, 0.5f}, DType::bf16), 25.25);
  EXPECT_EQ(sum_of_squares({}, DType::f32), 0.0);

  // More than two of the backend's 4096-element blocks, ragged end; the reference sums in double in index order,
  // the backend in blocks: the two differ only by double rounding (≈ n·2⁻⁵³ relative).
  const std::size_t n = 10001;
  const auto g = uniform(rng, n, -2, 2);
  DeviceVector<bf16> d_g16(device(), n);
  be->cast(DeviceVector<float>(device(), g).data(), DType::f32, d_g16.data(), DType::bf16, n);
  const auto g16 = d_g16.download();
  double ref32 = 0, ref16 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ref32 += double(g[i]) * g[i];
    ref16 += double(to_float(g16[i])) * to_float(g16[i]);
  }
  EXPECT_NEAR(sum_of_squares(g, DType::f32), ref32, 1e-12 * ref32);
  EXPECT_NEAR(sum_of_squares(test::to_float(g16), DType::bf16), ref16, 1e-12 * ref16);
  EXPECT_NE(ref32, ref16);  // the BF16 path really decodes BF16
}

TEST_P(Optimizer, SumOfSquaresAdds) {
  // The squared norm is added into the accumulator, never stored: units of the flat buffer (or the fp32 and BF16
  // parts of it) are summed one call after another into one accumulator.
  DeviceScalar acc(device(), 2.0);
  const DeviceArray f32(device(), DType::f32, {3.0f, -4.0f}), b16(device(), DType::bf16, {0.5f, 1.0f});
  be->sum_of_squares(f32.data(), 2, DType::f32, acc.data());
  EXPECT_EQ(acc.value(), 27.0);
  be->sum_of_squares(b16.data(), 2, DType::bf16, acc.data());
  EXPECT_EQ(acc.value(), 28.25);
  be->sum_of_squares(f32.data(), 0, DType::f32, acc.data());
  EXPECT_EQ(acc.value(), 28.25);
}

INSTANTIATE_TEST_SUITE_P(Backends, Optimizer, ::testing::ValuesIn(test::backends_under_test()),
                         test::TestName());

// The cpu backend's squared norm sums fixed blocks in fixed lanes: 1, 2 and 3 threads give the same bits (the
// global norm, and with it clipping, must not depend on --threads).
TEST(CpuSumOfSquares, TheSameBitsForAnyThreadCount) {
  std::mt19937 rng(17);
  const auto g = uniform(rng, 3 * 4096 + 77, -3, 3);
  std::vector<bf16> g16(g.size());
  dptrain::to_bf16(g.data(), g16.data(), g.size());
  auto squares = [&](int threads, DType dtype) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    double acc = 0;
    make_cpu_backend()->sum_of_squares(dtype == DType::f32 ? static_cast<const void*>(g.data()) : g16.data(),
                                       g.size(), dtype, &acc);
    omp_set_num_threads(saved);
    return acc;
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    const double one = squares(1, dtype);
    EXPECT_GT(one, 0.0);
    EXPECT_EQ(squares(2, dtype), one);
    EXPECT_EQ(squares(3, dtype), one);
  }
}

}  // namespace
}  // namespace dptrain
