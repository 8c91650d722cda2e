// The engine on one rank, on every backend of the build: ZeRO-3's unit-by-unit weight access (with two
// micro-steps) computes exactly what the replicated weights compute in one (where the backend promises repeatable,
// micro-batch-invariant bits), and holds compute views of two units, not of the model; the optimizer state goes to
// the host and back unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {
namespace {

class EngineStages : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const std::string why = test::backend_under_test_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
  // Four blocks, one unit per block (bucket 0): units final norm, blocks 3 … 0, embeddings.
  ModelConfig config{.vocab = 19, .seq = 6, .layers = 4, .width = 16, .heads = 2};
  std::vector<std::int32_t> windows = [] {
    std::vector<std::int32_t> w(4 * 7);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::int32_t((i * 7 + i / 7) % 19);
    return w;
  }();
  OptimizerSettings optimizer{.lr = 1e-2, .weight_decay = 0.1, .grad_clip = 1.0};
};

TEST_P(EngineStages, StageThreeComputesFromEachUnitWhatStageZeroComputesFromTheModel) {
  auto backend0 = test::make_backend_under_test(GetParam()), backend3 = test::make_backend_under_test(GetParam());
  if (!backend0->guarantees().repeatable) GTEST_SKIP() << GetParam() << " does not promise repeatable bits";
  DataParallelEngine replicated(config, *backend0, RankGroup{}, EngineSettings{.zero_stage = 0, .bucket_mb = 0}, 4);
  DataParallelEngine sharded(config, *backend3, RankGroup{}, EngineSettings{.zero_stage = 3, .bucket_mb = 0, .grad_accum = 2}, 4);
  replicated.initialise(5);
  sharded.initialise(5);
  for (int step = 0; step < 4; ++step) {
    const StepResult a = replicated.step(windows.data(), 4, optimizer);
    const StepResult b = sharded.step(windows.data(), 4, optimizer);
    ASSERT_TRUE(a.finite);
    if (backend0->guarantees().micro_batch_invariant) {
      EXPECT_EQ(a.loss, b.loss) << "step " << step;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
    }
  }
  if (backend0->guarantees().micro_batch_invariant) {
    const std::vector<bf16> wa = replicated.full_weights(), wb = sharded.full_weights();
    EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(bf16)), 0);
    EXPECT_EQ(replicated.loss_sum(windows.data(), 4), sharded.loss_sum(windows.data(), 4));
  }
}

TEST_P(EngineStages, StageThreeHoldsComputeViewsOfTwoUnitsOnly) {
  auto backend = test::make_backend_under_test(GetParam());
  DataParallelEngine engine(config, *backend, RankGroup{}, EngineSettings{.zero_stage = 3, .bucket_mb = 0}, 4);
  engine.initialise(5);
  engine.step(windows.data(), 4, optimizer);
  const ParameterLayout& layout = engine.layout();
  std::size_t largest = 0;
  for (const Unit& u : engine.plan().units()) largest = std::max(largest, u.range.size());
  EXPECT_EQ(largest, layout.block_range(0).size());  // a block is the largest unit of this model
  EXPECT_LT(2 * largest, layout.total());            // so two views hold less than the model
  const std::size_t weight_bytes = element_size(backend->weight_dtype());
  EXPECT_EQ(backend->weight_view_bytes(), weight_bytes == 2 ? 0 : 2 * largest * weight_bytes);
  const MemoryUse memory = engine.memory();
  EXPECT_EQ(memory.working_copies,
            layout.total() * element_size(backend->gradient_dtype()) + backend->weight_view_bytes());
  EXPECT_EQ(memory.weights, engine.plan().shard_total() * sizeof(bf16));  // one rank: the shard is the padded model
}

TEST_P(EngineStages, OptimizerStateRoundTripsThroughTheHost) {
  auto backend = test::make_backend_under_test(GetParam());
  DataParallelEngine engine(config, *backend, RankGroup{}, EngineSettings{.zero_stage = 1}, 4);
  engine.initialise(5);
  engine.step(windows.data(), 4, optimizer);
  OptimizerState state = engine.optimizer_state();
  ASSERT_EQ(state.master.size(), engine.plan().shard_total());
  for (float& x : state.m) x = x * 3 + 1;
  engine.set_optimizer_state(state);
  const OptimizerState back = engine.optimizer_state();
  EXPECT_EQ(back.master, state.master);
  EXPECT_EQ(back.m, state.m);
  EXPECT_EQ(back.v, state.v);
}

INSTANTIATE_TEST_SUITE_P(Backends, EngineStages, ::testing::ValuesIn(test::backends_under_test()),
                        [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace dptrain
