// The balanced partition of `count` elements into p chunks that every collective uses: chunk r starts at
// r·⌊count/p⌋ + min(r, count mod p), so the first count mod p chunks hold one element more. Chunks may be empty
// (count < p) and chunk p is the end (count).
#pragma once
#include <algorithm>
#include <cstddef>

namespace dptrain {

inline std::size_t chunk_begin(std::size_t count, int parts, int chunk) {
  const auto p = static_cast<std::size_t>(parts);
  const auto r = static_cast<std::size_t>(chunk);
  return r * (count / p) + std::min(r, count % p);
}

inline std::size_t chunk_size(std::size_t count, int parts, int chunk) {
  return chunk_begin(count, parts, chunk + 1) - chunk_begin(count, parts, chunk);
}

}  // namespace dptrain
