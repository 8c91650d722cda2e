// MPI start-up, agreement on set-up errors, and job-wide abort.
#include "dptrain/train/mpi_world.hpp"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {

MpiWorld::MpiWorld(int& argc, char**& argv) {
  // The communication thread of the overlap engine is the only one that calls MPI during a step, but the
  // main thread calls it between steps: MPI_THREAD_MULTIPLE keeps both legal without relying on a handoff.
  // A library that grants less is refused by require_thread_multiple(), inside the agreed set-up, so that every
  // rank reports it the same way instead of failing at random later.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level_);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
  MPI_Comm_size(node_, &local_size_);
  MPI_Comm_rank(node_, &local_rank_);
  const DeviceGroup group = device_group(node_);
  device_rank_ = group.rank;
  device_size_ = group.size;
}

double MpiWorld::node_minimum(double x) const {
  double minimum = x;
  MPI_Allreduce(&x, &minimum, 1, MPI_DOUBLE, MPI_MIN, node_);
  return minimum;
}

DeviceGroup device_group(MPI_Comm node) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string seen = visible ? std::string("=") + visible : std::string("unset");
  const int color = int(fnv1a(seen.data(), seen.size()) & 0x7fffffff);  // equal values, one group (MPI_Comm_split)
  int node_rank = 0;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm group;
  MPI_Comm_split(node, color, node_rank, &group);
  DeviceGroup result;
  MPI_Comm_rank(group, &result.rank);
  MPI_Comm_size(group, &result.size);
  MPI_Comm_free(&group);
  return result;
}

MpiWorld::~MpiWorld() {
  // MPI_Finalize waits for every rank and has no deadline: a rank stopped after the run's last exchange would hold
  // the others there for ever. A watched barrier first: past the timeout the job ends with exit 4 instead.
  watched("the barrier before MPI's end", [] { MPI_Barrier(MPI_COMM_WORLD); });
  MPI_Comm_free(&node_);
  MPI_Finalize();
}

void MpiWorld::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

double MpiWorld::sum_in_rank_order(double x) const {
  std::vector<double> all(size_);
  MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
  double total = 0;
  for (double v : all) total += v;
  return total;
}

std::vector<double> MpiWorld::max_over_ranks(std::vector<double> values) const {
  MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return values;
}

