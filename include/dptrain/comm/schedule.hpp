// Schedule: a collective written once as plain data, for one rank: rounds of sends and receives over element
// ranges of the caller's buffer. The builders (ring_schedule.cpp, tree_schedule.cpp) are pure functions of
// (rank, size, count); a Transport executes a schedule (point_to_point_executor.hpp for MPI; an NCCL transport
// would run each round as one ncclGroupStart/End plus a reduce kernel on its stream).
//
// Semantics (what every executor must produce, and what tests/comm/schedule_test.cpp simulates):
//   - Every rank of the group has the same number of rounds and walks them in order. A send in round i from rank a
//     to rank b matches a receive in round i of rank b from a; between one pair of ranks, sends and receives match
//     in the order they are listed (round by round, then list order), and the matched pair has the same count.
//   - A send reads its range as it stands after every earlier round. A receive with reduce = false writes the
//     incoming elements into its range; with reduce = true it adds them in (reduce_add(range, incoming)), through
//     scratch, in list order when several reduce receives of one round cover the same elements.
//   - Within a round, no send range overlaps a receive range, and a plain (reduce = false) receive range overlaps
//     no other receive range, so the ops of one round may run in any order or all at once.
// Empty transfers are never listed: both ends compute the same counts, so both leave them out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dptrain/comm/algorithm.hpp"

namespace dptrain {

// Elements [begin, begin + count) of the buffer the collective runs on.
struct ElementRange {
  std::size_t begin = 0;
  std::size_t count = 0;
  std::size_t end() const { return begin + count; }
  bool overlaps(const ElementRange& other) const { return begin < other.end() && other.begin < end(); }
};

struct Send {
  int peer = 0;
  ElementRange range;
};

struct Receive {
  int peer = 0;
  ElementRange range;
  bool reduce = false;  // true: range += incoming (via scratch); false: incoming written straight into range
};

struct Round {
  std::vector<Send> sends;
  std::vector<Receive> receives;
};

struct Schedule {
  std::vector<Round> rounds;
  // Receive scratch an executor needs to hold every reduce receive of one round at once: the largest sum over a
  // round of its reduce receives' counts, in elements. (A pipelined executor may need less; see its header.)
  std::size_t scratch_elements = 0;

  // Appends a round and returns it (builders fill it, then call finish()).
  Round& add_round() { return rounds.emplace_back(); }
  // Computes scratch_elements; builders call it last.
  void finish();
  // Elements this rank sends over the whole schedule (its wire bytes / element size).
  std::uint64_t elements_sent() const;
};

// Ring (ring_schedule.cpp), chunks by the balanced rule of chunks.hpp; rank r sends to r+1 and receives from r−1.
//   reduce-scatter, p−1 rounds: round s sends chunk r−s−1 and receives chunk r−s−2 with reduce; rank r ends with
//     chunk r summed over all ranks, added in the order r+1, r+2, …, r (docs/collectives.md, "Order of addition").
//   all-gather, p−1 rounds: round s sends chunk r−s and receives chunk r−s−1 in place.
// Ring all-reduce = the reduce-scatter schedule, then the all-gather schedule.
Schedule ring_reduce_scatter_schedule(int rank, int size, std::size_t count);
Schedule ring_all_gather_schedule(int rank, int size, std::size_t count);

// Binary tree (tree_schedule.cpp): rank 0 the root, children of r are 2r+1 and 2r+2, whole messages. One round
// per tree level and direction (2·depth rounds), every rank walking all of them.
//   all-reduce:     the whole vector reduced up (a node adds its left child's subtree sum, then its right child's),
//                   then broadcast down;
//   reduce-scatter: reduced up, then scattered down (each child gets the final chunks of its subtree);
//   all-gather:     gathered up (each node forwards its subtree's chunks), then the whole vector broadcast down.
Schedule tree_all_reduce_schedule(int rank, int size, std::size_t count);
Schedule tree_reduce_scatter_schedule(int rank, int size, std::size_t count);
Schedule tree_all_gather_schedule(int rank, int size, std::size_t count);

// The schedules `algorithm` (ring or tree) runs for `op`, in execution order: one, or two for the ring all-reduce.
std::vector<Schedule> collective_schedules(Algorithm algorithm, CollectiveOp op, int rank, int size,
                                           std::size_t count);

}  // namespace dptrain
