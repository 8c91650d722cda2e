// The α–β costs of the collectives: the table of collectives.hpp, one case per row.
#include "dptrain/cost/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {

std::string_view collective_name(Collective kind) {
  switch (kind) {
    case Collective::ring_all_reduce: return "ring all-reduce";
    case Collective::ring_reduce_scatter: return "reduce-scatter";
    case Collective::ring_all_gather: return "all-gather";
    case Collective::tree_all_reduce: return "binary-tree all-reduce (not pipelined)";
    case Collective::piece_all_gather: return "all-gather of a different piece per rank";
  }
  throw std::logic_error("collective_name: unknown Collective");
}

int ceil_log2(int ranks) {
  DP_ASSERT(ranks >= 1);
  int levels = 0;
  while ((std::int64_t{1} << levels) < ranks) ++levels;
  return levels;
}

AlphaBetaTerms collective_terms(Collective kind, int ranks, double bytes) {
  DP_ASSERT(ranks >= 1 && bytes >= 0);
  const double p = ranks;
  // A ring of p ranks takes p−1 hops per phase, each moving one slice of M/p bytes.
  const double ring_hops = p - 1, ring_bytes = (p - 1) / p * bytes;
  switch (kind) {
    // The reduce-scatter phase adds each received slice into the rank's own: (p−1) slices of M/p.
    case Collective::ring_all_reduce: return {2 * ring_hops, 2 * ring_bytes, ring_bytes};
    case Collective::ring_reduce_scatter: return {ring_hops, ring_bytes, ring_bytes};
    case Collective::ring_all_gather: return {ring_hops, ring_bytes};
    case Collective::tree_all_reduce: {
      // ⌈log2 p⌉ levels up (reduce) and as many down (broadcast), the whole vector at every level; on the way up
      // a parent adds the vectors of its (one or) two children.
      const double levels = 2.0 * ceil_log2(ranks);
      const double children = ranks > 2 ? 2 : 1;
      return {levels, levels * bytes, children * ceil_log2(ranks) * bytes};
    }
    case Collective::piece_all_gather: return {ring_hops, ring_hops * bytes};  // every other rank's piece passes by
  }
  throw std::logic_error("collective_terms: unknown Collective");
}

double wire_bytes(Collective kind, int ranks, double bytes) {
  // The tree's time counts its levels; its bytes per rank are the root's: the whole vector to each of its children
  // (two from 3 ranks on: the table's 2M).
  if (kind == Collective::tree_all_reduce) return std::min(ranks - 1, 2) * bytes;
  return collective_terms(kind, ranks, bytes).bandwidth_bytes;
}

CollectiveCost collective_cost(Collective kind, int ranks, double bytes, const Link& link) {
  CollectiveCost cost{.seconds = collective_terms(kind, ranks, bytes).seconds(link),
                      .wire_bytes = wire_bytes(kind, ranks, bytes),
                      .payload_bytes = bytes};
  if (kind == Collective::ring_all_gather) cost.payload_bytes = bytes / ranks;  // a rank originates its own slice
  return cost;
}

double compressed_payload_bytes(double params, int keep_one_in) {
  require(keep_one_in >= 1, "compression keeps one value in {}: must be at least 1", keep_one_in);
  constexpr double kValueBytes = 2, kIndexBytes = 4;  // BF16 value + int32 position in the flat gradient
  return std::ceil(params / keep_one_in) * (kValueBytes + kIndexBytes);
}

}  // namespace dptrain::cost
