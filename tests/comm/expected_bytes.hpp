// Wire bytes each algorithm must send, counted from what it moves (docs/collectives.md, "Bytes each rank sends"),
// independently of the schedules: shared by the schedule test (elements_sent) and the MPI test (the transport's
// counter and the log).
#pragma once
#include <cstddef>
#include <cstdint>

#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/chunks.hpp"
#include "dptrain/core/dtype.hpp"

namespace dptrain {

// Elements of the chunks of `node`'s subtree.
inline std::size_t subtree_elements(std::size_t count, int p, int node) {
  if (node >= p) return 0;
  return chunk_size(count, p, node) + subtree_elements(count, p, 2 * node + 1) +
         subtree_elements(count, p, 2 * node + 2);
}

// Ring (and native, which records what the ring would send) or tree; rank r of p.
inline std::uint64_t expected_bytes_sent(Algorithm algo, CollectiveOp op, std::size_t count, DType dtype, int r,
                                         int p) {
  if (p == 1 || count == 0) return 0;
  const std::uint64_t element = element_size(dtype), whole = count * element;
  if (algo != Algorithm::tree) {
    const std::uint64_t reduce_scatter = (count - chunk_size(count, p, r)) * element;
    const std::uint64_t all_gather = (count - chunk_size(count, p, (r + 1) % p)) * element;
    if (op == CollectiveOp::reduce_scatter) return reduce_scatter;
    if (op == CollectiveOp::all_gather) return all_gather;
    return reduce_scatter + all_gather;
  }
  const int children = (2 * r + 1 < p) + (2 * r + 2 < p);
  const std::uint64_t to_parent = r == 0 ? 0 : whole;
  switch (op) {
    case CollectiveOp::all_reduce: return to_parent + children * whole;
    case CollectiveOp::reduce_scatter:
      return to_parent + (subtree_elements(count, p, 2 * r + 1) + subtree_elements(count, p, 2 * r + 2)) * element;
    case CollectiveOp::all_gather: return (r == 0 ? 0 : subtree_elements(count, p, r) * element) + children * whole;
  }
  return 0;
}

}  // namespace dptrain
