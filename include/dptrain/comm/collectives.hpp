// Collectives: the front end the trainer and dpbench call. Ring and binary tree are schedules (schedule.hpp)
// executed by the transport; `native` is the transport's library's own. Every call is timed and accounted.
//
// Every operation works in place on `count` elements of `dtype` at `data`, split into size() chunks by the
// balanced rule of chunks.hpp:
//   all_reduce      every chunk ends as the sum over ranks;
//   reduce_scatter  rank r ends with chunk r summed over ranks (the other chunks are left unspecified);
//   all_gather      rank r's chunk r must be valid on entry; every chunk is valid on exit.
// `native` reduce_scatter and all_gather also need size() to divide count (UserError otherwise).
// Every rank must call the same operations in the same order with the same count and dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/chunks.hpp"
#include "dptrain/comm/comm_log.hpp"
#include "dptrain/comm/dtype.hpp"
#include "dptrain/comm/transport.hpp"
#include "dptrain/core/memory.hpp"

namespace dptrain {

// The ring's messages move in pieces of this size, each forwarded as soon as it is ready (docs/collectives.md has
// the measurements behind it); SIZE_MAX sends every chunk as one message. The tree always sends whole messages.
inline constexpr std::size_t kRingPieceBytes = std::size_t{256} << 10;

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

  // Runs the operation; returns its time on the device where the transport times its work there
  // (Transport::last_device_seconds, summed over the operation's parts), else nullopt.
  virtual std::optional<double> execute(CollectiveOp op, void* data, std::size_t count, DType dtype) = 0;
  // Wire bytes to record for a call; `counted` is the transport counter's increase during it.
  virtual std::uint64_t wire_bytes(CollectiveOp op, std::size_t count, DType dtype, std::uint64_t counted) const {
    return counted;
  }

  Transport& transport_;

 private:
  Algorithm algorithm_;
  CommLog log_;
};

// ring and tree reduce with `reduce_add` and take their receive scratch from `scratch_memory` (the MPI transport
// needs host-accessible memory); ring_piece_bytes sets the ring's pipelining. `native` needs a transport with its
// own collectives (transport.has_native(); UserError otherwise) and ignores the other arguments.
std::unique_ptr<Collectives> make_collectives(Algorithm algorithm, Transport& transport,
                                              ReduceAdd reduce_add = host_reduce_add,
                                              Memory& scratch_memory = host_memory(),
                                              std::size_t ring_piece_bytes = kRingPieceBytes);

// The two kinds behind make_collectives (scheduled_collectives.cpp, native_collectives.cpp).
std::unique_ptr<Collectives> make_scheduled_collectives(Algorithm algorithm, Transport& transport,
                                                        ReduceAdd reduce_add, Memory& scratch_memory,
                                                        std::size_t ring_piece_bytes);
std::unique_ptr<Collectives> make_native_collectives(Transport& transport);

}  // namespace dptrain
