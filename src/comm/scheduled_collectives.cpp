// The ring and tree Collectives: the operation's schedules (schedule.hpp), built once per (operation, count) and
// kept, run by the transport on the caller's buffer with scratch from the caller's Memory.
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "dptrain/comm/collectives.hpp"

namespace dptrain {
namespace {

class ScheduledCollectives final : public Collectives {
 public:
  ScheduledCollectives(Algorithm algorithm, Transport& transport, ReduceAdd reduce_add, Memory& scratch_memory,
                       std::size_t piece_bytes)
      : Collectives(algorithm, transport),
        reduce_add_(std::move(reduce_add)),
        scratch_(scratch_memory),
        piece_bytes_(piece_bytes) {}

 protected:
  // A ring all-reduce is two schedules (reduce-scatter, all-gather): its device time is the sum of theirs.
  std::optional<double> execute(CollectiveOp op, void* data, std::size_t count, DType dtype) override {
    std::optional<double> device_seconds = 0.0;
    for (const Schedule& schedule : schedules(op, count)) {
      transport_.execute(schedule, data, dtype, reduce_add_, scratch_, piece_bytes_);
      const std::optional<double> part = transport_.last_device_seconds();
      device_seconds = part && device_seconds ? std::optional(*device_seconds + *part) : std::nullopt;
    }
    return device_seconds;
  }

 private:
  // A trainer calls the same few (operation, unit size) pairs every step; a benchmark sweeps sizes. Keeping at
  // most kCachedCalls saves rebuilding the rounds per call without growing without bound.
  static constexpr std::size_t kCachedCalls = 64;

  const std::vector<Schedule>& schedules(CollectiveOp op, std::size_t count) {
    const auto key = std::make_pair(op, count);
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    if (cache_.size() >= kCachedCalls) cache_.clear();
    return cache_.emplace(key, collective_schedules(algorithm(), op, rank(), size(), count)).first->second;
  }

  ReduceAdd reduce_add_;
  Scratch scratch_;
  std::size_t piece_bytes_;
  std::map<std::pair<CollectiveOp, std::size_t>, std::vector<Schedule>> cache_;
};

}  // namespace

// The tree is the unpipelined baseline: whole messages whatever ring_piece_bytes says.
std::unique_ptr<Collectives> make_scheduled_collectives(Algorithm algorithm, Transport& transport,
                                                        ReduceAdd reduce_add, Memory& scratch_memory,
                                                        std::size_t ring_piece_bytes) {
  const std::size_t piece_bytes = algorithm == Algorithm::ring ? ring_piece_bytes : SIZE_MAX;
  return std::make_unique<ScheduledCollectives>(algorithm, transport, std::move(reduce_add), scratch_memory,
                                                piece_bytes);
}

}  // namespace dptrain
