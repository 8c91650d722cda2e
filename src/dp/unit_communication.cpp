// The units' communication: each unit's gradient collective queued on the comm executor as soon as backward
// completes it, the weight all-gathers of stages 1–3, and stage 3's weight access (a unit gathered when a pass
// reaches it, the next one prefetched, released once the pass has moved on).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "dptrain/core/error.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {

void DataParallelEngine::collective(CollectiveOp op, std::size_t u, void* data, DType dtype) {
  if (!distributed()) return;
  const Unit& unit = plan_.units()[u];
  const double start = timeline_.now();
  group_.collectives->run(op, data, unit.padded, dtype);
  if (timeline_.recording())
    timeline_.add({TimelineEvent::Track::communication, fmt::format("{} {}", collective_op_name(op), unit.name),
                   start, timeline_.now(), step_number_, int(u), unit.padded * element_size(dtype)});
}

void DataParallelEngine::watched_wait(CommExecutor::Ticket ticket, WaitAllowance allowance) {
  const double limit_s = settings_.comm_timeout_s + allowance.seconds;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit_s));
  std::string stuck;  // the task every rank is stuck behind
  try {
    if (executor_.wait_until(ticket, deadline)) return;
    stuck = executor_.oldest_unfinished();  // the executor runs its tasks in order
  } catch (const CommTimeout&) {
    stuck = executor_.failed();  // the transport's own deadline (NCCL's) passed inside that task
  }
  group_.abort(allowance.seconds > 0
                   ? fmt::format("{} did not complete in {:.3g} s (--comm-timeout {:g} s + {:.3g} s for {})", stuck,
                                 limit_s, settings_.comm_timeout_s, allowance.seconds, allowance.for_what)
                   : fmt::format("{} did not complete in {:g} s", stuck, limit_s));
}

void DataParallelEngine::run_on_comm_executor(std::function<void()> task, const char* what, WaitAllowance allowance) {
  watched_wait(executor_.submit(std::move(task), what), allowance);
}

void DataParallelEngine::wait_for_comm(CommExecutor::Ticket ticket, const char* what) {
  if (gaps_used_ == gaps_.size()) gaps_.emplace_back(device().create_event(), device().create_event());
  const auto [gap_start, gap_end] = gaps_[gaps_used_++];
  const double start = timeline_.now();
  device().record(gap_start, device().compute_stream());
  watched_wait(ticket);
  device().record(gap_end, device().compute_stream());
  const double end = timeline_.now();
  if (timeline_.recording() && end - start > 1e-5)
    timeline_.add({TimelineEvent::Track::compute, fmt::format("wait: {}", what), start, end, step_number_});
}

double DataParallelEngine::exposed_communication() {
  if (gaps_used_ == 0) return 0;
  device().synchronize(gaps_[gaps_used_ - 1].second);
  double total = 0;
  for (std::size_t i = 0; i < gaps_used_; ++i) total += device().elapsed_seconds(gaps_[i].first, gaps_[i].second);
  return total;
}

std::string DataParallelEngine::task_name(CollectiveOp op, std::size_t u) const {
  return fmt::format("{} on unit {}", collective_op_name(op), plan_.units()[u].name);
}

std::byte* DataParallelEngine::gradient_slice(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  const std::size_t at =
      settings_.zero_stage <= 1 ? unit.padded_offset + std::size_t(group_.rank) * unit.slice : unit.shard_offset;
  return gradient_.as<std::byte>() + at * wire_bytes();
}

// Casts unit u's gradient to the wire dtype (compute thread) and queues its collective: an all-reduce in place at
// stage 0, a reduce-scatter in place at stage 1, a reduce-scatter of a staging buffer keeping the own slice at
// stages 2 and 3.
void DataParallelEngine::launch_gradient(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  const int stage = settings_.zero_stage;
  const DType dtype = settings_.grad_dtype;
  std::byte* wire;
  if (stage <= 1) {
    wire = gradient_.as<std::byte>() + unit.padded_offset * wire_bytes();
  } else {
    gradient_staging_[u] = staging_.acquire(unit.padded * wire_bytes());
    wire = gradient_staging_[u]->as<std::byte>();
  }
  const DType accumulated = backend_.gradient_dtype();
  backend_.cast(gradient_accumulator_.as<std::byte>() + unit.range.begin * element_size(accumulated), accumulated,
                wire, dtype, unit.range.size());
  device().zero(wire + unit.range.size() * wire_bytes(), (unit.padded - unit.range.size()) * wire_bytes());
  const CollectiveOp op = stage == 0 ? CollectiveOp::all_reduce : CollectiveOp::reduce_scatter;
  device().record(gradient_ready_[u], device().compute_stream());
  gradient_tickets_[u] = executor_.submit(
      [this, u, wire, stage, dtype, op] {
        device().wait(comm_stream_, gradient_ready_[u]);
        collective(op, u, wire, dtype);
        if (stage >= 2) {
          // Keep the own slice; the staging buffer goes back to the pool at once, for the next unit.
          const Unit& unit = plan_.units()[u];
          device().copy(gradient_slice(u), wire + std::size_t(group_.rank) * unit.slice * wire_bytes(),
                        unit.slice * wire_bytes());
          staging_.release(std::move(gradient_staging_[u]));
        }
      },
      task_name(op, u));
}

