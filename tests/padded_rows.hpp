// Matrices in rows padded past their width (the LM head's logits, ModelConfig::logits_row_length), for tests that
// check an operation neither reads nor writes the padding: fill it with a value that would show either (NaN), run
// the operation, then take the rows back, expecting the padding still to hold that value bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace dptrain::test {

// x [rows, cols] laid in rows of ld ≥ cols, the padding `fill`.
template <typename E>
std::vector<E> padded_rows(const std::vector<E>& x, std::size_t rows, std::size_t cols, std::size_t ld, E fill) {
  std::vector<E> out(rows * ld, fill);
  for (std::size_t r = 0; r < rows; ++r)
    std::copy_n(x.begin() + std::ptrdiff_t(r * cols), cols, out.begin() + std::ptrdiff_t(r * ld));
  return out;
}

// The [rows, cols] back out of rows of ld; a failure for each padding element (the first three) that no longer
// holds `fill`'s bits.
template <typename E>
std::vector<E> unpadded_rows(const std::vector<E>& x, std::size_t rows, std::size_t cols, std::size_t ld, E fill) {
  std::vector<E> out(rows * cols);
  int changed = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(x.begin() + std::ptrdiff_t(r * ld), cols, out.begin() + std::ptrdiff_t(r * cols));
    for (std::size_t c = cols; c < ld; ++c)
      if (std::memcmp(&x[r * ld + c], &fill, sizeof(E)) != 0 && ++changed <= 3)
        ADD_FAILURE() << "padding of row " << r << " column " << c << " was written";
  }
  return out;
}

}  // namespace dptrain::test
