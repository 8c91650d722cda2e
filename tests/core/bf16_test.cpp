// BF16 rounding: ties to even, signed zeros, subnormals, infinities, NaN, overflow.
#include "dptrain/core/bf16.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dptrain {
namespace {

std::uint16_t bits_of(float f) { return to_bf16(f).bits; }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

TEST(Bf16, ExactValuesRoundTrip) {
  for (float f : {1.0f, -2.0f, 0.5f, 3.0f, 65280.0f, -0.15625f}) EXPECT_EQ(to_float(to_bf16(f)), f);
  EXPECT_EQ(bits_of(1.0f), 0x3f80);
}

TEST(Bf16, TiesRoundToEven) {
  // 1 + 2^-8 lies half-way between 1 (mantissa ...0, even) and 1 + 2^-7 (odd): goes down to 1.
  EXPECT_EQ(bits_of(from_bits(0x3f808000u)), 0x3f80);
  // 1 + 3·2^-8 lies half-way between 1 + 2^-7 (odd) and 1 + 2^-6 (even): goes up.
  EXPECT_EQ(bits_of(from_bits(0x3f818000u)), 0x3f82);
  // Just above and below the half-way point round to the nearer neighbour.
  EXPECT_EQ(bits_of(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bits_of(from_bits(0x3f807fffu)), 0x3f80);
}

TEST(Bf16, SignedZeros) {
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(to_float(to_bf16(-0.0f))));
}

TEST(Bf16, Subnormals) {
  // The smallest fp32 subnormal is below half of the smallest BF16 subnormal (2^-133): rounds to zero.
  EXPECT_EQ(bits_of(from_bits(0x00000001u)), 0x0000);
  // BF16 subnormals are exact.
  EXPECT_EQ(bits_of(from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(to_float(bf16{0x0001}), std::ldexp(1.0f, -133));
  // Half-way between the two smallest BF16 subnormals 1 and 2 (odd, even): up to 2.
  EXPECT_EQ(bits_of(from_bits(0x00018000u)), 0x0002);
  // The largest BF16 subnormal plus a carry becomes the smallest normal.
  EXPECT_EQ(bits_of(from_bits(0x007fc000u)), 0x0080);
  EXPECT_EQ(bits_of(-from_bits(0x00010000u)), 0x8001);
}

TEST(Bf16, InfinitiesAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(inf), 0x7f80);
  EXPECT_EQ(bits_of(-inf), 0xff80);
  // The largest fp32 is above the largest BF16 (0x7f7f) by more than half an ulp: rounds to Inf.
  EXPECT_EQ(bits_of(std::numeric_limits<float>::max()), 0x7f80);
  // Just below the half-way point to Inf stays at the largest finite BF16.
  EXPECT_EQ(bits_of(from_bits(0x7f7f7fffu)), 0x7f7f);
}

TEST(Bf16, NanStaysNan) {
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits would round to Inf if truncated blindly.
  EXPECT_TRUE(std::isnan(to_float(to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(to_float(to_bf16(from_bits(0xff800001u)))));
  EXPECT_EQ(bits_of(from_bits(0xff800001u)) & 0x8000, 0x8000);
}

TEST(Bf16, BulkConversionMatchesScalar) {
  std::vector<float> in(1000);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * i) * std::ldexp(1.0f, int(i % 40) - 20);
  std::vector<bf16> out(in.size());
  to_bf16(in.data(), out.data(), in.size());
  std::vector<float> back(in.size());
  to_float(out.data(), back.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].bits, to_bf16(in[i]).bits);
    EXPECT_LE(std::abs(back[i] - in[i]), std::abs(in[i]) * 0x1p-8f);  // half an ulp of an 8-bit mantissa
  }
}

// The bulk conversion (VCVTNEPS2BF16 where the CPU has AVX512_BF16, which flushes subnormals and so has them
// redone, the portable loop elsewhere) gives the scalar function's bits on every kind of input: 2²⁰ random bit
// patterns (every sign, exponent and mantissa alike, NaNs included), subnormals of each magnitude, the boundaries
// of rounding and of the special values, at every offset and length around the 16-value blocks.
TEST(Bf16, BulkConversionGivesTheScalarBitsForEveryKindOfInput) {
  std::mt19937 rng(5);
  std::vector<std::uint32_t> bits(1 << 20);
  for (std::uint32_t& b : bits) b = rng();
  for (std::uint32_t m = 1; m < 0x800000u; m = m * 3 + 1)
    bits.insert(bits.end(), {m, m | 0x80000000u});  // subnormals
  for (std::uint32_t b : {0x0u, 0x80000000u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x7f7fffffu, 0x7f800000u,
                          0xff800000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0x00800000u, 0x007fffffu, 0x807fffffu})
    bits.push_back(b);
  for (std::size_t offset = 0; offset < 3; ++offset)
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17),
                          std::size_t(33), bits.size() - offset}) {
      std::vector<float> in(n);
      for (std::size_t i = 0; i < n; ++i) in[i] = from_bits(bits[(offset + i) % bits.size()]);
      std::vector<bf16> out(n + 1, bf16{0x1234});
      to_bf16(in.data(), out.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i].bits, to_bf16(in[i]).bits)
            << std::hex << std::bit_cast<std::uint32_t>(in[i]) << " at " << std::dec << i;
      EXPECT_EQ(out[n].bits, 0x1234);  // nothing written past the end
    }
}

}  // namespace
}  // namespace dptrain
