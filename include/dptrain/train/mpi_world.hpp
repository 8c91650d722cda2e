// The MPI job as the trainer sees it: ranks, ranks on this node, scalar agreement in a fixed order, and the
// error policy: an error that every rank finds before training prints once and exits 2 everywhere; an error
// on some ranks prints `rank R: message` on each of them and still ends every rank; an error during training
// aborts the whole job (MPI_Abort) so no rank waits forever for a peer that is gone.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/core/error.hpp"
#include "dptrain/train/exchange_watch.hpp"

namespace dptrain {

// The ranks of the node communicator `node` that see the same GPUs, as (this rank's index among them, their
// count). Ranks see the same GPUs when their CUDA_VISIBLE_DEVICES are equal (set or not): a scheduler that gives each
// rank its own device (Slurm's --gpus-per-task, a CUDA_VISIBLE_DEVICES per rank) makes each a group of one, which
// takes the one device it sees; ranks of one launch on a node of 8 visible GPUs are one group, which shares them
// out by index. Collective over `node`.
struct DeviceGroup {
  int rank = 0, size = 1;
};
DeviceGroup device_group(MPI_Comm node);

class MpiWorld {
 public:
  MpiWorld(int& argc, char**& argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks sharing this node (its cores, its memory)
  int local_rank() const { return local_rank_; }  // this rank among them
  // The ranks of this node that see the same GPUs (device_group), and this rank among them: how the GPUs are
  // shared out (its GPU is device_rank() / ranks per GPU of those it sees).
  // The minimum of x over the ranks of this node (e.g. the earliest reading of the node's steady clock).
  double node_minimum(double x) const;
  int device_size() const { return device_size_; }
  int device_rank() const { return device_rank_; }

  void barrier() const;
  // Σ over ranks of one double, added in rank order (bitwise the same on every rank).
  double sum_in_rank_order(double x) const;
  // Element-wise maximum over ranks.
  std::vector<double> max_over_ranks(std::vector<double> values) const;
  // Rank 0 receives every rank's text in rank order; the other ranks get an empty vector.
  std::vector<std::string> gather_to_first(const std::string& text) const;
  // The ranks whose value differs from rank 0's (empty when all agree).
  std::vector<int> ranks_differing_from_first(std::uint64_t value) const;
  // Every rank's values, rank after rank ([size × values.size()]); every rank passes as many.
  std::vector<std::uint64_t> all_gather(const std::vector<std::uint64_t>& values) const;
  std::vector<double> all_gather(const std::vector<double>& values) const;
  // Rank `root`'s text on every rank.
  std::string broadcast(const std::string& text, int root) const;

  // Throws UserError when the MPI library did not grant MPI_THREAD_MULTIPLE (the same on every rank).
  void require_thread_multiple() const;

  // Runs an exchange between ranks made outside the comm executor (the set-up's) under the exchange timeout: one
  // that has not completed by then ends the job with `dptrain: rank R: <what> did not complete in S s` and exit
  // kExitCommunication, on every rank. Without a timeout set, or on one rank, it just runs.
  void watched(const std::string& what, const std::function<void()>& exchange) const;
  void set_exchange_timeout(double seconds) { exchange_timeout_s_ = seconds; }

  // Runs `setup` on every rank and agrees on the outcome (a watched exchange). Returns 0 when all succeeded;
  // otherwise the exit code (2 for bad input) after printing the error line(s) as described above.
  int agree(const std::function<void()>& setup, const char* program) const;

  // An error during training: prints `dptrain: message` (one rank) or `dptrain: rank R: message` and ends the job
  // with `code` (MPI_Abort among several ranks, so none waits for this one).
  [[noreturn]] void abort(const std::string& message, int code) const;

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0, device_size_ = 1, device_rank_ = 0;
  MPI_Comm node_ = MPI_COMM_NULL;  // the ranks sharing this node (MPI_COMM_TYPE_SHARED)
  int thread_level_ = 0;  // what MPI_Init_thread provided
  double exchange_timeout_s_ = 0;  // 0: none
  mutable ExchangeWatch watch_{[this](const std::string& message) { abort(message, kExitCommunication); }};
};

// The line a std::bad_alloc becomes (exit kExitBadInput): the run asked for more memory than the host has, or than
// this process's RLIMIT_AS / RLIMIT_DATA allows (named when set).
std::string out_of_memory_message();

// Why a thread level the MPI library provided is not enough (nullopt for MPI_THREAD_MULTIPLE): one line naming
// the level granted and the one needed.
std::optional<std::string> thread_support_problem(int provided);

}  // namespace dptrain
