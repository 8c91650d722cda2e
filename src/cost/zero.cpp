// ZeRO memory and traffic per rank: which of weights, gradients and optimizer state a stage shards over d ranks.
#include "dptrain/cost/zero.hpp"

#include "dptrain/core/error.hpp"
#include "dptrain/cost/collectives.hpp"

namespace dptrain::cost {
namespace {

void check_stage(int stage, int ranks) {
  require(stage >= 0 && stage < kZeroStages, "ZeRO stage {} does not exist: expected 0, 1, 2 or 3", stage);
  require(ranks >= 1, "data-parallel ranks d = {} must be at least 1", ranks);
}

}  // namespace

ZeroMemory zero_memory_per_rank(int stage, double params, int ranks, double gradient_bytes_per_param) {
  check_stage(stage, ranks);
  const double d = ranks;
  // Stage s shards the optimizer state from 1 on, the gradients from 2 on, the weights at 3.
  auto bytes = [&](double per_param, int sharded_from_stage) {
    return stage >= sharded_from_stage ? per_param * params / d : per_param * params;
  };
  return ZeroMemory{.weights_bytes = bytes(kWeightBytesPerParam, 3),
                    .gradients_bytes = bytes(gradient_bytes_per_param, 2),
                    .optimizer_bytes = bytes(kOptimizerBytesPerParam, 1)};
}

double zero_bytes_sent_per_step(int stage, double params, int ranks, double gradient_bytes_per_param) {
  check_stage(stage, ranks);
  // On a ring the bytes that cross the link at B are exactly the bytes a rank sends.
  auto sent = [&](Collective c, double bytes_per_param) {
    return collective_terms(c, ranks, bytes_per_param * params).bandwidth_bytes;
  };
  if (stage == 0) return sent(Collective::ring_all_reduce, gradient_bytes_per_param);
  // The gradient is reduce-scattered and the updated BF16 weights all-gathered: once after the update (stages 1
  // and 2), or before the forward and again before the backward pass (stage 3).
  const double gathers = stage == 3 ? 2 : 1;
  return sent(Collective::ring_reduce_scatter, gradient_bytes_per_param) +
         gathers * sent(Collective::ring_all_gather, kWeightBytesPerParam);
}

double zero_bytes_sent_per_accumulated_step(int stage, double params, int ranks, int micro_steps,
                                            double gradient_bytes_per_param) {
  DP_ASSERT(micro_steps >= 1);
  double bytes = zero_bytes_sent_per_step(stage, params, ranks, gradient_bytes_per_param);
  if (stage == 3)  // the two weight gathers of one micro-step: stage 3's bytes beyond stage 2's
    bytes += 2.0 * (micro_steps - 1) *
             (zero_bytes_sent_per_step(3, params, ranks, gradient_bytes_per_param) -
              zero_bytes_sent_per_step(2, params, ranks, gradient_bytes_per_param));
  return bytes;
}

}  // namespace dptrain::cost
