// ZeRO memory per rank and bytes sent per step: the stage-2 reference on 8 GPUs and every stage on 64, by hand.
#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/format.hpp"
#include "dptrain/cost/zero.hpp"

namespace dptrain::cost {
namespace {

constexpr double kPsi = 6'738'149'376;  // LLaMA 7B

TEST(Zero, Stage2On8GpusReference) {
  const ZeroMemory memory = zero_memory_per_rank(2, kPsi, 8);
  EXPECT_EQ(format_bytes(memory.weights_bytes), "13.48 GB");
  EXPECT_EQ(format_bytes(memory.gradients_bytes), "1.68 GB");
  EXPECT_EQ(format_bytes(memory.optimizer_bytes), "10.11 GB");
  EXPECT_EQ(format_bytes(memory.total_bytes()), "25.27 GB");
  EXPECT_EQ(format_bytes(zero_bytes_sent_per_step(2, kPsi, 8)), "23.58 GB");
  EXPECT_DOUBLE_EQ(memory.total_bytes(), 2 * kPsi + 14 * kPsi / 8);
}

// The docs/systems-model.md table, row by row, for d = 64.
TEST(Zero, EveryStageOn64GpusFromTheTable) {
  const double d = 64, k = 12, all_reduce = 2 * (d - 1) / d * 2 * kPsi;
  struct Row { double weights, gradients, optimizer, total, sent; };
  const Row rows[] = {
      {2 * kPsi, 2 * kPsi, k * kPsi, (2 + 2 + k) * kPsi, all_reduce},
      {2 * kPsi, 2 * kPsi, k * kPsi / d, 4 * kPsi + k * kPsi / d, all_reduce},
      {2 * kPsi, 2 * kPsi / d, k * kPsi / d, 2 * kPsi + (2 + k) * kPsi / d, all_reduce},
      {2 * kPsi / d, 2 * kPsi / d, k * kPsi / d, (2 + 2 + k) * kPsi / d, 1.5 * all_reduce},
  };
  for (int stage = 0; stage < 4; ++stage) {
    const ZeroMemory memory = zero_memory_per_rank(stage, kPsi, 64);
    EXPECT_DOUBLE_EQ(memory.weights_bytes, rows[stage].weights) << "stage " << stage;
    EXPECT_DOUBLE_EQ(memory.gradients_bytes, rows[stage].gradients) << "stage " << stage;
    EXPECT_DOUBLE_EQ(memory.optimizer_bytes, rows[stage].optimizer) << "stage " << stage;
    EXPECT_DOUBLE_EQ(memory.total_bytes(), rows[stage].total) << "stage " << stage;
    EXPECT_DOUBLE_EQ(zero_bytes_sent_per_step(stage, kPsi, 64), rows[stage].sent) << "stage " << stage;
  }
  // As printed: totals 107.81, 28.22, 14.95, 1.68 GB; sent 26.53 GB (stage 3: 39.80 GB).
  EXPECT_EQ(format_bytes(zero_memory_per_rank(0, kPsi, 64).total_bytes()), "107.81 GB");
  EXPECT_EQ(format_bytes(zero_memory_per_rank(1, kPsi, 64).total_bytes()), "28.22 GB");
  EXPECT_EQ(format_bytes(zero_memory_per_rank(2, kPsi, 64).total_bytes()), "14.95 GB");
  EXPECT_EQ(format_bytes(zero_memory_per_rank(3, kPsi, 64).total_bytes()), "1.68 GB");
  EXPECT_EQ(format_bytes(zero_bytes_sent_per_step(2, kPsi, 64)), "26.53 GB");
  EXPECT_EQ(format_bytes(zero_bytes_sent_per_step(3, kPsi, 64)), "39.80 GB");
}

// Accumulation: stages 0–2 reduce once per step whatever K; stage 3 gathers the BF16 weights (2 bytes per
// parameter) twice per micro-step, so each further micro-step adds 2 · (d−1)/d · 2Ψ.
TEST(Zero, AccumulatedStepsAddOnlyStage3sWeightGathers) {
  const double d = 64, gather = (d - 1) / d * 2 * kPsi;
  for (int stage = 0; stage < 3; ++stage)
    EXPECT_EQ(zero_bytes_sent_per_accumulated_step(stage, kPsi, 64, 4), zero_bytes_sent_per_step(stage, kPsi, 64))
        << "stage " << stage;
  EXPECT_EQ(zero_bytes_sent_per_accumulated_step(3, kPsi, 64, 1), zero_bytes_sent_per_step(3, kPsi, 64));
  EXPECT_DOUBLE_EQ(zero_bytes_sent_per_accumulated_step(3, kPsi, 64, 4),
                   zero_bytes_sent_per_step(3, kPsi, 64) + 3 * 2 * gather);
  // 1000 parameters on 4 ranks, K = 2: each ring pass sends 3/4 of 2000 bytes = 1500; reduce-scatter + 2
  // gathers, plus 2 more gathers = 5 · 1500 bytes.
  EXPECT_EQ(zero_bytes_sent_per_accumulated_step(3, 1000, 4, 2), 7500.0);
}

TEST(Zero, OneRankHoldsEverythingAndSendsNothing) {
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_DOUBLE_EQ(zero_memory_per_rank(stage, 1000, 1).total_bytes(), 16000);
    EXPECT_EQ(zero_bytes_sent_per_step(stage, 1000, 1), 0);
  }
}

TEST(Zero, RefusesUnknownStagesAndRankCounts) {
  EXPECT_THROW(zero_memory_per_rank(4, kPsi, 8), UserError);
  EXPECT_THROW(zero_memory_per_rank(-1, kPsi, 8), UserError);
  EXPECT_THROW(zero_bytes_sent_per_step(4, kPsi, 8), UserError);
  EXPECT_THROW(zero_memory_per_rank(0, kPsi, 0), UserError);
}

}  // namespace
}  // namespace dptrain::cost
