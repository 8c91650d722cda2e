// The ring's order of addition: the specification every ring reduce-scatter (MPI today, NCCL later) is held to,
// bit for bit. Chunk c starts as rank c+1's contribution and travels right; each rank adds its own contribution
// to the partial sum it receives, so the sum is
//   ((x[c+1] + x[c+2]) + x[c+3]) + … + x[c]      (ranks mod p)
// with every addition done in fp32 and, for BF16, rounded once to BF16 (nearest, ties to even) at each hop.
// The all-reduce's chunk c is that same value on every rank (the all-gather only copies it).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "dptrain/core/bf16.hpp"
#include "dptrain/core/dtype.hpp"

namespace dptrain {

// value(q) is rank q's contribution to one element of chunk c (representable in dtype).
template <typename Value>
float ring_order_sum(int p, int c, DType dtype, Value&& value) {
  float sum = value((c + 1) % p);
  for (int hop = 2; hop <= p; ++hop) {
    const float added = sum + value((c + hop) % p);
    sum = dtype == DType::bf16 ? round_to_bf16(added) : added;
  }
  return sum;
}

// Mixed-magnitude values whose BF16 (or fp32) sums round: random sign, exponent in [−12, 12] and mantissa bits,
// a pure function of (rank, element) so every rank can compute every rank's contribution.
inline float mixed_value(int rank, std::size_t i, DType dtype) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 40) + i + 0x9e3779b97f4a7c15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const auto exponent = static_cast<std::uint32_t>(127 - 12 + static_cast<int>(z % 25));
  const auto mantissa = static_cast<std::uint32_t>(z >> 8) & 0x7fffffu;
  const std::uint32_t sign = (z >> 40) & 1u;
  const float value = std::bit_cast<float>((sign << 31) | (exponent << 23) | mantissa);
  return dtype == DType::bf16 ? round_to_bf16(value) : value;
}

}  // namespace dptrain
