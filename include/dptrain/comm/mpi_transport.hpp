// MpiTransport: Transport over MPI point-to-point (MPI_Isend/MPI_Irecv of MPI_BYTE) on a private duplicate of
// the communicator it is given, so its traffic can never match anyone else's. Every message carries one fixed tag:
// MPI's non-overtaking rule then gives the Transport's pair-wise posting order. Messages are sent in pieces of at
// most kProgressPieceBytes (MPI counts are int, and the sleeping wait below needs to see data move); one Request
// then stands for all pieces. Schedules run on the
// PointToPointExecutor; the native collectives are MPI's own (mpi_native.cpp).
//
// Waiting: MPI_Waitall spins on the core, which on a machine with as many busy threads as cores takes the core from
// the compute thread (the comm executor waits while backward runs). The default wait polls with MPI_Testall for up
// to kSpinBeforeSleep after the last piece completed (a latency-bound hop of a small unit completes within it, so
// small models lose nothing, and a large message keeps its pieces moving), then sleeps between polls with a
// back-off bounded by kMaxSleep, so a message that arrives later is noticed within
// kMaxSleep plus the scheduler's wake-up. DPTRAIN_MPI_WAIT=spin|yield|sleep picks the policy (spin: MPI_Waitall, as
// before; yield: MPI_Testall and sched_yield), DPTRAIN_MPI_SPIN_US the spin budget; docs/cpu-speed.md has the
// measurements behind the defaults.
#pragma once
#include <mpi.h>

#include <chrono>
#include <vector>

#include "dptrain/comm/point_to_point_executor.hpp"
#include "dptrain/comm/transport.hpp"

namespace dptrain {

class MpiTransport final : public Transport {
 public:
  enum class WaitPolicy { spin, yield, sleep };
  // How long a sleeping wait keeps polling before its first sleep, and the longest sleep between two polls.
  static constexpr std::chrono::microseconds kSpinBeforeSleep{1000};
  static constexpr std::chrono::microseconds kMaxSleep{100};
  // The policy of DPTRAIN_MPI_WAIT (spin, yield or sleep; unset: sleep); any other value is refused.
  static WaitPolicy wait_policy_from_environment();
  // Reads DPTRAIN_MPI_WAIT and DPTRAIN_MPI_SPIN_US and throws UserError naming a bad value. Each rank has its own
  // environment: call it where the ranks agree on set-up errors, before any collective that a rank refusing its
  // environment would not join (the constructor calls it too, first).
  static void check_environment();

  // Largest piece of one message, in bytes; below INT_MAX and a multiple of 4 KiB.
  static constexpr std::size_t kMaxPieceBytes = std::size_t{1} << 30;
  // The pieces a message is sent in by default: small enough that a sleeping wait sees data move (a piece
  // completes every ~0.1–0.2 ms at shared-memory speed) and keeps polling, large enough to cost nothing.
  static constexpr std::size_t kProgressPieceBytes = std::size_t{1} << 20;

  // max_piece_bytes exists so tests can exercise the splitting with small messages.
  explicit MpiTransport(MPI_Comm comm = MPI_COMM_WORLD, std::size_t max_piece_bytes = kProgressPieceBytes);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Request isend(int peer, const void* data, std::size_t bytes) override;
  Request irecv(int peer, void* data, std::size_t bytes) override;
  void wait(Request& request) override;
  void wait_all(std::span<Request> requests) override;

  void execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add, Scratch& scratch,
               std::size_t piece_bytes) override;

  // MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather in place; BF16 through a user-defined MPI_Op that adds
  // with host_reduce_add (mpi_native.cpp).
  bool has_native() const override { return true; }
  void native(CollectiveOp op, void* data, std::size_t count, DType dtype) override;

  // The duplicated communicator.
  MPI_Comm communicator() const { return comm_; }

 private:
  template <typename Post>
  Request post(std::size_t bytes, Post&& post_piece);
  std::vector<MPI_Request>& slot_of(const Request& request);
  void release(Request& request);
  void wait_pieces(std::span<MPI_Request> pieces);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::size_t max_piece_bytes_;
  int rank_ = 0;
  int size_ = 1;
  // Request id → the MPI requests of its pieces (usually one). Freed slots are reused, so no allocation happens
  // once the pool has grown to the number of requests a collective keeps in flight.
  std::vector<std::vector<MPI_Request>> slots_;
  std::vector<std::int64_t> free_slots_;
  std::vector<MPI_Request> wait_scratch_;
  std::vector<int> completed_indices_;  // MPI_Testsome's output
  WaitPolicy wait_policy_ = WaitPolicy::sleep;
  PointToPointExecutor executor_;
};

}  // namespace dptrain
