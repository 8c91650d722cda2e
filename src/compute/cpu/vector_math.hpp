// Elementwise functions and sums written so that GCC vectorizes the loops that call them (AVX2 with
// -march=x86-64-v3): branch-free bodies instead of calls into libm (whose scalar expf and tanhf a loop cannot
// vectorize without -ffast-math), and sums kept in 8 lanes that are added in one fixed order at the end (a single
// running sum is a dependency chain the compiler may not reorder). Every result depends on the inputs alone: the
// same bits on any machine with FMA and for any thread count.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace dptrain::cpu {

// tanh as a rational function (Eigen's ptanh_float: odd degree-13 numerator over even degree-6 denominator,
// argument clamped to ±7.9053 where tanh rounds to ±1 in fp32; ≤ 2.8e-7 absolute from tanh in double).
inline float tanh_rational(float x) {
  const float clamped = std::clamp(x, -7.90531110763549805f, 7.90531110763549805f);
  const float x2 = clamped * clamped;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * clamped;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return std::abs(x) < 0.0004f ? x : p / q;  // tanh x = x in fp32 below 4e-4
}

// e^x for the softmaxes' x ≤ 0 (also right up to x = 88): 2^n · e^r with n = round(x·log2 e) and
// r = x − n·ln 2 in two parts (Cody–Waite), e^r by Cephes expf's degree-7 polynomial; within 2 ulp of expf. Below
// −87.3 (e^x under fp32's smallest normal) it returns a value ≤ 1.3e-38 instead of a subnormal or 0, which no sum
// of a softmax can see.
inline float exp_poly(float x) {
  x = std::clamp(x, -87.3f, 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
}

// Σ_{i<n} term(i) in 8 lanes (lane i mod 8) added as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), in T (float or
// double).
template <typename T = float, typename Term>
inline T lane_sum(std::size_t n, Term term) {
  constexpr std::size_t kLanes = 8;
  T lanes[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] += term(i + l);
  for (std::size_t l = 0; i + l < n; ++l) lanes[l] += term(i + l);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// max_{i<n} x[i] (n ≥ 1), in 8 lanes as lane_sum (GCC keeps a single running maximum scalar). A maximum does not
// depend on the order, up to which of ±0 or of several NaNs it returns, which no softmax output can tell apart.
inline float max_of(const float* x, std::size_t n) {
  constexpr std::size_t kLanes = 8;
  float lanes[kLanes];
  for (std::size_t l = 0; l < kLanes; ++l) lanes[l] = x[l < n ? l : 0];
  std::size_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], x[i + l]);
  for (std::size_t l = 0; i + l < n; ++l) lanes[l] = std::max(lanes[l], x[i + l]);
  return std::max(std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3])),
                  std::max(std::max(lanes[4], lanes[5]), std::max(lanes[6], lanes[7])));
}

// x[n] (n ≥ 1) becomes softmax(x) in place: e^(x − max) / Σ.
inline void softmax_in_place(float* x, std::size_t n) {
  const float m = max_of(x, n);
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) x[i] = exp_poly(x[i] - m);
  const float inv = 1.0f / lane_sum(n, [x](std::size_t i) { return x[i]; });
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) x[i] *= inv;
}

// Causal attention's row of query i: its scores x[0…i] become their softmax, and x[i+1 … end−1] zeros.
inline void causal_softmax_row(float* x, std::size_t i, std::size_t end) {
  softmax_in_place(x, i + 1);
  std::fill(x + i + 1, x + end, 0.0f);
}

// The softmax backward of causal attention's row of query i: d[0…i] (dP, the gradient of the probabilities p)
// becomes dS = p ⊙ (dP − Σ_j p_j·dP_j), and d[i+1 … end−1] zeros.
inline void causal_softmax_backward_row(const float* p, float* d, std::size_t i, std::size_t end) {
  const float dot = lane_sum(i + 1, [p, d](std::size_t j) { return p[j] * d[j]; });
  for (std::size_t j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot);
  std::fill(d + i + 1, d + end, 0.0f);
}

}  // namespace dptrain::cpu
