// Collective test data whose sums are exact in any order, even in BF16: rank r's element i is an integer in
// [−4, 4] times a power of two that depends on i alone, so every partial sum over up to 6 ranks is a small multiple
// of that power (|sum| ≤ 4·p ≤ 24 units). Algorithms must then agree bit for bit with the exact answer.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/collectives.hpp"
#include "dptrain/core/bf16.hpp"

namespace dptrain {

inline float contribution(int rank, std::size_t i) {
  const int units = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 9) - 4;
  return std::ldexp(static_cast<float>(units), static_cast<int>(i % 5) - 3);
}

inline float sum_over_ranks(int p, std::size_t i) {
  float sum = 0;  // exact: the partial sums are small multiples of one power of two
  for (int q = 0; q < p; ++q) sum += contribution(q, i);
  return sum;
}

// A typed view of a byte buffer of `count` elements.
struct TypedBytes {
  TypedBytes(DType dtype, std::size_t count) : dtype(dtype), count(count), bytes(count * element_size(dtype)) {}

  float get(std::size_t i) const {
    if (dtype == DType::f32) return reinterpret_cast<const float*>(bytes.data())[i];
    return to_float(reinterpret_cast<const bf16*>(bytes.data())[i]);
  }
  void set(std::size_t i, float value) {
    if (dtype == DType::f32) {
      reinterpret_cast<float*>(bytes.data())[i] = value;
    } else {
      reinterpret_cast<bf16*>(bytes.data())[i] = to_bf16(value);
    }
  }
  std::size_t element_bytes(std::size_t begin, std::size_t end) const { return (end - begin) * element_size(dtype); }

  DType dtype;
  std::size_t count;
  std::vector<std::byte> bytes;
};

inline int owner_of(std::size_t i, std::size_t count, int p) {
  int q = 0;
  while (chunk_begin(count, p, q + 1) <= i) ++q;
  return q;
}

// The input of `op` on rank r: all-gather has only the own chunk valid (the rest is a sentinel that must be
// overwritten); the reductions start from every element of the rank's contribution.
inline TypedBytes input(CollectiveOp op, DType dtype, std::size_t count, int r, int p) {
  TypedBytes buffer(dtype, count);
  const std::size_t own_begin = chunk_begin(count, p, r), own_end = chunk_begin(count, p, r + 1);
  for (std::size_t i = 0; i < count; ++i) {
    const bool own = i >= own_begin && i < own_end;
    buffer.set(i, op == CollectiveOp::all_gather && !own ? 12345.0f : contribution(r, i));
  }
  return buffer;
}

// Elements of the result range (everything, or chunk r for reduce-scatter) that differ from the exact answer.
inline long wrong_elements(const TypedBytes& result, CollectiveOp op, int r, int p) {
  const std::size_t count = result.count;
  std::size_t begin = 0, end = count;
  if (op == CollectiveOp::reduce_scatter) begin = chunk_begin(count, p, r), end = chunk_begin(count, p, r + 1);
  long wrong = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const float expected =
        op == CollectiveOp::all_gather ? contribution(owner_of(i, count, p), i) : sum_over_ranks(p, i);
    wrong += result.get(i) != expected;
  }
  return wrong;
}

}  // namespace dptrain
