// The learning-rate schedule's values, and a tiny model overfitting one batch through the whole engine.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "../kernels/cuda_on_cpu_backend.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/schedule.hpp"

namespace dptrain {
namespace {

TEST(Schedule, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(learning_rate(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(4, 100, 10, 1.0, 0.1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(99, 100, 10, 1.0, 0.1), 0.1);
  // Half-way through the decay (progress 44/89... take an odd count so the middle is a step): 10 + 45 of 91.
  EXPECT_NEAR(learning_rate(55, 101, 10, 1.0, 0.1), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.5)), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(0, 1, 0, 0.3, 0.0), 0.3);
  // --steps = --warmup + 1: the warm-up reaches the peak, the one step after it is the last, at the floor.
  EXPECT_DOUBLE_EQ(learning_rate(4, 6, 5, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(5, 6, 5, 1.0, 0.1), 0.1);
}

// Every backend of the build (backend_names()) trains through the same engine. (Not the cuda backend's code on the
// CPU harness: its hundreds of steps take minutes there; dp_test compares its training steps with the cpu's.)
class Engine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {  // a backend of the build that cannot run here (cuda without a GPU) is skipped, named
    if (const std::string why = test::backend_under_test_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(Engine, TinyModelOverfitsOneBatch) {
  ModelConfig config{.vocab = 16, .seq = 8, .layers = 2, .width = 32, .heads = 2};
  auto backend = test::make_backend_under_test(GetParam());
  DataParallelEngine engine(config, *backend, RankGroup{}, EngineSettings{.grad_dtype = DType::f32}, 4);
  engine.initialise(7);
  std::vector<std::int32_t> windows(4 * 9);
  for (std::size_t i = 0; i < windows.size(); ++i) windows[i] = std::int32_t((i * 5 + i / 9) % 16);
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    const StepResult r = engine.step(windows.data(), 4, {.lr = 1e-2, .weight_decay = 0.0, .grad_clip = 1.0});
    ASSERT_TRUE(r.finite);
    if (step == 0) first = r.loss;
    last = r.loss;
  }
  // Near-uniform prediction at initialisation: the tied head's logits have std ≈ 0.02·sqrt(H) ≈ 0.11, which
  // adds about var/2 plus sampling spread above ln V.
  EXPECT_NEAR(first, std::log(16.0), 0.1);
  EXPECT_LT(last, 0.05);
  EXPECT_EQ(engine.optimizer_step(), 150);
}

INSTANTIATE_TEST_SUITE_P(Backends, Engine, ::testing::ValuesIn(backend_names()),
                        [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace dptrain
