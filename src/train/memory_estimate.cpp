// Estimating a run's memory per rank from its options (the buffers engine_state.cpp and gpt.cpp allocate) and
// refusing a run that does not fit.
#include "dptrain/train/memory_estimate.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/cost/zero.hpp"
#include "dptrain/dp/unit_plan.hpp"
#include "dptrain/model/activation_memory.hpp"

namespace dptrain {

namespace {

constexpr double kCpuElementBytes = 4;  // the cpu backend's activations, compute weights and local gradient: fp32
constexpr double kTokenBytes = 4;       // a token of a window on the host (int32)

}  // namespace

RunMemoryEstimate estimate_run_memory(const TrainOptions& o, int ranks) {
  RunMemoryEstimate e;
  const double d = std::max(1, ranks);
  e.parameters = double(parameter_count(o.model));
  // The ZeRO formula (weights, wire gradient, fp32 master and Adam moments, sharded by stage), plus the working
  // copies: the fp32 local gradient, which every stage keeps whole, and the fp32 compute weights the cpu backend's
  // views hold, of the whole model to stage 2 and at stage 3 of the units in flight (two, at most the largest).
  const double grad_bytes = double(element_size(o.grad_dtype));
  const UnitPlan plan(ParameterLayout(o.model), bucket_bytes(o.bucket_mb), element_size(o.grad_dtype), ranks);
  const double viewed = o.zero == 3 ? 2 * double(plan.largest_padded()) : e.parameters;
  e.model_state_bytes = cost::zero_memory_per_rank(o.zero, e.parameters, ranks, grad_bytes).total_bytes() +
                        kCpuElementBytes * (e.parameters + viewed);
  const double local_windows = double(o.batch) / d;
  const double micro_windows = local_windows / std::max(1, o.grad_accum);
  e.activation_bytes = activation_arena_bytes(o.model, micro_windows, kCpuElementBytes, kCpuElementBytes,
                                              double(o.model.seq) * o.model.seq * kCpuElementBytes);
  // The batch's token windows (the evaluation reads its windows into the same buffer, a round at a time).
  e.window_bytes = local_windows * (double(o.model.seq) + 1) * kTokenBytes;
  return e;
}

void require_memory_fits(const RunMemoryEstimate& e, const TrainOptions& o, int ranks_on_this_host,
                         double available) {
  const double needed = e.total() * std::max(1, ranks_on_this_host);
  require(needed <= available,
          "the run needs about {} of memory per rank ({} for {:.4g} parameters at --zero {}, {} of activations and "
          "{} of token windows for --batch {}) × {} rank(s) on this host = {}, but {} is available: use a smaller "
          "model or --batch (or --grad-accum), or more ranks with --zero",
          format_binary_bytes(e.total()), format_binary_bytes(e.model_state_bytes), e.parameters, o.zero,
          format_binary_bytes(e.activation_bytes), format_binary_bytes(e.window_bytes), o.batch, ranks_on_this_host,
          format_binary_bytes(needed), format_binary_bytes(available));
}

}  // namespace dptrain
