// Schedule bookkeeping (scratch size, elements sent) and the choice of schedules per algorithm and operation.
#include "dptrain/comm/schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

void Schedule::finish() {
  scratch_elements = 0;
  for (const Round& round : rounds) {
    std::size_t reduced = 0;
    for (const Receive& receive : round.receives) {
      if (receive.reduce) reduced += receive.range.count;
    }
    scratch_elements = std::max(scratch_elements, reduced);
  }
}

std::uint64_t Schedule::elements_sent() const {
  std::uint64_t total = 0;
  for (const Round& round : rounds) {
    for (const Send& send : round.sends) total += send.range.count;
  }
  return total;
}

std::vector<Schedule> collective_schedules(Algorithm algorithm, CollectiveOp op, int rank, int size,
                                           std::size_t count) {
  if (algorithm == Algorithm::ring) {
    switch (op) {
      case CollectiveOp::all_reduce:
        return {ring_reduce_scatter_schedule(rank, size, count), ring_all_gather_schedule(rank, size, count)};
      case CollectiveOp::reduce_scatter: return {ring_reduce_scatter_schedule(rank, size, count)};
      case CollectiveOp::all_gather: return {ring_all_gather_schedule(rank, size, count)};
    }
  }
  if (algorithm == Algorithm::tree) {
    switch (op) {
      case CollectiveOp::all_reduce: return {tree_all_reduce_schedule(rank, size, count)};
      case CollectiveOp::reduce_scatter: return {tree_reduce_scatter_schedule(rank, size, count)};
      case CollectiveOp::all_gather: return {tree_all_gather_schedule(rank, size, count)};
    }
  }
  throw std::logic_error("collective_schedules: only ring and tree are written as schedules");
}

}  // namespace dptrain
