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

ZeroMemory zero_memory_per_rank(int stage, double params, int ranks) {
  check_stage(stage, ranks);
  const double d = ranks;
  // Stage s shards the optimizer state from 1 on, the gradients from 2 on, the weights at 3.
  auto bytes = [&](double per_param, int sharded_from_stage) {
    return stage >= sharded_from_stage ? per_param * params / d : per_param * params;
  };
  return ZeroMemory{.weights_bytes = bytes(kWeightBytesPerParam, 3),
                    .gradients_bytes = bytes(kGradientBytesPerParam, 2),
                    .optimizer_bytes = bytes(kOptimizerBytesPerParam, 1)};
}

double zero_bytes_sent_per_step(int stage, double params, int ranks) {
  check_stage(stage, ranks);
  // On a ring the bytes that cross the link at B are exactly the bytes a rank sends.
  const double all_reduce =
      collective_terms(Collective::ring_all_reduce, ranks, kGradientBytesPerParam * params).bandwidth_bytes;
  return stage == 3 ? 1.5 * all_reduce : all_reduce;
}

}  // namespace dptrain::cost
