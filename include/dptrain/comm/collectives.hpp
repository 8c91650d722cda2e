// Collectives written once over any Transport plus a ReduceAdd: ring, binary tree, and `native` (the MPI
// library's own), behind one polymorphic front end (Collectives) that times and accounts every call.
//
// Every operation works in place on `count` elements of `dtype` at `data`, split into size() chunks by the
// balanced rule of chunks.hpp:
//   all_reduce      every chunk ends as the sum over ranks;
//   reduce_scatter  rank r ends with chunk r summed over ranks (the other chunks are left unspecified);
//   all_gather      rank r's chunk r must be valid on entry; every chunk is valid on exit.
// Every rank must call the same operations in the same order with the same count and dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/comm_log.hpp"
#include "dptrain/comm/dtype.hpp"
#include "dptrain/comm/transport.hpp"

namespace dptrain {

// Receive scratch kept across calls, so the largest buffer a collective needs is allocated once, not per call.
class Scratch {
 public:
  std::byte* get(std::size_t bytes);

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

// Ring (ring.cpp): p−1 steps; each step sends one chunk to rank+1 and receives one from rank−1. Chunks move in
// pieces of at most piece_bytes, each forwarded as soon as it is ready (docs/collectives.md has the measurements
// behind the default); SIZE_MAX sends every chunk as one message.
inline constexpr std::size_t kRingPieceBytes = std::size_t{256} << 10;
void ring_reduce_scatter(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                         DType dtype, Scratch& scratch, std::size_t piece_bytes = kRingPieceBytes);
void ring_all_gather(Transport& transport, void* data, std::size_t count, DType dtype,
                     std::size_t piece_bytes = kRingPieceBytes);
void ring_all_reduce(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                     DType dtype, Scratch& scratch, std::size_t piece_bytes = kRingPieceBytes);

// Binary tree (tree.cpp), rank 0 the root, children of r are 2r+1 and 2r+2, whole messages (not pipelined).
//   all_reduce:     reduce the whole vector up to the root, broadcast it down.
//   reduce_scatter: reduce the whole vector up, then scatter down (each child gets its subtree's chunks).
//   all_gather:     gather up (each node forwards its subtree's chunks), then broadcast the whole vector down.
void tree_all_reduce(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                     DType dtype, Scratch& scratch);
void tree_reduce_scatter(Transport& transport, const ReduceAdd& reduce_add, void* data, std::size_t count,
                         DType dtype, Scratch& scratch);
void tree_all_gather(Transport& transport, void* data, std::size_t count, DType dtype);

// Bytes rank `rank` of `size` sends in the ring algorithm for one call: the sizes of the chunks it sends.
// All-reduce: 2·count − chunk(r) − chunk(r+1) elements, i.e. 2(p−1)/p·M when p divides count.
std::uint64_t ring_bytes_sent(CollectiveOp op, std::size_t count, DType dtype, int rank, int size);

// Front end used by the trainer. Calls are timed and accounted into log(); the algorithm is in execute().
class Collectives {
 public:
  virtual ~Collectives() = default;
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  void all_reduce(void* data, std::size_t count, DType dtype) { run(CollectiveOp::all_reduce, data, count, dtype); }
  void reduce_scatter(void* data, std::size_t count, DType dtype) {
    run(CollectiveOp::reduce_scatter, data, count, dtype);
  }
  void all_gather(void* data, std::size_t count, DType dtype) { run(CollectiveOp::all_gather, data, count, dtype); }
  void run(CollectiveOp op, void* data, std::size_t count, DType dtype);

  Algorithm algorithm() const { return algorithm_; }
  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  CommLog& log() { return log_; }
  const CommLog& log() const { return log_; }

 protected:
  Collectives(Algorithm algorithm, Transport& transport) : transport_(transport), algorithm_(algorithm) {}

  virtual void execute(CollectiveOp op, void* data, std::size_t count, DType dtype) = 0;
  // Wire bytes to record for a call; `counted` is the transport counter's increase during it.
  virtual std::uint64_t wire_bytes(CollectiveOp op, std::size_t count, DType dtype, std::uint64_t counted) const {
    return counted;
  }

  Transport& transport_;

 private:
  Algorithm algorithm_;
  CommLog log_;
};

// `native` needs an MpiTransport (it runs MPI collectives on its communicator): UserError otherwise.
std::unique_ptr<Collectives> make_collectives(Algorithm algorithm, Transport& transport,
                                              ReduceAdd reduce_add = host_reduce_add);

// The per-algorithm factories behind make_collectives (ring.cpp, tree.cpp, native.cpp).
std::unique_ptr<Collectives> make_ring_collectives(Transport& transport, ReduceAdd reduce_add,
                                                   std::size_t piece_bytes = kRingPieceBytes);
std::unique_ptr<Collectives> make_tree_collectives(Transport& transport, ReduceAdd reduce_add);

}  // namespace dptrain
