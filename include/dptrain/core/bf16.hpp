// BF16 storage type: the upper 16 bits of an IEEE-754 binary32. Conversion from fp32 rounds to nearest, ties to
// even; NaN stays NaN (quiet), ±Inf and ±0 are kept, subnormals round like any other value.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "dptrain/core/bf16_type.hpp"

namespace dptrain {


inline float to_float(bf16 x) { return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16); }

// Branch-free (both results computed, one selected), so that loops calling it vectorize.
inline bf16 to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases towards the even neighbour; carries into the
  // exponent give the correct next binade or Inf.
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;  // NaN: keep sign, force the quiet bit
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return bf16{static_cast<std::uint16_t>(is_nan ? quiet_nan : rounded)};
}

// Rounds an fp32 value to the nearest BF16 value, returned as fp32.
inline float round_to_bf16(float f) { return to_float(to_bf16(f)); }

void to_bf16(const float* in, bf16* out, std::size_t n);
void to_float(const bf16* in, float* out, std::size_t n);

}  // namespace dptrain
