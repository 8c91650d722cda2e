// Ring reduce-scatter and all-gather over a Transport (ring all-reduce = the two in sequence), and the ring
// Collectives. Each of the p−1 steps sends one chunk to the right neighbour and receives one from the left.
//
// Chunks travel in pieces of at most piece_bytes, pipelined across steps as NCCL does: a piece is forwarded as
// soon as it has arrived (all-gather) or been added in (reduce-scatter), without waiting for the rest of its
// chunk. On a CPU transport this does not buy concurrency (the process moves bytes only while it is inside the
// transport) but locality: a received piece is added while it is still in cache and sent on while the sum is,
// and the receive scratch is a few pieces, not a chunk. piece_bytes = SIZE_MAX gives the textbook ring (one
// message per chunk per step).
#include <algorithm>
#include <vector>

#include "dptrain/comm/collectives.hpp"

namespace dptrain {
namespace {

constexpr int kTagReduceScatter = 101;
constexpr int kTagAllGather = 102;
constexpr std::size_t kReceiveWindow = 4;  // reduce-scatter receives posted ahead (scratch = this many pieces)

// Where rank r sits on the ring, and chunk c / piece k of chunk c of the buffer.
struct Ring {
  Ring(Transport& transport, void* data, std::size_t count, DType dtype, std::size_t piece_bytes)
      : p(transport.size()),
        r(transport.rank()),
        left((r - 1 + p) % p),
        right((r + 1) % p),
        count(count),
        element(element_size(dtype)),
        piece_elements(std::max<std::size_t>(1, piece_bytes / element)),
        base(static_cast<std::byte*>(data)) {}

  int chunk_at(int offset) const { return ((r + offset) % p + p) % p; }  // chunk r+offset mod p
  std::size_t pieces(int c) const { return (chunk_size(count, p, c) + piece_elements - 1) / piece_elements; }
  std::size_t piece_begin(int c, std::size_t k) const { return chunk_begin(count, p, c) + k * piece_elements; }
  std::size_t piece_size(int c, std::size_t k) const {
    return std::min(piece_elements, chunk_size(count, p, c) - k * piece_elements);
  }
  std::byte* piece_data(int c, std::size_t k) const { return base + piece_begin(c, k) * element; }
  std::size_t piece_bytes(int c, std::size_t k) const { return piece_size(c, k) * element; }

