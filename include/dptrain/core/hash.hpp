// Small deterministic hashes and the splitmix64 generator: the same bits on every platform and every rank.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dptrain {

inline constexpr std::uint64_t kSplitMixIncrement = 0x9e3779b97f4a7c15ull;

// splitmix64 of z: a stateless 64-bit mix with full avalanche (the generator's output for state z).
inline std::uint64_t splitmix64(std::uint64_t z) {
  z += kSplitMixIncrement;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The splitmix64 generator (std::normal_distribution and friends are not specified bit for bit).
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    const std::uint64_t out = splitmix64(state);
    state += kSplitMixIncrement;
    return out;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// FNV-1a over bytes.
inline std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace dptrain
