// The start-up memory estimate per rank: the ZeRO formula plus the cpu backend's working copies, which at stage 3
// hold views of the units in flight only, not of the whole model; the batch's token windows, which the validation
// reuses (however many --eval-windows).
#include <gtest/gtest.h>

#include "dptrain/cost/zero.hpp"
#include "dptrain/dp/unit_plan.hpp"
#include "dptrain/model/layout.hpp"
#include "dptrain/train/memory_estimate.hpp"

namespace dptrain {
namespace {

TrainOptions options_at(int stage) {
  TrainOptions o;
  o.model = {.vocab = 256, .seq = 16, .layers = 4, .width = 64, .heads = 4};
  o.batch = 8;
  o.zero = stage;
  o.bucket_mb = 0;  // a unit per block
  return o;
}

TEST(MemoryEstimate, StageThreeCountsTwoViewsOfTheLargestUnitNotTheWholeModel) {
  constexpr int kRanks = 4;
  constexpr double kFloat = 4, kBf16 = 2;
  const double N = double(ParameterLayout(options_at(0).model).total());
  const UnitPlan plan(ParameterLayout(options_at(3).model), 0, std::size_t(kBf16), kRanks);
  const double largest = double(plan.largest_padded());
  ASSERT_LT(2 * largest, N);  // several blocks: the views of two are less than the model
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    const RunMemoryEstimate e = estimate_run_memory(options_at(stage), kRanks);
    const double formula = cost::zero_memory_per_rank(stage, N, kRanks, kBf16).total_bytes();
    // The fp32 local gradient, whole at every stage, and the fp32 compute views.
    const double views = stage == 3 ? 2 * largest : N;
    EXPECT_DOUBLE_EQ(e.model_state_bytes, formula + kFloat * (N + views));
  }
}

TEST(MemoryEstimate, TheValidationReusesTheBatchsWindows) {
  TrainOptions few = options_at(0), many = options_at(0);
  many.eval_windows = 2'000'000'000;
  EXPECT_EQ(estimate_run_memory(few, 2).window_bytes, estimate_run_memory(many, 2).window_bytes);
  EXPECT_DOUBLE_EQ(estimate_run_memory(few, 2).window_bytes, 8.0 / 2 * 17 * 4);  // 4 windows of 17 int32 tokens
}

}  // namespace
}  // namespace dptrain