  int p, r, left, right;
  std::size_t count, element, piece_elements;
  std::byte* base;
};

void send_chunk(Transport& transport, const Ring& ring, int tag, int c, std::vector<Request>& sends) {
  for (std::size_t k = 0; k < ring.pieces(c); ++k) {
    sends.push_back(transport.isend(ring.right, tag, ring.piece_data(c, k), ring.piece_bytes(c, k)));
  }
}

}  // namespace

// Step s sends chunk r−s−1 and receives chunk r−s−2, adding it in; from step 1 on, the chunk sent is the one
// summed at the step before, so each piece is forwarded right after its addition. The last step (s = p−2)
// receives chunk r: rank r ends owning its own chunk, summed over all ranks.
void ring_reduce_scatter(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                         DType dtype, Scratch& scratch, std::size_t piece_bytes) {
  const Ring ring(transport, data, count, dtype, piece_bytes);
  if (ring.p == 1 || count == 0) return;
  // Slot k mod W of the scratch holds piece k while it waits to be added.
  const std::size_t slots = std::min(kReceiveWindow, ring.pieces(0));  // chunk 0 has the most pieces
  const std::size_t slot_bytes = std::min(ring.piece_elements, chunk_size(count, ring.p, 0)) * ring.element;
  std::byte* incoming = scratch.get(slots * slot_bytes);
  std::vector<Request> sends, recvs(slots);

  send_chunk(transport, ring, kTagReduceScatter, ring.chunk_at(-1), sends);
  for (int step = 0; step < ring.p - 1; ++step) {
    const int c = ring.chunk_at(-step - 2);
    const std::size_t pieces = ring.pieces(c);
    auto post_recv = [&](std::size_t k) {
      if (k < pieces) {
        recvs[k % slots] = transport.irecv(ring.left, kTagReduceScatter, incoming + (k % slots) * slot_bytes,
                                           ring.piece_bytes(c, k));
      }
    };
    for (std::size_t k = 0; k < slots; ++k) post_recv(k);
    for (std::size_t k = 0; k < pieces; ++k) {
      transport.wait(recvs[k % slots]);
      reduce_add(ring.piece_data(c, k), incoming + (k % slots) * slot_bytes, ring.piece_size(c, k), dtype);
      post_recv(k + slots);
      if (step < ring.p - 2) {
        sends.push_back(transport.isend(ring.right, kTagReduceScatter, ring.piece_data(c, k), ring.piece_bytes(c, k)));
      }
    }
  }
  transport.wait_all(sends);
}

// Step s sends chunk r−s (its own first, then the one received at step s−1) and receives chunk r−s−1 directly
// into place. All receives are posted up front (they never overlap), so every piece finds its receive waiting.
void ring_all_gather(Transport& transport, void* data, std::size_t count, DType dtype, std::size_t piece_bytes) {
  const Ring ring(transport, data, count, dtype, piece_bytes);
  if (ring.p == 1 || count == 0) return;
  std::vector<Request> recvs, sends;
  for (int step = 0; step < ring.p - 1; ++step) {
    const int c = ring.chunk_at(-step - 1);
    for (std::size_t k = 0; k < ring.pieces(c); ++k) {
      recvs.push_back(transport.irecv(ring.left, kTagAllGather, ring.piece_data(c, k), ring.piece_bytes(c, k)));
    }
  }
  send_chunk(transport, ring, kTagAllGather, ring.r, sends);
  std::size_t next = 0;  // index into recvs, in posting order
  for (int step = 0; step < ring.p - 1; ++step) {
    const int c = ring.chunk_at(-step - 1);
    for (std::size_t k = 0; k < ring.pieces(c); ++k) {
      transport.wait(recvs[next++]);
      if (step < ring.p - 2) {
        sends.push_back(transport.isend(ring.right, kTagAllGather, ring.piece_data(c, k), ring.piece_bytes(c, k)));
      }
    }
  }
  transport.wait_all(sends);
}

void ring_all_reduce(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count, DType dtype,
                     Scratch& scratch, std::size_t piece_bytes) {
  ring_reduce_scatter(transport, reduce_add, data, count, dtype, scratch, piece_bytes);
  ring_all_gather(transport, data, count, dtype, piece_bytes);
}

namespace {

class RingCollectives final : public Collectives {
 public:
  RingCollectives(Transport& transport, ReduceAdd reduce_add, std::size_t piece_bytes)
      : Collectives(Algorithm::ring, transport), reduce_add_(std::move(reduce_add)), piece_bytes_(piece_bytes) {}

 protected:
  void execute(CollectiveOp op, void* data, std::size_t count, DType dtype) override {
    switch (op) {
      case CollectiveOp::all_reduce:
        ring_all_reduce(transport_, reduce_add_, data, count, dtype, scratch_, piece_bytes_);
        break;
      case CollectiveOp::reduce_scatter:
        ring_reduce_scatter(transport_, reduce_add_, data, count, dtype, scratch_, piece_bytes_);
        break;
      case CollectiveOp::all_gather: ring_all_gather(transport_, data, count, dtype, piece_bytes_); break;
    }
  }

 private:
  ReduceAdd reduce_add_;
  std::size_t piece_bytes_;
  Scratch scratch_;
};

}  // namespace

std::unique_ptr<Collectives> make_ring_collectives(Transport& transport, ReduceAdd reduce_add,
                                                   std::size_t piece_bytes) {
  return std::make_unique<RingCollectives>(transport, std::move(reduce_add), piece_bytes);
}

}  // namespace dptrain
