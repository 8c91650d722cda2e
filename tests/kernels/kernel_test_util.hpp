// What the kernel tests share: a fixture with the cpu backend (the reference) and a random generator; random BF16
// and fp32 data; widening BF16 to fp32; the BF16 ulp and fp32's unit roundoff; the bits of a float; arrays placed
// off a 16-byte boundary. Include after cuda_on_cpu.hpp and the kernel files.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "dptrain/compute/backend.hpp"
#include "dptrain/core/bf16.hpp"

namespace dptrain::kernel_test {

constexpr double kBf16Ulp = 0x1p-7;  // of |v|: the largest distance between two neighbouring BF16 values
constexpr double kF32Eps = 0x1p-24;  // the unit roundoff of fp32: one rounding moves v by at most this·|v|

inline std::vector<bf16> random_bf16(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = to_bf16(u(rng));
  return v;
}

inline std::vector<float> random_f32(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Multiples of 1/4 in [−4, 4]: sums of a few thousand of them are exact in fp32 (and in BF16 storage, each one).
inline float random_quarter(std::mt19937& rng) { return float(std::uniform_int_distribution<int>(-16, 16)(rng)) / 4; }

inline std::vector<bf16> random_quarters_bf16(std::mt19937& rng, std::size_t n) {
  std::vector<bf16> v(n);
  for (bf16& x : v) x = to_bf16(random_quarter(rng));
  return v;
}

inline std::vector<float> random_quarters_f32(std::mt19937& rng, std::size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = random_quarter(rng);
  return v;
}

inline std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> f(v.size());
  to_float(v.data(), f.data(), v.size());
  return f;
}

inline std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// n values of T placed `shift` elements past a 16-byte boundary.
template <typename T>
class Placed {
 public:
  Placed(const std::vector<T>& values, unsigned shift)
      : n_(values.size()), storage_((n_ + shift) * sizeof(T) / 16 + 1) {
    data = reinterpret_cast<T*>(storage_.data()) + shift;
    std::copy(values.begin(), values.end(), data);
  }
  Placed(const Placed&) = delete;  // `data` points into the storage: a copy would point into the original's
  Placed(Placed&&) = default;
  std::vector<T> values() const { return std::vector<T>(data, data + n_); }
  T* data;

 private:
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };

  std::size_t n_;
  std::vector<Chunk> storage_;
};

// A kernel test: the cpu backend to compare with, and a random generator with a fixed seed.
class KernelTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::mt19937 rng{11};
};

}  // namespace dptrain::kernel_test
