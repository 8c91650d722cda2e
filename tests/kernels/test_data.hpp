// Inputs and rounding constants for the kernel tests of attention_test.cpp and classifier_test.cpp.
#pragma once
#include <cstddef>
#include <random>
#include <vector>

#include "dptrain/core/bf16.hpp"

namespace dptrain::kernel_tests {

// Relative error bounds: one rounding of a value v to BF16 moves it by at most 2⁻⁸·|v| (8 significant bits, round
// to nearest); one fp32 operation by at most 2⁻²⁴·|v|, so an fp32 sum of k terms of magnitude Σ|t| carries at most
// about k·2⁻²⁴·Σ|t|.
inline constexpr double kBf16Rounding = 0x1p-8;
inline constexpr double kFp32Rounding = 0x1p-24;
// Below the smallest normal fp32 (and BF16) value the relative bounds stop holding: an absolute floor.
inline constexpr double kSmallestNormal = 0x1p-126;

// n BF16 values drawn uniformly from [lo, hi) and rounded.
inline std::vector<bf16> uniform_bf16(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> draw(lo, hi);
  std::vector<bf16> values;
  values.reserve(n);
  while (values.size() < n) values.push_back(to_bf16(draw(rng)));
  return values;
}

// BF16 values as fp32 (exactly), and fp32 values rounded to BF16.
inline std::vector<float> as_floats(const std::vector<bf16>& values) {
  std::vector<float> out;
  out.reserve(values.size());
  for (const bf16 x : values) out.push_back(to_float(x));
  return out;
}
inline std::vector<bf16> rounded_to_bf16(const std::vector<float>& values) {
  std::vector<bf16> out;
  out.reserve(values.size());
  for (const float x : values) out.push_back(to_bf16(x));
  return out;
}

}  // namespace dptrain::kernel_tests
