// Binary-tree collectives as schedules: rank 0 is the root and rank r's children are 2r+1 and 2r+2. Whole
// vectors go up (reduce) and down (broadcast); reduce-scatter and all-gather move only a subtree's chunks where
// the whole vector is not needed. The simple baseline beside the ring: ⌈log2 p⌉ hops each way, each hop the full
// message (the collectives run it unpipelined).
//
// Rounds: with D the depth of the deepest rank (depth(r) = ⌊log2(r+1)⌋), the way up takes rounds 0 … D−1 — a rank
// at depth d sends to its parent in round D−d, so it receives from its children in round D−d−1 — and the way down
// rounds D … 2D−1 — a rank at depth d sends to its children in round D+d and receives from its parent in round
// D+d−1. Every rank holds all 2D rounds (most of them empty), so the rounds line up across ranks.
#include <bit>
#include <vector>

#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/schedule.hpp"

namespace dptrain {
namespace {

int depth(int rank) { return std::bit_width(static_cast<unsigned>(rank) + 1) - 1; }

struct Tree {
  Tree(int rank, int size, std::size_t count) : rank(rank), size(size), levels(depth(size - 1)), count(count) {
    for (int child : {2 * rank + 1, 2 * rank + 2}) {
      if (child < size) children.push_back(child);
    }
  }

  bool is_root() const { return rank == 0; }
  int parent() const { return (rank - 1) / 2; }
  ElementRange whole() const { return {0, count}; }

  // The non-empty chunks of the subtree under `node`, in breadth-first order (both ends list them alike).
  std::vector<ElementRange> subtree_chunks(int node) const {
    std::vector<int> ranks{node};
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      for (int child : {2 * ranks[i] + 1, 2 * ranks[i] + 2}) {
        if (child < size) ranks.push_back(child);
      }
    }
    std::vector<ElementRange> chunks;
    for (int q : ranks) {
      if (chunk_size(count, size, q) > 0) chunks.push_back({chunk_begin(count, size, q), chunk_size(count, size, q)});
    }
    return chunks;
  }

  // The rounds of this rank's transfers (see the file comment); only asked for where such a transfer exists.
  std::size_t up_receive_round() const { return levels - depth(rank) - 1; }
  std::size_t up_send_round() const { return levels - depth(rank); }
  std::size_t down_receive_round() const { return levels + depth(rank) - 1; }
  std::size_t down_send_round() const { return levels + depth(rank); }

  int rank, size, levels;
  std::size_t count;
  std::vector<int> children;
};

// 2D empty rounds, which the phases below fill (a zero-element vector moves nothing).
Schedule empty_rounds(const Tree& tree) {
  Schedule schedule;
  schedule.rounds.resize(2 * static_cast<std::size_t>(tree.levels));
  return schedule;
}

// Each rank adds its children's subtree sums (left, then right) into its vector and sends the sum to its parent.
void reduce_up(const Tree& tree, Schedule& schedule) {
  if (tree.count == 0) return;
  for (int child : tree.children) {
    schedule.rounds[tree.up_receive_round()].receives.push_back({child, tree.whole(), /*reduce=*/true});
  }
  if (!tree.is_root()) schedule.rounds[tree.up_send_round()].sends.push_back({tree.parent(), tree.whole()});
}

// Each rank receives its children's subtree chunks into place, then passes its whole subtree's chunks up.
void gather_up(const Tree& tree, Schedule& schedule) {
  for (int child : tree.children) {
    for (const ElementRange& range : tree.subtree_chunks(child)) {
      schedule.rounds[tree.up_receive_round()].receives.push_back({child, range, /*reduce=*/false});
    }
  }
  if (tree.is_root()) return;
  for (const ElementRange& range : tree.subtree_chunks(tree.rank)) {
    schedule.rounds[tree.up_send_round()].sends.push_back({tree.parent(), range});
  }
}

// The root's whole vector goes down to every rank.
void broadcast_down(const Tree& tree, Schedule& schedule) {
  if (tree.count == 0) return;
  if (!tree.is_root()) {
    schedule.rounds[tree.down_receive_round()].receives.push_back({tree.parent(), tree.whole(), /*reduce=*/false});
  }
  for (int child : tree.children) schedule.rounds[tree.down_send_round()].sends.push_back({child, tree.whole()});
}

// Each rank receives the final chunks of its subtree from its parent and forwards each child its share.
void scatter_down(const Tree& tree, Schedule& schedule) {
  if (!tree.is_root()) {
    for (const ElementRange& range : tree.subtree_chunks(tree.rank)) {
      schedule.rounds[tree.down_receive_round()].receives.push_back({tree.parent(), range, /*reduce=*/false});
    }
  }
  for (int child : tree.children) {
    for (const ElementRange& range : tree.subtree_chunks(child)) {
      schedule.rounds[tree.down_send_round()].sends.push_back({child, range});
    }
  }
}

// The way up, then the way down, in one schedule.
Schedule tree_schedule(int rank, int size, std::size_t count, void (*up)(const Tree&, Schedule&),
                       void (*down)(const Tree&, Schedule&)) {
  const Tree tree(rank, size, count);
  Schedule schedule = empty_rounds(tree);
  up(tree, schedule);
  down(tree, schedule);
  schedule.finish();
  return schedule;
}

}  // namespace

Schedule tree_all_reduce_schedule(int rank, int size, std::size_t count) {
  return tree_schedule(rank, size, count, reduce_up, broadcast_down);
}

Schedule tree_reduce_scatter_schedule(int rank, int size, std::size_t count) {
  return tree_schedule(rank, size, count, reduce_up, scatter_down);
}

Schedule tree_all_gather_schedule(int rank, int size, std::size_t count) {
  return tree_schedule(rank, size, count, gather_up, broadcast_down);
}

}  // namespace dptrain