// Stages 1–3: rank r's slice of unit u all-gathered into a staging buffer of the whole padded unit.
void DataParallelEngine::launch_weight_gather(std::size_t u, const bf16* own, std::size_t own_count) {
  const Unit& unit = plan_.units()[u];
  weight_staging_[u] = staging_.acquire(unit.padded * sizeof(bf16));
  bf16* buffer = weight_staging_[u]->as<bf16>();
  bf16* slice = buffer + std::size_t(group_.rank) * unit.slice;
  device().copy(slice, own, own_count * sizeof(bf16));
  device().zero(slice + own_count, (unit.slice - own_count) * sizeof(bf16));
  device().record(weight_ready_[u], device().compute_stream());
  weight_tickets_[u] = executor_.submit(
      [this, u, buffer] {
        device().wait(comm_stream_, weight_ready_[u]);
        collective(CollectiveOp::all_gather, u, buffer, DType::bf16);
      },
      task_name(CollectiveOp::all_gather, u));
}

void DataParallelEngine::launch_weight_gather_from_shard(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  launch_weight_gather(u, weights_.as<bf16>() + unit.shard_offset, unit.slice);
}

const bf16* DataParallelEngine::gathered(std::size_t u) {
  wait_for_comm(weight_tickets_[u], "weights");
  return weight_staging_[u]->as<bf16>();
}

void DataParallelEngine::release_gathered(std::size_t u) { staging_.release(std::move(weight_staging_[u])); }

void DataParallelEngine::take_gathered_weights(std::size_t u) {
  const FlatRange r = plan_.units()[u].range;
  device().copy(weights_.as<bf16>() + r.begin, gathered(u), r.size() * sizeof(bf16));
  release_gathered(u);
}

void DataParallelEngine::gather_all_units(const std::function<void(std::size_t, const bf16*)>& use) {
  // Two units in flight: the next one is gathered while the current one is used.
  const std::size_t units = plan_.units().size();
  for (std::size_t u = 0; u <= units; ++u) {
    if (u < units) launch_weight_gather_from_shard(u);
    if (u > 0) {
      use(u - 1, gathered(u - 1));
      release_gathered(u - 1);
    }
  }
}

// ---- stage 3: weights of the units in use only ---------------------------------------------------------------

WeightAccess DataParallelEngine::sharded_weights(const std::vector<std::size_t>& pass_order) {
  return {[this, &pass_order](FlatRange r) { return acquire_unit(r, pass_order); },
          [this](FlatRange r) { --unit_uses_[plan_.unit_of(r.begin)]; }};
}

// A unit stays gathered while the pass has acquires of it outstanding, and until the pass acquires another unit
// (consecutive blocks of one unit are acquired and released one after another).
const void* DataParallelEngine::acquire_unit(FlatRange range, const std::vector<std::size_t>& pass_order) {
  const std::size_t u = plan_.unit_of(range.begin);
  const Unit& unit = plan_.units()[u];
  if (!unit_view_[u]) {
    release_idle_units(u);
    if (!weight_staging_[u]) launch_weight_gather_from_shard(u);
    unit_view_[u] = backend_.acquire_weights(gathered(u), unit.range.size());
    // Prefetch: the next unit's all-gather runs while this one is computed with.
    const auto next = std::find(pass_order.begin(), pass_order.end(), u) + 1;
    if (next != pass_order.end() && !unit_view_[*next] && !weight_staging_[*next])
      launch_weight_gather_from_shard(*next);
  }
  ++unit_uses_[u];
  return static_cast<const std::byte*>(unit_view_[u]) +
         (range.begin - unit.range.begin) * element_size(backend_.weight_dtype());
}

void DataParallelEngine::release_idle_units(std::size_t except) {
  for (std::size_t u = 0; u < unit_view_.size(); ++u) {
    if (u == except || !unit_view_[u] || unit_uses_[u] > 0) continue;
    backend_.release_weights(unit_view_[u]);
    unit_view_[u] = nullptr;
    release_gathered(u);
  }
}

}  // namespace dptrain
