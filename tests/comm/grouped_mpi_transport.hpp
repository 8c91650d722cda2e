// For MPI tests: schedules run as the NCCL transport runs them (GroupedExecutor: steps of grouped transfers, reduces
// on a stream of their own), over MPI on the host, on streams that make every missing dependency visible: the
// transfers of a step complete at once (posted and waited for in the step), while the reduces are deferred as long
// as the executor allows: they run only when a later step's transfers wait for them, or at the end. A send of a
// range whose reduce has not run sends a stale value; a receive into a scratch slot whose previous piece has not
// been added overwrites it: either makes the collective's result wrong.
#pragma once
#include <mpi.h>

#include <span>
#include <vector>

#include "dptrain/comm/grouped_executor.hpp"
#include "dptrain/comm/mpi_transport.hpp"

namespace dptrain {

class DeferredReduceStreams final : public StepStreams {
 public:
  explicit DeferredReduceStreams(Transport& transport) : transport_(transport) {}

  // The ReduceAdd to hand the executor: queues `add` of these arguments (reading `incoming` only when it runs).
  ReduceAdd deferred(ReduceAdd add = host_reduce_add) {
    return [this, add = std::move(add)](void* acc, const void* in, std::size_t n, DType dtype) {
      pending_.push_back({add, acc, in, n, dtype, kUnrecorded});
    };
  }

  void transfers_wait_for_reduces(std::size_t step) override {
    ++waits_;
    run_pending([&](const Pending& p) { return p.step <= step; });
  }
  void transfer(std::span<const Message> sends, std::span<const Message> receives) override {
    requests_.clear();
    for (const Message& m : receives) requests_.push_back(transport_.irecv(m.peer, m.data, m.bytes));
    for (const Message& m : sends) requests_.push_back(transport_.isend(m.peer, m.data, m.bytes));
    transport_.wait_all(requests_);
    ++groups_;
  }
  void reduces_wait_for_transfers() override {}
  void record_reduces(std::size_t step) override {
    for (Pending& p : pending_)
      if (p.step == kUnrecorded) p.step = step;
  }
  void finish() override {
    run_pending([](const Pending&) { return true; });
  }

  std::size_t groups() const { return groups_; }
  std::size_t waits() const { return waits_; }

 private:
  static constexpr std::size_t kUnrecorded = SIZE_MAX;
  struct Pending {
    ReduceAdd add;
    void* acc;
    const void* in;
    std::size_t count;
    DType dtype;
    std::size_t step;
  };

  // Runs, in issue order, the pending reduces up to the last one `due` selects (a stream runs in order).
  template <typename Due>
  void run_pending(Due due) {
    std::size_t last = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i)
      if (due(pending_[i])) last = i + 1;
    for (std::size_t i = 0; i < last; ++i)
      pending_[i].add(pending_[i].acc, pending_[i].in, pending_[i].count, pending_[i].dtype);
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(last));
  }

  Transport& transport_;
  std::vector<Pending> pending_;
  std::vector<Request> requests_;
  std::size_t groups_ = 0, waits_ = 0;
};

// A Transport whose schedules run on the GroupedExecutor over DeferredReduceStreams, its messages on an MpiTransport.
class GroupedMpiTransport final : public Transport {
 public:
  explicit GroupedMpiTransport(MPI_Comm comm = MPI_COMM_WORLD) : mpi_(comm), streams_(*this) {}

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  Request isend(int peer, const void* data, std::size_t bytes) override {
    count_sent(bytes);
    return mpi_.isend(peer, data, bytes);
  }
  Request irecv(int peer, void* data, std::size_t bytes) override { return mpi_.irecv(peer, data, bytes); }
  void wait(Request& request) override { mpi_.wait(request); }
  void wait_all(std::span<Request> requests) override { mpi_.wait_all(requests); }
  void execute(const Schedule& schedule, void* data, DType dtype, const ReduceAdd& reduce_add, Scratch& scratch,
               std::size_t piece_bytes) override {
    executor_.run(streams_, schedule, data, dtype, streams_.deferred(reduce_add), scratch, piece_bytes);
  }

  DeferredReduceStreams& streams() { return streams_; }

 private:
  MpiTransport mpi_;
  DeferredReduceStreams streams_;
  GroupedExecutor executor_;
};

}  // namespace dptrain
