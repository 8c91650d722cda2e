// Transport: what every collective runs on. A rank in a group of size() ranks
//   - executes Schedules (schedule.hpp): the ring and tree collectives are written once as schedules and each
//     transport runs them its own way (MpiTransport: non-blocking point-to-point with look-ahead, see
//     point_to_point_executor.hpp; an NCCL transport: one ncclGroupStart/End per round plus a reduce kernel);
//   - may offer its library's own collectives (`native`: MPI_Allreduce, ncclAllReduce, ...);
//   - posts non-blocking sends and receives of raw bytes and waits for them (what the point-to-point executor
//     and the neighbour-exchange benchmark use).
//
// Point-to-point contract: a receive of n bytes matches a send of exactly n bytes from that peer; messages between
// the same pair of ranks match in the order they were posted (there are no tags). Buffers must stay valid and
// untouched until the request has been waited for.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>

#include "dptrain/comm/algorithm.hpp"
#include "dptrain/comm/dtype.hpp"
#include "dptrain/comm/schedule.hpp"
#include "dptrain/comm/scratch.hpp"

namespace dptrain {

// Thrown by a transport that watches its own operations (NcclTransport) when one did not complete by its deadline:
// the communicator is aborted, and the job must end on every rank as for the engine's watchdog.
class CommTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An in-flight send or receive. Opaque: only the transport that issued it can interpret `id`.
struct Request {
  std::int64_t id = -1;
  bool active() const { return id >= 0; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Request isend(int peer, const void* data, std::size_t bytes) = 0;
  virtual Request irecv(int peer, void* data, std::size_t bytes) = 0;

  // Blocks until the request completed and marks it inactive; waiting for an inactive request returns at once.
  virtual void wait(Request& request) = 0;
  virtual void wait_all(std::span<Request> requests);

  // Runs this rank's part of `schedule` on `data` (elements of dtype; the schedule's ranges index it), adding
  // reduce receives in with reduce_add, their incoming data held in `scratch`. Every rank of the group executes
  // its own schedule of the same collective at the same point. Messages may be split into pieces of at most
  // piece_bytes, each forwarded as soon as the data it carries is final (SIZE_MAX: whole messages); a transport
  // with its own pipelining may ignore it. Returns when `data` holds the result and every send has completed.
  virtual void execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add,
                       Scratch& scratch, std::size_t piece_bytes) = 0;

  // The library's own collectives on `count` elements in place, with the chunk semantics of collectives.hpp.
  // reduce_scatter and all_gather require count % size() == 0 (UserError otherwise; see require_native_chunks).
  // A transport without them returns false from has_native(), and native() throws std::logic_error.
  virtual bool has_native() const { return false; }
  virtual void native(CollectiveOp op, void* data, std::size_t count, DType dtype);

  // The device time of the last execute() or native() for a transport that times its operations on its device
  // (NCCL: CUDA events around the work on its stream); nullopt for one whose operations the host's clock times.
  virtual std::optional<double> last_device_seconds() const { return std::nullopt; }

  // Called by a watchdog that is about to end the job (MPI_Abort): ends what the transport has in flight, from any
  // thread, so no device work outlives the job (NCCL: ncclCommAbort). The transport is unusable afterwards.
  virtual void abort() noexcept {}

  // Every byte this rank has handed to isend since construction or the last reset (counted when posted).
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  void reset_bytes_sent() { bytes_sent_.store(0, std::memory_order_relaxed); }

 protected:
  void count_sent(std::size_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> bytes_sent_{0};
};

// Native reduce-scatter and all-gather give every rank count / p elements (libraries have no balanced uneven
// split in place): UserError naming the count, the rank count and the fix when p does not divide count.
void require_native_chunks(CollectiveOp op, std::size_t count, int size);

}  // namespace dptrain
