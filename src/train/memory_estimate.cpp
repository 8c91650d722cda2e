// Estimating a run's memory per rank from its options (the buffers engine_state.cpp and gpt.cpp allocate) and
// refusing a run that does not fit.
#include "dptrain/train/memory_estimate.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/cost/zero.hpp"
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
  // The ZeRO formula (weights, wire gradient, fp32 master and Adam moments, sharded by stage), plus what every
  // stage keeps whole: the fp32 local gradient and the fp32 compute weights the cpu backend's view holds (stage 3
  // views one unit at a time, counted whole here: an upper bound).
  const double grad_bytes = double(element_size(o.grad_dtype));
  e.model_state_bytes = cost::zero_memory_per_rank(o.zero, e.parameters, ranks, grad_bytes).total_bytes() +
                        2 * kCpuElementBytes * e.parameters;
  const double local_windows = double(o.batch) / d;
  const double micro_windows = local_windows / std::max(1, o.grad_accum);
  e.activation_bytes = activation_arena_bytes(o.model, micro_windows, kCpuElementBytes, kCpuElementBytes,
                                              double(o.model.seq) * o.model.seq * kCpuElementBytes);
  const double window_tokens = double(o.model.seq) + 1;
  const double eval_windows = std::ceil(double(o.eval_windows) / d);
  e.window_bytes = (local_windows + eval_windows) * window_tokens * kTokenBytes;
  return e;
}

void require_memory_fits(const RunMemoryEstimate& e, const TrainOptions& o, int ranks_on_this_host,
                         double available) {
  const double needed = e.total() * std::max(1, ranks_on_this_host);
  require(needed <= available,
          "the run needs about {} of memory per rank ({} for {:.4g} parameters at --zero {}, {} of activations for "
          "--batch {}, {} of token windows for --batch and --eval-windows {}) × {} rank(s) on this host = {}, but {} "
          "is available: use a smaller model or --batch (or --grad-accum), fewer --eval-windows, or more ranks with "
          "--zero",
          format_binary_bytes(e.total()), format_binary_bytes(e.model_state_bytes), e.parameters, o.zero,
          format_binary_bytes(e.activation_bytes), o.batch, format_binary_bytes(e.window_bytes), o.eval_windows,
          ranks_on_this_host, format_binary_bytes(needed), format_binary_bytes(available));
}

}  // namespace dptrain
