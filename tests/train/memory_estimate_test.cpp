// The start-up memory estimate per rank: the ZeRO formula plus the cpu backend's working copies, which at stage 3
// hold views of the units in flight only, not of the whole model; the batch's token windows, which the validation
// reuses (however many --eval-windows).
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/cost/zero.hpp"
#include "dptrain/dp/engine.hpp"
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

// The estimate against what an engine allocates, on the cpu backend (fp32 activations, gradient and views) and on
// the cuda backend's code (BF16 activations, no views): the arena exactly (plus the backend's operation scratch,
// which the estimate leaves out), and the model state and working copies up to the units' padding (every unit
// padded to 32 elements at 1 rank: at most 31 elements a unit, each ≤ 16 + 4 + 4 bytes).
TEST(MemoryEstimate, MatchesWhatTheEngineAllocatesOnEachBackend) {
  TrainOptions o = options_at(0);
  o.model.seq = 32;
  for (const auto& make : {std::function<std::unique_ptr<Backend>()>([] { return make_backend("cpu"); }),
                           std::function<std::unique_ptr<Backend>()>(test::make_cuda_on_cpu_backend)}) {
    const std::unique_ptr<Backend> backend = make();
    SCOPED_TRACE(backend->name());
    DataParallelEngine engine(o.model, *backend, RankGroup{}, EngineSettings{.bucket_mb = o.bucket_mb},
                              std::size_t(o.batch));
    engine.initialise(1);
    const RunMemoryEstimate e = estimate_run_memory(o, 1, footprint_of(*backend, o.model));
    const MemoryUse m = engine.memory();
    EXPECT_LE(e.activation_bytes, double(m.activations));
    EXPECT_LE(double(m.activations), e.activation_bytes + double(backend->scratch_bytes()));
    const double state = double(m.weights + m.gradients + m.optimizer + m.working_copies);
    const double padding = double(engine.plan().units().size()) * 31 * (16 + 4 + 4);
    EXPECT_LE(e.model_state_bytes, state);
    EXPECT_LE(state, e.model_state_bytes + padding);
  }
  // A BF16 backend keeps half the cpu's activations, and no views: for GPT-2 124M at Q = 1024 and 64 windows, the
  // fused attention's footprint is well under an 80 GB GPU, where the cpu's figures (fp32, the probabilities
  // [T, T]) come to about 89 GiB.
  TrainOptions gpt2;
  gpt2.model = {.vocab = 50257, .seq = 1024, .layers = 12, .width = 768, .heads = 12};
  gpt2.batch = 64;
  const BackendFootprint fused{.activation_bytes = 2, .gradient_bytes = 4, .view_bytes = 0,
                               .attention_saved_bytes = 1024 * 4};
  EXPECT_GT(estimate_run_memory(gpt2, 1).total(), 80e9);
  EXPECT_LT(estimate_run_memory(gpt2, 1, fused).total(), 40e9);
}

TEST(MemoryEstimate, TheValidationReusesTheBatchsWindows) {
  TrainOptions few = options_at(0), many = options_at(0);
  many.eval_windows = 2'000'000'000;
  EXPECT_EQ(estimate_run_memory(few, 2).window_bytes, estimate_run_memory(many, 2).window_bytes);
  EXPECT_DOUBLE_EQ(estimate_run_memory(few, 2).window_bytes, 8.0 / 2 * 17 * 4);  // 4 windows of 17 int32 tokens
}

}  // namespace
}  // namespace dptrain
