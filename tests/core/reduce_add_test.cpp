// The host reduce-add: BF16 adds in fp32 and rounds once per call (ties to even, NaN quiet), bit-identical to
// the scalar reference to_bf16(to_float(a) + to_float(b)); fp32 adds exactly as fp32.
#include "dptrain/core/reduce_add.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dptrain/core/bf16.hpp"

namespace dptrain {
namespace {

std::uint16_t add_bits(std::uint16_t a, std::uint16_t b) {
  bf16 acc{a};
  const bf16 in{b};
  host_reduce_add(&acc, &in, 1, DType::bf16);
  return acc.bits;
}

TEST(CoreHostReduceAdd, Bf16RoundsOncePerAdd) {
  EXPECT_EQ(add_bits(0x3f80, 0x3f80), 0x4000);  // 1 + 1 = 2
  EXPECT_EQ(add_bits(0x3f80, 0x3b80), 0x3f80);  // 1 + 2^-8: half-way, ties to even → 1
  EXPECT_EQ(add_bits(0x3f81, 0x3b80), 0x3f82);  // (1 + 2^-7) + 2^-8: half-way, ties to even → 1 + 2^-6
  EXPECT_EQ(add_bits(0x4380, 0x3f80), 0x4380);  // 256 + 1: 257 is not a BF16, ties to even → 256
  EXPECT_EQ(add_bits(0x7f7f, 0x7f7f), 0x7f80);  // max + max overflows to +Inf
  EXPECT_EQ(add_bits(0x7f80, 0xff80), 0xffc0);  // Inf − Inf = NaN (quiet; x86 gives the default NaN, sign set)
  EXPECT_EQ(add_bits(0x7f81, 0x3f80) & 0x7fc0, 0x7fc0);  // signalling NaN in, quiet NaN out
  EXPECT_EQ(add_bits(0x8000, 0x8000), 0x8000);  // −0 + −0 = −0
  EXPECT_EQ(add_bits(0x8000, 0x0000), 0x0000);  // −0 + +0 = +0
}

TEST(CoreHostReduceAdd, Bf16MatchesScalarReferenceOnRandomBits) {
  // Random bit patterns cover normals, subnormals, infinities and NaNs; the vectorised loop must agree with
  // the scalar definition of core/bf16.hpp bit for bit (NaN payloads included).
  std::mt19937 rng(12345);
  const std::size_t n = (1 << 16) + 13;  // not a multiple of the vector width: the scalar tail too
  std::vector<bf16> acc(n), in(n);
  for (std::size_t i = 0; i < n; ++i) {
    acc[i].bits = static_cast<std::uint16_t>(rng());
    in[i].bits = static_cast<std::uint16_t>(rng());
  }
  std::vector<bf16> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = to_bf16(to_float(acc[i]) + to_float(in[i]));
  host_reduce_add(acc.data(), in.data(), n, DType::bf16);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += acc[i].bits != expected[i].bits;
  EXPECT_EQ(wrong, 0u);
}

TEST(CoreHostReduceAdd, F32AddsExactly) {
  std::vector<float> acc{1.0f, -2.5f, 1e30f, 0.1f}, in{2.0f, 2.5f, 1e30f, 0.2f};
  host_reduce_add(acc.data(), in.data(), acc.size(), DType::f32);
  EXPECT_EQ(acc, (std::vector<float>{3.0f, 0.0f, 2e30f, 0.1f + 0.2f}));
}

TEST(CoreHostReduceAdd, CountZeroTouchesNothing) {
  float acc = 7, in = 1;
  host_reduce_add(&acc, &in, 0, DType::f32);
  EXPECT_EQ(acc, 7.0f);
}

}  // namespace
}  // namespace dptrain