std::vector<std::string> MpiWorld::gather_to_first(const std::string& text) const {
  const long long length = static_cast<long long>(text.size());
  std::vector<long long> lengths(rank_ == 0 ? size_ : 0);
  MPI_Gather(&length, 1, MPI_LONG_LONG, lengths.data(), 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  std::vector<std::string> texts(rank_ == 0 ? size_ : 0);
  // In messages of at most 1 GiB: MPI counts are ints, and a long run's trace passes 2 GiB.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  if (rank_ == 0) {
    texts[0] = text;
    for (int r = 1; r < size_; ++r) {
      texts[r].resize(std::size_t(lengths[r]));
      for (std::size_t at = 0; at < texts[r].size(); at += kPiece)
        MPI_Recv(texts[r].data() + at, int(std::min(kPiece, texts[r].size() - at)), MPI_CHAR, r, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    }
  } else {
    for (std::size_t at = 0; at < text.size(); at += kPiece)
      MPI_Send(text.data() + at, int(std::min(kPiece, text.size() - at)), MPI_CHAR, 0, 0, MPI_COMM_WORLD);
  }
  return texts;
}

std::vector<int> MpiWorld::ranks_differing_from_first(std::uint64_t value) const {
  std::vector<std::uint64_t> all(size_);
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  std::vector<int> differing;
  for (int r = 1; r < size_; ++r)
    if (all[r] != all[0]) differing.push_back(r);
  return differing;
}

std::vector<std::uint64_t> MpiWorld::all_gather(const std::vector<std::uint64_t>& values) const {
  std::vector<std::uint64_t> all(values.size() * std::size_t(size_));
  MPI_Allgather(values.data(), int(values.size()), MPI_UINT64_T, all.data(), int(values.size()), MPI_UINT64_T,
                MPI_COMM_WORLD);
  return all;
}

std::vector<double> MpiWorld::all_gather(const std::vector<double>& values) const {
  std::vector<double> all(values.size() * std::size_t(size_));
  MPI_Allgather(values.data(), int(values.size()), MPI_DOUBLE, all.data(), int(values.size()), MPI_DOUBLE,
                MPI_COMM_WORLD);
  return all;
}

std::string MpiWorld::broadcast(const std::string& text, int root) const {
  long long length = static_cast<long long>(text.size());
  MPI_Bcast(&length, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD);
  std::string out = rank_ == root ? text : std::string(std::size_t(length), '\0');
  MPI_Bcast(out.data(), int(length), MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

std::string out_of_memory_message() {
  // A limit on this process (ulimit -v / -d, a scheduler's RLIMIT_AS or RLIMIT_DATA) fails allocations long before
  // the host runs out: name it, or the line would blame a host with gigabytes free.
  std::string limits;
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "address space (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "data (ulimit -d)"}}) {
    rlimit limit{};
    if (::getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      limits += fmt::format(", this process's {} limit {}", name, format_binary_bytes(double(limit.rlim_cur)));
  }
  return fmt::format("out of memory ({} available on this host{}): the model, --batch or the data are too large "
                     "for it",
                     format_binary_bytes(available_memory_bytes()), limits);
}

std::optional<std::string> thread_support_problem(int provided) {
  if (provided >= MPI_THREAD_MULTIPLE) return std::nullopt;
  const char* granted = provided == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                        : provided == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED"
                                                          : "MPI_THREAD_SINGLE";
  return fmt::format(
      "the MPI library provides only {} but dptrain needs MPI_THREAD_MULTIPLE (its communication thread calls MPI "
      "while the main thread may): use an MPI library built with MPI_THREAD_MULTIPLE support",
      granted);
}

void MpiWorld::require_thread_multiple() const {
  if (const auto problem = thread_support_problem(thread_level_)) fail("{}", *problem);
}

void MpiWorld::watched(const std::string& what, const std::function<void()>& exchange) const {
  if (size_ == 1 || exchange_timeout_s_ <= 0) return exchange();
  watch_.run(what, exchange_timeout_s_, exchange);
}

int MpiWorld::agree(const std::function<void()>& setup, const char* program) const {
  int code = 0;
  std::string message;
  try {
    setup();
  } catch (const UserError& e) {
    code = kExitBadInput;
    message = e.what();
  } catch (const std::bad_alloc&) {  // what the memory estimate did not foresee: still the input's size
    code = kExitBadInput;
    message = out_of_memory_message();
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  int worst = 0, failed = code != 0, failed_ranks = 0;
  // A rank whose set-up failed while the others went on into an exchange it never joins: its own error is in the
  // line that ends the job, else only the others' exchange would be named.
  std::string what = "the check that every rank's set-up succeeded";
  if (code != 0) what += " (this rank's failed: " + message + ")";
  watched(what, [&] {
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  });
  if (worst == 0) return 0;
  if (failed_ranks == size_) {
    // Every rank failed; the first one speaks for all (with a single rank this is the plain error line).
    if (rank_ == 0) std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  } else if (code != 0) {
    std::fprintf(stderr, "%s: rank %d: %s\n", program, rank_, message.c_str());
  }
  std::fflush(stderr);
  return worst;
}

void MpiWorld::abort(const std::string& message, int code) const {
  // The same line as a set-up error's: `dptrain: message` alone, `dptrain: rank R: message` among several ranks
  // (each rank that fails says so; MPI_Abort then ends the others).
  if (size_ == 1)
    std::fprintf(stderr, "dptrain: %s\n", message.c_str());
  else
    std::fprintf(stderr, "dptrain: rank %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  if (size_ == 1) {
    MPI_Finalize();
    std::exit(code);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace dptrain
