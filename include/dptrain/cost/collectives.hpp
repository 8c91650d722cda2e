// Time, wire bytes and payload of the collectives on an α–β link (docs/systems-model.md "Links"), for p ranks.
// Every time has the form  t = alpha_count·α + bandwidth_bytes/B + reduced_bytes·γ , which the fit (fit.hpp)
// inverts. reduced_bytes is what a rank adds on the critical path: ring all-reduce and reduce-scatter (p−1)/p·M,
// the tree up to two children's M per level on the way up (2⌈log2 p⌉·M, M for p = 2), the all-gathers nothing.
// With γ = 0 (every preset) the times are docs/systems-model.md's to the last digit.
//
//   collective                        alpha_count   bandwidth_bytes      wire bytes each rank sends  payload
//   ring all-reduce (M)               2(p−1)        2(p−1)/p·M           2(p−1)/p·M                  M
//   ring reduce-scatter (M)           p−1           (p−1)/p·M            (p−1)/p·M                   M
//   ring all-gather (M gathered)      p−1           (p−1)/p·M            (p−1)/p·M                   M/p
//   binary-tree all-reduce (M)        2⌈log2 p⌉     2⌈log2 p⌉·M          2M                          M
//   all-gather of pieces (P per rank) p−1           (p−1)·P              (p−1)·P                     P
//
// Payload is what a rank originates; wire bytes is what it sends, forwarding included. One rank sends nothing.
#pragma once
#include <string_view>

#include "dptrain/cost/link.hpp"

namespace dptrain::cost {

enum class Collective {
  ring_all_reduce,
  ring_reduce_scatter,
  ring_all_gather,
  tree_all_reduce,   // binary tree, reduce up then broadcast down, not pipelined
  piece_all_gather,  // every rank contributes a different piece of P bytes (e.g. a compressed gradient)
};

// Table name: "ring all-reduce", "reduce-scatter", "all-gather", "binary-tree all-reduce (not pipelined)", ...
std::string_view collective_name(Collective kind);

// `bytes` is M, the whole vector, for every kind except piece_all_gather, where it is P, one rank's piece.
struct AlphaBetaTerms {
  double alpha_count;      // how many α the critical path pays
  double bandwidth_bytes;  // bytes the critical path moves at B
  double reduced_bytes = 0;  // bytes the critical path adds, at γ seconds each
  double seconds(const Link& link) const {
    return alpha_count * link.alpha_s + bandwidth_bytes / link.bandwidth_Bps + reduced_bytes * link.gamma_s_per_byte;
  }
};

struct CollectiveCost {
  double seconds;        // modelled time
  double wire_bytes;     // bytes each rank sends
  double payload_bytes;  // bytes each rank originates
};

AlphaBetaTerms collective_terms(Collective kind, int ranks, double bytes);
CollectiveCost collective_cost(Collective kind, int ranks, double bytes, const Link& link);
// The bytes each rank sends (the table's last column). The tree's are its root's (rank 0, the rank whose figures
// dptrain reports): 2M from 3 ranks on (the table's), M at 2 ranks; an inner rank sends 3M and a leaf M
// (docs/collectives.md, "Bytes each rank sends").
double wire_bytes(Collective kind, int ranks, double bytes);

// ⌈log2 p⌉ for p ≥ 1 (0 for one rank).
int ceil_log2(int ranks);

// Payload of one rank's compressed gradient: one value in `keep_one_in` is kept and sent as its BF16 value plus a
// 4-byte index, P = ⌈N/k⌉·(2 + 4) bytes for N parameters (N = M/2 elements of the BF16 gradient).
double compressed_payload_bytes(double params, int keep_one_in);

}  // namespace dptrain::cost
