// Helpers shared by the compute tests: deterministic random fills and a central finite-difference checker that
// perturbs fp32 host inputs in place and differentiates a double-valued test function (which uploads them to the
// device and runs the forward there).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace dptrain::test {

inline std::vector<float> uniform(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Σ out·R in double: the scalar test function whose gradient with respect to `out` is R.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) s += double(out[i]) * double(r[i]);
  return s;
}

struct Tolerance {
  double abs;  // covers the fp32 rounding of L divided by the step (and the truncation of a small derivative)
  double rel;  // covers the O(h²) truncation, which scales with the derivative's own curvature
};

struct GradientCheckResult {
  double max_error = 0.0;     // max |analytic − numeric|
  double max_excess = 0.0;    // max |analytic − numeric| / (abs + rel·|numeric|); ≤ 1 passes
  std::size_t failures = 0;
};

// Numerical derivative of L for every element of x against analytic[i]. `loss` must recompute L from the
// current contents of x. The central difference D(h) = (L(x₊) − L(x₋)) / (x₊ − x₋) divides by the fp32 values x±h
// actually stored, so their representation error does not enter; it errs by h²/6·L''' + O(h⁴) (truncation) plus
// the rounding noise of L over 2h. The check uses the Richardson combination (4·D(h/2) − D(h))/3, which cancels
// the h² term: what is left is O(h⁴) truncation and ≈ 1.5× the noise of D(h/2).
inline double central_difference(float* x, std::size_t i, const std::function<double()>& loss, float h) {
  const float saved = x[i], plus = saved + h, minus = saved - h;
  x[i] = plus;
  const double lp = loss();
  x[i] = minus;
  const double lm = loss();
  x[i] = saved;
  return (lp - lm) / (double(plus) - double(minus));
}

inline double extrapolated_difference(float* x, std::size_t i, const std::function<double()>& loss, float h) {
  return (4 * central_difference(x, i, loss, h / 2) - central_difference(x, i, loss, h)) / 3;
}

inline GradientCheckResult check_gradient(const std::string& what, float* x, const double* analytic, std::size_t n,
                                          const std::function<double()>& loss, float h, Tolerance tol) {
  GradientCheckResult result;
  for (std::size_t i = 0; i < n; ++i) {
    const double numeric = extrapolated_difference(x, i, loss, h);
    const double error = std::abs(analytic[i] - numeric);
    const double bound = tol.abs + tol.rel * std::abs(numeric);
    result.max_error = std::max(result.max_error, error);
    result.max_excess = std::max(result.max_excess, error / bound);
    if (error > bound) {
      if (++result.failures <= 5)
        ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric
                      << " |diff| " << error << " > " << bound;
    }
  }
  if (result.failures > 5) ADD_FAILURE() << what << ": " << result.failures << " of " << n << " elements failed";
  ::testing::Test::RecordProperty(what + "_max_error", std::to_string(result.max_error));
  return result;
}

// A gradient a backward wrote, in double.
inline std::vector<double> widened(const std::vector<float>& values) { return {values.begin(), values.end()}; }

// The increment a backward added to a buffer that held `before`, in double.
inline std::vector<double> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> d(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) d[i] = double(after[i]) - double(before[i]);
  return d;
}

}  // namespace dptrain::test
