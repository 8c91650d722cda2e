// Binary-tree collectives over a Transport, not pipelined: rank 0 is the root and rank r's children are 2r+1 and
// 2r+2. Whole vectors go up (reduce) and down (broadcast); reduce-scatter and all-gather move a subtree's chunks
// where the whole vector is not needed. The simple baseline beside the ring: ⌈log2 p⌉ hops each way, each hop
// the full message.
#include <vector>

#include "dptrain/comm/collectives.hpp"

namespace dptrain {
namespace {

constexpr int kTagUp = 201;
constexpr int kTagDown = 202;

struct Tree {
  Tree(Transport& transport, void* data, std::size_t count, DType dtype)
      : p(transport.size()),
        r(transport.rank()),
        count(count),
        element(element_size(dtype)),
        base(static_cast<std::byte*>(data)) {
    for (int child : {2 * r + 1, 2 * r + 2}) {
      if (child < p) children.push_back(child);
    }
  }

  bool is_root() const { return r == 0; }
  int parent() const { return (r - 1) / 2; }
  std::size_t bytes() const { return count * element; }

  // Ranks of the subtree under `node`, in breadth-first order (both ends of a transfer list them the same way).
  std::vector<int> subtree(int node) const {
    std::vector<int> ranks{node};
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      for (int child : {2 * ranks[i] + 1, 2 * ranks[i] + 2}) {
        if (child < p) ranks.push_back(child);
      }
    }
    return ranks;
  }

  // Posts one message per non-empty chunk of `node`'s subtree, to or from `peer`.
  template <typename Post>
  void post_subtree_chunks(int node, std::vector<Request>& requests, Post&& post) const {
    for (int q : subtree(node)) {
      const std::size_t chunk_bytes = chunk_size(count, p, q) * element;
      if (chunk_bytes > 0) requests.push_back(post(base + chunk_begin(count, p, q) * element, chunk_bytes));
    }
  }

  int p, r;
  std::size_t count, element;
  std::byte* base;
  std::vector<int> children;
};

// Sums the whole vector into the root: each node adds its children's subtree sums (left child first), then
// passes its own subtree sum to its parent.
void reduce_up(Transport& transport, const ReduceAdd& reduce_add, const Tree& tree, DType dtype, Scratch& scratch) {
  std::byte* incoming = scratch.get(tree.children.size() * tree.bytes());
  std::vector<Request> recvs;
  for (std::size_t i = 0; i < tree.children.size(); ++i) {
    recvs.push_back(transport.irecv(tree.children[i], kTagUp, incoming + i * tree.bytes(), tree.bytes()));
  }
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    transport.wait(recvs[i]);
    reduce_add(tree.base, incoming + i * tree.bytes(), tree.count, dtype);
  }
  if (!tree.is_root()) {
    Request send = transport.isend(tree.parent(), kTagUp, tree.base, tree.bytes());
    transport.wait(send);
  }
}

// The root's whole vector goes down to every rank.
void broadcast_down(Transport& transport, const Tree& tree) {
  if (!tree.is_root()) {
    Request recv = transport.irecv(tree.parent(), kTagDown, tree.base, tree.bytes());
    transport.wait(recv);
  }
  std::vector<Request> sends;
  for (int child : tree.children) sends.push_back(transport.isend(child, kTagDown, tree.base, tree.bytes()));
  transport.wait_all(sends);
}

// Each rank receives the (final) chunks of its subtree from its parent and forwards each child its share.
void scatter_down(Transport& transport, const Tree& tree) {
  std::vector<Request> requests;
  if (!tree.is_root()) {
    tree.post_subtree_chunks(tree.r, requests, [&](std::byte* data, std::size_t bytes) {
      return transport.irecv(tree.parent(), kTagDown, data, bytes);
    });
    transport.wait_all(requests);
    requests.clear();
  }
  for (int child : tree.children) {
    tree.post_subtree_chunks(child, requests, [&](std::byte* data, std::size_t bytes) {
      return transport.isend(child, kTagDown, data, bytes);
    });
  }
  transport.wait_all(requests);
}

// Each rank receives its children's subtree chunks into place, then passes its whole subtree's chunks up.
void gather_up(Transport& transport, const Tree& tree) {
  std::vector<Request> requests;
  for (int child : tree.children) {
    tree.post_subtree_chunks(child, requests, [&](std::byte* data, std::size_t bytes) {
      return transport.irecv(child, kTagUp, data, bytes);
    });
  }
  transport.wait_all(requests);
  requests.clear();
  if (!tree.is_root()) {
    tree.post_subtree_chunks(tree.r, requests, [&](std::byte* data, std::size_t bytes) {
      return transport.isend(tree.parent(), kTagUp, data, bytes);
    });
    transport.wait_all(requests);
  }
}

}  // namespace

void tree_all_reduce(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count, DType dtype,
                     Scratch& scratch) {
  const Tree tree(transport, data, count, dtype);
  if (tree.p == 1 || count == 0) return;
  reduce_up(transport, reduce_add, tree, dtype, scratch);
  broadcast_down(transport, tree);
}

void tree_reduce_scatter(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                         DType dtype, Scratch& scratch) {
  const Tree tree(transport, data, count, dtype);
  if (tree.p == 1 || count == 0) return;
  reduce_up(transport, reduce_add, tree, dtype, scratch);
  scatter_down(transport, tree);
}

void tree_all_gather(Transport& transport, void* data, std::size_t count, DType dtype) {
  const Tree tree(transport, data, count, dtype);
  if (tree.p == 1 || count == 0) return;
  gather_up(transport, tree);
  broadcast_down(transport, tree);
}

namespace {

class TreeCollectives final : public Collectives {
 public:
  TreeCollectives(Transport& transport, ReduceAdd reduce_add)
      : Collectives(Algorithm::tree, transport), reduce_add_(std::move(reduce_add)) {}

 protected:
  void execute(CollectiveOp op, void* data, std::size_t count, DType dtype) override {
    switch (op) {
      case CollectiveOp::all_reduce: tree_all_reduce(transport_, reduce_add_, data, count, dtype, scratch_); break;
      case CollectiveOp::reduce_scatter:
        tree_reduce_scatter(transport_, reduce_add_, data, count, dtype, scratch_);
        break;
      case CollectiveOp::all_gather: tree_all_gather(transport_, data, count, dtype); break;
    }
  }

 private:
  ReduceAdd reduce_add_;
  Scratch scratch_;
};

}  // namespace

std::unique_ptr<Collectives> make_tree_collectives(Transport& transport, ReduceAdd reduce_add) {
  return std::make_unique<TreeCollectives>(transport, std::move(reduce_add));
}

}  // namespace dptrain
