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

constexpr double kTokenBytes = 4;  // a token of a window on the host (int32)

}  // namespace

BackendFootprint footprint_of(const Backend& backend, const ModelConfig& m) {
  return {.activation_bytes = double(element_size(backend.activation_dtype())),
          .gradient_bytes = double(element_size(backend.gradient_dtype())),
          // Views are copies where the operations read another type than the BF16 weights (the cpu's fp32).
          .view_bytes = backend.weight_dtype() == DType::bf16 ? 0.0 : double(element_size(backend.weight_dtype())),
          .attention_saved_bytes =
              double(backend.attention_saved_bytes(std::size_t(m.seq), std::size_t(m.width), std::size_t(m.heads)))};
}

RunMemoryEstimate estimate_run_memory(const TrainOptions& o, int ranks, const BackendFootprint& b) {
  RunMemoryEstimate e;
  const double d = std::max(1, ranks);
  e.parameters = double(parameter_count(o.model));
  // The ZeRO formula (weights, wire gradient, fp32 master and Adam moments, sharded by stage), plus the working
  // copies: the local gradient, which every stage keeps whole, and the compute views of the weights (the cpu
  // backend's fp32 mirror; none on a GPU), of the whole model to stage 2 and at stage 3 of the units in flight
  // (two, at most the largest).
  const double grad_bytes = double(element_size(o.grad_dtype));
  const UnitPlan plan(ParameterLayout(o.model), bucket_bytes(o.bucket_mb), element_size(o.grad_dtype), ranks);
  const double viewed = o.zero == 3 ? 2 * double(plan.largest_padded()) : e.parameters;
  e.model_state_bytes = cost::zero_memory_per_rank(o.zero, e.parameters, ranks, grad_bytes).total_bytes() +
                        b.gradient_bytes * e.parameters + b.view_bytes * viewed;
  const double local_windows = double(o.batch) / d;
  const double micro_windows = local_windows / std::max(1, o.grad_accum);
  const double saved =
      b.attention_saved_bytes > 0 ? b.attention_saved_bytes : double(o.model.seq) * o.model.seq * b.activation_bytes;
  e.activation_bytes = activation_arena_bytes(o.model, micro_windows, b.activation_bytes, b.gradient_bytes, saved);
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
