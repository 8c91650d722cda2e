// The views a fused attention is given of the model's arrays (compute/attention_layout.hpp), without a GPU: each
// view's (dims, strides, offset) addresses exactly the elements the cpu backend reads and writes, for awkward
// shapes (one window, one position, one head, T not a power of two). Two checks: q, k and v together cover
// qkv[B,T,3C] exactly once (out and the statistics cover theirs exactly once), each element where the model's
// row-major layout puts it; and attention computed through the views alone, in double, gives the cpu backend's
// attention_forward output (the same arithmetic up to fp32 rounding: |out| ≤ max|v| = 1 and the sums are of
// ≤ T·hs terms of size ≤ 1, so 1e-5 is over 10× the fp32 error and far below a swapped stride's effect).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dptrain/compute/attention_layout.hpp"
#include "dptrain/compute/backend.hpp"

namespace dptrain {
namespace {

struct Shape {
  std::size_t B, T, C, NH;
};
const Shape kShapes[] = {{2, 5, 16, 2}, {1, 1, 8, 1}, {3, 7, 24, 3}, {1, 13, 64, 1}};

// How often each element of an array of n is addressed by the views, over their whole index ranges.
std::vector<int> coverage(std::int64_t n, const std::vector<HeadsView>& views) {
  std::vector<int> hits(std::size_t(n), 0);
  for (const HeadsView& v : views)
    for (std::int64_t b = 0; b < v.dims[0]; ++b)
      for (std::int64_t h = 0; h < v.dims[1]; ++h)
        for (std::int64_t t = 0; t < v.dims[2]; ++t)
          for (std::int64_t d = 0; d < v.dims[3]; ++d) {
            const std::int64_t i = v.at(b, h, t, d);
            if (i >= 0 && i < n) ++hits[std::size_t(i)];
            else ADD_FAILURE() << "element " << i << " outside the array of " << n;
          }
  return hits;
}

TEST(AttentionLayout, ViewsAddressTheModelsRowMajorArraysOnceEach) {
  for (const Shape s : kShapes) {
    const auto B = std::int64_t(s.B), T = std::int64_t(s.T), C = std::int64_t(s.C), NH = std::int64_t(s.NH);
    const std::int64_t hs = C / NH;
    SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
    const HeadsView q = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::q), k = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::k),
                    v = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::v), out = out_heads(s.B, s.T, s.C, s.NH),
                    stats = stats_rows(s.B, s.T, s.NH);
    EXPECT_EQ(coverage(B * T * 3 * C, {q, k, v}), std::vector<int>(std::size_t(B * T * 3 * C), 1));
    EXPECT_EQ(coverage(B * T * C, {out}), std::vector<int>(std::size_t(B * T * C), 1));
    EXPECT_EQ(coverage(B * NH * T, {stats}), std::vector<int>(std::size_t(B * NH * T), 1));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < NH; ++h)
        for (std::int64_t t = 0; t < T; ++t) {
          EXPECT_EQ(stats.at(b, h, t, 0), (b * NH + h) * T + t);
          for (std::int64_t d = 0; d < hs; ++d) {
            const std::int64_t row = (b * T + t) * 3 * C + h * hs + d;
            EXPECT_EQ(q.at(b, h, t, d), row);
            EXPECT_EQ(k.at(b, h, t, d), row + C);
            EXPECT_EQ(v.at(b, h, t, d), row + 2 * C);
            EXPECT_EQ(out.at(b, h, t, d), (b * T + t) * C + h * hs + d);
          }
        }
  }
}

TEST(AttentionLayout, AttentionThroughTheViewsIsTheCpuBackends) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto cpu = make_backend("cpu");
  for (const Shape s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    std::vector<float> qkv(s.B * s.T * 3 * s.C), out(s.B * s.T * s.C);
    for (float& x : qkv) x = uniform(rng);
    std::vector<float> probs(s.B * s.NH * cpu->attention_saved_bytes(s.T, s.C, s.NH) / sizeof(float));
    cpu->attention_forward(out.data(), probs.data(), qkv.data(), s.B, s.T, s.C, s.NH);

    const HeadsView q = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::q), k = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::k),
                    v = qkv_heads(s.B, s.T, s.C, s.NH, QkvPart::v), o = out_heads(s.B, s.T, s.C, s.NH);
    const std::int64_t hs = q.dims[3];
    const double scale = 1 / std::sqrt(double(hs));
    for (std::int64_t b = 0; b < q.dims[0]; ++b)
      for (std::int64_t h = 0; h < q.dims[1]; ++h)
        for (std::int64_t i = 0; i < q.dims[2]; ++i) {
          std::vector<double> p(std::size_t(i + 1));
          double top = -1e300, sum = 0;
          for (std::int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (std::int64_t d = 0; d < hs; ++d) dot += double(qkv[q.at(b, h, i, d)]) * qkv[k.at(b, h, j, d)];
            top = std::max(top, p[std::size_t(j)] = dot * scale);
          }
          for (double& x : p) sum += (x = std::exp(x - top));
          for (std::int64_t d = 0; d < hs; ++d) {
            double y = 0;
            for (std::int64_t j = 0; j <= i; ++j) y += p[std::size_t(j)] / sum * qkv[v.at(b, h, j, d)];
            EXPECT_NEAR(out[o.at(b, h, i, d)], y, 1e-5) << b << "," << h << "," << i << "," << d;
          }
        }
  }
}

}  // namespace
}  // namespace dptrain
